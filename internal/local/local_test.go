package local

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weirstream/weir/changelog"
	"github.com/weirstream/weir/internal/assign"
	"github.com/weirstream/weir/internal/statelog"
)

// testStore is the one store of the tests' single sub-topology.
const testStore = "counts"

// openTestDB opens a real Badger database in a temporary directory.
func openTestDB(t *testing.T) *statelog.DB {
	t.Helper()
	db, err := statelog.Open(t.TempDir(), changelog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// fillSpace writes n keys and a checkpoint into a store partition, as a
// task's commit does.
func fillSpace(t *testing.T, db *statelog.DB, partition int32, n int, ckpt int64) {
	t.Helper()
	sp := db.Space(testStore, partition)
	entries := make([]statelog.Entry, n)
	for i := range entries {
		entries[i] = statelog.Entry{Key: []byte{byte(i >> 8), byte(i)}, Value: []byte("value")}
	}
	if err := sp.Apply(entries); err != nil {
		t.Fatal(err)
	}
	if err := sp.SetCheckpoint(ckpt); err != nil {
		t.Fatal(err)
	}
}

// storedCheckpoint returns the checkpoint offset the database holds for a
// partition of testStore, or -1.
func storedCheckpoint(t *testing.T, db *statelog.DB, partition int32) int64 {
	t.Helper()
	cps, err := db.Checkpoints()
	if err != nil {
		t.Fatal(err)
	}
	for _, cp := range cps {
		if cp.Store == testStore && cp.Partition == partition {
			return cp.Offset
		}
	}
	return -1
}

// startCleaner runs l.Run until the test ends.
func startCleaner(t *testing.T, l *State) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { l.Run(ctx) })
	t.Cleanup(func() {
		cancel()
		wg.Wait()
		l.Close()
	})
}

// waitFor polls cond every millisecond for up to d and reports whether it
// became true.
func waitFor(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if cond() {
			return true
		}
		time.Sleep(time.Millisecond)
	}
	return cond()
}

// TestLateReleaseKeepsSiblingThreadsState pins a bug where, with several
// threads, a thread that closed a task late (after the group had already
// given the task to a sibling thread of the same instance, which acquired
// it) cleared the sibling's claim: the cleaner then dropped the live state
// of the task under the sibling's feet.
func TestLateReleaseKeepsSiblingThreadsState(t *testing.T) {
	t.Parallel()
	const delay = 10 * time.Millisecond
	db := openTestDB(t)
	const live, moved = 0, 1
	fillSpace(t, db, live, 100, 42)
	fillSpace(t, db, moved, 100, 7)
	l, err := New(db, slog.New(slog.DiscardHandler), delay, map[string]int{testStore: 0})
	if err != nil {
		t.Fatal(err)
	}
	liveID, movedID := assign.TaskID{Partition: live}, assign.TaskID{Partition: moved}
	stores := []string{testStore}

	// Task "moved" leaves the instance: thread 0 closes it, nobody takes it.
	l.Acquire(movedID, 0)
	// Task "live" runs on thread 0; the group moves it to thread 1, which
	// acquires it before thread 0, stalled, gets round to closing it.
	l.Acquire(liveID, 0)
	l.Acquire(liveID, 1)
	l.Release(movedID, 0, stores)
	l.Release(liveID, 0, stores)
	startCleaner(t, l)

	// The partition nobody holds is dropped after the delay...
	if !waitFor(10*time.Second, func() bool { return storedCheckpoint(t, db, moved) < 0 }) {
		t.Fatal("the state of a task nobody holds was not dropped")
	}
	// ...and the cleaner, which dropped it once it was due, never drops
	// the one thread 1 holds: watch it for many cleanup ticks.
	held := func() bool {
		n, err := db.Space(testStore, live).Count()
		return err == nil && n == 100 && storedCheckpoint(t, db, live) == 42 && l.Offsets()[liveID] == 42
	}
	if waitFor(50*delay, func() bool { return !held() }) {
		n, _ := db.Space(testStore, live).Count()
		t.Fatalf("state of the task thread 1 holds was dropped: checkpoint %d, %d keys, offsets %v",
			storedCheckpoint(t, db, live), n, l.Offsets())
	}
	if _, ok := l.Offsets()[movedID]; ok {
		t.Errorf("offsets still report the dropped task: %v", l.Offsets())
	}

	// Once thread 1 closes it too, nobody holds it: it is dropped.
	l.Release(liveID, 1, stores)
	if !waitFor(10*time.Second, func() bool { return storedCheckpoint(t, db, live) < 0 }) {
		t.Fatal("the state of a task released by every thread was not dropped")
	}
}

// gatedSpaces is spaceOps that can hold a drop or a size estimate midway:
// a held call reports its partition (a size estimate: its store) on
// entered, then waits until its gate is closed before it does the real
// work.
type gatedSpaces struct {
	spaceOps
	dropGate, sizeGate chan struct{} // nil: do not hold
	entered            chan space
	sizesRun           atomic.Int64 // size estimates that reached the database
}

func newGatedSpaces(l *State) *gatedSpaces {
	return &gatedSpaces{spaceOps: l.spaces, entered: make(chan space, 16)}
}

func (g *gatedSpaces) drop(s space) error {
	if g.dropGate != nil {
		g.entered <- s
		<-g.dropGate
	}
	return g.spaceOps.drop(s)
}

func (g *gatedSpaces) size(store string) int64 {
	if g.sizeGate != nil {
		g.entered <- space{store: store}
		<-g.sizeGate
	}
	g.sizesRun.Add(1)
	return g.spaceOps.size(store)
}

// within runs f in a goroutine and reports whether it returned within d.
func within(d time.Duration, f func()) (returned <-chan struct{}, ok bool) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	select {
	case <-done:
		return done, true
	case <-time.After(d):
		return done, false
	}
}

// TestDropDoesNotBlockOtherTasks pins a bug where the cleaner held the
// lock of State while Badger dropped a partition: a thread creating
// any task (acquire) and sarama's JoinGroup (offsets) waited for the drop.
// Now only a task whose own partition is being dropped waits, and it
// starts once the drop is done, never under it.
func TestDropDoesNotBlockOtherTasks(t *testing.T) {
	t.Parallel()
	const delay = 10 * time.Millisecond
	db := openTestDB(t)
	fillSpace(t, db, 0, 100, 5)
	fillSpace(t, db, 1, 100, 6)
	l, err := New(db, slog.New(slog.DiscardHandler), delay, map[string]int{testStore: 0})
	if err != nil {
		t.Fatal(err)
	}
	moved, other, fresh := assign.TaskID{Partition: 0}, assign.TaskID{Partition: 1}, assign.TaskID{Partition: 2}
	l.Acquire(other, 0) // runs here: only partition 0 is due
	g := newGatedSpaces(l)
	g.dropGate = make(chan struct{})
	l.spaces = g
	startCleaner(t, l)
	var once sync.Once
	open := func() { once.Do(func() { close(g.dropGate) }) }
	t.Cleanup(open) // before the cleaner's cleanup waits for the drop

	select {
	case s := <-g.entered:
		if s != (space{testStore, 0}) {
			t.Fatalf("dropping %v, want partition 0", s)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the due partition was not dropped")
	}
	// The drop is under way.
	if _, ok := within(10*time.Second, func() {
		l.Acquire(fresh, 1)
		l.Release(other, 0, []string{testStore})
		_ = l.Offsets()
		l.Checkpointed(testStore, 2, 1)
	}); !ok {
		t.Fatal("acquire, release, offsets or checkpointed of other tasks waited for a drop in progress")
	}
	acquired, ok := within(20*delay, func() { l.Acquire(moved, 1) })
	if ok {
		t.Fatal("a task acquired its partition while the partition was being dropped")
	}
	open()
	select {
	case <-acquired:
	case <-time.After(10 * time.Second):
		t.Fatal("acquire did not return after the drop ended")
	}
	// The drop landed before the task started, and it was the last one:
	// what the task writes now stays.
	if off := storedCheckpoint(t, db, 0); off >= 0 {
		t.Fatalf("partition 0 still has checkpoint %d after its drop", off)
	}
	if off, ok := l.Offsets()[moved]; ok {
		t.Fatalf("offsets report the dropped partition at %d", off)
	}
	fillSpace(t, db, 0, 10, 9)
	l.Checkpointed(testStore, 0, 9)
	if waitFor(30*delay, func() bool { return storedCheckpoint(t, db, 0) != 9 }) {
		t.Fatal("the state a task wrote after acquiring its partition was dropped")
	}
}

// TestSizesDoNotBlockTasks pins a bug where a metrics scrape held the lock
// of State while Badger estimated partition sizes, stalling task
// creation and JoinGroup behind the scrape. close must still wait for a
// scrape in flight: the database is never read after close returns.
func TestSizesDoNotBlockTasks(t *testing.T) {
	t.Parallel()
	db := openTestDB(t)
	fillSpace(t, db, 0, 100, 5)
	l, err := New(db, slog.New(slog.DiscardHandler), time.Hour, map[string]int{testStore: 0})
	if err != nil {
		t.Fatal(err)
	}
	g := newGatedSpaces(l)
	g.sizeGate = make(chan struct{})
	l.spaces = g
	var once sync.Once
	open := func() { once.Do(func() { close(g.sizeGate) }) }
	t.Cleanup(open)

	scraped := make(chan map[string]int64, 1)
	go func() { scraped <- l.Sizes() }()
	select {
	case <-g.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the scrape did not estimate a size")
	}
	// The estimate is under way.
	if _, ok := within(10*time.Second, func() {
		l.Acquire(assign.TaskID{Partition: 1}, 0)
		_ = l.Offsets()
		l.Checkpointed(testStore, 1, 3)
	}); !ok {
		t.Fatal("acquire, offsets or checkpointed waited for a metrics scrape")
	}
	closed, ok := within(100*time.Millisecond, l.Close)
	if ok {
		t.Fatal("close returned while a scrape was reading the database")
	}
	open()
	select {
	case sizes := <-scraped:
		if _, ok := sizes[testStore]; !ok {
			t.Errorf("sizes = %v, want an entry for %s", sizes, testStore)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the scrape did not return")
	}
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("close did not return after the scrape ended")
	}
	ran := g.sizesRun.Load()
	if sizes := l.Sizes(); sizes != nil || g.sizesRun.Load() != ran {
		t.Errorf("a scrape after close returned %v and read the database %d times", sizes, g.sizesRun.Load()-ran)
	}
}

// Checkpoints lists every store partition held, found on disk at start
// or checkpointed since, sorted by store and partition.
func TestCheckpointsListsWhatIsHeld(t *testing.T) {
	t.Parallel()
	db := openTestDB(t)
	fillSpace(t, db, 2, 1, 20)
	l, err := New(db, slog.New(slog.DiscardHandler), time.Hour, map[string]int{testStore: 0, "other": 1})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	l.Checkpointed(testStore, 0, 7)
	l.Checkpointed("other", 1, 3)
	l.Checkpointed(testStore, 2, 21)
	got := l.Checkpoints()
	want := []statelog.Checkpoint{{Store: testStore, Partition: 0, Offset: 7}, {Store: testStore, Partition: 2, Offset: 21}, {Store: "other", Partition: 1, Offset: 3}}
	if len(got) != len(want) {
		t.Fatalf("checkpoints %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i].Store != want[i].Store || got[i].Partition != want[i].Partition || got[i].Offset != want[i].Offset {
			t.Errorf("checkpoint %d = %+v, want %+v", i, got[i], want[i])
		}
	}
}
