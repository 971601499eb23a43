package statelog

import (
	"github.com/weirstream/weir/changelog"

	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/dgraph-io/badger/v4"
)

const (
	defaultMemTableSize     = 16 << 20
	defaultNumMemtables     = 2
	defaultBlockCacheSize   = 32 << 20
	defaultIndexCacheSize   = 16 << 20
	defaultValueLogFileSize = 64 << 20
	// defaultTableSize is the size of Badger's table files (SSTs) at every
	// level but 0, whose tables are memtables: about 128 files per GiB of
	// state (Badger keeps each open).
	defaultTableSize = 8 << 20
)

// DB is the Badger database of one instance, shared by all its stores.
// Keys are prefixed by store and partition; a partition's checkpoint is
// kept in the same database. DB is safe for concurrent use.
type DB struct {
	bdb   *badger.DB
	cache *readCache // nil: no cache
	// ts is the one Badger version every write of this opening is at and
	// every read reads at (see versionFloor).
	ts uint64
	// drop is held exclusively by Drop and shared by every write: Badger
	// refuses writes (ErrBlockedWrites) while it drops a prefix, and two
	// drops cannot run at once.
	drop sync.RWMutex
	// lastWritten is what LastWritten returns, read before Badger opened
	// the directory (opening writes to it).
	lastWritten time.Time
	// maxValue is the largest value Badger takes (see entryTooLarge).
	maxValue int64
	// bulkDir holds bulk restores' runs and markers (bulk.go); "" for an
	// in-memory database.
	bulkDir string
	logger  *slog.Logger
}

// Open opens or creates the database in dir.
func Open(dir string, o changelog.Options) (*DB, error) {
	switch len(o.EncryptionKey) {
	case 0, 16, 24, 32:
	default:
		return nil, fmt.Errorf("changelog: encryption key of %d bytes; want 16, 24 or 32", len(o.EncryptionKey))
	}
	opts := badger.DefaultOptions(dir).
		WithMemTableSize(or(o.MemTableSize, defaultMemTableSize)).
		WithNumMemtables(or(o.NumMemtables, defaultNumMemtables)).
		WithBlockCacheSize(or(o.BlockCacheSize, defaultBlockCacheSize)).
		WithIndexCacheSize(or(o.IndexCacheSize, defaultIndexCacheSize)).
		WithValueLogFileSize(or(o.ValueLogFileSize, defaultValueLogFileSize)).
		WithNumLevelZeroTables(2).
		WithNumLevelZeroTablesStall(8).
		WithNumCompactors(2).
		WithDetectConflicts(false).
		WithLogger(badgerLogger{o.Logger}).
		WithBaseTableSize(defaultTableSize)
	// Tables of one size at every level. Badger builds a table in memory,
	// in a buffer twice the table's size that it pools afterwards; with
	// its default growth (×2 per level from 2 MiB) the last level's tables
	// are 64 MiB, and a compaction or bulk load into it held 128 MiB per
	// table under way.
	opts.TableSizeMultiplier = 1
	// Badger refuses to open when values kept in the LSM tree (up to
	// ValueThreshold, 1 MiB by default) could exceed a write batch, 15% of
	// a memtable: below a 7 MiB memtable, larger values go to the value
	// log instead.
	opts = opts.WithValueThreshold(min(opts.ValueThreshold, 15*opts.MemTableSize/100))
	if o.InMemory {
		opts = opts.WithInMemory(true).WithDir("").WithValueDir("")
	}
	if len(o.EncryptionKey) > 0 {
		opts = opts.WithEncryptionKey(o.EncryptionKey)
		if o.EncryptionKeyRotation > 0 {
			opts = opts.WithEncryptionKeyRotationDuration(o.EncryptionKeyRotation)
		}
	}
	var last time.Time
	if !o.InMemory {
		last = newestModTime(dir)
	}
	bdb, err := badger.OpenManaged(opts)
	if errors.Is(err, badger.ErrEncryptionKeyMismatch) {
		return nil, fmt.Errorf("changelog: opening state in %s: %w", dir, changelog.ErrEncryptionKey)
	}
	if err != nil {
		return nil, fmt.Errorf("changelog: opening state in %s: %w", dir, err)
	}
	cacheBytes := o.ReadCacheBytes
	if cacheBytes == 0 {
		cacheBytes = changelog.DefaultReadCacheBytes
	}
	maxValue := opts.ValueLogFileSize
	if o.InMemory {
		maxValue = min(maxValue, opts.ValueThreshold)
	}
	ts := max(bdb.MaxVersion(), versionFloor)
	// Versions below ts are never read again: compactions may drop every
	// version of a key but its newest, and deleted keys, as Badger does
	// outside managed mode below its oldest read.
	bdb.SetDiscardTs(ts)
	d := &DB{bdb: bdb, ts: ts, cache: newReadCache(cacheBytes), lastWritten: last, maxValue: maxValue, logger: o.Logger}
	if !o.InMemory {
		d.bulkDir = dir + "-bulk"
		if err := d.recoverBulk(); err != nil {
			_ = bdb.Close()
			return nil, fmt.Errorf("changelog: opening state in %s: finishing interrupted bulk restores: %w", dir, err)
		}
	}
	return d, nil
}

// InMemory reports whether the database keeps nothing on disk.
func (d *DB) InMemory() bool { return d.bulkDir == "" }

// versionFloor is the least Badger version a DB writes at.
//
// Badger runs in managed mode: weir keeps one version of a key, reads only
// the newest and needs none of Badger's timestamps, so one opening writes
// everything at one version, DB.ts, and reads at the same. A read then
// stops at the first memtable or level that holds the key (Badger stops
// where it finds the version it reads at), where with a new timestamp per
// commit it searched every memtable and level for newer versions, and no
// read or commit passes Badger's timestamp watermarks. Badger resolves
// two writes of a key at one version as it resolves any: the newer
// memtable or table wins, in reads and in compactions.
//
// ts is the highest version in the database when it opens, and at least
// the floor: above anything state written by weir versions that used
// Badger's own timestamps (1, 2, …, one a commit) holds, so a key's new
// value is newer than its old one; and never below a version already
// written, so that state written after a downgrade to such a version,
// which counts on from the highest, is not shadowed when weir opens it
// again.
const versionFloor = 1 << 32

// readTxn begins a read transaction at the database's version; the
// caller discards it.
func (d *DB) readTxn() *badger.Txn { return d.bdb.NewTransactionAt(d.ts, false) }

// view runs fn in a read transaction.
func (d *DB) view(fn func(txn *badger.Txn) error) error {
	txn := d.readTxn()
	defer txn.Discard()
	return fn(txn)
}

// update runs fn in a write transaction and commits it.
func (d *DB) update(fn func(txn *badger.Txn) error) error {
	txn := d.bdb.NewTransactionAt(d.ts, true)
	defer txn.Discard()
	if err := fn(txn); err != nil {
		return err
	}
	return txn.CommitAt(d.ts, nil)
}

// newWriteBatch returns a write batch at the database's version.
func (d *DB) newWriteBatch() *badger.WriteBatch { return d.bdb.NewWriteBatchAt(d.ts) }

// newestModTime returns the latest modification time of dir and the files
// in it (Badger's directory is flat), or zero when there is none. Errors
// only make the answer older or zero, which its one use, LastWritten,
// turns into a more cautious restore.
func newestModTime(dir string) time.Time {
	var last time.Time
	if fi, err := os.Stat(dir); err == nil {
		last = fi.ModTime()
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if fi, err := e.Info(); err == nil && fi.ModTime().After(last) {
			last = fi.ModTime()
		}
	}
	return last
}

// LastWritten returns when the database's directory was last written
// before Open: the newest modification time of its files, about when the
// instance that used it last committed or stopped. It is zero for an
// in-memory database and for a directory that did not exist.
//
// Nothing in the database was written after it, so it is the latest time
// a checkpoint without a time ([Checkpoint].Time zero, written by weir
// versions that did not record one) can have been written. File times are
// only as good as the file system keeps them: copying the directory
// without preserving them makes it look younger.
func (d *DB) LastWritten() time.Time { return d.lastWritten }

func or[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// Close flushes and closes the database.
func (d *DB) Close() error {
	if err := d.bdb.Close(); err != nil {
		return fmt.Errorf("changelog: closing state: %w", err)
	}
	return nil
}

// Key layout: one byte of kind, the store name with its length, the
// partition, then the store's own key.
const (
	kindData           = 'd'
	kindCheckpoint     = 'c'
	kindCheckpointTime = 't'
	// kindCheckpointLog marks a partition whose checkpoint is an offset of
	// another log than the store's changelog topic (SetLog).
	kindCheckpointLog = 'l'
	// kindFlush is a key written and dropped at once to make Badger
	// flush its memtables (see DB.makeRoom); it never stays.
	kindFlush = 'f'
)

func spacePrefix(kind byte, store string, partition int32) []byte {
	p := make([]byte, 0, 1+binary.MaxVarintLen64+len(store)+4)
	p = append(p, kind)
	p = binary.AppendUvarint(p, uint64(len(store)))
	p = append(p, store...)
	return binary.BigEndian.AppendUint32(p, uint32(partition))
}

// Space returns the committed state of one store partition.
func (d *DB) Space(store string, partition int32) *Space {
	return &Space{
		db: d, store: store, partition: partition,
		prefix:   spacePrefix(kindData, store, partition),
		ckpt:     spacePrefix(kindCheckpoint, store, partition),
		ckptTime: spacePrefix(kindCheckpointTime, store, partition),
		ckptLog:  spacePrefix(kindCheckpointLog, store, partition),
	}
}

// Space is the committed state of one store partition in the database: a
// Bytes whose keys carry no prefix. Writes go straight to Badger; the
// runtime writes only committed data and restored changelog records.
type Space struct {
	db        *DB
	store     string
	partition int32
	prefix    []byte
	ckpt      []byte
	ckptTime  []byte
	ckptLog   []byte
	err       error
}

var _ Bytes = (*Space)(nil)

func (s *Space) key(k []byte) []byte { return append(slices.Clip(s.prefix), k...) }

// Get implements Bytes.
func (s *Space) Get(key []byte) ([]byte, error) {
	v, _, _, err := s.GetStamped(key)
	return v, err
}

// GetStamped implements Bytes.
func (s *Space) GetStamped(key []byte) ([]byte, int64, bool, error) {
	k := s.key(key)
	c, absent, ok, gen := s.db.cache.get(k)
	if ok {
		if absent {
			return nil, 0, false, nil
		}
		// The caller owns what Get returns (Bytes): copy the shared value.
		return append(make([]byte, 0, len(c.val)), c.val...), c.ts, c.stamped, nil
	}
	var v local
	err := s.db.view(func(txn *badger.Txn) error {
		item, err := txn.Get(k)
		if errors.Is(err, badger.ErrKeyNotFound) {
			s.db.cache.fill(k, local{}, true, gen)
			return nil
		}
		if err != nil {
			return err
		}
		raw, err := item.ValueCopy(nil)
		if err != nil {
			return err
		}
		if v, err = decodeLocal(raw, item.UserMeta()); err != nil {
			return err
		}
		if s.db.cache != nil {
			s.db.cache.fill(k, local{val: append(make([]byte, 0, len(v.val)), v.val...), ts: v.ts, stamped: v.stamped}, false, gen)
		}
		return nil
	})
	if err != nil {
		return nil, 0, false, fmt.Errorf("changelog: get: %w", err)
	}
	return v.val, v.ts, v.stamped, nil
}

// metaStamped is the Badger user meta bit of a value kept with its
// timestamp: the value's bytes follow the timestamp's 8 (big-endian
// milliseconds). Values without the bit are their bytes alone, as every
// value was before weir kept timestamps, so that older state reads the
// same.
const metaStamped byte = 1

// local is a value as the database keeps it: its bytes and, for one put
// with a timestamp, the timestamp.
type local struct {
	val     []byte
	ts      int64
	stamped bool
}

// encodeLocal returns e's value as Badger keeps it, and its user meta.
func encodeLocal(e Entry) ([]byte, byte) {
	if !e.Stamped {
		return nonNil(e.Value), 0
	}
	out := make([]byte, 8, 8+len(e.Value))
	binary.BigEndian.PutUint64(out, uint64(e.Time))
	return append(out, e.Value...), metaStamped
}

// decodeLocal reads a value Badger keeps (encodeLocal). raw is not copied.
func decodeLocal(raw []byte, meta byte) (local, error) {
	if meta&metaStamped == 0 {
		return local{val: nonNil(raw)}, nil
	}
	if len(raw) < 8 {
		return local{}, fmt.Errorf("a value with a timestamp has %d bytes, fewer than the timestamp's 8", len(raw))
	}
	return local{val: raw[8:], ts: int64(binary.BigEndian.Uint64(raw)), stamped: true}, nil
}

// forget drops entries' keys from the read cache.
func (s *Space) forget(entries []Entry) {
	if s.db.cache == nil {
		return
	}
	for _, e := range entries {
		s.db.cache.forget(s.key(e.Key))
	}
}

// Put implements Bytes.
func (s *Space) Put(key, value []byte) error {
	return s.Apply([]Entry{{Key: key, Value: value}})
}

// PutStamped implements Bytes.
func (s *Space) PutStamped(key, value []byte, ts int64) error {
	return s.Apply([]Entry{{Key: key, Value: value, Stamped: true, Time: ts}})
}

// Delete implements Bytes.
func (s *Space) Delete(key []byte) error {
	return s.Apply([]Entry{{Key: key, Deleted: true}})
}

// Entry is a change to a key: a new value, or a deletion.
type Entry struct {
	Key     []byte
	Value   []byte
	Deleted bool
	// Stamped reports that the value carries its timestamp, Time in
	// milliseconds since the epoch (Bytes.PutStamped).
	Stamped bool
	Time    int64
}

// Apply writes entries in one Badger write batch.
func (s *Space) Apply(entries []Entry) error {
	s.db.drop.RLock()
	defer s.db.drop.RUnlock()
	wb := s.db.newWriteBatch()
	defer wb.Cancel()
	for _, e := range entries {
		var err error
		if e.Deleted {
			err = wb.Delete(s.key(e.Key))
		} else {
			v, meta := encodeLocal(e)
			err = wb.SetEntry(badger.NewEntry(s.key(e.Key), v).WithMeta(meta))
		}
		if err != nil {
			return fmt.Errorf("changelog: write: %w", s.db.refused(err, s.key(e.Key), e.Value))
		}
	}
	if err := wb.Flush(); err != nil {
		// What reached Badger is unknown: forget every key.
		s.forget(entries)
		return fmt.Errorf("changelog: write: %w", err)
	}
	s.forget(entries)
	return nil
}

// Range implements Bytes.
func (s *Space) Range(lo, hi []byte) iter.Seq2[[]byte, []byte] { return s.scan(lo, hi, false) }

// Backward implements Bytes.
func (s *Space) Backward(lo, hi []byte) iter.Seq2[[]byte, []byte] { return s.scan(lo, hi, true) }

// scan walks [lo, hi) of the space with a Badger iterator, released when
// the loop ends.
func (s *Space) scan(lo, hi []byte, reverse bool) iter.Seq2[[]byte, []byte] {
	lo, hi = cloneBound(lo), cloneBound(hi) // not retained from the caller
	return func(yield func([]byte, []byte) bool) {
		txn := s.db.readTxn()
		defer txn.Discard()
		it := txn.NewIterator(badger.IteratorOptions{Prefix: s.prefix, Reverse: reverse, PrefetchValues: false})
		defer it.Close()
		if reverse {
			if hi != nil {
				it.Seek(s.key(hi))
			} else {
				it.Seek(PrefixEnd(s.prefix))
			}
		} else {
			it.Seek(s.key(lo))
		}
		n := len(s.prefix)
		for ; it.Valid(); it.Next() {
			item := it.Item()
			k := item.Key()[n:]
			if !inRange(k, lo, hi) {
				if reverse && hi != nil && bytes.Compare(k, hi) >= 0 {
					continue // reverse Seek lands on hi itself
				}
				return
			}
			raw, err := item.ValueCopy(nil)
			if err == nil {
				var v local
				if v, err = decodeLocal(raw, item.UserMeta()); err == nil {
					raw = v.val
				}
			}
			if err != nil {
				s.err = fmt.Errorf("changelog: scan: %w", err)
				return
			}
			if !yield(slices.Clone(k), raw) {
				return
			}
		}
	}
}

// Err implements Bytes.
func (s *Space) Err() error {
	err := s.err
	s.err = nil
	return err
}

// Drop deletes the partition's state and checkpoint, for a full restore or
// after the partition moved away for good.
func (s *Space) Drop() error {
	if s.empty() {
		return nil // DropPrefix stalls every write of the instance: skip it
	}
	s.db.drop.Lock()
	defer s.db.drop.Unlock()
	err := s.db.bdb.DropPrefix(s.prefix, s.ckpt, s.ckptTime, s.ckptLog)
	s.db.cache.clear() // drops are rare: forget everything rather than scan
	if err != nil {
		return fmt.Errorf("changelog: dropping state: %w", err)
	}
	return nil
}

// DropAll deletes everything in the database: every store and checkpoint.
func (d *DB) DropAll() error {
	d.drop.Lock()
	defer d.drop.Unlock()
	err := d.bdb.DropAll()
	d.cache.clear()
	if err != nil {
		return fmt.Errorf("changelog: dropping all state: %w", err)
	}
	return nil
}

// DropStore deletes every partition of store, data and checkpoints, from
// the database: the store starts empty and restores in full. For a store
// whose state an upgrade drops (its changelog is deleted too).
func (d *DB) DropStore(store string) error {
	var prefixes [][]byte
	for _, kind := range []byte{kindData, kindCheckpoint, kindCheckpointTime, kindCheckpointLog} {
		p := spacePrefix(kind, store, 0)
		prefixes = append(prefixes, p[:len(p)-4])
	}
	d.drop.Lock()
	defer d.drop.Unlock()
	err := d.bdb.DropPrefix(prefixes...)
	d.cache.clear()
	if err != nil {
		return fmt.Errorf("changelog: dropping store %s: %w", store, err)
	}
	return nil
}

// empty reports whether the partition has neither data nor checkpoint.
func (s *Space) empty() bool {
	found := false
	_ = s.db.view(func(txn *badger.Txn) error {
		for _, p := range [][]byte{s.prefix, s.ckpt, s.ckptTime, s.ckptLog} {
			it := txn.NewIterator(badger.IteratorOptions{Prefix: p})
			it.Rewind()
			found = found || it.Valid()
			it.Close()
		}
		return nil
	})
	return !found
}

// EstimatedDiskBytes returns Badger's estimate of the disk that store's
// data takes, all its partitions together: the on-disk (compressed) size
// of the table files whose keys all belong to the store, stale versions
// and deletions not yet compacted away included. It is an estimate with
// known gaps, which Badger's EstimateSize has:
//
//   - writes still in memtables (up to changelog.Options.MemTableSize ×
//     NumMemtables for the whole database) are not on disk yet and count
//     0;
//   - a table that also holds another store's keys is not counted, so a
//     store of about one table or less (2 to 16 MiB with the default
//     options) can read 0, and a large one is short of the tables at its
//     ends;
//   - a value of 1 MiB or more lives in the value log and counts only by
//     the pointer to it.
//
// It reads table metadata only (no data): cheap enough for every scrape.
func (d *DB) EstimatedDiskBytes(store string) int64 {
	onDisk, _ := d.bdb.EstimateSize(storePrefix(store)) // the other result is the uncompressed size
	return int64(onDisk)
}

// storePrefix is the prefix of the data of every partition of store: a
// space prefix without its partition. The length before the name keeps
// one store's prefix from being the prefix of another's.
func storePrefix(store string) []byte {
	p := spacePrefix(kindData, store, 0)
	return p[:len(p)-4]
}

// badgerMaxKey is the longest key Badger takes, in bytes (its
// Txn.modify); a Space's key counts with its prefix.
const badgerMaxKey = 65000

// entryTooLarge is an entry whose key or value is over Badger's size
// limits, in weir's words: Badger's own error for it carries a hex dump of
// the first KiB of the key or value, a record's data, which weir keeps out
// of its errors and logs. Badger's error stays reachable through
// errors.Unwrap, out of the text.
type entryTooLarge struct {
	key, value       int // lengths in bytes; key with the Space's prefix
	maxKey, maxValue int64
	err              error
}

func (e *entryTooLarge) Error() string {
	if int64(e.key) > e.maxKey {
		return fmt.Sprintf("a key of %d bytes (with the store's prefix) is over Badger's limit of %d", e.key, e.maxKey)
	}
	return fmt.Sprintf("a value of %d bytes is over Badger's limit of %d", e.value, e.maxValue)
}

func (e *entryTooLarge) Unwrap() error { return e.err }

// refused returns err, Badger's refusal to write key (with its Space's
// prefix) and value, as an *entryTooLarge when the entry is over Badger's
// size limits, so that the error does not carry the data; Badger's other
// refusals (its sentinel errors) carry none and are returned as they are.
func (d *DB) refused(err error, key, value []byte) error {
	if len(key) <= badgerMaxKey && int64(len(value)) <= d.maxValue {
		return err
	}
	return &entryTooLarge{key: len(key), value: len(value), maxKey: badgerMaxKey, maxValue: d.maxValue, err: err}
}

// badgerLogger forwards Badger's warnings and errors to slog. A byte slice
// among a line's arguments is a key or a value (Badger logs the key of a
// value it cannot read) and is logged as its length only.
type badgerLogger struct{ l *slog.Logger }

func (b badgerLogger) Errorf(f string, a ...any) {
	if b.l != nil {
		b.l.Error("badger: " + fmt.Sprintf(f, redactBytes(a)...))
	}
}

func (b badgerLogger) Warningf(f string, a ...any) {
	if b.l != nil {
		b.l.Warn("badger: " + fmt.Sprintf(f, redactBytes(a)...))
	}
}

// redactBytes returns a with every byte slice replaced by its length.
func redactBytes(a []any) []any {
	out := make([]any, len(a))
	for i, v := range a {
		if b, ok := v.([]byte); ok {
			v = byteCount(len(b))
		}
		out[i] = v
	}
	return out
}

// byteCount formats as "<n bytes>" whatever the verb, so that a %x or %s
// meant for the bytes shows their length only.
type byteCount int

func (n byteCount) Format(f fmt.State, _ rune) { fmt.Fprintf(f, "<%d bytes>", int(n)) }

func (badgerLogger) Infof(string, ...any) {}

func (badgerLogger) Debugf(string, ...any) {}

// cloneBound copies a scan bound, keeping nil (open) apart from empty.
func cloneBound(b []byte) []byte {
	if b == nil {
		return nil
	}
	return append([]byte{}, b...)
}

// Count returns the number of keys in the partition's committed state. It
// walks the keys without reading values: O(keys).
func (s *Space) Count() (int64, error) {
	var n int64
	err := s.db.view(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: s.prefix, PrefetchValues: false})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			n++
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("changelog: counting keys: %w", err)
	}
	return n, nil
}
