package statelog

// Checkpoints: the changelog offset (and time) a store partition's state
// reflects, kept in the database next to the data.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/dgraph-io/badger/v4"
)

// Checkpoint returns the partition's checkpoint: the next changelog offset
// its state reflects and since when; false when there is none.
func (s *Space) Checkpoint() (Checkpoint, bool, error) {
	c := Checkpoint{Store: s.store, Partition: s.partition}
	found := false
	err := s.db.view(func(txn *badger.Txn) (err error) {
		c.Offset, c.Time, found, err = readCheckpoint(txn, s.ckpt, s.ckptTime)
		return err
	})
	if err != nil {
		return Checkpoint{}, false, fmt.Errorf("changelog: reading checkpoint of %s/%d: %w", s.store, s.partition, err)
	}
	return c, found, nil
}

// SetCheckpoint records that the state reflects the changelog up to (not
// including) offset, as of now: for state that is known to be in sync with
// its changelog at this moment, such as right after a commit.
func (s *Space) SetCheckpoint(offset int64) error {
	return s.SetCheckpointAt(offset, time.Now())
}

// SetCheckpointAt records that the state reflects the changelog up to (not
// including) offset, and that it was last known to hold everything the
// changelog had before offset at time at (see [Checkpoint].Time). A
// restore in progress passes a time older than now: the records it has not
// read yet may predate the call. A zero at records a checkpoint without a
// time, as weir versions before checkpoint times did.
func (s *Space) SetCheckpointAt(offset int64, at time.Time) error {
	s.db.drop.RLock()
	defer s.db.drop.RUnlock()
	err := s.db.update(func(txn *badger.Txn) error {
		if err := txn.Set(s.ckpt, binary.BigEndian.AppendUint64(nil, uint64(offset))); err != nil {
			return err
		}
		if at.IsZero() {
			return txn.Delete(s.ckptTime)
		}
		return txn.Set(s.ckptTime, binary.BigEndian.AppendUint64(nil, uint64(at.UnixMilli())))
	})
	if err != nil {
		return fmt.Errorf("changelog: writing checkpoint of %s/%d: %w", s.store, s.partition, err)
	}
	return nil
}

// Log returns the log the partition's checkpoint is an offset of, when it
// is not the store's changelog topic (SetLog); "" for the changelog.
func (s *Space) Log() (string, error) {
	var log string
	err := s.db.view(func(txn *badger.Txn) error {
		item, err := txn.Get(s.ckptLog)
		if errors.Is(err, badger.ErrKeyNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		v, err := item.ValueCopy(nil)
		log = string(v)
		return err
	})
	if err != nil {
		return "", fmt.Errorf("changelog: reading the checkpoint log of %s/%d: %w", s.store, s.partition, err)
	}
	return log, nil
}

// SetLog records that the partition's checkpoint is an offset of log (a
// store restored from its input topic), or, with "", of the store's
// changelog topic. A checkpoint read against another log than the one it
// was taken in would skip or replay the wrong records: the restore
// compares the two. Drop removes the mark with the checkpoint.
func (s *Space) SetLog(log string) error {
	s.db.drop.RLock()
	defer s.db.drop.RUnlock()
	err := s.db.update(func(txn *badger.Txn) error {
		if log == "" {
			return txn.Delete(s.ckptLog)
		}
		return txn.Set(s.ckptLog, []byte(log))
	})
	if err != nil {
		return fmt.Errorf("changelog: writing the checkpoint log of %s/%d: %w", s.store, s.partition, err)
	}
	return nil
}

// A checkpoint is two keys written in one transaction: the offset, 8 bytes
// big-endian, under the checkpoint key, as weir has always kept it, and
// the time in Unix milliseconds, 8 bytes big-endian, under a key of its
// own. A checkpoint written before times were kept has no time key. The
// offset's value is unchanged so that an earlier weir version, after a
// rollback, still reads the checkpoints (it requires 8 bytes) and ignores
// the times. Its writes leave a time that is older than its checkpoint,
// which only makes the next restore more cautious, and its Drop leaves a
// time key without a checkpoint, which is ignored.
func readCheckpoint(txn *badger.Txn, ckptKey, timeKey []byte) (offset int64, at time.Time, found bool, err error) {
	item, err := txn.Get(ckptKey)
	if errors.Is(err, badger.ErrKeyNotFound) {
		return 0, time.Time{}, false, nil
	}
	if err != nil {
		return 0, time.Time{}, false, err
	}
	err = item.Value(func(v []byte) error {
		if len(v) != 8 {
			return fmt.Errorf("checkpoint of %d bytes, want 8", len(v))
		}
		offset = int64(binary.BigEndian.Uint64(v))
		return nil
	})
	if err != nil {
		return 0, time.Time{}, false, err
	}
	item, err = txn.Get(timeKey)
	if errors.Is(err, badger.ErrKeyNotFound) {
		return offset, time.Time{}, true, nil
	}
	if err != nil {
		return 0, time.Time{}, false, err
	}
	err = item.Value(func(v []byte) error {
		if len(v) != 8 {
			return fmt.Errorf("checkpoint time of %d bytes, want 8", len(v))
		}
		at = time.UnixMilli(int64(binary.BigEndian.Uint64(v)))
		return nil
	})
	if err != nil {
		return 0, time.Time{}, false, err
	}
	return offset, at, true, nil
}

// Checkpoint is a store partition's checkpoint.
type Checkpoint struct {
	Store     string
	Partition int32
	// Offset is the next changelog offset the local state reflects.
	Offset int64
	// Time is when the local state was last known to hold everything the
	// changelog had below Offset, in milliseconds: the time of the commit
	// that wrote the checkpoint or, for one a restore wrote, when the
	// restore started (a replay from an earlier checkpoint keeps that
	// one's time until it reaches the end). Changelog records at Offset or
	// later may be newer. A
	// restore compares it with the changelog's delete.retention.ms: a
	// tombstone written after Time may be compacted away once that much
	// time has passed since Time, and a replay from Offset then misses the
	// deletion.
	//
	// Time is zero for a checkpoint written by a weir version that did not
	// record it; [DB.LastWritten] bounds it then.
	Time time.Time
}

// Checkpoints lists every checkpoint in the database: the store partitions
// this instance holds state for.
func (d *DB) Checkpoints() ([]Checkpoint, error) {
	var out []Checkpoint
	err := d.view(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte{kindCheckpoint}})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			item := it.Item()
			store, partition, ok := parseSpacePrefix(item.Key())
			if !ok {
				return fmt.Errorf("malformed checkpoint key %x", item.Key())
			}
			off, at, _, err := readCheckpoint(txn, item.KeyCopy(nil), spacePrefix(kindCheckpointTime, store, partition))
			if err != nil {
				return fmt.Errorf("%s/%d: %w", store, partition, err)
			}
			out = append(out, Checkpoint{Store: store, Partition: partition, Offset: off, Time: at})
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("changelog: listing checkpoints: %w", err)
	}
	return out, nil
}

// parseSpacePrefix reverses spacePrefix for a key that is exactly one.
func parseSpacePrefix(k []byte) (store string, partition int32, ok bool) {
	if len(k) < 1 {
		return "", 0, false
	}
	n, w := binary.Uvarint(k[1:])
	if w <= 0 || uint64(len(k)) != 1+uint64(w)+n+4 {
		return "", 0, false
	}
	rest := k[1+w:]
	return string(rest[:n]), int32(binary.BigEndian.Uint32(rest[n:])), true
}

// CheckpointTooOld reports whether state in sync with its changelog as of
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
func CheckpointTooOld(since, now time.Time, deleteRetention time.Duration) bool {
	if since.IsZero() {
		return true
	}
	margin := min(deleteRetention/10, time.Minute)
	return now.Sub(since) >= deleteRetention-margin
}
