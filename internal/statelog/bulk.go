package statelog

// Bulk restores: a store partition that is empty when its full restore
// starts is loaded through Badger's StreamWriter, which writes sorted keys
// straight into tables and skips the memtable, its log, flushes and
// compactions: the write path that makes a restore through write batches
// cost about three times its fetch.
//
// A StreamWriter takes keys in order, and a changelog partition holds its
// keys in the order they were last written. The Bulk therefore sorts what
// the fetches bring in runs of bounded size (RunBytes), writes each full
// run to a file beside the database, and at the end merges the runs into
// the StreamWriter, keeping each key's latest record and dropping keys
// whose latest record is a tombstone (the partition was empty, so a
// deletion leaves nothing). Sorting and spilling overlap the fetch; the
// merge is the only step that holds the database.
//
// # What the load holds
//
// The StreamWriter blocks every write to the database while it writes
// (Badger refuses them; the DB's drop lock makes weir's writers wait).
// Reads go on: in managed mode (see versionFloor) the StreamWriter leaves
// Badger's timestamps alone, and its records are at the version every
// read reads at. The load writes its tables one level
// above the highest level that holds tables, which needs empty memtables
// and an empty level 0. When they hold data (another task committed since
// the database opened), the load flushes the memtables and compacts the
// tree into one level itself, provided the tables hold at most
// flattenFactor times the load (see makeRoom). Beside a larger database
// the merged records go through write batches instead, as a restore did
// before: still sorted, still without the duplicates, at the normal
// path's speed.
//
// # Crash safety
//
// The StreamWriter writes the partition's checkpoint with its data, and
// Badger registers each table as it is written: a crash in the middle of a
// load would leave a checkpoint beside part of the data. Before the load
// starts, a marker file naming the partition is written (and synced) in
// the bulk directory, and removed once Badger has synced the last table.
// Open drops the data and checkpoint of every partition whose marker it
// finds, so the next start restores that partition in full again.

import (
	"bufio"
	"bytes"
	"cmp"
	"container/heap"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
	"unsafe"

	"github.com/dgraph-io/badger/v4"
	"github.com/dgraph-io/ristretto/v2/z"
)

// DefaultBulkRunBytes is how many bytes a Bulk holds in memory before it
// writes them, sorted, to a run file: keys, values and bulkRefBytes per
// record, per restore running at once.
const DefaultBulkRunBytes = 64 << 20

// bulkChunk is how many records Add sorts at a time. It sorts on the
// restore's goroutine that applies a fetched batch while the next one is
// fetched, so that the end of a restore merges sorted chunks instead of
// sorting everything.
const bulkChunk = 1 << 17

// bulkRefBytes is what a record costs a run besides its key and value.
const bulkRefBytes = int(unsafe.Sizeof(bulkRef{}))

// bulkWriteBytes is how many bytes of records the merge hands the
// StreamWriter at once.
const bulkWriteBytes = 1 << 20

// bulkTableBytes is how many bytes of keys and values (a large value
// counts as the pointer to the value log the table keeps) a bulk load puts
// in one table: each table is a stream of its own, ended after that much.
// Badger closes a table on its own only at the table size compressed, and
// holds the block data uncompressed in the builder until the table is
// written: records that compress eight to one made builders of 100 MiB
// and more, up to 16 of them in flight. A table of 7 MiB uncompressed fits
// the builder's first buffer (twice the table size) with its compressed
// blocks; compressible state makes smaller files.
const bulkTableBytes = defaultTableSize * 7 / 8

// bulkMarkerPrefix starts the name of a load's marker file; the space's
// data prefix follows in hex.
const bulkMarkerPrefix = "loading-"

// Bulk is the full restore of one empty store partition through Badger's
// bulk path (see bulk.go's header). Add the records' entries in changelog
// order, then Finish with the checkpoint; or Cancel. A Bulk is used by one
// goroutine. It holds at most RunBytes of keys and values in memory, and
// the rest in run files in the bulk directory until Finish or Cancel.
type Bulk struct {
	db       *DB
	s        *Space
	runBytes int
	// tableBytes is bulkTableBytes but in tests, which make small tables.
	tableBytes int
	dir        string // this load's run files
	arena      []byte
	refs       []bulkRef
	runs       []string
	// chunks are the ends, in refs, of the sorted chunks of the run in
	// memory; the refs after the last end are not sorted yet.
	chunks []int
	bytes  int // keys and values added, all runs together
	expect int64
	// mem is the mapping that holds the run reserved for the records
	// expected (allocRun), until Cancel; nil when the run is on the heap.
	// The refs and the arena stay in it unless they outgrow it.
	mem []byte
	// Fallback reports, after Finish, that the records went through write
	// batches because the database was not ready for the StreamWriter.
	Fallback bool
}

// bulkRef is one entry of the run in memory: its key and value in the
// arena, one after the other.
type bulkRef struct {
	// head is the key's first 8 bytes, big-endian and zero-padded: most
	// comparisons of the sort end on it, without a look into the arena.
	head uint64
	off  uint32 // in the arena, which maxBulkRunBytes keeps below 4 GiB
	vlen int32
	klen uint16 // Badger's keys are at most 65,000 bytes
	meta byte
	// deleted: a tombstone, without a value.
	deleted bool
}

// maxBulkRunBytes bounds a Bulk's run in memory, so that an arena offset
// (the run plus one record of at most a value log file) fits 32 bits.
const maxBulkRunBytes = 1 << 30

// keyHead returns the first 8 bytes of key as a big-endian number, padded
// with zeros: heads compare as the keys' first 8 bytes do, and equal heads
// leave the order to the rest of the keys (a shorter key's padding
// compares equal to a longer key's zeros, so bytes.Compare decides).
func keyHead(key []byte) uint64 {
	var b [8]byte
	copy(b[:], key)
	return binary.BigEndian.Uint64(b[:])
}

// NewBulk starts a bulk load of s, which must hold neither data nor a
// checkpoint. runBytes bounds the run in memory (DefaultBulkRunBytes when
// zero or less). It fails for an in-memory database, which has no
// directory for runs: restore through write batches instead.
func (d *DB) NewBulk(s *Space, runBytes int) (*Bulk, error) {
	if d.bulkDir == "" {
		return nil, errors.New("changelog: bulk restore needs a database on disk")
	}
	runBytes = min(runBytes, maxBulkRunBytes)
	if runBytes <= 0 {
		runBytes = DefaultBulkRunBytes
	}
	dir, err := os.MkdirTemp(d.bulkDir, "runs-")
	if err != nil {
		return nil, fmt.Errorf("changelog: bulk restore of %s/%d: %w", s.store, s.partition, err)
	}
	return &Bulk{db: d, s: s, runBytes: runBytes, tableBytes: bulkTableBytes, dir: dir}, nil
}

// Expect tells the load about how many records will come (the changelog
// offsets to restore, an upper bound), so that the run in memory is
// allocated once at about its size rather than grown step by step, which
// leaves several times its size to the garbage collector. Call it before
// the first Add.
func (b *Bulk) Expect(records int64) { b.expect = records }

// reserve allocates the run in memory for the records expected, within
// runBytes, at the size the first entries take in the arena; the refs get
// a sixteenth more than that size predicts and the arena an eighth, so
// that a run whose later entries are a little smaller or larger (keys
// often grow with the offsets) does not copy them into a larger array.
// The run is outside the Go heap where the system allows (see allocRun);
// Cancel frees it.
func (b *Bulk) reserve(entries []Entry) {
	if b.expect <= 0 || cap(b.refs) > 0 || len(entries) == 0 {
		return
	}
	per := 0
	for _, e := range entries {
		per += len(e.Key)
		if !e.Deleted {
			per += len(e.Value)
			if e.Stamped {
				per += 8
			}
		}
	}
	per = per/len(entries) + 1
	fit := int64(b.runBytes / (bulkRefBytes + per))
	refs := min(b.expect, fit+fit/16+1)
	arena := min(b.expect, fit) * int64(per)
	b.refs, b.arena, b.mem = allocRun(int(refs), int(min(arena+arena/8, int64(b.runBytes))))
}

// Add takes the next entries of the changelog, in order: a later entry of a
// key replaces an earlier one. The entries are copied.
func (b *Bulk) Add(entries []Entry) error {
	b.reserve(entries)
	for _, e := range entries {
		if len(b.arena)+len(b.refs)*bulkRefBytes >= b.runBytes {
			if err := b.spill(); err != nil {
				return err
			}
		}
		if err := b.checkSize(e); err != nil {
			return fmt.Errorf("changelog: bulk restore of %s/%d: %w", b.s.store, b.s.partition, err)
		}
		r := bulkRef{head: keyHead(e.Key), off: uint32(len(b.arena)), klen: uint16(len(e.Key)), deleted: e.Deleted}
		b.arena = append(b.arena, e.Key...)
		if !e.Deleted {
			// The value as Badger keeps it (encodeLocal), written straight
			// into the arena.
			if e.Stamped {
				b.arena = binary.BigEndian.AppendUint64(b.arena, uint64(e.Time))
				r.meta = metaStamped
			}
			b.arena = append(b.arena, nonNil(e.Value)...)
			r.vlen = int32(len(b.arena) - int(r.off) - len(e.Key))
		}
		b.refs = append(b.refs, r)
		b.bytes += len(e.Key) + int(r.vlen)
	}
	if len(b.refs)-b.sortedEnd() >= bulkChunk {
		b.seal()
	}
	return nil
}

// sortedEnd is where the refs not sorted yet start.
func (b *Bulk) sortedEnd() int {
	if len(b.chunks) == 0 {
		return 0
	}
	return b.chunks[len(b.chunks)-1]
}

// seal sorts the refs not sorted yet into a chunk of their own, each key
// once.
func (b *Bulk) seal() {
	start := b.sortedEnd()
	if start == len(b.refs) {
		return
	}
	n := len(b.sortDedup(b.refs[start:]))
	b.refs = b.refs[:start+n]
	b.chunks = append(b.chunks, len(b.refs))
}

// memSources returns the sorted chunks of the run in memory as merge
// sources ranked from rank on, sealing the last first.
func (b *Bulk) memSources(rank int) []*runSource {
	b.seal()
	var srcs []*runSource
	start := 0
	for i, end := range b.chunks {
		srcs = append(srcs, &runSource{rank: rank + i, b: b, mem: b.refs[start:end]})
		start = end
	}
	return srcs
}

// checkSize returns an *entryTooLarge when Badger would refuse e for its
// size, with its key as the database keeps it.
func (b *Bulk) checkSize(e Entry) error {
	vlen := len(e.Value)
	if e.Stamped {
		vlen += 8
	}
	if len(b.s.prefix)+len(e.Key) <= badgerMaxKey && int64(vlen) <= b.db.maxValue {
		return nil
	}
	return &entryTooLarge{key: len(b.s.prefix) + len(e.Key), value: vlen, maxKey: badgerMaxKey, maxValue: b.db.maxValue}
}

func (b *Bulk) key(r bulkRef) []byte { return b.arena[r.off : int(r.off)+int(r.klen)] }

func (b *Bulk) value(r bulkRef) []byte {
	start := int(r.off) + int(r.klen)
	return b.arena[start : start+int(r.vlen)]
}

// sortDedup sorts refs by key, keeps each key's last entry, and returns
// the kept prefix of refs.
func (b *Bulk) sortDedup(refs []bulkRef) []bulkRef {
	// Entries sit in the arena in the order they came, so the offset
	// orders the entries of one key: an unstable sort with it as the
	// tie-break is stable, and faster.
	slices.SortFunc(refs, func(x, y bulkRef) int {
		if x.head != y.head {
			return cmp.Compare(x.head, y.head)
		}
		if c := bytes.Compare(b.key(x), b.key(y)); c != 0 {
			return c
		}
		return cmp.Compare(x.off, y.off)
	})
	out := refs[:0]
	for i, r := range refs {
		if i+1 < len(refs) && r.head == refs[i+1].head && bytes.Equal(b.key(r), b.key(refs[i+1])) {
			continue // a later entry of the key follows
		}
		out = append(out, r)
	}
	return out
}

// spill writes the run in memory, sorted, to a run file, and empties it.
// Tombstones are kept: a key deleted in this run may have a value in an
// earlier one.
func (b *Bulk) spill() error {
	name := filepath.Join(b.dir, fmt.Sprintf("run-%06d", len(b.runs)))
	f, err := os.Create(name)
	if err != nil {
		return fmt.Errorf("changelog: bulk restore of %s/%d: %w", b.s.store, b.s.partition, err)
	}
	w := bufio.NewWriterSize(f, 1<<20)
	var hdr [2*binary.MaxVarintLen64 + 2]byte
	m := newMerge(b.memSources(0))
	m.keepDeleted = true
	for {
		e, ok, _ := m.next() // sources in memory do not fail
		if !ok {
			break
		}
		h := binary.AppendUvarint(hdr[:0], uint64(len(e.key)))
		h = binary.AppendUvarint(h, uint64(len(e.value)))
		flags := e.meta << 1
		if e.deleted {
			flags |= 1
		}
		h = append(h, flags)
		w.Write(h)
		w.Write(e.key)
		w.Write(e.value)
	}
	err = w.Flush()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("changelog: bulk restore of %s/%d: writing a run: %w", b.s.store, b.s.partition, err)
	}
	b.runs = append(b.runs, name)
	b.arena, b.refs, b.chunks = b.arena[:0], b.refs[:0], b.chunks[:0]
	return nil
}

// Cancel drops the load: its runs and what it holds in memory. The
// partition stays as it was, empty. Safe after Finish; it must not run
// while an Add does, whose records may be in the memory it frees.
func (b *Bulk) Cancel() {
	_ = os.RemoveAll(b.dir)
	b.arena, b.refs, b.runs, b.chunks = nil, nil, nil, nil
	freeRun(b.mem)
	b.mem, b.expect = nil, 0 // an Add after Cancel reserves nothing again
}

// Finish merges the runs into the partition and writes its checkpoint, the
// next changelog offset the state reflects as of at, and the log the
// checkpoint is an offset of (Space.SetLog; "" for the changelog). The
// partition must still be empty. Whatever happens, the runs are removed.
func (b *Bulk) Finish(offset int64, at time.Time, log string) error {
	defer b.Cancel()
	srcs, err := b.sources()
	if err != nil {
		return err
	}
	defer func() {
		for _, s := range srcs {
			s.close()
		}
	}()
	m := newMerge(srcs)
	ckpt := checkpointEntries(b.s, offset, at, log)
	b.db.drop.Lock()
	err = b.stream(m, ckpt)
	if errors.Is(err, errNotReady) {
		if err = b.db.makeRoom(b.bytes); err == nil {
			err = b.stream(m, ckpt)
		}
	}
	b.db.drop.Unlock()
	if errors.Is(err, errNotReady) {
		// Nothing was written: the other writes need not wait for these.
		b.Fallback = true
		return b.writeBatches(m, ckpt)
	}
	return err
}

// errNotReady is the answer of stream and makeRoom when the database's
// memtables or level 0 hold data (see makeRoom).
var errNotReady = errors.New("the database holds recent writes")

// sources opens every run file and the run in memory, oldest first.
func (b *Bulk) sources() ([]*runSource, error) {
	var srcs []*runSource
	for i, name := range b.runs {
		f, err := os.Open(name)
		if err != nil {
			for _, s := range srcs {
				s.close()
			}
			return nil, fmt.Errorf("changelog: bulk restore of %s/%d: %w", b.s.store, b.s.partition, err)
		}
		srcs = append(srcs, &runSource{rank: i, f: f, r: bufio.NewReaderSize(f, 256<<10)})
	}
	return append(srcs, b.memSources(len(b.runs))...), nil
}

// checkpointEntries returns the keys of s's checkpoint (see
// readCheckpoint) as entries with database keys, in key order.
func checkpointEntries(s *Space, offset int64, at time.Time, log string) []Entry {
	out := []Entry{{Key: s.ckpt, Value: binary.BigEndian.AppendUint64(nil, uint64(offset))}}
	if log != "" {
		out = append(out, Entry{Key: s.ckptLog, Value: []byte(log)})
	}
	out = append(out, Entry{Key: s.ckptTime, Value: binary.BigEndian.AppendUint64(nil, uint64(at.UnixMilli()))})
	slices.SortFunc(out, func(x, y Entry) int { return bytes.Compare(x.Key, y.Key) })
	return out
}

// flattenFactor bounds the tables a bulk load of n bytes may rewrite to
// make room for itself: flattenFactor × n. A leveled tree rewrites what
// goes through its memtables about ten times on its way down, so rewriting
// up to four times the load's size once costs less than what the load
// saves. Larger databases take the write batches instead.
const flattenFactor = 4

// makeRoom readies the database for a StreamWriter beside its data, or
// returns errNotReady: Badger's PrepareIncremental refuses while a
// memtable holds data and, while level 0 holds tables, compacts the whole
// tree into one level first (Flatten), which costs time in proportion to
// the whole database. When the memtables and level 0 are empty already,
// nothing is done. Otherwise, when the tables hold at most flattenFactor ×
// load bytes, it flushes the memtables and flattens the tree itself; and
// when they hold more, it gives up. The caller holds the drop lock, so no
// write of weir's comes in between.
func (d *DB) makeRoom(load int) error {
	var tables int64
	levels := d.bdb.Levels()
	for _, l := range levels {
		tables += l.Size
	}
	if tables > int64(flattenFactor)*int64(load) {
		return errNotReady
	}
	if err := d.flushMemtables(); err != nil {
		return err
	}
	if levels = d.bdb.Levels(); len(levels) > 0 && levels[0].NumTables > 0 {
		start := time.Now()
		if err := d.bdb.Flatten(2); err != nil {
			return fmt.Errorf("compacting the tables into one level: %w", err)
		}
		if d.logger != nil {
			d.logger.Debug("bulk restore compacted the tables into one level", "tables_bytes", tables, "load_bytes", load, "took", time.Since(start))
		}
	}
	return nil
}

// flushMemtables writes Badger's memtables to level 0 tables: a key
// written and dropped at once, since DropPrefix flushes every memtable
// that holds data before it drops.
func (d *DB) flushMemtables() error {
	key := []byte{kindFlush}
	if err := d.update(func(txn *badger.Txn) error { return txn.Set(key, nil) }); err != nil {
		return fmt.Errorf("flushing the memtables: %w", err)
	}
	if err := d.bdb.DropPrefix(key); err != nil {
		return fmt.Errorf("flushing the memtables: %w", err)
	}
	return nil
}

// stream writes the merge and the checkpoint through a StreamWriter, with
// the partition's marker file in place while it does.
func (b *Bulk) stream(m *merge, ckpt []Entry) error {
	if levels := b.db.bdb.Levels(); len(levels) > 0 && levels[0].NumTables > 0 {
		return errNotReady // PrepareIncremental would flatten the tree
	}
	marker := filepath.Join(b.db.bulkDir, bulkMarkerPrefix+hex.EncodeToString(b.s.prefix))
	if err := writeSynced(marker); err != nil {
		return fmt.Errorf("changelog: bulk restore of %s/%d: marking the load: %w", b.s.store, b.s.partition, err)
	}
	sw := b.db.bdb.NewStreamWriter()
	if err := sw.PrepareIncremental(); err != nil {
		sw.Cancel()
		_ = removeSynced(marker) // nothing was written
		if strings.Contains(err.Error(), "MemTable has data") {
			return errNotReady
		}
		return fmt.Errorf("changelog: bulk restore of %s/%d: %w", b.s.store, b.s.partition, err)
	}
	if err := b.feed(sw, m, ckpt); err != nil {
		sw.Cancel()
		return b.undo(marker, err)
	}
	if err := sw.Flush(); err != nil {
		return b.undo(marker, err)
	}
	b.db.cache.clear()
	if err := removeSynced(marker); err != nil {
		return fmt.Errorf("changelog: bulk restore of %s/%d: %w", b.s.store, b.s.partition, err)
	}
	return nil
}

// undo drops what a failed load wrote (tables Badger registered, maybe
// with the checkpoint), so that the partition is empty again, and then its
// marker; if the drop fails too, the marker stays for the next Open. It
// returns the load's error.
func (b *Bulk) undo(marker string, err error) error {
	s := b.s
	err = fmt.Errorf("changelog: bulk restore of %s/%d: %w", s.store, s.partition, err)
	if derr := b.db.bdb.DropPrefix(s.prefix, s.ckpt, s.ckptTime, s.ckptLog); derr != nil {
		return fmt.Errorf("%w (dropping what it wrote: %w)", err, derr)
	}
	b.db.cache.clear()
	_ = removeSynced(marker)
	return err
}

// feed hands the StreamWriter the partition's keys in order, in one
// stream: the checkpoint's offset key sorts before the data and its log and
// time keys after it (see the key kinds).
func (b *Bulk) feed(sw *badger.StreamWriter, m *merge, ckpt []Entry) error {
	buf := z.NewBuffer(bulkWriteBytes+bulkWriteBytes/4, "weir.bulk")
	defer buf.Release()
	stream := uint32(1)
	threshold := int(b.db.bdb.Opts().ValueThreshold)
	inTable := 0 // bytes of the current stream
	pace := b.db.newTablePacer()
	write := func() error {
		if buf.LenNoPadding() < bulkWriteBytes {
			return nil
		}
		pace.wait(int(stream - 1))
		err := sw.Write(buf)
		buf.Reset()
		return err
	}
	add := func(key, value []byte, meta byte) error {
		putKV(buf, streamKV{key: key, value: value, meta: meta, version: b.db.ts, stream: stream})
		inTable += len(key) + 16
		if len(value) < threshold {
			inTable += len(value)
		}
		if inTable >= b.tableBytes {
			// The table is full: end its stream, and go on in the next
			// one. The keys come sorted, so the streams' tables do not
			// overlap.
			putKV(buf, streamKV{stream: stream, done: true})
			stream++
			inTable = 0
		}
		return write()
	}
	var rest []Entry
	for _, e := range ckpt {
		if bytes.Compare(e.Key, b.s.prefix) < 0 {
			if err := add(e.Key, e.Value, 0); err != nil {
				return err
			}
		} else {
			rest = append(rest, e)
		}
	}
	key := make([]byte, 0, 64)
	for {
		e, ok, err := m.next()
		if err != nil {
			return err
		}
		if !ok {
			break
		}
		key = append(append(key[:0], b.s.prefix...), e.key...)
		if err := add(key, e.value, e.meta); err != nil {
			return err
		}
	}
	for _, e := range rest {
		if err := add(e.Key, e.Value, 0); err != nil {
			return err
		}
	}
	if buf.LenNoPadding() == 0 {
		return nil
	}
	return sw.Write(buf)
}

// streamKV is one record of a StreamWriter's input: a key and its value
// at a version in stream, or the end of stream (done).
type streamKV struct {
	key, value []byte
	meta       byte   // Badger's user meta; 0: none
	version    uint64 // the DB's (DB.ts); 0 for done
	stream     uint32
	done       bool
}

// putKV appends kv to buf as badger.KVToBuffer would append the pb.KV it
// stands for: the protobuf wire format, fields in the order of their
// numbers, fields of zero value left out. KVToBuffer goes through
// protobuf's reflection and costs about a tenth of a bulk load's CPU;
// this costs a copy. The StreamWriter decodes it with protobuf, so any
// field order would do, but the output matches byte for byte (see the
// test).
func putKV(buf *z.Buffer, kv streamKV) {
	const (
		tagKey      = 1<<3 | 2 // field 1, bytes
		tagValue    = 2<<3 | 2
		tagUserMeta = 3<<3 | 2
		tagVersion  = 4<<3 | 0 // field 4, varint
		tagStream   = 10<<3 | 0
		tagDone     = 11<<3 | 0
	)
	version := kv.version
	bytesField := func(b []byte) int {
		if len(b) == 0 {
			return 0
		}
		return 1 + uvarintLen(uint64(len(b))) + len(b)
	}
	n := bytesField(kv.key) + bytesField(kv.value)
	if kv.meta != 0 {
		n += 3
	}
	if version != 0 {
		n += 1 + uvarintLen(version)
	}
	if kv.stream != 0 {
		n += 1 + uvarintLen(uint64(kv.stream))
	}
	if kv.done {
		n += 2
	}
	out := buf.SliceAllocate(n)[:0]
	appendBytes := func(tag byte, b []byte) {
		if len(b) > 0 {
			out = append(out, tag)
			out = binary.AppendUvarint(out, uint64(len(b)))
			out = append(out, b...)
		}
	}
	appendBytes(tagKey, kv.key)
	appendBytes(tagValue, kv.value)
	if kv.meta != 0 {
		out = append(out, tagUserMeta, 1, kv.meta)
	}
	if version != 0 {
		out = binary.AppendUvarint(append(out, tagVersion), version)
	}
	if kv.stream != 0 {
		out = binary.AppendUvarint(append(out, tagStream), uint64(kv.stream))
	}
	if kv.done {
		out = append(out, tagDone, 1)
	}
}

// uvarintLen is the length of v as a varint.
func uvarintLen(v uint64) int {
	n := 1
	for ; v >= 0x80; v >>= 7 {
		n++
	}
	return n
}

// maxTablesInFlight bounds the tables of a bulk load that Badger builds at
// once. The StreamWriter hands each ended stream's table to a goroutine of
// its own, which compresses, writes and syncs it while holding its blocks
// (up to twice defaultTableSize) in memory, and lets up to 16 run: a feed
// faster than the disk would hold 16 of them.
const maxTablesInFlight = 3

// tablePacer keeps a bulk load's feed at most maxTablesInFlight tables
// ahead of the tables Badger has finished. Only the load adds tables while
// its StreamWriter runs (Badger stops compactions and flushes for it), and
// table ids grow, so the load's finished tables are those with an id above
// the highest one before it.
type tablePacer struct {
	db   *DB
	base uint64
}

func (d *DB) newTablePacer() *tablePacer {
	p := &tablePacer{db: d}
	for _, t := range d.bdb.Tables() {
		p.base = max(p.base, t.ID)
	}
	return p
}

// wait returns once at most maxTablesInFlight of the ended tables are
// unfinished, polling every millisecond; it gives up after 10 s, since
// pacing bounds memory and a stall must not stop the load.
func (p *tablePacer) wait(ended int) {
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		done := 0
		for _, t := range p.db.bdb.Tables() {
			if t.ID > p.base {
				done++
			}
		}
		if ended-done <= maxTablesInFlight {
			return
		}
		time.Sleep(time.Millisecond)
	}
}

// writeBatches writes the merge and the checkpoint through write batches,
// the checkpoint last, each batch under the drop lock's read side as any
// write.
func (b *Bulk) writeBatches(m *merge, ckpt []Entry) error {
	for {
		last, err := b.writeBatch(m, ckpt)
		if err != nil || last {
			return err
		}
	}
}

// writeBatch writes the merge's next 10,000 entries, and with the last
// ones the checkpoint.
func (b *Bulk) writeBatch(m *merge, ckpt []Entry) (last bool, err error) {
	const batch = 10_000
	b.db.drop.RLock()
	defer b.db.drop.RUnlock()
	wb := b.db.newWriteBatch()
	defer wb.Cancel() // a no-op after Flush
	fail := func(err error) (bool, error) {
		return false, fmt.Errorf("changelog: bulk restore of %s/%d: %w", b.s.store, b.s.partition, err)
	}
	n := 0
	for ; n < batch; n++ {
		e, ok, err := m.next()
		if err != nil {
			return fail(err)
		}
		if !ok {
			break
		}
		// The batch keeps the value until it is flushed; the merge
		// reuses its buffer.
		v := append([]byte(nil), e.value...)
		if err := wb.SetEntry(badger.NewEntry(b.s.key(e.key), v).WithMeta(e.meta)); err != nil {
			return fail(err)
		}
	}
	last = n < batch
	if last {
		for _, e := range ckpt {
			if err := wb.Set(e.Key, e.Value); err != nil {
				return fail(err)
			}
		}
	}
	if err := wb.Flush(); err != nil {
		return fail(err)
	}
	if last {
		b.db.cache.clear()
	}
	return last, nil
}

// mergeEntry is one key's latest entry, as the merge yields it: the key
// without the space's prefix and the value as Badger keeps it.
type mergeEntry struct {
	key, value []byte
	meta       byte
	deleted    bool
}

// runSource yields the entries of one sorted run: a file, or the run in
// memory (b and mem).
type runSource struct {
	rank int // later runs win
	f    *os.File
	r    *bufio.Reader
	b    *Bulk
	mem  []bulkRef
	cur  mergeEntry
	kbuf []byte
}

func (s *runSource) close() {
	if s.f != nil {
		_ = s.f.Close()
	}
}

// advance loads the source's next entry into cur; false at its end.
func (s *runSource) advance() (bool, error) {
	if s.b != nil {
		if len(s.mem) == 0 {
			return false, nil
		}
		r := s.mem[0]
		s.mem = s.mem[1:]
		s.cur = mergeEntry{key: s.b.key(r), value: s.b.value(r), meta: r.meta, deleted: r.deleted}
		return true, nil
	}
	klen, err := binary.ReadUvarint(s.r)
	if errors.Is(err, io.EOF) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("reading a run: %w", err)
	}
	vlen, err := binary.ReadUvarint(s.r)
	if err != nil {
		return false, fmt.Errorf("reading a run: %w", noEOF(err))
	}
	flags, err := s.r.ReadByte()
	if err != nil {
		return false, fmt.Errorf("reading a run: %w", noEOF(err))
	}
	if need := int(klen + vlen); cap(s.kbuf) < need {
		s.kbuf = make([]byte, need)
	}
	data := s.kbuf[:klen+vlen]
	if _, err := io.ReadFull(s.r, data); err != nil {
		return false, fmt.Errorf("reading a run: %w", noEOF(err))
	}
	s.cur = mergeEntry{key: data[:klen], value: data[klen:], meta: flags >> 1, deleted: flags&1 != 0}
	return true, nil
}

func noEOF(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}

// merge yields the live entries of sorted runs in key order: of equal
// keys, the latest run's, and nothing for a key whose latest entry is a
// deletion. What it yields stays valid until the next call.
type merge struct {
	// keepDeleted yields deletions too (a spilled run keeps them).
	keepDeleted bool
	h           runHeap
	started     bool
	srcs        []*runSource
	out         mergeEntry
	buf         []byte
}

func newMerge(srcs []*runSource) *merge { return &merge{srcs: srcs} }

func (m *merge) start() error {
	m.started = true
	for _, s := range m.srcs {
		ok, err := s.advance()
		if err != nil {
			return err
		}
		if ok {
			m.h = append(m.h, s)
		}
	}
	heap.Init(&m.h)
	return nil
}

func (m *merge) next() (mergeEntry, bool, error) {
	if len(m.srcs) == 1 {
		// One run (all of it fit in memory): its keys are unique
		// already, and nothing needs copying.
		for {
			ok, err := m.srcs[0].advance()
			if err != nil || !ok {
				return mergeEntry{}, false, err
			}
			if m.keepDeleted || !m.srcs[0].cur.deleted {
				return m.srcs[0].cur, true, nil
			}
		}
	}
	if !m.started {
		if err := m.start(); err != nil {
			return mergeEntry{}, false, err
		}
	}
	for len(m.h) > 0 {
		// The heap's top is the smallest key, of the latest run among
		// equal keys: take it, and pass over the other runs' entries of
		// the key.
		top := m.h[0]
		m.buf = append(append(m.buf[:0], top.cur.key...), top.cur.value...)
		m.out = mergeEntry{key: m.buf[:len(top.cur.key)], value: m.buf[len(top.cur.key):], meta: top.cur.meta, deleted: top.cur.deleted}
		for len(m.h) > 0 && bytes.Equal(m.h[0].cur.key, m.out.key) {
			s := m.h[0]
			ok, err := s.advance()
			if err != nil {
				return mergeEntry{}, false, err
			}
			if ok {
				heap.Fix(&m.h, 0)
			} else {
				heap.Pop(&m.h)
			}
		}
		if m.keepDeleted || !m.out.deleted {
			return m.out, true, nil
		}
	}
	return mergeEntry{}, false, nil
}

// runHeap orders sources by their current key, then latest run first.
type runHeap []*runSource

func (h runHeap) Len() int { return len(h) }
func (h runHeap) Less(i, j int) bool {
	if c := bytes.Compare(h[i].cur.key, h[j].cur.key); c != 0 {
		return c < 0
	}
	return cmp.Compare(h[i].rank, h[j].rank) > 0
}
func (h runHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *runHeap) Push(x any)   { *h = append(*h, x.(*runSource)) }
func (h *runHeap) Pop() any {
	old := *h
	s := old[len(old)-1]
	*h = old[:len(old)-1]
	return s
}

// writeSynced creates an empty file and syncs it and its directory.
func writeSynced(name string) error {
	f, err := os.Create(name)
	if err != nil {
		return err
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return syncDir(filepath.Dir(name))
}

// removeSynced removes a file and syncs its directory.
func removeSynced(name string) error {
	if err := os.Remove(name); err != nil {
		return err
	}
	return syncDir(filepath.Dir(name))
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// recoverBulk drops the partitions of the loads a crash interrupted (their
// marker files), and the runs they left; called by Open before anything
// reads the database.
func (d *DB) recoverBulk() error {
	entries, err := os.ReadDir(d.bulkDir)
	if errors.Is(err, os.ErrNotExist) {
		return os.MkdirAll(d.bulkDir, 0o700)
	}
	if err != nil {
		return err
	}
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, "runs-") {
			if err := os.RemoveAll(filepath.Join(d.bulkDir, name)); err != nil {
				return err
			}
			continue
		}
		hexPrefix, ok := strings.CutPrefix(name, bulkMarkerPrefix)
		if !ok {
			continue
		}
		prefix, err := hex.DecodeString(hexPrefix)
		if err != nil || len(prefix) == 0 || prefix[0] != kindData {
			return fmt.Errorf("malformed bulk marker %s", name)
		}
		store, partition, ok := parseSpacePrefix(append([]byte{kindCheckpoint}, prefix[1:]...))
		if !ok {
			return fmt.Errorf("malformed bulk marker %s", name)
		}
		s := d.Space(store, partition)
		if d.logger != nil {
			d.logger.Warn("state of a bulk restore that did not finish; dropping it to restore in full", "store", store, "partition", partition)
		}
		if err := d.bdb.DropPrefix(s.prefix, s.ckpt, s.ckptTime, s.ckptLog); err != nil {
			return err
		}
		if err := removeSynced(filepath.Join(d.bulkDir, name)); err != nil {
			return err
		}
	}
	return nil
}
