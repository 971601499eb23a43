package task

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strconv"

	"github.com/weirstream/weir/internal/assign"
)

// Standby keeps a copy of one task's stores current on an instance that
// does not run the task (Config.StandbyReplicas): it reads the stores'
// changelogs (read_committed) and applies them to Badger with their
// checkpoints, as a restore does, but never processes a record. When the
// task fails over to this instance, its restore starts from the standby's
// checkpoint and replays only what the standby had not applied yet.
//
// A Standby has no node instances, so no processor code runs for it. Its
// methods run on one goroutine at a time (the instance's standby runner).
type Standby struct {
	t *Task
}

// NewStandby returns a standby copy of task id's stores. It does not read
// anything yet: Update does.
func NewStandby(sh *Shared, log *slog.Logger, id assign.TaskID) *Standby {
	t := &Task{id: id, name: id.String(), sh: sh}
	t.log = log.With("standby", t.name)
	t.openStores(sh.Layout.Subs[id.Subtopology])
	return &Standby{t: t}
}

// ID is the task whose stores the standby copies.
func (s *Standby) ID() assign.TaskID { return s.t.id }

// Stores returns the names of the standby's stores, sorted.
func (s *Standby) Stores() []string {
	names := make([]string, 0, len(s.t.stores))
	for name := range s.t.stores {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

// Update brings every store partition of the standby up to its changelog's
// end as it is now, and returns the records each was behind when Update
// looked (store -> lag), which it also sets as weir_standby_lag_records.
// Missing or unusable local state is copied in full, as a restore would.
// ctx ending stops it between two batches: every batch applied is
// written with its checkpoint, so what is on disk stays a valid prefix of
// the changelog.
func (s *Standby) Update(ctx context.Context) (map[string]int64, error) {
	t := s.t
	partition := strconv.Itoa(int(t.id.Partition))
	lags := make(map[string]int64, len(t.stores))
	for _, name := range s.Stores() {
		behind, err := t.restoreStore(ctx, t.stores[name], restoreStandby)
		if err != nil {
			return lags, fmt.Errorf("weir: standby %s: store %s: %w", t.name, name, err)
		}
		lags[name] = behind
		t.sh.Metrics.StandbyLag.WithLabelValues(name, partition).Set(float64(behind))
	}
	return lags, nil
}

// Lag returns how many records the standby's copy of store is behind, as
// of its last look at the changelog's end, and during an update what is
// left of it; false for a store the task does not have. A standby that
// starts copying a store in full is behind by the whole changelog from
// the moment it empties the store. Safe to call from any goroutine.
func (s *Standby) Lag(store string) (int64, bool) {
	st := s.t.stores[store]
	if st == nil {
		return 0, false
	}
	return st.remaining.Load(), true
}

// Read runs fn, a read of the standby's copy of store, when the copy is at
// most maxLag records behind, and returns the lag it found; ran reports
// whether fn ran (false for a store the task does not have, or a copy
// further behind). A full copy cannot empty the store while fn runs, so a
// read sees the copy as it was when the lag was checked, or later. Safe to
// call from any goroutine.
func (s *Standby) Read(store string, maxLag int64, fn func() error) (lag int64, ran bool, err error) {
	st := s.t.stores[store]
	if st == nil {
		return 0, false, nil
	}
	st.dropping.RLock()
	defer st.dropping.RUnlock()
	if lag = st.remaining.Load(); lag > maxLag {
		return lag, false, nil
	}
	return lag, true, fn()
}

// Close drops the standby's lag gauges. Its state stays on disk, where the
// local state's cleaner drops it unless a task or standby takes it again
// (Config.Stores.CleanupDelay).
func (s *Standby) Close() {
	partition := strconv.Itoa(int(s.t.id.Partition))
	for name := range s.t.stores {
		s.t.sh.Metrics.StandbyLag.DeleteLabelValues(name, partition)
	}
}
