// Package global keeps an instance's global stores (graph.GlobalStore):
// each is the whole of its topic, every partition, restored into the
// state database before any task starts and kept current while the
// application runs. The topic is the store's changelog; the records are
// applied as they are, a null value deleting its key.
//
// A store's data lives in the database space of partition [Partition];
// the offset reached in each topic partition is that partition's
// checkpoint (space (store, partition)), written in the same batch as the
// data it covers, so a restart resumes where the last batch ended, unless
// the checkpoint is older than the topic's delete.retention.ms: deletions
// written since may have been compacted away, so the store restores in
// full. A caught-up partition's checkpoint time is refreshed every
// [CheckpointRefresh], so a quiet topic does not make its checkpoint look
// old.
package global

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/IBM/sarama"

	"github.com/weirstream/weir/internal/graph"
	"github.com/weirstream/weir/internal/statelog"
	"github.com/weirstream/weir/internal/topics"
)

// Partition is the database partition that holds a global store's data.
const Partition int32 = -1

// DefaultPoll is how long Run waits before it looks again at a topic
// partition that had nothing new.
const DefaultPoll = 100 * time.Millisecond

// CheckpointRefresh is how often a caught-up partition's checkpoint time
// is written again while nothing new arrives.
const CheckpointRefresh = time.Minute

// Updater restores and keeps current an instance's global stores.
type Updater struct {
	db     *statelog.DB
	client sarama.Client
	log    *slog.Logger
	// deleteRetention is each topic's delete.retention.ms.
	deleteRetention map[string]time.Duration
	// Poll is how long Run waits after a round that found nothing new in
	// any partition; DefaultPoll when zero.
	Poll   time.Duration
	stores []*store
}

type store struct {
	name, topic string
	parts       []*part
}

type part struct {
	p   int32
	pos int64 // next offset to read
	r   *statelog.Reader
	// synced is when the partition was last known caught up with its
	// topic, as its checkpoint time says.
	synced time.Time
}

// New returns an Updater of the global stores gs, reading through client
// (read_committed) and writing to db. deleteRetention gives each topic's
// delete.retention.ms (topics.DefaultDeleteRetention for a topic it
// lacks). It does no I/O.
func New(db *statelog.DB, client sarama.Client, log *slog.Logger, gs []*graph.GlobalStore, deleteRetention map[string]time.Duration) *Updater {
	u := &Updater{db: db, client: client, log: log, deleteRetention: deleteRetention}
	for _, g := range gs {
		u.stores = append(u.stores, &store{name: g.Name, topic: g.Topic})
	}
	return u
}

// Space returns the bytes of global store name in db.
func Space(db *statelog.DB, name string) *statelog.Space { return db.Space(name, Partition) }

// Restore brings every global store up to the committed end of its topic,
// from where its checkpoints left it. A checkpoint the topic no longer
// holds (compaction or retention moved the log start past it, or the
// topic was recreated) makes the store start over from the topic's start,
// its data dropped first, so that no deleted key survives.
func (u *Updater) Restore(ctx context.Context) error {
	for _, s := range u.stores {
		start := time.Now()
		n, err := u.restore(ctx, s, 0)
		if err != nil {
			return err
		}
		u.log.Info("global store restored", "store", s.name, "topic", s.topic, "records", n, "took", time.Since(start))
	}
	return nil
}

// maxStartOvers bounds how often a restore starts over because its
// position left the topic.
const maxStartOvers = 3

func (u *Updater) restore(ctx context.Context, s *store, attempt int) (int64, error) {
	ps, err := u.client.Partitions(s.topic)
	if err != nil {
		return 0, fmt.Errorf("weir: global store %s: partitions of %s: %w", s.name, s.topic, err)
	}
	s.parts = s.parts[:0]
	now := time.Now()
	for _, p := range ps {
		ck, found, err := u.db.Space(s.name, p).Checkpoint()
		if err != nil {
			return 0, err
		}
		pt := &part{p: p, r: statelog.NewReader(u.client, s.topic, p, statelog.ReaderOptions{}), synced: ck.Time}
		if found && attempt == 0 {
			dr, known := u.deleteRetention[s.topic]
			if !known {
				dr = topics.DefaultDeleteRetention
			}
			if statelog.CheckpointTooOld(ck.Time, now, dr) {
				end, err := pt.r.End(ctx)
				if err != nil {
					return 0, fmt.Errorf("weir: global store %s: %w", s.name, err)
				}
				if end > ck.Offset {
					// Without records past the checkpoint no deletion
					// was missed, however old it is.
					u.log.Warn("global store checkpoint older than its topic's delete.retention.ms, deletions since may be compacted away; restoring it in full",
						"store", s.name, "topic", s.topic, "partition", p, "checkpoint", ck.Offset, "checkpoint_time", ck.Time, "delete_retention", dr)
					if err := u.drop(s, ps); err != nil {
						return 0, err
					}
					return u.restore(ctx, s, attempt+1)
				}
			}
		}
		if found {
			pt.pos = ck.Offset
		} else if pt.pos, err = pt.r.Start(ctx); err != nil {
			return 0, fmt.Errorf("weir: global store %s: %w", s.name, err)
		}
		s.parts = append(s.parts, pt)
	}
	var total int64
	for _, pt := range s.parts {
		n, err := u.catchUp(ctx, s, pt)
		var oor *statelog.OffsetOutOfRangeError
		if errors.As(err, &oor) && attempt < maxStartOvers {
			u.log.Warn("global store checkpoint out of range of its topic; restoring it from the start",
				"store", s.name, "topic", s.topic, "partition", pt.p, "offset", oor.Offset)
			if err := u.drop(s, ps); err != nil {
				return 0, err
			}
			return u.restore(ctx, s, attempt+1)
		}
		if err != nil {
			return 0, err
		}
		total += n
	}
	return total, nil
}

// drop deletes a global store's data and checkpoints.
func (u *Updater) drop(s *store, ps []int32) error {
	if err := Space(u.db, s.name).Drop(); err != nil {
		return err
	}
	for _, p := range ps {
		if err := u.db.Space(s.name, p).Drop(); err != nil {
			return err
		}
	}
	return nil
}

// catchUp applies what the partition holds past its position, up to its
// committed end now, and returns how many records it applied.
func (u *Updater) catchUp(ctx context.Context, s *store, pt *part) (int64, error) {
	// Every record committed before asked is at most end: once the
	// partition reached end, what it holds is in sync as of asked.
	asked := time.Now()
	end, err := pt.r.End(ctx)
	if err != nil {
		return 0, fmt.Errorf("weir: global store %s: %w", s.name, err)
	}
	if end == pt.pos {
		if asked.Sub(pt.synced) >= CheckpointRefresh {
			if err := u.db.Space(s.name, pt.p).SetCheckpointAt(pt.pos, asked); err != nil {
				return 0, err
			}
			pt.synced = asked
		}
		return 0, nil
	}
	var n int64
	data, ckpt := Space(u.db, s.name), u.db.Space(s.name, pt.p)
	pos, err := pt.r.ReadTo(ctx, pt.pos, end, func(recs []statelog.Record, next int64) error {
		entries := make([]statelog.Entry, 0, len(recs))
		var nullKeys, firstNull int64
		for _, r := range recs {
			if r.Key == nil {
				// A record with a null key has no row to set: skipped, as
				// Kafka Streams' global tables skip it.
				if nullKeys++; nullKeys == 1 {
					firstNull = r.Offset
				}
				continue
			}
			entries = append(entries, statelog.Entry{Key: r.Key, Value: r.Value, Deleted: r.Value == nil})
		}
		if nullKeys > 0 {
			u.log.Warn("weir: global store skipped records with a null key", "store", s.name, "topic", s.topic,
				"partition", pt.p, "records", nullKeys, "first_offset", firstNull)
		}
		c := u.db.NewCommit()
		if err := c.Stage(data, entries); err != nil {
			c.Cancel()
			return err
		}
		// A batch short of end is in sync as of no time known, so it
		// keeps the time of the last one that was.
		at := pt.synced
		if next >= end {
			at = asked
		}
		c.Checkpoint(ckpt, next, at)
		if err := c.Flush(); err != nil {
			return err
		}
		pt.synced = at
		n += int64(len(recs))
		return nil
	})
	pt.pos = pos
	if err != nil {
		return n, fmt.Errorf("weir: global store %s: %w", s.name, err)
	}
	return n, nil
}

// Run keeps the global stores current until ctx ends: it reads what each
// topic partition gained since Restore or the last round, and waits Poll
// after a round that found nothing. It returns nil when ctx ends, or the
// error that stopped it.
func (u *Updater) Run(ctx context.Context) error {
	poll := u.Poll
	if poll <= 0 {
		poll = DefaultPoll
	}
	timer := time.NewTimer(poll)
	defer timer.Stop()
	for ctx.Err() == nil {
		var applied int64
		for _, s := range u.stores {
			for _, pt := range s.parts {
				n, err := u.catchUp(ctx, s, pt)
				var oor *statelog.OffsetOutOfRangeError
				if errors.As(err, &oor) {
					u.log.Warn("global store lost its place in its topic; restoring it from the start",
						"store", s.name, "topic", s.topic, "partition", pt.p, "offset", oor.Offset)
					ps := make([]int32, len(s.parts))
					for i, pt := range s.parts {
						ps[i] = pt.p
					}
					if err := u.drop(s, ps); err != nil {
						return err
					}
					if _, err = u.restore(ctx, s, 0); err != nil && ctx.Err() == nil {
						return err
					}
					break
				}
				if err != nil {
					if ctx.Err() != nil {
						return nil
					}
					return err
				}
				applied += n
			}
		}
		if applied > 0 {
			continue
		}
		timer.Reset(poll)
		select {
		case <-ctx.Done():
		case <-timer.C:
		}
	}
	return nil
}
