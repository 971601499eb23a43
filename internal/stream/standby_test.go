package stream

import (
	"context"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/weirstream/weir/internal/assign"
	"github.com/weirstream/weir/internal/metrics"
	"github.com/weirstream/weir/internal/task"
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
