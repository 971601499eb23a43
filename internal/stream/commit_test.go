package stream

import (
	"testing"
	"time"

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
