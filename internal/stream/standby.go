package stream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/weirstream/weir/internal/assign"
	"github.com/weirstream/weir/internal/task"
)

// standbyHolder is the holder index under which standbys hold their
// tasks' state in local.State (threads use their index, from 0).
const standbyHolder = -1

// Standby runner timing: a caught-up runner looks at the changelogs'
// ends every standbyPoll; after a failed update it waits standbyBackoff
// before trying that standby again.
// A runner that found a standby standbyBehind records or more behind
// goes round again at once.
//
// A standby whose last update failed, or whose last successful update
// ended more than standbyStale ago (the runner busy with a full copy of
// another), has a lag nobody knows: it reports UnknownLag.
const (
	standbyPoll    = 250 * time.Millisecond
	standbyBackoff = 5 * time.Second
	standbyBehind  = 10_000
	standbyStale   = 30 * time.Second
)

// UnknownLag is the lag reported for a standby whose copy may be of any
// age: its updates fail, or it has not been updated for standbyStale. No
// lag bound admits it.
const UnknownLag int64 = math.MaxInt64

// Standbys runs the standby and warm-up tasks of one instance
// (Config.StandbyReplicas, Config.MaxWarmups): the union of what the group
// leader assigned its threads, less the tasks a thread of the instance
// runs itself. One goroutine updates them in turn, so a standby costs the
// instance at most two restore batches of memory at a time, whatever
// their number; a standby copying a large store in full holds the others
// back meanwhile. When a warm-up is caught up (within WarmupProbes'
// AcceptableLag), the runner starts a probing rebalance, which moves its
// task here.
//
// A task and its standby never write the same store partition at once:
// a standby starts only while no thread holds its task (local.State),
// and a thread about to restore a task first calls Yield, which stops the
// task's standby and waits for the batch it is writing. The standby's
// checkpoint is then where the task's restore starts.
//
// A failed update (a changelog that cannot be read, say) is logged and
// tried again after standbyBackoff; it never stops the instance, since
// the standby only saves restore time.
type Standbys struct {
	sh  *task.Shared
	log *slog.Logger
	w   WarmupProbes

	mu      sync.Mutex
	wanted  map[int][]assign.TaskID // per thread, from its last assignment
	warm    map[int][]assign.TaskID // warm-ups per thread, also in wanted
	running map[assign.TaskID]*standbyRun
	// probedAt is when a caught-up warm-up last asked for a probing
	// rebalance; lastProbe when the last probe started; probeDue the
	// reason of a probe asked for and not started yet ("" none), and
	// probing is set while one runs.
	probedAt  map[assign.TaskID]time.Time
	lastProbe time.Time
	probeDue  string
	probing   bool
	probeDone chan struct{} // closed when the probe running ends
	// current is the standby being updated now, and cancel ends its
	// update; done is closed when that update returns.
	current assign.TaskID
	cancel  context.CancelFunc
	done    chan struct{}
	wake    chan struct{}
}

// standbyRun is one standby the runner keeps.
type standbyRun struct {
	sb       *task.Standby
	retryAt  time.Time // after a failure: not before then
	failures int
	updated  bool      // an update has completed: Lag means something
	syncedAt time.Time // when the last successful update ended
}

// lag returns the standby's lag of store as StoreLag does. s.mu is held.
func (r *standbyRun) lag(store string) (int64, bool) {
	lag, ok := r.sb.Lag(store)
	if ok && !r.fresh() {
		lag = UnknownLag
	}
	return lag, ok
}

// fresh reports whether the last update succeeded recently enough for the
// standby's lag to mean something; while an update of it runs, its lag is
// the live remainder of that update.
func (r *standbyRun) fresh() bool {
	return r.failures == 0 && time.Since(r.syncedAt) <= standbyStale
}

// WarmupProbes is what the runner needs to move warm-up tasks: when a
// warm-up's lag is at most AcceptableLag it calls Probe, which starts a
// probing rebalance (Prober.Probe); while it holds warm-ups, it also
// probes every Interval. Probe nil: no probes.
type WarmupProbes struct {
	AcceptableLag int64
	Interval      time.Duration
	Probe         func(ctx context.Context) error
}

// Probe pacing: the least time between two probes of one instance (the
// warm-ups that catch up together share one rebalance), and how long a
// caught-up warm-up that is still a warm-up after its probe waits before
// it asks again (the leader saw it behind: its lag is compared with the
// owner's state as of the rebalance).
const (
	probeGap   = time.Second
	probeRetry = 30 * time.Second
)

// NewStandbys returns the standby runner of the instance whose tasks share
// sh, moving warm-ups as w says. Run runs it.
func NewStandbys(sh *task.Shared, log *slog.Logger, w WarmupProbes) *Standbys {
	return &Standbys{sh: sh, log: log, w: w, wanted: map[int][]assign.TaskID{}, warm: map[int][]assign.TaskID{},
		running: map[assign.TaskID]*standbyRun{}, probedAt: map[assign.TaskID]time.Time{}, wake: make(chan struct{}, 1)}
}

// Set records the standbys and warm-ups the group leader assigned thread.
// It returns at once; the runner starts and stops standbys on its own
// goroutine. A warm-up is kept like a standby.
func (s *Standbys) Set(thread int, standbys, warmups []assign.TaskID) {
	s.mu.Lock()
	s.wanted[thread] = append(slices.Clone(standbys), warmups...)
	s.warm[thread] = slices.Clone(warmups)
	s.mu.Unlock()
	s.poke()
}

// askProbe records that a probe is due for reason, unless one is.
// s.mu is held.
func (s *Standbys) askProbe(reason string) {
	if s.w.Probe != nil && s.probeDue == "" {
		s.probeDue = reason
	}
}

// maybeProbe starts the probe asked for, on a goroutine of its own,
// unless one runs or the last started less than probeGap ago. While the
// instance holds warm-ups, one is asked for every w.Interval.
func (s *Standbys) maybeProbe(ctx context.Context) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	if s.lastProbe.IsZero() {
		s.lastProbe = now // the interval counts from the start
	}
	if s.w.Interval > 0 && len(s.warmSet()) > 0 && now.Sub(s.lastProbe) >= s.w.Interval {
		s.askProbe("interval")
	}
	if s.probeDue == "" || s.probing || now.Sub(s.lastProbe) < probeGap {
		return
	}
	reason := s.probeDue
	s.probeDue, s.probing, s.lastProbe = "", true, now
	done := make(chan struct{})
	s.probeDone = done
	go func() {
		defer close(done)
		err := s.w.Probe(ctx)
		busy := errors.Is(err, ErrGroupBusy)
		switch {
		case busy:
		case err != nil:
			if ctx.Err() == nil {
				s.log.Warn("probing rebalance failed", "reason", reason, "error", err)
			}
			s.sh.Metrics.Probes.WithLabelValues(reason, "failed").Inc()
		default:
			s.log.Info("probing rebalance started", "reason", reason)
			s.sh.Metrics.Probes.WithLabelValues(reason, "started").Inc()
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		s.probing = false
		if busy {
			s.askProbe(reason) // again once the rebalance is over
		}
	}()
}

// warmSet returns the warm-up tasks of every thread. s.mu is held.
func (s *Standbys) warmSet() map[assign.TaskID]bool {
	set := map[assign.TaskID]bool{}
	for _, ts := range s.warm {
		for _, id := range ts {
			set[id] = true
		}
	}
	return set
}

func (s *Standbys) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// Yield stops the standby of task id, if there is one, and waits until it
// wrote its last batch: a thread that acquired id (local.State.Acquire)
// calls it before restoring id's stores. It returns early when ctx ends.
func (s *Standbys) Yield(ctx context.Context, id assign.TaskID) {
	s.mu.Lock()
	var done chan struct{}
	if s.done != nil && s.current == id {
		s.cancel()
		done = s.done
	}
	s.mu.Unlock()
	if done != nil {
		select {
		case <-done:
		case <-ctx.Done():
		}
	}
	s.poke() // the runner drops the standby: a thread holds the task now
}

// StoreLag returns how far behind its changelog this instance's standby
// (or warm-up) copy of store's partition of task id is, in records (see
// task.Standby.Lag), or UnknownLag when its last update failed or is
// older than standbyStale; false when the instance keeps no such copy
// that it has brought up to date at least once, or a thread of the
// instance holds the task now (the copy is then the task's, restoring or
// running).
func (s *Standbys) StoreLag(id assign.TaskID, store string) (int64, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.running[id]
	if r == nil || !r.updated || s.sh.Local.HeldByThread(id) {
		return 0, false
	}
	return r.lag(store)
}

// ErrNoStandby is returned by Read when the instance keeps no standby
// copy of the store partition that it could read.
var ErrNoStandby = errors.New("weir: no standby copy of the store partition here")

// StandbyBehindError is returned by Read for a standby copy further
// behind than the bound; Lag is UnknownLag when nobody knows how far.
type StandbyBehindError struct{ Lag, MaxLag int64 }

func (e *StandbyBehindError) Error() string {
	if e.Lag == UnknownLag {
		return fmt.Sprintf("the standby has not been brought up to date for %v or its updates fail, so how far behind it is is unknown", standbyStale)
	}
	return fmt.Sprintf("the standby is %d records behind, more than the %d allowed", e.Lag, e.MaxLag)
}

// Read runs fn, a read of this instance's standby copy of store's
// partition of task id, when the copy is at most maxLag records behind
// (see StoreLag): ErrNoStandby when there is no such copy, a
// *StandbyBehindError when it is further behind. A full copy cannot empty
// the store while fn runs (task.Standby.Read).
func (s *Standbys) Read(id assign.TaskID, store string, maxLag int64, fn func() error) error {
	s.mu.Lock()
	r := s.running[id]
	if r == nil || !r.updated || s.sh.Local.HeldByThread(id) {
		s.mu.Unlock()
		return ErrNoStandby
	}
	sb, fresh := r.sb, r.fresh()
	s.mu.Unlock()
	if !fresh {
		return &StandbyBehindError{Lag: UnknownLag, MaxLag: maxLag}
	}
	lag, ran, err := sb.Read(store, maxLag, fn)
	switch {
	case ran:
		return err
	case lag > maxLag:
		return &StandbyBehindError{Lag: lag, MaxLag: maxLag}
	}
	return ErrNoStandby
}

// KeptStandby is a standby or warm-up copy the runner keeps, as
// Standbys.Kept reports it.
type KeptStandby struct {
	ID     assign.TaskID
	Warmup bool // a warm-up (Config.MaxWarmups), not a standby replica
	// Lags are its stores' lags, as StoreLag reports them; empty until
	// its first update completed, or while a thread holds its task.
	Lags map[string]int64
}

// Kept returns the standby and warm-up copies the runner keeps, sorted by
// task. Safe for concurrent use.
func (s *Standbys) Kept() []KeptStandby {
	s.mu.Lock()
	defer s.mu.Unlock()
	warm := s.warmSet()
	out := make([]KeptStandby, 0, len(s.running))
	for _, id := range slices.SortedFunc(maps.Keys(s.running), assign.TaskID.Compare) {
		r := s.running[id]
		k := KeptStandby{ID: id, Warmup: warm[id], Lags: map[string]int64{}}
		if r.updated && !s.sh.Local.HeldByThread(id) {
			for _, store := range r.sb.Stores() {
				if lag, ok := r.lag(store); ok {
					k.Lags[store] = lag
				}
			}
		}
		out = append(out, k)
	}
	return out
}

// Tasks returns the tasks whose standbys the runner keeps, sorted.
func (s *Standbys) Tasks() []assign.TaskID {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.SortedFunc(maps.Keys(s.running), assign.TaskID.Compare)
}

// Run updates the standbys until ctx ends, then closes them. Their state
// stays on disk.
func (s *Standbys) Run(ctx context.Context) {
	defer func() {
		// A probe under way ends with ctx; it uses the instance's admin
		// client, which closes after the runner.
		s.mu.Lock()
		probe := s.probeDone
		s.mu.Unlock()
		if probe != nil {
			select {
			case <-probe:
			case <-time.After(probeJoinWait):
			}
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, r := range s.running {
			r.sb.Close()
		}
		s.running = map[assign.TaskID]*standbyRun{}
	}()
	for ctx.Err() == nil {
		s.reconcile()
		behind := false
		for _, id := range s.Tasks() {
			if ctx.Err() != nil {
				return
			}
			behind = s.update(ctx, id) || behind
		}
		s.maybeProbe(ctx)
		if behind {
			continue // more arrived while updating the others
		}
		timer := time.NewTimer(standbyPoll)
		select {
		case <-ctx.Done():
		case <-s.wake:
		case <-timer.C:
		}
		timer.Stop()
	}
}

// reconcile starts the standbys assigned and not running, and stops those
// no longer assigned or whose task a thread of the instance now holds.
func (s *Standbys) reconcile() {
	s.mu.Lock()
	defer s.mu.Unlock()
	want := map[assign.TaskID]bool{}
	for _, ts := range s.wanted {
		for _, id := range ts {
			if int(id.Subtopology) < len(s.sh.Layout.Subs) && !s.sh.Local.HeldByThread(id) {
				want[id] = true
			}
		}
	}
	warm := s.warmSet()
	for id := range s.probedAt {
		if !warm[id] {
			delete(s.probedAt, id)
		}
	}
	for id, r := range s.running {
		if !want[id] {
			r.sb.Close()
			s.sh.Local.Release(id, standbyHolder, r.sb.Stores())
			delete(s.running, id)
			s.log.Info("standby stopped", "standby", id.String())
		}
	}
	for _, id := range slices.SortedFunc(maps.Keys(want), assign.TaskID.Compare) {
		if s.running[id] != nil {
			continue
		}
		s.sh.Local.Acquire(id, standbyHolder)
		s.running[id] = &standbyRun{sb: task.NewStandby(s.sh, s.log, id)}
		s.log.Info("standby started", "standby", id.String())
	}
}

// update brings one standby up to its changelogs' ends. It reports
// whether the standby was standbyBehind records or more behind a store's
// end: much may have come meanwhile.
func (s *Standbys) update(ctx context.Context, id assign.TaskID) (behind bool) {
	s.mu.Lock()
	r := s.running[id]
	if r == nil || s.sh.Local.HeldByThread(id) || time.Now().Before(r.retryAt) {
		s.mu.Unlock()
		return false
	}
	uctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	s.current, s.cancel, s.done = id, cancel, done
	s.mu.Unlock()

	lags, err := r.sb.Update(uctx)

	s.mu.Lock()
	cancel()
	close(done)
	s.current, s.cancel, s.done = assign.TaskID{}, nil, nil
	s.mu.Unlock()
	if err != nil {
		if uctx.Err() != nil {
			return false // yielded, or the instance is stopping
		}
		s.mu.Lock() // StoreLag reads failures
		r.failures++
		r.retryAt = time.Now().Add(standbyBackoff)
		s.mu.Unlock()
		s.log.Warn("standby update failed; trying again later", "standby", id.String(), "failures", r.failures, "retry_in", standbyBackoff, "error", err)
		return false
	}
	var total int64
	for _, lag := range lags {
		behind = behind || lag >= standbyBehind
		total += lag
	}
	s.mu.Lock()
	r.failures, r.updated, r.syncedAt = 0, true, time.Now()
	// A warm-up caught up: time to move its task here.
	if total <= s.w.AcceptableLag && s.warmSet()[id] && time.Since(s.probedAt[id]) >= probeRetry {
		s.probedAt[id] = time.Now()
		s.log.Info("warm-up caught up; asking for a probing rebalance", "warmup", id.String(), "lag", total)
		s.askProbe("caught_up")
	}
	s.mu.Unlock()
	return behind
}
