package stream

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/weirstream/weir/changelog"
	"github.com/weirstream/weir/internal/assign"
	"github.com/weirstream/weir/internal/graph"
	"github.com/weirstream/weir/internal/local"
	"github.com/weirstream/weir/internal/metrics"
	"github.com/weirstream/weir/internal/statelog"
	"github.com/weirstream/weir/internal/task"
	"github.com/weirstream/weir/internal/topics"
)

// The runner's probing: a probe asked for starts at once, probes are at
// least probeGap apart, one put off because the group is rebalancing is
// asked for again, and the interval asks for one only while the instance
// holds warm-ups.
func TestStandbysProbePacing(t *testing.T) {
	m, err := metrics.New(prometheus.NewRegistry(), "app", noSource{})
	if err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int32
	var busy atomic.Bool
	done := make(chan struct{}, 10)
	probe := func(context.Context) error {
		calls.Add(1)
		defer func() { done <- struct{}{} }()
		if busy.Load() {
			return ErrGroupBusy
		}
		return nil
	}
	s := NewStandbys(&task.Shared{Metrics: m}, slog.New(slog.NewTextHandler(io.Discard, nil)), WarmupProbes{AcceptableLag: 10, Interval: time.Hour, Probe: probe})
	ctx := context.Background()
	wait := func() {
		t.Helper()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("the probe did not run")
		}
		// The probe's goroutine clears probing after it returns.
		for deadline := time.Now().Add(10 * time.Second); ; {
			s.mu.Lock()
			p := s.probing
			s.mu.Unlock()
			if !p {
				return
			}
			if time.Now().After(deadline) {
				t.Fatal("the probe never ended")
			}
			time.Sleep(time.Millisecond)
		}
	}
	started := func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.probing
	}
	ask := func(reason string) {
		s.mu.Lock()
		s.askProbe(reason)
		s.mu.Unlock()
	}

	s.maybeProbe(ctx) // no warm-ups, nothing asked: no probe
	s.Set(0, nil, []assign.TaskID{{Subtopology: 0, Partition: 1}})
	s.maybeProbe(ctx)
	if started() {
		t.Fatal("a probe before any was due")
	}
	// The first probe waits for probeGap after the runner's start.
	s.mu.Lock()
	s.lastProbe = time.Now().Add(-probeGap)
	s.mu.Unlock()
	ask("caught_up")
	s.maybeProbe(ctx)
	wait()
	if got := counterValue(t, m.Probes, "caught_up", "started"); got != 1 {
		t.Errorf("probes started = %v, want 1", got)
	}
	// Within probeGap of the last: put off.
	ask("caught_up")
	s.maybeProbe(ctx)
	if started() {
		t.Fatalf("a second probe within %s of the first", probeGap)
	}
	// Past the gap, the group rebalancing: put off and asked again.
	busy.Store(true)
	s.mu.Lock()
	s.lastProbe = time.Now().Add(-probeGap)
	s.mu.Unlock()
	s.maybeProbe(ctx)
	wait()
	s.mu.Lock()
	due := s.probeDue
	s.mu.Unlock()
	if due != "caught_up" {
		t.Errorf("after a busy group the probe due is %q, want it asked again", due)
	}
	if got := counterValue(t, m.Probes, "caught_up", "failed"); got != 0 {
		t.Errorf("a probe put off counted as failed")
	}
	// The interval, with warm-ups held.
	busy.Store(false)
	s.mu.Lock()
	s.probeDue, s.lastProbe = "", time.Now().Add(-2*time.Hour)
	s.mu.Unlock()
	s.maybeProbe(ctx)
	wait()
	if got := counterValue(t, m.Probes, "interval", "started"); got != 1 {
		t.Errorf("interval probes = %v, want 1", got)
	}
	// No warm-ups: the interval asks for nothing.
	s.Set(0, nil, nil)
	s.mu.Lock()
	s.lastProbe = time.Now().Add(-2 * time.Hour)
	s.mu.Unlock()
	s.maybeProbe(ctx)
	if started() {
		t.Errorf("a probe without warm-ups")
	}
	if calls.Load() != 3 {
		t.Errorf("%d probes in all, want 3", calls.Load())
	}
}

// A standby's lag is only as good as its last update: after a failed one,
// or when none succeeded for standbyStale, it is UnknownLag, which no lag
// bound admits, and a read of it is refused as behind without running.
func TestStandbyLagGrowsStaleWhenUpdatesFail(t *testing.T) {
	t.Parallel()
	s, sh, log := newTestStandbys(t)
	id := assign.TaskID{}
	r := &standbyRun{sb: task.NewStandby(sh, log, id), updated: true, syncedAt: time.Now()}
	s.running[id] = r

	ran := 0
	read := func() error { ran++; return nil }
	if lag, ok := s.StoreLag(id, "s"); !ok || lag != 0 {
		t.Fatalf("lag of a standby just updated = %d, %v; want 0", lag, ok)
	}
	if err := s.Read(id, "s", 0, read); err != nil || ran != 1 {
		t.Fatalf("read of a standby just updated = %v (ran %d)", err, ran)
	}
	for _, c := range []struct {
		name     string
		failures int
		synced   time.Time
	}{
		{"after a failed update", 1, time.Now()},
		{"with no update for longer than standbyStale", 0, time.Now().Add(-standbyStale - time.Second)},
	} {
		r.failures, r.syncedAt = c.failures, c.synced
		if lag, ok := s.StoreLag(id, "s"); !ok || lag != UnknownLag {
			t.Errorf("%s: lag = %d, %v; want UnknownLag", c.name, lag, ok)
		}
		var behind *StandbyBehindError
		if err := s.Read(id, "s", 1<<40, read); !errors.As(err, &behind) || ran != 1 {
			t.Errorf("%s: read = %v (ran %d); want it refused as behind", c.name, err, ran-1)
		}
	}
	if err := s.Read(assign.TaskID{Partition: 1}, "s", 0, read); !errors.Is(err, ErrNoStandby) {
		t.Errorf("read of a standby this instance does not keep = %v, want ErrNoStandby", err)
	}
}

// Kept lists the copies the runner keeps, telling warm-ups from standbys,
// with their stores' lags once an update has completed (UnknownLag when
// it is stale).
func TestStandbysKept(t *testing.T) {
	t.Parallel()
	s, sh, log := newTestStandbys(t)
	standby, warmup := assign.TaskID{Partition: 1}, assign.TaskID{Partition: 0}
	s.Set(0, []assign.TaskID{standby}, []assign.TaskID{warmup})
	s.running[standby] = &standbyRun{sb: task.NewStandby(sh, log, standby), updated: true, syncedAt: time.Now()}
	s.running[warmup] = &standbyRun{sb: task.NewStandby(sh, log, warmup)} // not updated yet
	got := s.Kept()
	if len(got) != 2 || got[0].ID != warmup || !got[0].Warmup || len(got[0].Lags) != 0 ||
		got[1].ID != standby || got[1].Warmup || got[1].Lags["s"] != 0 || len(got[1].Lags) != 1 {
		t.Fatalf("kept %+v, want the warm-up without lags, then the standby with lag 0", got)
	}
	s.running[standby].failures = 1
	if lag := s.Kept()[1].Lags["s"]; lag != UnknownLag {
		t.Errorf("lag after a failed update %d, want UnknownLag", lag)
	}
}

// newTestStandbys returns a standby runner over a fresh local database
// with one sub-topology of one processor using store "s", its shared task
// configuration and its logger (which discards).
func newTestStandbys(t *testing.T) (*Standbys, *task.Shared, *slog.Logger) {
	t.Helper()
	db, err := statelog.Open(t.TempDir(), changelog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	m, err := metrics.New(prometheus.NewRegistry(), "app", noSource{})
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	loc, err := local.New(db, log, time.Hour, map[string]int{"s": 0})
	if err != nil {
		t.Fatal(err)
	}
	n := &graph.Node{Name: "p", Kind: graph.KindProcessor}
	sh := &task.Shared{Config: task.Config{ApplicationID: "app"}, DB: db, Metrics: m, Local: loc,
		Graph:  &graph.Graph{Nodes: []*graph.Node{n}, Stores: []*graph.Store{{Name: "s", Users: []*graph.Node{n}}}},
		Layout: &topics.Layout{Subs: []*graph.Subtopology{{ID: 0, Nodes: []*graph.Node{n}}}}}
	s := NewStandbys(sh, log, WarmupProbes{})
	return s, sh, log
}
