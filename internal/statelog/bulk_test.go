package statelog

import (
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/weirstream/weir/changelog"
)

// bulkModel is what a changelog of random puts, stamped puts and
// deletions leaves in a store partition: each key's latest entry.
type bulkModel map[string]Entry

// randomChangelog returns n entries over keys distinct keys, in changelog
// order, and the state they leave.
func randomChangelog(seed uint64, n, keys int) ([]Entry, bulkModel) {
	rng := rand.New(rand.NewPCG(seed, 1))
	model := bulkModel{}
	var out []Entry
	for i := range n {
		k := fmt.Appendf(nil, "key-%05d", rng.IntN(keys))
		var e Entry
		switch rng.IntN(5) {
		case 0:
			e = Entry{Key: k, Deleted: true}
			delete(model, string(k))
		case 1:
			e = Entry{Key: k, Value: fmt.Appendf(nil, "stamped-%d", i), Stamped: true, Time: int64(i)}
			model[string(k)] = e
		case 2:
			e = Entry{Key: k, Value: []byte{}} // empty, not deleted
			model[string(k)] = e
		default:
			e = Entry{Key: k, Value: fmt.Appendf(nil, "value-%d", i)}
			model[string(k)] = e
		}
		out = append(out, e)
	}
	return out, model
}

// checkSpace fails t unless s holds exactly the model.
func checkSpace(t *testing.T, s *Space, model bulkModel) {
	t.Helper()
	n, err := s.Count()
	if err != nil {
		t.Fatal(err)
	}
	if n != int64(len(model)) {
		t.Errorf("%s/%d holds %d keys, want %d", s.store, s.partition, n, len(model))
	}
	for k, want := range model {
		v, ts, stamped, err := s.GetStamped([]byte(k))
		if err != nil {
			t.Fatal(err)
		}
		if v == nil || string(v) != string(want.Value) || stamped != want.Stamped || ts != want.Time {
			t.Fatalf("%s = %q (time %d, stamped %v), want %q (time %d, stamped %v)", k, v, ts, stamped, want.Value, want.Time, want.Stamped)
		}
	}
	for k, v := range s.Range(nil, nil) {
		if _, ok := model[string(k)]; !ok {
			t.Fatalf("%s = %q is not in the changelog's state", k, v)
		}
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
}

// bulkLoad loads entries into s in batches of 1,000 and finishes with the
// checkpoint offset len(entries).
func bulkLoad(t *testing.T, db *DB, s *Space, entries []Entry, runBytes int, log string) *Bulk {
	t.Helper()
	return bulkLoadWith(t, db, s, entries, runBytes, log, nil)
}

// bulkLoadWith loads entries after setup, when not nil, has seen the Bulk.
func bulkLoadWith(t *testing.T, db *DB, s *Space, entries []Entry, runBytes int, log string, setup func(*Bulk)) *Bulk {
	t.Helper()
	b, err := db.NewBulk(s, runBytes)
	if err != nil {
		t.Fatal(err)
	}
	if setup != nil {
		setup(b)
	}
	for i := 0; i < len(entries); i += 1000 {
		if err := b.Add(entries[i:min(i+1000, len(entries))]); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Finish(int64(len(entries)), time.UnixMilli(1_700_000_000_000), log); err != nil {
		t.Fatal(err)
	}
	return b
}

func checkCheckpoint(t *testing.T, s *Space, offset int64, log string) {
	t.Helper()
	c, ok, err := s.Checkpoint()
	if err != nil || !ok || c.Offset != offset || c.Time.UnixMilli() != 1_700_000_000_000 {
		t.Errorf("checkpoint = %+v, %v, %v; want offset %d at 1700000000000", c, ok, err, offset)
	}
	if got, err := s.Log(); err != nil || got != log {
		t.Errorf("checkpoint log = %q, %v; want %q", got, err, log)
	}
}

func TestBulkKeepsEachKeysLatestEntry(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		runBytes   int   // small ones spill many runs
		n, keys    int   // over bulkChunk records: several sorted chunks
		expect     int64 // records announced with Expect; 0 for none
		tableBytes int   // bytes per table; 0 for bulkTableBytes
	}{
		{"one run in memory", 0, 20_000, 3_000, 0, 0},
		{"spilled runs", 4 << 10, 20_000, 3_000, 0, 0},
		{"sorted chunks", 0, 3*bulkChunk + 5, 100_000, 0, 0},
		{"sorted chunks and spilled runs", 8 << 20, 3*bulkChunk + 5, 100_000, 0, 0},
		{"as many records as expected", 0, 20_000, 3_000, 20_000, 0},
		{"fewer records than expected", 0, 20_000, 3_000, 1_000_000, 0},
		{"more records than expected", 0, 20_000, 3_000, 10, 0},
		{"expected records over spilled runs", 4 << 10, 20_000, 3_000, 20_000, 0},
		{"many tables", 0, 20_000, 3_000, 0, 2 << 10},
		{"many tables from spilled runs", 4 << 10, 20_000, 3_000, 0, 2 << 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			db, err := Open(dir, changelog.Options{})
			if err != nil {
				t.Fatal(err)
			}
			entries, model := randomChangelog(7, tc.n, tc.keys)
			s := db.Space("counts", 3)
			b := bulkLoadWith(t, db, s, entries, tc.runBytes, "", func(b *Bulk) {
				if tc.expect != 0 {
					b.Expect(tc.expect)
				}
				if tc.tableBytes != 0 {
					b.tableBytes = tc.tableBytes
				}
			})
			if b.Fallback {
				t.Error("a load into a fresh database went through write batches")
			}
			// About 3,000 keys of some 20 bytes each: a table per 2 KiB
			// makes about 30.
			if tables := len(db.bdb.Tables()); tc.tableBytes != 0 && tables < 20 {
				t.Errorf("%d tables after a load of ~60 KB in tables of %d bytes", tables, tc.tableBytes)
			}
			checkSpace(t, s, model)
			checkCheckpoint(t, s, int64(tc.n), "")
			// The runs are gone, and the load survives a reopen.
			if runs, _ := filepath.Glob(filepath.Join(dir+"-bulk", "*")); len(runs) != 0 {
				t.Errorf("bulk directory after the load: %v", runs)
			}
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
			if db, err = Open(dir, changelog.Options{}); err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			checkSpace(t, db.Space("counts", 3), model)
			checkCheckpoint(t, db.Space("counts", 3), int64(tc.n), "")
		})
	}
}

func TestBulkSpillsRuns(t *testing.T) {
	t.Parallel()
	db, err := Open(t.TempDir(), changelog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	b, err := db.NewBulk(db.Space("s", 0), 1<<10)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Cancel()
	entries, _ := randomChangelog(1, 1_000, 100)
	if err := b.Add(entries); err != nil {
		t.Fatal(err)
	}
	if len(b.runs) < 10 {
		t.Errorf("%d runs spilled for ~20 KB of records with runs of 1 KiB", len(b.runs))
	}
	if len(b.arena) > 2<<10 {
		t.Errorf("%d bytes in memory, want at most about the run size", len(b.arena))
	}
}

// A load told how many records come allocates its run once, within the
// run size.
func TestBulkExpectAllocatesTheRunOnce(t *testing.T) {
	t.Parallel()
	db, err := Open(t.TempDir(), changelog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, tc := range []struct {
		name     string
		runBytes int
		n        int
	}{
		{"run in memory", 0, 50_000},
		{"spilled runs", 256 << 10, 50_000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := db.NewBulk(db.Space("s", 0), tc.runBytes)
			if err != nil {
				t.Fatal(err)
			}
			defer b.Cancel()
			b.Expect(int64(tc.n))
			entries, _ := randomChangelog(3, tc.n, tc.n)
			if err := b.Add(entries[:1000]); err != nil {
				t.Fatal(err)
			}
			refs, arena := cap(b.refs), cap(b.arena)
			if refs < 1000 || refs > tc.n+1 {
				t.Fatalf("%d refs reserved for %d records expected", refs, tc.n)
			}
			if limit := max(tc.runBytes, DefaultBulkRunBytes); refs*bulkRefBytes+arena > limit*2 {
				t.Fatalf("%d bytes reserved, over the run size %d", refs*bulkRefBytes+arena, limit)
			}
			if err := b.Add(entries[1000:]); err != nil {
				t.Fatal(err)
			}
			if cap(b.refs) != refs {
				t.Errorf("refs grew from %d to %d within the records expected", refs, cap(b.refs))
			}
		})
	}
}

// Loads after other writes, and beside other partitions' data: each
// partition holds its own changelog's state whichever path the load took.
func TestBulkBesideOtherState(t *testing.T) {
	t.Parallel()
	db, err := Open(t.TempDir(), changelog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	e1, m1 := randomChangelog(1, 5_000, 1_000)
	e2, m2 := randomChangelog(2, 5_000, 1_000)
	e3, m3 := randomChangelog(3, 5_000, 1_000)
	s1, s2, s3 := db.Space("counts", 0), db.Space("counts", 1), db.Space("other", 0)
	if b := bulkLoad(t, db, s1, e1, 0, ""); b.Fallback {
		t.Error("first load went through write batches")
	}
	// A second stream-written load lands one level above the first.
	if b := bulkLoad(t, db, s2, e2, 0, "input-topic"); b.Fallback {
		t.Error("second load on an unwritten database went through write batches")
	}
	// A commit in between leaves data in the memtable: the load flushes
	// it and compacts the small tree, and streams.
	if err := db.Space("counts", 9).Put([]byte("k"), []byte("v")); err != nil {
		t.Fatal(err)
	}
	if b := bulkLoad(t, db, s3, e3, 2<<10, ""); b.Fallback {
		t.Error("a load after a write into a small database went through write batches")
	}
	checkSpace(t, db.Space("counts", 9), bulkModel{"k": {Value: []byte("v")}})
	checkSpace(t, s1, m1)
	checkSpace(t, s2, m2)
	checkSpace(t, s3, m3)
	checkCheckpoint(t, s2, 5_000, "input-topic")
	checkCheckpoint(t, s3, 5_000, "")
	// Later writes to a loaded partition win over the loaded versions.
	for k := range m1 {
		if err := s1.Delete([]byte(k)); err != nil {
			t.Fatal(err)
		}
		delete(m1, k)
		break
	}
	if err := s1.Put([]byte("new"), []byte("v")); err != nil {
		t.Fatal(err)
	}
	m1["new"] = Entry{Key: []byte("new"), Value: []byte("v")}
	checkSpace(t, s1, m1)
	// And a drop removes a loaded partition.
	if err := s2.Drop(); err != nil {
		t.Fatal(err)
	}
	checkSpace(t, s2, bulkModel{})
}

// A load that a crash interrupted leaves its marker; the next Open drops
// the partition, data and checkpoint, and leaves the others.
func TestBulkInterruptedIsDroppedAtOpen(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db, err := Open(dir, changelog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	keep, half := db.Space("counts", 0), db.Space("counts", 1)
	if err := keep.Put([]byte("a"), []byte("1")); err != nil {
		t.Fatal(err)
	}
	if err := keep.SetCheckpoint(5); err != nil {
		t.Fatal(err)
	}
	// What a crash during a load leaves: the marker, some of the data,
	// the checkpoint, and a run directory.
	if err := half.Put([]byte("b"), []byte("2")); err != nil {
		t.Fatal(err)
	}
	if err := half.SetCheckpoint(100); err != nil {
		t.Fatal(err)
	}
	marker := filepath.Join(dir+"-bulk", bulkMarkerPrefix+hex.EncodeToString(half.prefix))
	if err := os.WriteFile(marker, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir+"-bulk", "runs-123", "run-000000"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if db, err = Open(dir, changelog.Options{}); err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	checkSpace(t, db.Space("counts", 1), bulkModel{})
	if _, ok, _ := db.Space("counts", 1).Checkpoint(); ok {
		t.Error("the interrupted partition kept its checkpoint")
	}
	checkSpace(t, db.Space("counts", 0), bulkModel{"a": {Value: []byte("1")}})
	if c, ok, _ := db.Space("counts", 0).Checkpoint(); !ok || c.Offset != 5 {
		t.Errorf("the other partition's checkpoint = %+v, %v", c, ok)
	}
	left, _ := os.ReadDir(dir + "-bulk")
	if len(left) != 0 {
		t.Errorf("bulk directory after Open holds %d entries", len(left))
	}
}

func TestBulkRefusesAnOversizedEntryByLength(t *testing.T) {
	t.Parallel()
	db, err := Open(t.TempDir(), changelog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	b, err := db.NewBulk(db.Space("s", 0), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Cancel()
	err = b.Add([]Entry{{Key: []byte(strings.Repeat("k", badgerMaxKey+1)), Value: []byte("secret")}})
	if err == nil || !strings.Contains(err.Error(), "over Badger's limit") || strings.Contains(err.Error(), "kkkk") {
		t.Errorf("oversized key: %v", err)
	}
}

func TestBulkNeedsADatabaseOnDisk(t *testing.T) {
	t.Parallel()
	db, err := Open("", changelog.Options{InMemory: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.NewBulk(db.Space("s", 0), 0); err == nil {
		t.Error("NewBulk on an in-memory database succeeded")
	}
}

// Keys that share their first 8 bytes, or differ only in length or in
// trailing zeros, sort as bytes.Compare sorts them.
func TestBulkSortsKeysThatShareTheirHead(t *testing.T) {
	t.Parallel()
	db, err := Open(t.TempDir(), changelog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	keys := []string{"user-0000000002", "user-000", "user-0000000001", "user-000\x00", "u", "", "user-0000000001\x00", "\x00", "user-001", "user-000\x00\x00"}
	var entries []Entry
	model := bulkModel{}
	for i, k := range keys {
		e := Entry{Key: []byte(k), Value: fmt.Appendf(nil, "%d", i)}
		entries = append(entries, e)
		model[k] = e
	}
	s := db.Space("s", 0)
	bulkLoad(t, db, s, entries, 0, "")
	checkSpace(t, s, model)
	var got []string
	for k := range s.Range(nil, nil) {
		got = append(got, string(k))
	}
	want := slices.Clone(keys)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("keys in the store: %q, want %q", got, want)
	}
}

// A load far smaller than the database's tables does not flatten them: it
// goes through write batches, with the same result.
func TestBulkIntoALargeDatabaseTakesTheWriteBatches(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db, err := Open(dir, changelog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	big, bigModel := randomChangelog(4, 100_000, 50_000)
	if err := db.Space("big", 0).Apply(big); err != nil {
		t.Fatal(err)
	}
	// Closing flushes the memtables into tables.
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if db, err = Open(dir, changelog.Options{}); err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	small, smallModel := randomChangelog(5, 100, 50)
	s := db.Space("small", 0)
	if b := bulkLoad(t, db, s, small, 0, ""); !b.Fallback {
		t.Error("a load of a few KB beside megabytes of tables streamed")
	}
	checkSpace(t, s, smallModel)
	checkCheckpoint(t, s, 100, "")
	checkSpace(t, db.Space("big", 0), bigModel)
}

// Values over Badger's value threshold go to its value log, through the
// StreamWriter as through a write batch.
func TestBulkLoadsLargeValues(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db, err := Open(dir, changelog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	big := Entry{Key: []byte("big"), Value: []byte(strings.Repeat("v", 3<<20)), Stamped: true, Time: 42}
	entries, model := randomChangelog(9, 1_000, 200)
	entries = append(entries, big)
	model["big"] = big
	s := db.Space("s", 0)
	if b := bulkLoad(t, db, s, entries, 0, ""); b.Fallback {
		t.Error("the load went through write batches")
	}
	checkSpace(t, s, model)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if db, err = Open(dir, changelog.Options{}); err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	checkSpace(t, db.Space("s", 0), model)
}
