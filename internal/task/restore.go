package task

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/weirstream/weir/internal/statelog"
	"github.com/weirstream/weir/internal/topics"
)

// restore brings every store partition of the task up to the end of its
// changelog. Local state with a checkpoint replays only the tail; missing
// or unusable state is dropped and restored in full.
func (t *Task) restore(ctx context.Context) error {
	sh := t.sh
	if sh.YieldStandby != nil {
		// A standby of this task on this instance stops first: the two
		// must never write the task's stores at once.
		sh.YieldStandby(ctx, t.id)
	}
	for _, st := range t.stores {
		select {
		case sh.RestoreSlots <- struct{}{}:
		case <-ctx.Done():
			return ctx.Err()
		}
		_, err := t.restoreStore(ctx, st, restoreActive)
		<-sh.RestoreSlots
		if err != nil {
			return fmt.Errorf("weir: task %s: restoring store %s: %w", t.name, st.spec.Name, err)
		}
	}
	return nil
}

// restoreMode tells restoreStore who it restores for.
type restoreMode int

const (
	// restoreActive: a task about to process; the restore listener and
	// the restore metrics see it.
	restoreActive restoreMode = iota
	// restoreStandby: a standby copy catching up (see Standby); only the
	// standby metrics see it, and it logs at debug level.
	restoreStandby
)

// standbyCheckpointRefresh is how often a caught-up standby rewrites its
// checkpoint although nothing arrived: the checkpoint's time says how long
// the state is known complete (see statelog.CheckpointTooOld), and a quiet store
// whose time stayed where it was would be copied in full once records
// came again after delete.retention.ms.
const standbyCheckpointRefresh = time.Minute

// Reasons for restoring a store partition from the changelog's log start,
// the reason label of weir_restores_full_total.
const (
	fullNoState      = "no_state"                // no local state
	fullOutOfRange   = "checkpoint_out_of_range" // the changelog no longer holds the checkpoint
	fullTooOld       = "checkpoint_too_old"      // deletions since the checkpoint may be compacted away
	fullLogStartMove = "log_start_moved"         // the log start overtook a full restore
)

// maxRestoreRestarts bounds how many times one restore of a store
// partition starts over because the changelog's log start overtook it.
// Retention or DeleteRecords moving the log start once during a long
// restore is expected of compact,delete changelogs (window and session
// stores); a log start that overtakes the restore again and again means the
// changelog keeps records for less time than a restore takes, which more
// attempts do not fix. The restore then fails with the
// [statelog.OffsetOutOfRangeError], and the task's thread with it, as any
// failed restore does.
const maxRestoreRestarts = 3

// restoreStore brings one store partition up to the end of its changelog.
//
// It replays the changelog from the local checkpoint when that is safe,
// and otherwise drops the local state and restores from the log start (a
// full restore): when there is no checkpoint, when the changelog no
// longer holds it, and when the checkpoint is older than the changelog's
// delete.retention.ms (see statelog.CheckpointTooOld).
//
// A full restore whose position falls below the log start (retention or
// DeleteRecords moved it while the restore ran) starts over from the new
// log start, on dropped state, at most maxRestoreRestarts times. Keeping
// what it applied and going on from the new start would be wrong: the
// deleted range may hold the tombstone of a key applied before it, and the
// key would stay. Starting over gives the state a fresh instance would
// build from the same changelog: the records it still holds.
//
// behind is how many offsets the store partition was behind the end when
// the call began (a standby's lag).
func (t *Task) restoreStore(ctx context.Context, st *taskStore, mode restoreMode) (behind int64, err error) {
	rr := &restoreRun{t: t, st: st, mode: mode, listener: t.sh.RestoreListener, applied: t.sh.Metrics.RestoredRecords,
		partition: strconv.Itoa(int(t.id.Partition)), start: time.Now(), idx: storeIndex(st.spec.Kind)}
	if mode == restoreStandby {
		rr.listener, rr.applied = nil, t.sh.Metrics.StandbyRecords
	}
	rr.r = statelog.NewReader(t.sh.RestoreClient, st.topic, t.id.Partition, statelog.ReaderOptions{})
	upToDate, err := rr.plan(ctx)
	if err != nil || upToDate {
		return 0, err
	}
	behind = max(rr.end-rr.from, 0)
	defer rr.cancelBulk()
	next, err := rr.read(ctx)
	if err != nil {
		return 0, err
	}
	if mode == restoreActive && !st.source {
		if next, err = rr.readToStable(ctx, next); err != nil {
			return 0, err
		}
	}
	if err := rr.finish(next); err != nil {
		return 0, err
	}
	return behind, nil
}

// restoreRun is one restore of a store partition (restoreStore), in named
// steps: plan where it starts, read to the end (starting over when the log
// start overtakes it), read on to the last stable offset, and record the
// checkpoint.
type restoreRun struct {
	t         *Task
	st        *taskStore
	mode      restoreMode
	listener  RestoreListener
	applied   *prometheus.CounterVec // records applied, per store and partition
	partition string
	start     time.Time
	idx       statelog.Index
	r         *statelog.Reader

	end, from int64
	// since is the time the checkpoints written during the restore carry
	// (statelog.Checkpoint.Time). A replay keeps the old checkpoint's:
	// the keys it found on disk are no safer for the replay having
	// begun, as tombstones written before the restore started may still
	// vanish before it reaches them. A full restore reads every record
	// it applies after start.
	since  time.Time
	full   bool
	reason string // why full: the reason label of weir_restores_full_total

	records, pass int64 // applied in all, and since the last (re)start
	// A batch is written to Badger on a goroutine of its own while the
	// reader fetches the next one: fetching and applying overlap, with at
	// most two batches in memory. Each batch goes in one write batch with
	// its checkpoint, after its data.
	bufs     [2][]statelog.Entry
	cur      int
	inflight *restoreBatch
	// bulk, when set, takes the records instead of write batches: a full
	// restore of an active task's empty store partition of at least
	// Config.BulkRestoreMin offsets (see statelog.Bulk). Nothing reaches
	// the database before finish, which writes the data and the
	// checkpoint.
	bulk *statelog.Bulk
}

// plan finds the log's end and where the restore starts: the local
// checkpoint, or the log start for a full restore, whose local state it
// drops first. upToDate is a standby already caught up.
func (rr *restoreRun) plan(ctx context.Context) (upToDate bool, err error) {
	t, st := rr.t, rr.st
	if rr.end, err = rr.r.End(ctx); err != nil {
		return false, err
	}
	if st.source {
		// The store follows the task's input topic: it holds what the
		// task committed, and the task processes the rest itself.
		if rr.end, err = t.sourceEnd(ctx, rr.r, st, rr.end); err != nil {
			return false, err
		}
	}
	ckpt, ok, err := st.space.Checkpoint()
	if err != nil {
		return false, err
	}
	if ok && rr.mode == restoreStandby && ckpt.Offset >= rr.end && st.ckpt == ckpt.Offset && rr.start.Sub(st.ckptAt) < standbyCheckpointRefresh {
		// Caught up, and the checkpoint is the standby's own and recent:
		// nothing to read, and no need to write it again.
		return true, nil
	}
	// A checkpoint above end is not by itself wrong: an open transaction
	// holds the last stable offset below records already committed. The
	// reader reports a checkpoint above the log's end as out of range.
	rr.from = ckpt.Offset
	if ok {
		// A checkpoint taken in another log (the store switched between
		// its changelog topic and its input topic) says nothing here.
		log, err := st.space.Log()
		if err != nil {
			return false, err
		}
		if want := st.sourceLog(); log != want {
			t.log.Info("store checkpoint is of another log; restoring in full", "store", st.spec.Name, "checkpoint_log", log, "log", want)
			ok = false
		}
	}
	rr.reason = fullNoState
	if ok {
		rr.reason = ""
		rr.since = t.checkpointSince(ckpt)
		if rr.from < rr.end {
			dr, known := t.sh.Layout.DeleteRetention[st.topic]
			if !known {
				dr = topics.DefaultDeleteRetention
			}
			if statelog.CheckpointTooOld(rr.since, rr.start, dr) {
				rr.reason = fullTooOld
				t.log.Warn("checkpoint older than the changelog's delete.retention.ms, deletions since may be compacted away; restoring in full",
					"store", st.spec.Name, "checkpoint", rr.from, "checkpoint_time", rr.since, "delete_retention", dr)
			}
		}
	}
	rr.full = rr.reason != ""
	if rr.full {
		if err := st.empty(rr.end); err != nil {
			return false, err
		}
		if rr.from, err = rr.r.Start(ctx); err != nil {
			return false, err
		}
		rr.since = rr.start
		return false, rr.startBulk()
	}
	return false, nil
}

// startBulk starts a bulk load of the emptied store partition when the
// restore is one (see restoreRun.bulk); a database that has no bulk path
// (in memory) restores through write batches.
func (rr *restoreRun) startBulk() error {
	least := rr.t.sh.BulkRestoreMin
	if rr.mode != restoreActive || least <= 0 || rr.end-rr.from < least || rr.t.sh.DB.InMemory() {
		return nil
	}
	b, err := rr.t.sh.DB.NewBulk(rr.st.space, 0)
	if err != nil {
		return err
	}
	b.Expect(rr.end - rr.from)
	rr.bulk = b
	return nil
}

// cancelBulk drops a bulk load that did not finish, and its runs.
func (rr *restoreRun) cancelBulk() {
	if rr.bulk != nil {
		rr.bulk.Cancel()
		rr.bulk = nil
	}
}

// settle waits for the batch being written, and counts it.
func (rr *restoreRun) settle() error {
	if rr.inflight == nil {
		return nil
	}
	b := rr.inflight
	rr.inflight = nil
	if err := <-b.done; err != nil {
		return err
	}
	rr.records += int64(b.recs)
	rr.pass += int64(b.recs)
	rr.st.remaining.Store(max(rr.end-b.next, 0))
	rr.applied.WithLabelValues(rr.st.spec.Name, rr.partition).Add(float64(b.recs))
	if rr.listener != nil {
		rr.listener.OnBatchRestored(rr.st.spec.Name, rr.t.id.Partition, b.next, b.recs)
	}
	return nil
}

// apply hands a fetched batch to Badger, once the one before it is
// written.
func (rr *restoreRun) apply(recs []statelog.Record, next int64) error {
	if err := rr.settle(); err != nil {
		return err
	}
	// The records with the local index entries they imply, which the
	// changelog does not hold (see storeIndex). They keep pointing into
	// the fetch's buffers, which the batch keeps alive.
	if rr.st.source {
		// A record with a null key is not in the store: the table drops
		// it.
		recs = slices.DeleteFunc(recs, func(r statelog.Record) bool { return r.Key == nil })
	}
	entries, err := statelog.RestoreEntries(rr.bufs[rr.cur][:0], recs, rr.idx, rr.st.source)
	if err != nil {
		return err
	}
	rr.bufs[rr.cur] = entries
	rr.cur ^= 1
	b := &restoreBatch{recs: len(recs), next: next, done: make(chan error, 1)}
	db, space, at := rr.t.sh.DB, rr.st.space, rr.since
	if bulk := rr.bulk; bulk != nil {
		go func() { b.done <- bulk.Add(entries) }()
	} else {
		go func() { b.done <- db.Restore(space, entries, next, at) }()
	}
	rr.inflight = b
	return nil
}

// readTo reads the changelog from from to end into the store, and returns
// the offset after the last record read.
func (rr *restoreRun) readTo(ctx context.Context, from, end int64) (int64, error) {
	next, err := rr.r.ReadTo(ctx, from, end, rr.apply)
	if serr := rr.settle(); serr != nil && err == nil {
		err = serr
	}
	return next, err
}

// read reads the changelog to its end, starting over from the new log
// start when the log start overtakes the restore (see restoreStore).
func (rr *restoreRun) read(ctx context.Context) (next int64, err error) {
	t, st := rr.t, rr.st
	for restarts := 0; ; {
		if rr.full && rr.mode == restoreActive {
			t.sh.Metrics.FullRestores.WithLabelValues(st.spec.Name, rr.partition, rr.reason).Inc()
		} else if rr.full {
			t.log.Info("standby copying the store in full", "store", st.spec.Name, "reason", rr.reason)
		}
		st.remaining.Store(max(rr.end-rr.from, 0))
		if rr.listener != nil {
			rr.listener.OnRestoreStart(st.spec.Name, t.id.Partition, rr.from, rr.end, rr.full)
		}
		rr.pass = 0
		next, err = rr.readTo(ctx, rr.from, rr.end)
		var oor *statelog.OffsetOutOfRangeError
		if !errors.As(err, &oor) {
			return next, err
		}
		if rr.full && restarts == maxRestoreRestarts {
			return 0, fmt.Errorf("the changelog's log start overtook the restore %d times: the changelog keeps records for less time than a restore takes: %w", restarts+1, err)
		}
		if err := st.space.Drop(); err != nil {
			return 0, err
		}
		if rr.bulk != nil {
			// Nothing of the load reached the database: start it again.
			rr.cancelBulk()
			if rr.bulk, err = t.sh.DB.NewBulk(st.space, 0); err != nil {
				return 0, err
			}
		}
		logStart, err := rr.r.Start(ctx)
		if err != nil {
			return 0, err
		}
		// The log may have changed under the restore (a recreated topic
		// also reports out of range): aim for its end as it is now.
		if rr.end, err = rr.r.End(ctx); err != nil {
			return 0, err
		}
		if rr.full {
			restarts++
			t.log.Warn("changelog log start moved past the restore; restoring again from the new log start",
				"store", st.spec.Name, "position", oor.Offset, "log_start", logStart,
				"skipped_offsets", max(logStart-oor.Offset, 0), "dropped_records", rr.pass, "restart", restarts)
			rr.reason = fullLogStartMove
		} else {
			// The changelog no longer holds the checkpoint (retention or
			// a recreated topic): the local state cannot be brought up to
			// date.
			t.log.Warn("checkpoint no longer in the changelog; restoring in full", "store", st.spec.Name, "checkpoint", rr.from, "log_start", logStart)
			rr.reason = fullOutOfRange
			rr.full = true
		}
		rr.from, rr.since = logStart, rr.start
		if rr.bulk != nil {
			rr.bulk.Expect(rr.end - rr.from)
		}
	}
}

// readToStable reads on until no transaction is open below the position:
// a task's state must not start below a transaction that is still open,
// whose records may yet commit (a commit whose marker is on its way,
// while the group's offsets already say committed). A store following its
// input topic is exempt: other producers write there.
func (rr *restoreRun) readToStable(ctx context.Context, next int64) (int64, error) {
	for {
		lso, err := rr.t.awaitStable(ctx, rr.r, rr.st, next)
		if err != nil {
			return 0, err
		}
		if lso <= next {
			return next, nil
		}
		rr.end = lso
		if next, err = rr.readTo(ctx, next, rr.end); err != nil {
			return 0, err
		}
	}
}

// finish records the checkpoint, next, and reports the restore.
func (rr *restoreRun) finish(next int64) error {
	t, st := rr.t, rr.st
	// Having read up to end, the state holds everything the changelog had
	// when the restore started; later records are newer than start.
	bulk, fallback := rr.bulk != nil, false
	if bulk {
		b := rr.bulk
		rr.bulk = nil
		if err := b.Finish(next, rr.start, st.sourceLog()); err != nil {
			return err
		}
		fallback = b.Fallback
	} else {
		if err := st.space.SetCheckpointAt(next, rr.start); err != nil {
			return err
		}
		if err := st.space.SetLog(st.sourceLog()); err != nil {
			return err
		}
	}
	st.ckpt, st.ckptAt = next, rr.start
	t.sh.Local.Checkpointed(st.spec.Name, t.id.Partition, next)
	took := time.Since(rr.start)
	st.remaining.Store(0)
	if rr.mode == restoreStandby {
		if rr.records > 0 {
			t.log.Debug("standby updated", "store", st.spec.Name, "records", rr.records, "full", rr.full, "took", took)
		}
		return nil
	}
	t.sh.Metrics.RestoreDuration.WithLabelValues(st.spec.Name).Observe(took.Seconds())
	t.log.Info("store restored", "store", st.spec.Name, "records", rr.records, "full", rr.full, "bulk", bulk && !fallback, "took", took)
	if rr.listener != nil {
		rr.listener.OnRestoreEnd(st.spec.Name, t.id.Partition, rr.records, took)
	}
	return nil
}

// sourceEnd returns where the restore of a store whose changelog is the
// task's input topic ends: the group's committed offset of the task's
// partition (records after it the task processes itself, into the store),
// or the topic's start when the group has committed none, at most end.
func (t *Task) sourceEnd(ctx context.Context, r *statelog.Reader, st *taskStore, end int64) (int64, error) {
	if t.sh.CommittedOffset == nil {
		return 0, fmt.Errorf("no way to read the committed offset of %s", st.topic)
	}
	off, found, err := t.sh.CommittedOffset(st.topic, t.id.Partition)
	if err != nil {
		return 0, fmt.Errorf("reading the committed offset of %s/%d: %w", st.topic, t.id.Partition, err)
	}
	if !found {
		return r.Start(ctx)
	}
	return min(off, end), nil
}

// restoreBatch is a batch of changelog records being written to Badger.
type restoreBatch struct {
	recs int
	next int64
	done chan error
}

// checkpointSince returns when the state behind checkpoint c was last known
// to hold everything its changelog had below c.Offset: c.Time, or, for a
// checkpoint written by a weir version that recorded no time, an estimate
// that errs towards old: the database's last write before this run less
// Stores.CleanupDelay, since the state of a task that moved away stays that
// long while the instance goes on writing (the delay of the current
// configuration stands in for that of the run that wrote it). Such a
// checkpoint is then trusted after a short stop, so an upgrade does not
// restore every store in full, and not after a long one. Zero when
// nothing is known.
func (t *Task) checkpointSince(c statelog.Checkpoint) time.Time {
	if !c.Time.IsZero() {
		return c.Time
	}
	last := t.sh.DB.LastWritten()
	if last.IsZero() {
		return time.Time{}
	}
	return last.Add(-t.sh.CleanupDelay)
}

// empty drops the store's data for a full restore of behind records.
// A standby read (Standby.Read, for StoreReader.WithStandbyReads) must
// see the store as behind from the moment it empties, and none may be
// under way while it does.
func (st *taskStore) empty(behind int64) error {
	st.dropping.Lock()
	defer st.dropping.Unlock()
	st.remaining.Store(max(behind, 1))
	return st.space.Drop()
}

// openTxnWarnEvery is how long a restore waits on a transaction left open
// on its changelog before it says so, and then how often it says so again.
const openTxnWarnEvery = 30 * time.Second

// openTxnPoll is how often a restore held by an open transaction looks at
// the changelog's last stable offset again.
const openTxnPoll = 100 * time.Millisecond

// AbandonedEnder is a Host that can end records a process of the
// application that is gone left open on a changelog partition, in a
// transaction whose coordinator completed it without the marker reaching
// the partition (the thread's take-over). It logs what it does and does
// not; the restore goes on waiting for the last stable offset either way.
type AbandonedEnder interface {
	EndAbandonedOn(ctx context.Context, topic string, partition int32)
}

// awaitStable returns pos when no transaction is open on the store's
// changelog partition at or above pos (its high watermark is not above
// it), and otherwise waits until the last stable offset passes pos and
// returns it: the records of the open transaction, and any committed after
// them, must be restored before the task may start. A transaction open
// past the transaction timeout of its producer (one that died) is aborted
// by its coordinator, which moves the offset on; one that stays open (a
// lost marker) keeps the task restoring, with a warning every
// openTxnWarnEvery, never reported as restored; with each warning a host
// that is an AbandonedEnder is asked to end it, should a departed process
// have left it. It returns early when ctx ends.
func (t *Task) awaitStable(ctx context.Context, r *statelog.Reader, st *taskStore, pos int64) (int64, error) {
	hwm, err := r.HighWatermark(ctx)
	if err != nil || hwm <= pos {
		return pos, err
	}
	began, warned := time.Now(), time.Now()
	for {
		lso, err := r.End(ctx)
		if err != nil {
			return pos, err
		}
		if lso > pos {
			return lso, nil
		}
		if time.Since(warned) >= openTxnWarnEvery {
			warned = time.Now()
			t.log.Warn("restore held below the changelog's high watermark by an open transaction; the task starts once it ends",
				"store", st.spec.Name, "topic", st.topic, "last_stable_offset", lso, "high_watermark", hwm, "waited", time.Since(began).Round(time.Second))
			if e, ok := t.host.(AbandonedEnder); ok {
				e.EndAbandonedOn(ctx, st.topic, t.id.Partition)
			}
		}
		timer := time.NewTimer(openTxnPoll)
		select {
		case <-ctx.Done():
			timer.Stop()
			return pos, ctx.Err()
		case <-timer.C:
		}
	}
}
