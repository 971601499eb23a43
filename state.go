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
	"github.com/weirstream/weir/internal/graph"
	"github.com/weirstream/weir/internal/restore"
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

// Store implements graph.TaskEnv.
func (t *task) Store(node, name string) (changelog.Bytes, error) {
	st := t.stores[name]
	if st == nil {
		return nil, fmt.Errorf("weir: task %s has no store %q", t.name, name)
	}
	if !st.users[node] {
		return nil, fmt.Errorf("weir: processor %q is not attached to store %q (Topology.AddStore)", node, name)
	}
	return st.buf, nil
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
		for _, e := range st.buf.Changes() {
			m := &sarama.ProducerMessage{
				Topic:     st.topic,
				Key:       sarama.ByteEncoder(e.Key),
				Partition: t.id.Partition,
				Metadata:  explicitPartition{},
			}
			if !e.Deleted {
				m.Value = sarama.ByteEncoder(nonNilBytes(e.Value))
			}
			if err := t.th.producer.Send(m); err != nil {
				return err
			}
			t.th.sent = true
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
			t.th.app.local.checkpointed(st.spec.Name, t.id.Partition, off)
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

func (t *task) restoreStore(ctx context.Context, st *taskStore) error {
	app := t.th.app
	listener := app.cfg.State.RestoreListener
	start := time.Now()
	r := restore.NewReader(app.restoreClient, st.topic, t.id.Partition, restore.ReaderOptions{})
	end, err := r.End(ctx)
	if err != nil {
		return err
	}
	from, ok, err := st.space.Checkpoint()
	if err != nil {
		return err
	}
	// A checkpoint above end is not by itself wrong: an open transaction
	// holds the last stable offset below records already committed. The
	// reader reports a checkpoint above the log's end as out of range.
	full := !ok
	if full {
		if err := st.space.Drop(); err != nil {
			return err
		}
		if from, err = r.Start(ctx); err != nil {
			return err
		}
	}
	var records int64
	apply := func(recs []restore.Record, next int64) error {
		entries := make([]changelog.Entry, len(recs))
		for i, rec := range recs {
			entries[i] = changelog.Entry{Key: rec.Key, Value: rec.Value, Deleted: rec.Value == nil}
		}
		if err := st.space.Apply(entries); err != nil {
			return err
		}
		if err := st.space.SetCheckpoint(next); err != nil {
			return err
		}
		records += int64(len(recs))
		st.remaining.Store(max(end-next, 0))
		app.metrics.RestoredRecords.WithLabelValues(st.spec.Name, strconv.Itoa(int(t.id.Partition))).Add(float64(len(recs)))
		if listener != nil {
			listener.OnBatchRestored(st.spec.Name, t.id.Partition, next, len(recs))
		}
		return nil
	}
	st.remaining.Store(max(end-from, 0))
	if listener != nil {
		listener.OnRestoreStart(st.spec.Name, t.id.Partition, from, end, full)
	}
	next, err := r.ReadTo(ctx, from, end, apply)
	var oor *restore.OffsetOutOfRangeError
	if errors.As(err, &oor) && !full {
		// The changelog no longer holds the checkpoint (retention or a
		// recreated topic): the local state cannot be brought up to date.
		t.log.Warn("checkpoint no longer in the changelog; restoring in full", "store", st.spec.Name, "checkpoint", from)
		if err := st.space.Drop(); err != nil {
			return err
		}
		if from, err = r.Start(ctx); err != nil {
			return err
		}
		full = true
		if listener != nil {
			listener.OnRestoreStart(st.spec.Name, t.id.Partition, from, end, full)
		}
		next, err = r.ReadTo(ctx, from, end, apply)
	}
	if err != nil {
		return err
	}
	if err := st.space.SetCheckpoint(next); err != nil {
		return err
	}
	app.local.checkpointed(st.spec.Name, t.id.Partition, next)
	took := time.Since(start)
	st.remaining.Store(0)
	app.metrics.RestoreDuration.WithLabelValues(st.spec.Name).Observe(took.Seconds())
	t.log.Info("store restored", "store", st.spec.Name, "records", records, "full", full, "took", took)
	if listener != nil {
		listener.OnRestoreEnd(st.spec.Name, t.id.Partition, records, took)
	}
	return nil
}
