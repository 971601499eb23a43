package weir

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"

	"github.com/weirstream/weir/changelog"
	"github.com/weirstream/weir/internal/client"
	"github.com/weirstream/weir/internal/graph"
	"github.com/weirstream/weir/internal/topics"
)

// StateConfig configures local state.
type StateConfig struct {
	// Badger bounds the instance's Badger database; see changelog.Options
	// for the defaults (about 100 MiB of Badger memory).
	Badger changelog.Options
	// MaxBufferBytes bounds the state changes a thread buffers between
	// commits (keys and values); crossing it commits at once. Default
	// 16 MiB.
	MaxBufferBytes int
	// MaxConcurrentRestores bounds how many store partitions an instance
	// restores at the same time; each holds one fetch (1 MiB) in memory.
	// Default 2.
	MaxConcurrentRestores int
	// RestoreListener, when set, is told about every restore. Its methods
	// are called from restore goroutines and must be safe for concurrent
	// use.
	RestoreListener RestoreListener
	// CleanupDelay is how long the local state of a task that moved to
	// another instance is kept, so that a quick move back restores only the
	// changelog's tail; then it is deleted. State found at start for tasks
	// not assigned within the delay is deleted too. Default 10 minutes.
	// Kafka Streams' state.cleanup.delay.ms.
	CleanupDelay time.Duration
}

const (
	defaultMaxBufferBytes        = 16 << 20
	defaultMaxConcurrentRestores = 2
	defaultCleanupDelay          = 10 * time.Minute
)

// RestoreListener observes restores of store partitions from their
// changelogs. Kafka Streams' StateRestoreListener.
type RestoreListener interface {
	// OnRestoreStart is called before a store partition is restored from
	// offset from up to end (exclusive). from is 0 and full is true when
	// the local state was missing or unusable.
	OnRestoreStart(store string, partition int32, from, end int64, full bool)
	// OnBatchRestored is called after each applied batch of records.
	OnBatchRestored(store string, partition int32, next int64, records int)
	// OnRestoreEnd is called when the partition has caught up.
	OnRestoreEnd(store string, partition int32, records int64, took time.Duration)
}

// taskStore is a task's partition of a state store.
type taskStore struct {
	spec  *graph.Store
	topic string // changelog topic
	space *changelog.Space
	buf   *changelog.Buffer
	users map[string]bool
	// last is the newest changelog record sent for this partition by the
	// commit under way; after the flush its offset gives the checkpoint.
	last *sarama.ProducerMessage
	// remaining is the restore's records left, for metrics.
	remaining atomic.Int64
}

// storeNames returns the names of the task's stores.
func (t *task) storeNames() []string {
	names := make([]string, 0, len(t.stores))
	for name := range t.stores {
		names = append(names, name)
	}
	return names
}

// openStores creates the task's store partitions.
func (t *task) openStores(sub *graph.Subtopology) {
	t.stores = map[string]*taskStore{}
	inSub := map[*graph.Node]bool{}
	for _, n := range sub.Nodes {
		inSub[n] = true
	}
	app := t.th.app
	for _, s := range app.graph.Stores {
		if len(s.Users) == 0 || !inSub[s.Users[0]] {
			continue
		}
		space := app.db.Space(s.Name, t.id.Partition)
		st := &taskStore{
			spec:  s,
			topic: graph.ChangelogTopic(app.cfg.ApplicationID, s.Name),
			space: space,
			buf:   changelog.NewBuffer(space),
			users: map[string]bool{},
		}
		for _, u := range s.Users {
			st.users[u.Name] = true
		}
		t.stores[s.Name] = st
	}
}

// Store implements graph.TaskEnv. The store's buffer comes wrapped in the
// null-key rule (see nullKeyBytes).
func (t *task) Store(node, name string) (changelog.Bytes, error) {
	st := t.stores[name]
	if st == nil {
		return nil, fmt.Errorf("weir: task %s has no store %q", t.name, name)
	}
	if !st.users[node] {
		return nil, fmt.Errorf("weir: processor %q is not attached to store %q (Topology.AddStore)", node, name)
	}
	return &nullKeyBytes{Bytes: st.buf, t: t, store: name}, nil
}

// bufferedBytes is the size of the task's uncommitted state changes.
func (t *task) bufferedBytes() int {
	n := 0
	for _, st := range t.stores {
		n += st.buf.Size()
	}
	return n
}

// sendChangelog produces every buffered change to the store's changelog,
// one record per key, to the task's partition.
func (t *task) sendChangelog() error {
	for _, st := range t.stores {
		changes := st.buf.Changes()
		if len(changes) == 0 {
			continue
		}
		o := &client.Origin{Explicit: true, Task: t.name, Offset: -1, Store: st.spec.Name}
		for _, e := range changes {
			m := &sarama.ProducerMessage{
				Topic:     st.topic,
				Key:       sarama.ByteEncoder(e.Key),
				Partition: t.id.Partition,
				Metadata:  o,
			}
			if !e.Deleted {
				m.Value = sarama.ByteEncoder(nonNilBytes(e.Value))
			}
			if err := t.th.send(m); err != nil {
				return err
			}
			st.last = m
		}
	}
	return nil
}

func nonNilBytes(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

// applyState writes the committed changes to Badger, then the checkpoint:
// the commit that contained them has succeeded.
func (t *task) applyState() error {
	for _, st := range t.stores {
		if err := st.buf.Flush(); err != nil {
			return fmt.Errorf("weir: task %s: store %s: %w", t.name, st.spec.Name, err)
		}
		if st.last != nil {
			off := st.last.Offset + 1
			if err := st.space.SetCheckpoint(off); err != nil {
				return fmt.Errorf("weir: task %s: store %s: %w", t.name, st.spec.Name, err)
			}
			t.th.app.local.Checkpointed(st.spec.Name, t.id.Partition, off)
			st.last = nil
		}
	}
	return nil
}

// discardState drops uncommitted changes: the commit failed.
func (t *task) discardState() {
	for _, st := range t.stores {
		st.buf.Clear()
		st.last = nil
	}
}

// restore brings every store partition of the task up to the end of its
// changelog. Local state with a checkpoint replays only the tail; missing
// or unusable state is dropped and restored in full.
func (t *task) restore(ctx context.Context) error {
	app := t.th.app
	for _, st := range t.stores {
		select {
		case app.restoreSlots <- struct{}{}:
		case <-ctx.Done():
			return ctx.Err()
		}
		err := t.restoreStore(ctx, st)
		<-app.restoreSlots
		if err != nil {
			return fmt.Errorf("weir: task %s: restoring store %s: %w", t.name, st.spec.Name, err)
		}
	}
	return nil
}

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
// [changelog.OffsetOutOfRangeError], and the task's thread with it, as any
// failed restore does.
const maxRestoreRestarts = 3

// restoreStore brings one store partition up to the end of its changelog.
//
// It replays the changelog from the local checkpoint when that is safe,
// and otherwise drops the local state and restores from the log start (a
// full restore): when there is no checkpoint, when the changelog no
// longer holds it, and when the checkpoint is older than the changelog's
// delete.retention.ms (see checkpointTooOld).
//
// A full restore whose position falls below the log start (retention or
// DeleteRecords moved it while the restore ran) starts over from the new
// log start, on dropped state, at most maxRestoreRestarts times. Keeping
// what it applied and going on from the new start would be wrong: the
// deleted range may hold the tombstone of a key applied before it, and the
// key would stay. Starting over gives the state a fresh instance would
// build from the same changelog: the records it still holds.
func (t *task) restoreStore(ctx context.Context, st *taskStore) error {
	app := t.th.app
	listener := app.cfg.State.RestoreListener
	partition := strconv.Itoa(int(t.id.Partition))
	start := time.Now()
	r := changelog.NewReader(app.restoreClient, st.topic, t.id.Partition, changelog.ReaderOptions{})
	end, err := r.End(ctx)
	if err != nil {
		return err
	}
	ckpt, ok, err := st.space.Checkpoint()
	if err != nil {
		return err
	}
	// A checkpoint above end is not by itself wrong: an open transaction
	// holds the last stable offset below records already committed. The
	// reader reports a checkpoint above the log's end as out of range.
	from := ckpt.Offset
	// since is the time the checkpoints written during the restore carry
	// (changelog.Checkpoint.Time). A replay keeps the old checkpoint's:
	// the keys it found on disk are no safer for the replay having
	// begun, as tombstones written before the restore started may still
	// vanish before it reaches them. A full restore reads every record
	// it applies after start.
	var since time.Time
	reason := fullNoState
	if ok {
		reason = ""
		since = t.checkpointSince(ckpt)
		if from < end {
			dr, known := app.layout.DeleteRetention[st.topic]
			if !known {
				dr = topics.DefaultDeleteRetention
			}
			if checkpointTooOld(since, start, dr) {
				reason = fullTooOld
				t.log.Warn("checkpoint older than the changelog's delete.retention.ms, deletions since may be compacted away; restoring in full",
					"store", st.spec.Name, "checkpoint", from, "checkpoint_time", since, "delete_retention", dr)
			}
		}
	}
	full := reason != ""
	if full {
		if err := st.space.Drop(); err != nil {
			return err
		}
		if from, err = r.Start(ctx); err != nil {
			return err
		}
		since = start
	}
	var records, pass int64 // applied in all, and since the last (re)start
	apply := func(recs []changelog.Record, next int64) error {
		entries := make([]changelog.Entry, len(recs))
		for i, rec := range recs {
			entries[i] = changelog.Entry{Key: rec.Key, Value: rec.Value, Deleted: rec.Value == nil}
		}
		if err := st.space.Apply(entries); err != nil {
			return err
		}
		if err := st.space.SetCheckpointAt(next, since); err != nil {
			return err
		}
		records += int64(len(recs))
		pass += int64(len(recs))
		st.remaining.Store(max(end-next, 0))
		app.metrics.RestoredRecords.WithLabelValues(st.spec.Name, partition).Add(float64(len(recs)))
		if listener != nil {
			listener.OnBatchRestored(st.spec.Name, t.id.Partition, next, len(recs))
		}
		return nil
	}
	var next int64
	for restarts := 0; ; {
		if full {
			app.metrics.FullRestores.WithLabelValues(st.spec.Name, partition, reason).Inc()
		}
		st.remaining.Store(max(end-from, 0))
		if listener != nil {
			listener.OnRestoreStart(st.spec.Name, t.id.Partition, from, end, full)
		}
		pass = 0
		next, err = r.ReadTo(ctx, from, end, apply)
		var oor *changelog.OffsetOutOfRangeError
		if !errors.As(err, &oor) {
			break
		}
		if full && restarts == maxRestoreRestarts {
			return fmt.Errorf("the changelog's log start overtook the restore %d times: the changelog keeps records for less time than a restore takes: %w", restarts+1, err)
		}
		if err := st.space.Drop(); err != nil {
			return err
		}
		logStart, err := r.Start(ctx)
		if err != nil {
			return err
		}
		// The log may have changed under the restore (a recreated topic
		// also reports out of range): aim for its end as it is now.
		if end, err = r.End(ctx); err != nil {
			return err
		}
		if full {
			restarts++
			t.log.Warn("changelog log start moved past the restore; restoring again from the new log start",
				"store", st.spec.Name, "position", oor.Offset, "log_start", logStart,
				"skipped_offsets", max(logStart-oor.Offset, 0), "dropped_records", pass, "restart", restarts)
			reason = fullLogStartMove
		} else {
			// The changelog no longer holds the checkpoint (retention or
			// a recreated topic): the local state cannot be brought up to
			// date.
			t.log.Warn("checkpoint no longer in the changelog; restoring in full", "store", st.spec.Name, "checkpoint", from, "log_start", logStart)
			reason = fullOutOfRange
			full = true
		}
		from, since = logStart, start
	}
	if err != nil {
		return err
	}
	// Having read up to end, the state holds everything the changelog had
	// when the restore started; later records are newer than start.
	if err := st.space.SetCheckpointAt(next, start); err != nil {
		return err
	}
	app.local.Checkpointed(st.spec.Name, t.id.Partition, next)
	took := time.Since(start)
	st.remaining.Store(0)
	app.metrics.RestoreDuration.WithLabelValues(st.spec.Name).Observe(took.Seconds())
	t.log.Info("store restored", "store", st.spec.Name, "records", records, "full", full, "took", took)
	if listener != nil {
		listener.OnRestoreEnd(st.spec.Name, t.id.Partition, records, took)
	}
	return nil
}

// checkpointSince returns when the state behind checkpoint c was last known
// to hold everything its changelog had below c.Offset: c.Time, or, for a
// checkpoint written by a weir version that recorded no time, an estimate
// that errs towards old: the database's last write before this run less
// State.CleanupDelay, since the state of a task that moved away stays that
// long while the instance goes on writing (the delay of the current
// configuration stands in for that of the run that wrote it). Such a
// checkpoint is then trusted after a short stop, so an upgrade does not
// restore every store in full, and not after a long one. Zero when
// nothing is known.
func (t *task) checkpointSince(c changelog.Checkpoint) time.Time {
	if !c.Time.IsZero() {
		return c.Time
	}
	last := t.th.app.db.LastWritten()
	if last.IsZero() {
		return time.Time{}
	}
	return last.Add(-t.th.app.cfg.State.CleanupDelay)
}

// checkpointTooOld reports whether state in sync with its changelog as of
// since may miss deletions at now, for a changelog whose
// delete.retention.ms is deleteRetention.
//
// Compaction removes an overwritten or deleted key's older records at once
// but keeps a tombstone for delete.retention.ms after it first compacts
// it, which is after the tombstone was written. A tombstone written after
// since therefore stays in the changelog until since + deleteRetention at
// least, and a replay from the checkpoint before then sees every
// deletion. Later it may find the tombstone gone and keep the key.
//
// Both times come from the local clock, so a skew with the broker's clock
// cancels out. The margin, a tenth of deleteRetention and at most a
// minute, covers what the times do not: the moment between a commit and
// its checkpoint, transactions open when a restore started, and clock
// steps. An unknown (zero) since is too old.
//
// The caller asks only when the changelog holds records at or after the
// checkpoint: without any, no deletion can have been missed however old
// the checkpoint is.
func checkpointTooOld(since, now time.Time, deleteRetention time.Duration) bool {
	if since.IsZero() {
		return true
	}
	margin := min(deleteRetention/10, time.Minute)
	return now.Sub(since) >= deleteRetention-margin
}
