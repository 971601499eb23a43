// Package local keeps track of the state an instance holds on disk: which
// store partitions, at which checkpoints, held by which threads, and when
// the state of a task that moved away is dropped.
package local

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/weirstream/weir/internal/assign"
	"github.com/weirstream/weir/internal/statelog"
)

// State keeps track of the store partitions this instance holds on
// disk. It tells the group leader which tasks' state the instance has (so
// tasks stay where their state is), and drops the state of tasks that
// moved away once Config.Stores.CleanupDelay has passed without them coming
// back: a quick move back restores only the changelog's tail.
//
// # Locking
//
// mu guards the bookkeeping and is only ever held briefly: the Badger
// work that can take long (dropping a partition, estimating sizes) runs
// outside it, so a thread creating a task (Acquire) and sarama's rebalance
// goroutine asking for the offsets (JoinGroup) do not wait for Badger;
// only a task whose own partition is being dropped waits for that drop.
// use is held shared by that work and exclusively by Close, so the
// database is never touched once Close has returned.
type State struct {
	db       *statelog.DB
	spaces   spaceOps // what the cleaner and the scrapes do to the database
	log      *slog.Logger
	delay    time.Duration
	storeSub map[string]int // store -> sub-topology

	use    sync.RWMutex
	closed bool // under use: the database is closing, no more reads

	mu    sync.Mutex
	ckpts map[space]int64 // checkpoint of every partition held
	// holders are the threads (by index) running each task. A task moves
	// between threads of one instance with an overlap: the new thread may
	// acquire it before the old one, stalled, releases it. Its state stays
	// as long as any thread holds it.
	holders map[assign.TaskID]map[int]struct{}
	due     map[space]time.Time // partitions to drop, and when
	// dropping are the partitions the cleaner is dropping now, outside mu;
	// dropped is signalled (on mu) whenever one is done, for acquire.
	dropping map[space]struct{}
	dropped  *sync.Cond
}

// space is one store partition.
type space struct {
	store     string
	partition int32
}

// spaceOps is what State does to the database outside its lock. It is
// an interface so that tests can hold a drop or a size estimate midway.
type spaceOps interface {
	drop(s space) error
	size(store string) int64 // all the store's partitions on disk
}

// dbSpaces is spaceOps on the instance's database.
type dbSpaces struct{ db *statelog.DB }

func (d dbSpaces) drop(s space) error      { return d.db.Space(s.store, s.partition).Drop() }
func (d dbSpaces) size(store string) int64 { return d.db.EstimatedDiskBytes(store) }

// New returns the local state of db, whose stores belong to the
// sub-topologies storeSub gives. The store partitions held are dropped
// after delay unless their task is acquired first, except those of the
// stores keep names (the global stores, which belong to no task).
func New(db *statelog.DB, log *slog.Logger, delay time.Duration, storeSub map[string]int, keep ...string) (*State, error) {
	l := &State{
		db: db, spaces: dbSpaces{db}, log: log, delay: delay, storeSub: storeSub,
		ckpts: map[space]int64{}, holders: map[assign.TaskID]map[int]struct{}{},
		due: map[space]time.Time{}, dropping: map[space]struct{}{},
	}
	l.dropped = sync.NewCond(&l.mu)
	cps, err := db.Checkpoints()
	if err != nil {
		return nil, err
	}
	// Nothing runs yet: everything held is dropped unless its task is
	// assigned within the delay.
	for _, cp := range cps {
		if slices.Contains(keep, cp.Store) {
			continue
		}
		s := space{cp.Store, cp.Partition}
		l.ckpts[s] = cp.Offset
		l.due[s] = time.Now().Add(delay)
	}
	return l, nil
}

func (l *State) task(s space) (assign.TaskID, bool) {
	sub, ok := l.storeSub[s.store]
	return assign.TaskID{Subtopology: sub, Partition: s.partition}, ok
}

// offsets returns, per task, the sum of its stores' checkpoints: what the
// assignor compares to find the instance most caught up.
func (l *State) Offsets() map[assign.TaskID]int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[assign.TaskID]int64{}
	for s, off := range l.ckpts {
		if id, ok := l.task(s); ok {
			out[id] += off
		}
	}
	return out
}

// Checkpoints returns the checkpoint of every store partition the
// instance holds on disk (its tasks', its standbys', and those of tasks
// that moved away and are not dropped yet), sorted by store and
// partition: the next changelog offset each reflects. Safe for concurrent
// use.
func (l *State) Checkpoints() []statelog.Checkpoint {
	l.mu.Lock()
	out := make([]statelog.Checkpoint, 0, len(l.ckpts))
	for s, off := range l.ckpts {
		out = append(out, statelog.Checkpoint{Store: s.store, Partition: s.partition, Offset: off})
	}
	l.mu.Unlock()
	slices.SortFunc(out, func(a, b statelog.Checkpoint) int {
		if c := strings.Compare(a.Store, b.Store); c != 0 {
			return c
		}
		return int(a.Partition) - int(b.Partition)
	})
	return out
}

// acquire marks a task as running on thread, so its state is not dropped.
// It must be called before the task touches its stores. If the cleaner is
// dropping one of the task's partitions right now, acquire waits until
// that drop is done: the task then starts from empty state, never from
// state that disappears under it.
func (l *State) Acquire(id assign.TaskID, thread int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for l.isDropping(id) {
		l.dropped.Wait()
	}
	hs := l.holders[id]
	if hs == nil {
		hs = map[int]struct{}{}
		l.holders[id] = hs
	}
	hs[thread] = struct{}{}
	for s := range l.due {
		if t, ok := l.task(s); ok && t == id {
			delete(l.due, s)
		}
	}
}

// isDropping reports whether the cleaner is dropping a partition of id.
// l.mu is held.
func (l *State) isDropping(id assign.TaskID) bool {
	for s := range l.dropping {
		if t, ok := l.task(s); ok && t == id {
			return true
		}
	}
	return false
}

// release marks a task as no longer running on thread. When no other
// thread holds it, its stores' partitions are dropped after the delay
// unless it comes back; while another thread holds it (it moved to a
// sibling thread that acquired it first), its state is that thread's and
// stays.
func (l *State) Release(id assign.TaskID, thread int, stores []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if hs := l.holders[id]; hs != nil {
		delete(hs, thread)
		if len(hs) > 0 {
			return
		}
		delete(l.holders, id)
	}
	at := time.Now().Add(l.delay)
	for _, st := range stores {
		l.due[space{st, id.Partition}] = at
	}
}

// Sizes returns, for each store with a partition on disk, the estimate of
// the disk its data takes (statelog.DB.EstimatedDiskBytes, whose gaps
// weir_store_estimated_disk_bytes documents). The estimate is per store,
// not per partition: a table holding two partitions of one store then
// counts, where a per-partition estimate would miss it. It runs outside
// l.mu (it walks Badger's table list), and close waits for it.
func (l *State) Sizes() map[string]int64 {
	l.use.RLock()
	defer l.use.RUnlock()
	if l.closed {
		return nil
	}
	l.mu.Lock()
	stores := map[string]int64{}
	for s := range l.ckpts {
		stores[s.store] = 0
	}
	l.mu.Unlock()
	for store := range stores {
		stores[store] = l.spaces.size(store)
	}
	return stores
}

// ErrClosed is returned by View once Close has begun.
var ErrClosed = errors.New("weir: local state is closed")

// View runs fn with the database, which stays open until fn returns; it
// returns ErrClosed without running fn once Close has begun. For reads
// from outside the stream threads (store views).
func (l *State) View(fn func(db *statelog.DB) error) error {
	l.use.RLock()
	defer l.use.RUnlock()
	if l.closed {
		return ErrClosed
	}
	return fn(l.db)
}

// close stops reads of the database by metrics scrapes and the cleaner,
// waiting for those under way; call it before closing the database.
func (l *State) Close() {
	l.use.Lock()
	l.closed = true
	l.use.Unlock()
}

// checkpointed records a new checkpoint.
func (l *State) Checkpointed(store string, partition int32, offset int64) {
	l.mu.Lock()
	l.ckpts[space{store, partition}] = offset
	l.mu.Unlock()
}

// run drops due partitions until ctx ends or the database closes.
func (l *State) Run(ctx context.Context) {
	tick := time.NewTicker(min(max(l.delay/4, 10*time.Millisecond), time.Minute))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if !l.dropDue(ctx) {
			return
		}
	}
}

// dropDue drops the partitions that are due and held by no thread. It
// returns false once the database is closed.
//
// The due partitions are taken off the due list and marked dropping under
// l.mu, then dropped outside it. A task acquiring one of them meanwhile
// waits in acquire until its drop is done (sequence: the cleaner marks
// partition p dropping and unlocks; a thread creates the task of p and
// calls acquire, which sees p dropping and waits; the drop ends, the
// cleaner unmarks p and signals; acquire takes the task, which restores p
// into the empty prefix). Without the wait, the task could restore into p
// and see its data vanish when the drop lands.
func (l *State) dropDue(ctx context.Context) bool {
	l.use.RLock()
	defer l.use.RUnlock()
	if l.closed {
		return false
	}
	l.mu.Lock()
	now := time.Now()
	var drop []space
	for s, at := range l.due {
		if now.Before(at) {
			continue
		}
		delete(l.due, s)
		if id, ok := l.task(s); ok && len(l.holders[id]) > 0 {
			continue // running again (acquire clears due; this is a safeguard)
		}
		l.dropping[s] = struct{}{}
		drop = append(drop, s)
	}
	l.mu.Unlock()

	for i, s := range drop {
		if ctx.Err() != nil {
			// The App is stopping: what is left stays on disk, and the next
			// start schedules it again.
			l.mu.Lock()
			for _, r := range drop[i:] {
				delete(l.dropping, r)
				l.due[r] = now
			}
			l.dropped.Broadcast()
			l.mu.Unlock()
			return true
		}
		err := l.spaces.drop(s)
		l.mu.Lock()
		delete(l.dropping, s)
		if err != nil {
			l.due[s] = now // try again at the next tick
		} else {
			delete(l.ckpts, s)
		}
		l.dropped.Broadcast()
		l.mu.Unlock()
		if err != nil {
			l.log.Warn("dropping state of a task that moved away", "store", s.store, "partition", s.partition, "error", err)
			continue
		}
		l.log.Info("dropped state of a task that moved away", "store", s.store, "partition", s.partition)
	}
	return true
}

// HeldByThread reports whether a stream thread (a holder index from 0)
// holds task id: its state is then the thread's, and no standby may
// write it.
func (l *State) HeldByThread(id assign.TaskID) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for h := range l.holders[id] {
		if h >= 0 {
			return true
		}
	}
	return false
}
