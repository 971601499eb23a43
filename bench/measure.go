package main

import (
	"context"
	"fmt"
	"os"
	"runtime/pprof"
	"runtime/trace"
	"slices"
	"sync/atomic"
	"time"
)

// counter counts records seen by any number of goroutines and notes, on
// the monotonic clock, when the first and the target-th arrived. Each
// record costs one atomic add; the clock is read twice per run.
type counter struct {
	start  time.Time
	target int64
	n      atomic.Int64
	first  atomic.Int64 // time.Duration since start
	last   atomic.Int64 // time.Duration since start
	done   chan struct{}
}

func newCounter(target int64) *counter {
	return &counter{start: time.Now(), target: target, done: make(chan struct{})}
}

// reset restarts the clock; call it right before the measured work starts.
func (c *counter) reset() { c.start = time.Now() }

// add counts one record.
func (c *counter) add() {
	n := c.n.Add(1)
	if n == 1 {
		c.first.Store(int64(time.Since(c.start)))
	}
	if n == c.target {
		c.last.Store(int64(time.Since(c.start)))
		close(c.done)
	}
}

// since returns the time elapsed since the counter's start.
func (c *counter) since() time.Duration { return time.Since(c.start) }

// waitDone waits until the target is reached. failed delivers a fatal
// error of the work being measured (nil when it stopped cleanly too
// early). It reports progress on stderr every 10 s while it waits.
func (c *counter) waitDone(ctx context.Context, what string, timeout time.Duration, failed <-chan error) error {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(10 * time.Second)
	defer tick.Stop()
	for {
		select {
		case <-c.done:
			return nil
		case err := <-failed:
			if err == nil {
				err = fmt.Errorf("stopped early")
			}
			return fmt.Errorf("%s: after %d of %d records: %w", what, c.n.Load(), c.target, err)
		case <-tick.C:
			fmt.Fprintf(os.Stderr, "bench: %s: %d of %d records after %v\n", what, c.n.Load(), c.target, c.since().Round(time.Second))
		case <-deadline.C:
			return fmt.Errorf("%s: timed out after %v with %d of %d records (raise -timeout if the machine is just slow)", what, timeout, c.n.Load(), c.target)
		case <-ctx.Done():
			return fmt.Errorf("%s: interrupted with %d of %d records: %w", what, c.n.Load(), c.target, ctx.Err())
		}
	}
}

// result is one measured workload.
type result struct {
	Workload string `json:"workload"`
	Name     string `json:"name"`
	Round    int    `json:"round"`
	Records  int64  `json:"records"`
	// Bytes is the key and value payload of Records.
	Bytes int64 `json:"bytes"`

	// FirstSeconds is from the start (app.Run, the group's Consume, the
	// first send) to the first record: connecting and joining the group.
	FirstSeconds float64 `json:"first_record_seconds"`
	// ProcessedSeconds is from the start to the Records-th record seen.
	ProcessedSeconds float64 `json:"processed_seconds"`
	// EndSeconds is from the start to the end of the measurement: the
	// last record seen, or for the passthrough the output complete in
	// the output topic.
	EndSeconds float64 `json:"end_seconds"`

	// Rate is Records over EndSeconds: includes the group join.
	Rate float64 `json:"records_per_second"`
	// MBRate is Bytes over EndSeconds, in 10^6 bytes per second.
	MBRate float64 `json:"mb_per_second"`
	// SteadyRate is the records after the first over the time from the
	// first record to the end: the join does not count.
	SteadyRate   float64 `json:"steady_records_per_second"`
	SteadyMBRate float64 `json:"steady_mb_per_second"`

	// CPUSeconds is the user and system CPU time of the whole bench
	// process from the start to the end of the measurement.
	CPUSeconds float64 `json:"cpu_seconds"`
	// CPUPerMillion is CPUSeconds scaled to a million records.
	CPUPerMillion float64 `json:"cpu_seconds_per_million_records"`
	// CloseSeconds is how long stopping the client or application took.
	CloseSeconds float64 `json:"close_seconds"`

	// Verified is the number of records found in the output topic after
	// the passthrough, with read_committed isolation; nil if not checked.
	Verified *int64 `json:"verified_output_records,omitempty"`
	// Note explains the measurement's end condition and oddities.
	Note string `json:"note,omitempty"`
}

// finish fills in the rates from the durations and counts.
func (r *result) finish() {
	if r.EndSeconds > 0 {
		r.Rate = float64(r.Records) / r.EndSeconds
		r.MBRate = float64(r.Bytes) / r.EndSeconds / 1e6
	}
	if steady := r.EndSeconds - r.FirstSeconds; steady > 0 && r.Records > 1 {
		r.SteadyRate = float64(r.Records-1) / steady
		r.SteadyMBRate = float64(r.Bytes) * float64(r.Records-1) / float64(r.Records) / steady / 1e6
	}
	if r.Records > 0 {
		r.CPUPerMillion = r.CPUSeconds / float64(r.Records) * 1e6
	}
}

func (r *result) summary() string {
	s := fmt.Sprintf("%s (round %d): %.0f records/s, %.1f MB/s; steady %.0f records/s; first record after %.2fs, done after %.2fs; %.2f CPU s/M records",
		r.Name, r.Round, r.Rate, r.MBRate, r.SteadyRate, r.FirstSeconds, r.EndSeconds, r.CPUPerMillion)
	if r.Note != "" {
		s += "; " + r.Note
	}
	return s
}

// profiling says what a measurement records besides CPU time: with a
// prefix, a CPU profile, and with trace also an execution trace.
type profiling struct {
	prefix string
	trace  bool
}

// measurement covers one workload's measured interval: CPU time and,
// when asked for, a CPU profile and an execution trace.
type measurement struct {
	cpu0           time.Duration
	profile, trace *os.File
}

// startMeasurement starts the CPU accounting and, if p.prefix is set, a
// CPU profile written to prefix-<workload>[-r<round>].pprof (and an
// execution trace to .trace when p.trace is set).
func startMeasurement(p profiling, workload string, round int) (*measurement, error) {
	m := &measurement{cpu0: cpuTime()}
	if p.prefix == "" {
		return m, nil
	}
	name := p.prefix + "-" + workload
	if round > 1 {
		name += fmt.Sprintf("-r%d", round)
	}
	f, err := os.Create(name + ".pprof")
	if err != nil {
		return nil, fmt.Errorf("cpu profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("cpu profile: %w", err)
	}
	m.profile = f
	if p.trace {
		t, err := os.Create(name + ".trace")
		if err == nil {
			if err = trace.Start(t); err != nil {
				t.Close()
			}
		}
		if err != nil {
			_, _ = m.stop()
			return nil, fmt.Errorf("execution trace: %w", err)
		}
		m.trace = t
	}
	return m, nil
}

// stop ends the measurement and returns the CPU time it used. It is safe
// to call more than once; later calls return 0.
func (m *measurement) stop() (time.Duration, error) {
	if m == nil || m.cpu0 < 0 {
		return 0, nil
	}
	used := cpuTime() - m.cpu0
	m.cpu0 = -1
	if m.trace != nil {
		trace.Stop()
		if err := m.trace.Close(); err != nil {
			return used, fmt.Errorf("execution trace: %w", err)
		}
		m.trace = nil
	}
	if m.profile != nil {
		pprof.StopCPUProfile()
		err := m.profile.Close()
		m.profile = nil
		if err != nil {
			return used, fmt.Errorf("cpu profile: %w", err)
		}
	}
	return used, nil
}

// median returns the median of xs (the mean of the middle two for an even
// count), or 0 for none.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(xs))
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
