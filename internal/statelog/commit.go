package statelog

import (
	"encoding/binary"
	"fmt"
	"time"

	"github.com/dgraph-io/badger/v4"
)

// Commit writes the state of one committed transaction (or, at least once,
// one flushed commit interval) to the database: the changes of every store
// partition the thread holds, then their checkpoints, in one Badger write
// batch flushed once. Badger may split a large batch into several of its
// own transactions, so a crash can keep a prefix of it; since every
// checkpoint comes after all the data, a kept prefix holds data newer than
// its checkpoints, which replaying the changelog from those checkpoints
// converges (a restore is idempotent), never the reverse.
//
// A Commit is used by one goroutine: Stage for each partition, Checkpoint
// for each, then Flush or Cancel exactly once.
type Commit struct {
	db     *DB
	wb     *badger.WriteBatch
	ckpts  []pendingCheckpoint
	staged []Entry // with the database's keys, for the read cache
	// restore forgets the staged keys in the read cache instead of
	// keeping their values.
	restore bool
	closed  bool
}

type pendingCheckpoint struct {
	s      *Space
	offset int64
	at     time.Time
}

// NewCommit starts a commit. A partition drop waits until it is flushed or
// cancelled.
func (d *DB) NewCommit() *Commit {
	d.drop.RLock()
	return &Commit{db: d, wb: d.newWriteBatch()}
}

// Stage adds the committed changes of one store partition.
func (c *Commit) Stage(s *Space, entries []Entry) error {
	for _, e := range entries {
		var err error
		k := s.key(e.Key)
		if e.Deleted {
			err = c.wb.Delete(k)
		} else {
			v, meta := encodeLocal(e)
			err = c.wb.SetEntry(badger.NewEntry(k, v).WithMeta(meta))
		}
		switch {
		case c.db.cache == nil:
		case c.restore:
			c.staged = append(c.staged, Entry{Key: k})
		default:
			// The cache keeps its own copy: the buffer's value may be
			// reused once the commit is done.
			c.staged = append(c.staged, Entry{Key: k, Value: append([]byte{}, e.Value...), Deleted: e.Deleted, Stamped: e.Stamped, Time: e.Time})
		}
		if err != nil {
			return fmt.Errorf("changelog: staging %s/%d: %w", s.store, s.partition, c.db.refused(err, k, e.Value))
		}
	}
	return nil
}

// Checkpoint records that s reflects its changelog up to (not including)
// offset as of at; it is written after every staged change.
func (c *Commit) Checkpoint(s *Space, offset int64, at time.Time) {
	c.ckpts = append(c.ckpts, pendingCheckpoint{s, offset, at})
}

// Flush writes the batch: the staged changes, then the checkpoints.
func (c *Commit) Flush() error {
	if c.closed {
		return fmt.Errorf("changelog: commit already flushed or cancelled")
	}
	defer c.release()
	for _, p := range c.ckpts {
		err := c.wb.Set(p.s.ckpt, binary.BigEndian.AppendUint64(nil, uint64(p.offset)))
		if err == nil {
			err = c.wb.Set(p.s.ckptTime, binary.BigEndian.AppendUint64(nil, uint64(p.at.UnixMilli())))
		}
		if err != nil {
			c.wb.Cancel()
			return fmt.Errorf("changelog: checkpoint of %s/%d: %w", p.s.store, p.s.partition, err)
		}
	}
	if err := c.wb.Flush(); err != nil {
		// What reached Badger is unknown: forget every key.
		for _, e := range c.staged {
			c.db.cache.forget(e.Key)
		}
		return fmt.Errorf("changelog: writing the commit: %w", err)
	}
	// The committed values are the likeliest next reads: keep them.
	for _, e := range c.staged {
		if c.restore {
			c.db.cache.forget(e.Key)
		} else {
			c.db.cache.put(e.Key, local{val: e.Value, ts: e.Time, stamped: e.Stamped}, e.Deleted)
		}
	}
	return nil
}

// Restore writes one batch of changelog records restored into s, then the
// checkpoint offset (as of at) they bring it to, in one Badger write batch.
// Unlike a commit, it keeps the values out of the read cache (a restore
// would flush it with data nobody asked for) and forgets the keys instead.
// Safe to call on a goroutine of its own while the next batch is fetched.
func (d *DB) Restore(s *Space, entries []Entry, offset int64, at time.Time) error {
	c := d.NewCommit()
	c.restore = true
	if err := c.Stage(s, entries); err != nil {
		c.Cancel()
		return err
	}
	c.Checkpoint(s, offset, at)
	return c.Flush()
}

// Cancel drops the batch unwritten. It is a no-op after Flush.
func (c *Commit) Cancel() {
	if !c.closed {
		c.wb.Cancel()
		c.release()
	}
}

func (c *Commit) release() {
	c.closed = true
	c.db.drop.RUnlock()
}
