package stream

import (
	"slices"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/weirstream/weir/internal/txntest"
)

// TestRejoinWaitsForTheCommitUnderWay: a commit under way when the member
// is about to send JoinGroup carries the generation the group is leaving,
// which the group accepts only until every member has rejoined. The
// rebalance mark must therefore wait for that commit to end, and a due
// commit after it must wait for the new assignment.
func TestRejoinWaitsForTheCommitUnderWay(t *testing.T) {
	th := failureThread(t, Config{}, txntest.New(true))

	// A commit holds the gate, as commitLocked runs under it.
	th.committing <- struct{}{}
	var committedFirst bool
	marked := make(chan bool)
	go func() {
		th.markRebalance()
		marked <- committedFirst
	}()
	// A broken gate lets markRebalance return at once; a working one
	// keeps it waiting for as long as the commit runs.
	select {
	case <-marked:
		t.Fatal("the rebalance was marked while a commit was under way")
	case <-time.After(100 * time.Millisecond):
	}
	committedFirst = true
	<-th.committing
	if !<-marked {
		t.Fatal("the rebalance was marked before the commit ended")
	}
	if !th.inRebalance() {
		t.Fatal("inRebalance = false after the rebalance was marked")
	}

	// Between JoinGroup and the new assignment a due commit waits.
	done, err := th.commitDue()
	if err != nil || done {
		t.Fatalf("commitDue during the rebalance = %v, %v; want false, nil", done, err)
	}
	select {
	case th.committing <- struct{}{}:
		<-th.committing
	default:
		t.Fatal("commitDue left the commit gate held")
	}
}

// TestRejoinDoesNotWaitForeverForACommit: the wait is bounded by half the
// transaction timeout, so a commit stuck on the network cannot hold the
// member out of the group.
func TestRejoinDoesNotWaitForeverForACommit(t *testing.T) {
	th := failureThread(t, Config{}, txntest.New(true))
	th.in.TransactionTimeout = 200 * time.Millisecond
	th.committing <- struct{}{}
	defer func() { <-th.committing }()
	marked := make(chan struct{})
	go func() {
		th.markRebalance()
		close(marked)
	}()
	select {
	case <-marked:
	case <-time.After(30 * time.Second):
		t.Fatal("markRebalance still waits 30 s after half the transaction timeout (100 ms)")
	}
	if !th.inRebalance() {
		t.Fatal("inRebalance = false after the rebalance was marked")
	}
}

// A thread that never waits for input between two commits is behind: it
// doubles its commit interval, up to MaxCommitInterval; the first wait
// brings it back to CommitInterval.
func TestCommitIntervalStretchesWhileBehind(t *testing.T) {
	t.Parallel()
	th := failureThread(t, Config{CommitInterval: 100 * time.Millisecond, MaxCommitInterval: 700 * time.Millisecond}, txntest.New(true))
	th.setInterval(th.in.CommitInterval)
	var got []time.Duration
	for _, waited := range []bool{false, false, false, false, true, false} {
		th.waited = waited
		th.setInterval(th.nextInterval())
		got = append(got, th.interval)
	}
	want := []time.Duration{200 * time.Millisecond, 400 * time.Millisecond, 700 * time.Millisecond, 700 * time.Millisecond, 100 * time.Millisecond, 200 * time.Millisecond}
	if !slices.Equal(got, want) {
		t.Fatalf("intervals %v, want %v", got, want)
	}
	if th.waited {
		t.Fatal("the wait was not forgotten after the commit")
	}
	var m dto.Metric
	if err := th.in.Metrics.CommitInterval.WithLabelValues("0").Write(&m); err != nil || m.GetGauge().GetValue() != 0.2 {
		t.Fatalf("weir_commit_interval_seconds = %v (%v), want 0.2", m.GetGauge().GetValue(), err)
	}
	// Without MaxCommitInterval (0), the interval stays fixed.
	fixed := failureThread(t, Config{CommitInterval: 100 * time.Millisecond}, txntest.New(true))
	fixed.setInterval(fixed.in.CommitInterval)
	if fixed.setInterval(fixed.nextInterval()); fixed.interval != 100*time.Millisecond {
		t.Fatalf("interval %v without MaxCommitInterval", fixed.interval)
	}
}
