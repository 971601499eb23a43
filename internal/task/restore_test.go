package task

import (
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/weirstream/weir/changelog"
	"github.com/weirstream/weir/internal/graph"
	"github.com/weirstream/weir/internal/local"
	"github.com/weirstream/weir/internal/statelog"
)

// A checkpoint is trusted only while every tombstone written after it must
// still be in the changelog: younger than delete.retention.ms, less the
// margin.
func TestCheckpointTooOld(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	day := 24 * time.Hour
	for _, tc := range []struct {
		name            string
		age             time.Duration
		deleteRetention time.Duration
		want            bool
	}{
		{"fresh", time.Minute, day, false},
		{"inside the margin of a minute", day - 2*time.Minute, day, false},
		{"within the margin", day - 30*time.Second, day, true},
		{"older than delete.retention.ms", day + time.Second, day, true},
		{"short retention, young", 800 * time.Millisecond, time.Second, false},
		{"short retention, margin of a tenth", 950 * time.Millisecond, time.Second, true},
		{"zero retention", 0, 0, true},
		{"checkpoint from the future", -time.Hour, day, false},
	} {
		if got := statelog.CheckpointTooOld(now.Add(-tc.age), now, tc.deleteRetention); got != tc.want {
			t.Errorf("%s: statelog.CheckpointTooOld(age %v, delete.retention.ms %v) = %v, want %v", tc.name, tc.age, tc.deleteRetention, got, tc.want)
		}
	}
	if !statelog.CheckpointTooOld(time.Time{}, now, day) {
		t.Error("a checkpoint of unknown time was trusted")
	}
}

// A checkpoint written before checkpoints had a time is dated by the
// database's last write, less Stores.CleanupDelay.
func TestCheckpointSince(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "state")
	db, err := statelog.Open(dir, changelog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Space("s", 0).SetCheckpoint(1); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	written := time.Now().Add(-time.Hour).Truncate(time.Second)
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range append(entries, nil) {
		path := dir
		if e != nil {
			path = filepath.Join(dir, e.Name())
		}
		if err := os.Chtimes(path, written, written); err != nil {
			t.Fatal(err)
		}
	}
	db, err = statelog.Open(dir, changelog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()

	tk := &Task{sh: &Shared{Config: Config{CleanupDelay: 10 * time.Minute}, DB: db}}
	at := time.UnixMilli(1_700_000_000_000)
	if got := tk.checkpointSince(statelog.Checkpoint{Offset: 1, Time: at}); !got.Equal(at) {
		t.Errorf("checkpointSince of a checkpoint with a time = %v, want %v", got, at)
	}
	if got, want := tk.checkpointSince(statelog.Checkpoint{Offset: 1}), written.Add(-10*time.Minute); !got.Equal(want) {
		t.Errorf("checkpointSince of a checkpoint without a time = %v, want the last write less the cleanup delay, %v", got, want)
	}

	mem, err := statelog.Open("", changelog.Options{InMemory: true})
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	tk = &Task{sh: &Shared{DB: mem}}
	if got := tk.checkpointSince(statelog.Checkpoint{Offset: 1}); !got.IsZero() {
		t.Errorf("checkpointSince without a time or a last write = %v, want zero", got)
	}
}

// An idle store's checkpoint is written again, with the commit's time, at
// most once a checkpointRefresh: a quiet store must not look too old to
// trust after a short restart.
func TestIdleCheckpointIsRefreshed(t *testing.T) {
	t.Parallel()
	db, err := statelog.Open(t.TempDir(), changelog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	space := db.Space("s", 0)
	held, err := local.New(db, slog.New(slog.DiscardHandler), time.Hour, map[string]int{"s": 0})
	if err != nil {
		t.Fatal(err)
	}
	restoredAt := time.UnixMilli(1_700_000_000_000)
	st := &taskStore{spec: &graph.Store{Name: "s"}, space: space, buf: statelog.NewBuffer(space), ckpt: 40, ckptAt: restoredAt, staged: -1}
	tk := &Task{sh: &Shared{Local: held}, stores: map[string]*taskStore{"s": st}}
	commitAt := func(at time.Time) {
		t.Helper()
		c := db.NewCommit()
		if err := tk.Stage(c, at); err != nil {
			t.Fatal(err)
		}
		if err := c.Flush(); err != nil {
			t.Fatal(err)
		}
		tk.Applied()
	}
	// Restoring: the restore owns the store's checkpoint (and writes
	// st.ckpt on its goroutine); the thread's commits leave it alone.
	commitAt(restoredAt.Add(2 * time.Minute))
	if _, ok, _ := space.Checkpoint(); ok {
		t.Fatal("a commit wrote a checkpoint of a task still restoring")
	}
	tk.running = true
	commitAt(restoredAt.Add(30 * time.Second))
	if _, ok, _ := space.Checkpoint(); ok {
		t.Fatal("a checkpoint was written for an idle store before checkpointRefresh passed")
	}
	later := restoredAt.Add(2 * time.Minute)
	commitAt(later)
	cp, ok, err := space.Checkpoint()
	if err != nil || !ok || cp.Offset != 40 || !cp.Time.Equal(later) {
		t.Fatalf("checkpoint %+v (%v, %v), want offset 40 at %v", cp, ok, err, later)
	}
}
