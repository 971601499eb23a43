package weir

import (
	"context"
	"log/slog"
	"maps"
	"sync"
	"time"

	"github.com/weirstream/weir/changelog"
	"github.com/weirstream/weir/internal/assign"
)

// localState keeps track of the store partitions this instance holds on
// disk. It tells the group leader which tasks' state the instance has (so
// tasks stay where their state is), and drops the state of tasks that
// moved away once Config.State.CleanupDelay has passed without them coming
// back: a quick move back restores only the changelog's tail.
type localState struct {
	db       *changelog.DB
	log      *slog.Logger
	delay    time.Duration
	storeSub map[string]int // store -> sub-topology

	mu      sync.Mutex
	closed  bool            // the database is closing: no more reads
	ckpts   map[space]int64 // checkpoint of every partition held
	running map[assign.TaskID]bool
	due     map[space]time.Time // partitions to drop, and when
}

// space is one store partition.
type space struct {
	store     string
	partition int32
}

func newLocalState(db *changelog.DB, log *slog.Logger, delay time.Duration, storeSub map[string]int) (*localState, error) {
	l := &localState{
		db: db, log: log, delay: delay, storeSub: storeSub,
		ckpts: map[space]int64{}, running: map[assign.TaskID]bool{}, due: map[space]time.Time{},
	}
	cps, err := db.Checkpoints()
	if err != nil {
		return nil, err
	}
	// Nothing runs yet: everything held is dropped unless its task is
	// assigned within the delay.
	for _, cp := range cps {
		s := space{cp.Store, cp.Partition}
		l.ckpts[s] = cp.Offset
		l.due[s] = time.Now().Add(delay)
	}
	return l, nil
}

func (l *localState) task(s space) (assign.TaskID, bool) {
	sub, ok := l.storeSub[s.store]
	return assign.TaskID{Subtopology: sub, Partition: s.partition}, ok
}

// offsets returns, per task, the sum of its stores' checkpoints: what the
// assignor compares to find the instance most caught up.
func (l *localState) offsets() map[assign.TaskID]int64 {
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

// acquire marks a task as running here, so its state is not dropped. It
// must be called before the task touches its stores.
func (l *localState) acquire(id assign.TaskID) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.running[id] = true
	for s := range l.due {
		if t, ok := l.task(s); ok && t == id {
			delete(l.due, s)
		}
	}
}

// release marks a task as no longer running here; its stores' partitions
// are dropped after the delay unless it comes back.
func (l *localState) release(id assign.TaskID, stores []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.running, id)
	at := time.Now().Add(l.delay)
	for _, st := range stores {
		l.due[space{st, id.Partition}] = at
	}
}

// sizes returns the estimated on-disk bytes of each store's partitions.
func (l *localState) sizes() map[string]int64 {
	l.mu.Lock()
	defer l.mu.Unlock() // close waits, so the database stays open
	if l.closed {
		return nil
	}
	out := map[string]int64{}
	for s := range l.ckpts {
		out[s.store] += l.db.Space(s.store, s.partition).ApproximateSize()
	}
	return out
}

// close stops reads of the database by metrics scrapes; call it before
// closing the database.
func (l *localState) close() {
	l.mu.Lock()
	l.closed = true
	l.mu.Unlock()
}

// checkpointed records a new checkpoint.
func (l *localState) checkpointed(store string, partition int32, offset int64) {
	l.mu.Lock()
	l.ckpts[space{store, partition}] = offset
	l.mu.Unlock()
}

// run drops due partitions until ctx ends. The lock is held while
// dropping, so a task cannot start on a partition being dropped.
func (l *localState) run(ctx context.Context) {
	tick := time.NewTicker(min(max(l.delay/4, 10*time.Millisecond), time.Minute))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		l.mu.Lock()
		if l.closed {
			l.mu.Unlock()
			return
		}
		now := time.Now()
		for _, s := range spacesOf(l.due) {
			if now.Before(l.due[s]) {
				continue
			}
			if id, ok := l.task(s); ok && l.running[id] {
				delete(l.due, s)
				continue
			}
			if err := l.db.Space(s.store, s.partition).Drop(); err != nil {
				l.log.Warn("dropping state of a task that moved away", "store", s.store, "partition", s.partition, "error", err)
				continue
			}
			l.log.Info("dropped state of a task that moved away", "store", s.store, "partition", s.partition)
			delete(l.due, s)
			delete(l.ckpts, s)
		}
		l.mu.Unlock()
	}
}

func spacesOf(m map[space]time.Time) []space {
	keys := make([]space, 0, len(m))
	for k := range maps.Keys(m) {
		keys = append(keys, k)
	}
	return keys
}
