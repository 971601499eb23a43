package statelog

// Benchmarks of a key-value store partition's put and get rates, straight
// on Badger (Space) and through the write buffer a task uses (Buffer over
// Space). Each op moves one 16-byte key and one 100-byte value; b.SetBytes
// makes MB/s mean 10^6 bytes of key+value per second.
//
//	go test -run '^$' -bench . -benchtime 1000000x ./changelog/
//
// Every benchmark runs on Badger with the instance defaults (changelog.Options{}) in
// a temporary directory ("disk") and with changelog.Options{InMemory: true} ("mem").
// Results: bench/README.md, "State".

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"github.com/weirstream/weir/changelog"
	"testing"
)

const (
	benchKeyBytes   = 16
	benchValueBytes = 100
	// benchStoreKeys is how many keys the read benchmarks load first:
	// about 116 MB of keys and values, several times the default
	// memtables (32 MiB) and block cache (32 MiB), so reads reach tables.
	benchStoreKeys = 1_000_000
	// benchCommitPuts is how many puts a buffer takes between flushes,
	// as if a commit came every benchCommitPuts records.
	benchCommitPuts = 10_000
	// benchRestoreBatch is how many records a restore applies at once:
	// about what one 1 MiB changelog fetch of such records holds.
	benchRestoreBatch = 7_500
)

// benchKey returns the 16-byte key of the i-th record: hex digits of a
// scrambled i, so that consecutive keys are not adjacent in the store.
func benchKey(dst []byte, i int) []byte {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(i)*0x9E3779B97F4A7C15)
	return hex.AppendEncode(dst[:0], b[:])
}

func benchValue() []byte {
	v := make([]byte, benchValueBytes)
	for i := range v {
		v[i] = 'a' + byte(i%26)
	}
	return v
}

// benchPick returns the i-th of n keys in a scattered order that visits
// every key once per n ops (the step, 7,919, is a prime that divides
// neither benchStoreKeys nor benchCommitPuts).
func benchPick(i, n int) int { return int(uint64(i) * 7_919 % uint64(n)) }

// benchSizes are the store sizes the read benchmarks run with.
var benchSizes = []int{benchCommitPuts, benchStoreKeys}

var benchOptions = []struct {
	name string
	opts changelog.Options
}{
	{"disk", changelog.Options{}},
	{"disk-nocache", changelog.Options{ReadCacheBytes: -1}},
	{"mem", changelog.Options{InMemory: true}},
}

// benchSpace opens a database for b and returns one store partition of it.
func benchSpace(b *testing.B, o changelog.Options) *Space {
	b.Helper()
	dir := ""
	if !o.InMemory {
		dir = b.TempDir()
	}
	db, err := Open(dir, o)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if err := db.Close(); err != nil {
			b.Error(err)
		}
	})
	return db.Space("bench", 0)
}

// benchLoad writes keys 0..n-1 to s in batches, as a restore does.
func benchLoad(b *testing.B, s *Space, n int) {
	b.Helper()
	value := benchValue()
	batch := make([]Entry, 0, benchCommitPuts)
	for i := range n {
		batch = append(batch, Entry{Key: benchKey(nil, i), Value: value})
		if len(batch) == cap(batch) || i == n-1 {
			if err := s.Apply(batch); err != nil {
				b.Fatal(err)
			}
			batch = batch[:0]
		}
	}
}

// BenchmarkSpacePut puts new keys one at a time straight into Badger: one
// write batch per put, the cost without the buffer.
func BenchmarkSpacePut(b *testing.B) {
	for _, bo := range benchOptions {
		b.Run(bo.name, func(b *testing.B) {
			s := benchSpace(b, bo.opts)
			value := benchValue()
			key := make([]byte, 0, benchKeyBytes)
			b.SetBytes(benchKeyBytes + benchValueBytes)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if err := s.Put(benchKey(key, i), value); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
}

// BenchmarkSpaceApply writes new keys the way a restore does: one Apply
// of benchRestoreBatch entries per op (one fetch) and then the
// checkpoint. Its MB/s and records/s compare with the restore workload of
// bench/; run it with -benchtime Nx for N×7,500 records in the store.
func BenchmarkSpaceApply(b *testing.B) {
	for _, bo := range benchOptions {
		b.Run(bo.name, func(b *testing.B) {
			s := benchSpace(b, bo.opts)
			value := benchValue()
			batch := make([]Entry, benchRestoreBatch)
			keys := make([]byte, benchRestoreBatch*benchKeyBytes)
			for i := range batch {
				batch[i] = Entry{Key: keys[i*benchKeyBytes : (i+1)*benchKeyBytes : (i+1)*benchKeyBytes], Value: value}
			}
			b.SetBytes(benchRestoreBatch * (benchKeyBytes + benchValueBytes))
			b.ReportAllocs()
			next := 0
			for b.Loop() {
				for i := range batch {
					benchKey(batch[i].Key, next)
					next++
				}
				if err := s.Apply(batch); err != nil {
					b.Fatal(err)
				}
				if err := s.SetCheckpoint(int64(next)); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(next)/b.Elapsed().Seconds(), "records/s")
		})
	}
}

// BenchmarkSpaceGet reads keys straight from Badger, in a store partition
// holding 10,000 keys (they stay in the memtable) or benchStoreKeys keys
// (most reads reach tables and miss the block cache).
func BenchmarkSpaceGet(b *testing.B) {
	for _, bo := range benchOptions {
		for _, n := range benchSizes {
			b.Run(fmt.Sprintf("%s/keys=%d", bo.name, n), func(b *testing.B) {
				s := benchSpace(b, bo.opts)
				benchLoad(b, s, n)
				key := make([]byte, 0, benchKeyBytes)
				b.SetBytes(benchKeyBytes + benchValueBytes)
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					v, err := s.Get(benchKey(key, benchPick(i, n)))
					if err != nil || len(v) != benchValueBytes {
						b.Fatalf("get %d: %d bytes, %v", i, len(v), err)
					}
					i++
				}
			})
		}
	}
}

// BenchmarkBufferPut puts new keys through a write buffer over Badger and
// flushes it to Badger every benchCommitPuts puts, as the runtime does
// after each commit. The flushes are inside the timing.
func BenchmarkBufferPut(b *testing.B) {
	for _, bo := range benchOptions {
		b.Run(bo.name, func(b *testing.B) {
			s := benchSpace(b, bo.opts)
			buf := NewBuffer(s)
			value := benchValue()
			key := make([]byte, 0, benchKeyBytes)
			b.SetBytes(benchKeyBytes + benchValueBytes)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if err := buf.Put(benchKey(key, i), value); err != nil {
					b.Fatal(err)
				}
				i++
				if i%benchCommitPuts == 0 {
					if err := buf.Flush(); err != nil {
						b.Fatal(err)
					}
				}
			}
			if err := buf.Flush(); err != nil {
				b.Fatal(err)
			}
		})
	}
}

// benchBuffer returns a buffer holding benchCommitPuts changed keys (not
// yet flushed) over a store partition that holds n other keys.
func benchBuffer(b *testing.B, o changelog.Options, n int) *Buffer {
	b.Helper()
	s := benchSpace(b, o)
	benchLoad(b, s, n)
	buf := NewBuffer(s)
	value := benchValue()
	for i := range benchCommitPuts {
		if err := buf.Put(benchKey(nil, n+i), value); err != nil {
			b.Fatal(err)
		}
	}
	return buf
}

// BenchmarkBufferGetHit reads keys that the buffer holds: a map lookup and
// a copy of the value, Badger is not asked.
func BenchmarkBufferGetHit(b *testing.B) {
	for _, bo := range benchOptions {
		b.Run(bo.name, func(b *testing.B) {
			buf := benchBuffer(b, bo.opts, benchStoreKeys)
			key := make([]byte, 0, benchKeyBytes)
			b.SetBytes(benchKeyBytes + benchValueBytes)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				v, err := buf.Get(benchKey(key, benchStoreKeys+benchPick(i, benchCommitPuts)))
				if err != nil || len(v) != benchValueBytes {
					b.Fatalf("get %d: %d bytes, %v", i, len(v), err)
				}
				i++
			}
		})
	}
}

// BenchmarkBufferGetMiss reads keys that the buffer does not hold: they
// fall through to Badger, whose store partition holds 10,000 or
// benchStoreKeys other keys.
func BenchmarkBufferGetMiss(b *testing.B) {
	for _, bo := range benchOptions {
		for _, n := range benchSizes {
			b.Run(fmt.Sprintf("%s/keys=%d", bo.name, n), func(b *testing.B) {
				buf := benchBuffer(b, bo.opts, n)
				key := make([]byte, 0, benchKeyBytes)
				b.SetBytes(benchKeyBytes + benchValueBytes)
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					v, err := buf.Get(benchKey(key, benchPick(i, n)))
					if err != nil || len(v) != benchValueBytes {
						b.Fatalf("get %d: %d bytes, %v", i, len(v), err)
					}
					i++
				}
			})
		}
	}
}
