package statelog

import (
	"github.com/weirstream/weir/changelog"

	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"
)

func TestSpacesAreIsolatedAndDurable(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db, err := Open(dir, changelog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	// "ab"/1 and "a"/... must not see each other although one name is a
	// prefix of the other.
	s1, s2, s3 := db.Space("a", 1), db.Space("ab", 1), db.Space("a", 2)
	s1.Put([]byte("k1"), []byte("v1"))
	s1.Put([]byte("k2"), []byte("v2"))
	s2.Put([]byte("k1"), []byte("other store"))
	s3.Put([]byte("k1"), []byte("other partition"))
	s1.Put([]byte("empty"), nil)
	if got := collect(s1.Range(nil, nil)); !slices.Equal(got, []string{"empty=", "k1=v1", "k2=v2"}) {
		t.Errorf("space a/1 = %v", got)
	}
	if got := collect(s1.Backward([]byte("k1"), []byte("k2"))); !slices.Equal(got, []string{"k1=v1"}) {
		t.Errorf("Backward[k1,k2) = %v", got)
	}
	if got := collect(s1.Backward(nil, []byte("k2"))); !slices.Equal(got, []string{"k1=v1", "empty="}) {
		t.Errorf("Backward(nil,k2) = %v", got)
	}
	if v, _ := s1.Get([]byte("empty")); v == nil || len(v) != 0 {
		t.Errorf("empty value read back as %v", v)
	}
	if _, ok, _ := s1.Checkpoint(); ok {
		t.Error("checkpoint before any was set")
	}
	if err := s1.SetCheckpoint(42); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	db, err = Open(dir, changelog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	s1 = db.Space("a", 1)
	if c, ok, err := s1.Checkpoint(); err != nil || !ok || c.Offset != 42 {
		t.Errorf("checkpoint after reopen = %+v, %v, %v", c, ok, err)
	}
	if v, _ := s1.Get([]byte("k2")); string(v) != "v2" {
		t.Errorf("k2 after reopen = %q", v)
	}
	if err := s1.Drop(); err != nil {
		t.Fatal(err)
	}
	if got := collect(s1.Range(nil, nil)); len(got) != 0 {
		t.Errorf("after Drop: %v", got)
	}
	if _, ok, _ := s1.Checkpoint(); ok {
		t.Error("checkpoint survived Drop")
	}
	if v, _ := db.Space("ab", 1).Get([]byte("k1")); string(v) != "other store" {
		t.Errorf("Drop of a/1 touched ab/1: %q", v)
	}
}

func TestEncryptionKeyLength(t *testing.T) {
	t.Parallel()
	if _, err := Open(t.TempDir(), changelog.Options{EncryptionKey: []byte("short")}); err == nil {
		t.Fatal("accepted a 5-byte key")
	}
	db, err := Open(t.TempDir(), changelog.Options{EncryptionKey: make([]byte, 32)})
	if err != nil {
		t.Fatal(err)
	}
	db.Close()
}

func TestBufferOverBadger(t *testing.T) {
	t.Parallel()
	db, err := Open("", changelog.Options{InMemory: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	s := db.Space("counts", 0)
	s.Put([]byte("a"), []byte("1"))
	s.Put([]byte("c"), []byte("1"))
	b := NewBuffer(s)
	b.Put([]byte("b"), []byte("2"))
	b.Delete([]byte("c"))
	if got := collect(b.Range(nil, nil)); !slices.Equal(got, []string{"a=1", "b=2"}) {
		t.Errorf("merged = %v", got)
	}
	if err := b.Flush(); err != nil {
		t.Fatal(err)
	}
	if got := collect(s.Range(nil, nil)); !slices.Equal(got, []string{"a=1", "b=2"}) {
		t.Errorf("badger after flush = %v", got)
	}
}

func TestCheckpointsAndCount(t *testing.T) {
	t.Parallel()
	db, err := Open("", changelog.Options{InMemory: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	db.Space("counts", 3).SetCheckpoint(10)
	db.Space("c", 300).SetCheckpoint(7)
	s := db.Space("counts", 0)
	s.SetCheckpoint(1)
	for _, k := range []string{"a", "b", "c"} {
		s.Put([]byte(k), []byte("v"))
	}
	got, err := db.Checkpoints()
	if err != nil {
		t.Fatal(err)
	}
	type at struct {
		store     string
		partition int32
		offset    int64
	}
	want := map[at]bool{{"counts", 3, 10}: true, {"c", 300, 7}: true, {"counts", 0, 1}: true}
	if len(got) != len(want) {
		t.Fatalf("Checkpoints = %+v", got)
	}
	for _, c := range got {
		if !want[at{c.Store, c.Partition, c.Offset}] {
			t.Errorf("unexpected checkpoint %+v", c)
		}
		if c.Time.IsZero() {
			t.Errorf("checkpoint %+v has no time", c)
		}
	}
	if n, err := s.Count(); err != nil || n != 3 {
		t.Errorf("Count = %d, %v; want 3", n, err)
	}
}

// Checkpoints carry the time as of which the state was in sync, so that a
// restore can tell a checkpoint older than the changelog's
// delete.retention.ms; checkpoints written before they had a time are
// still read, with a zero time.
func TestCheckpointTime(t *testing.T) {
	t.Parallel()
	db, err := Open("", changelog.Options{InMemory: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()

	at := time.Date(2026, 3, 1, 12, 30, 0, 123_456_789, time.UTC)
	s := db.Space("counts", 2)
	if err := s.SetCheckpointAt(5, at); err != nil {
		t.Fatal(err)
	}
	c, ok, err := s.Checkpoint()
	if err != nil || !ok {
		t.Fatalf("Checkpoint = %+v, %v, %v", c, ok, err)
	}
	want := Checkpoint{Store: "counts", Partition: 2, Offset: 5, Time: at.Truncate(time.Millisecond)}
	if c.Store != want.Store || c.Partition != want.Partition || c.Offset != want.Offset || !c.Time.Equal(want.Time) {
		t.Errorf("Checkpoint = %+v, want %+v", c, want)
	}

	before := time.Now().Truncate(time.Millisecond)
	if err := s.SetCheckpoint(6); err != nil {
		t.Fatal(err)
	}
	after := time.Now()
	if c, _, _ := s.Checkpoint(); c.Offset != 6 || c.Time.Before(before) || c.Time.After(after) {
		t.Errorf("SetCheckpoint(6) read back as %+v, want offset 6 at a time in [%v, %v]", c, before, after)
	}

	// A zero time writes a checkpoint without a time, as earlier
	// versions did.
	if err := s.SetCheckpointAt(7, time.Time{}); err != nil {
		t.Fatal(err)
	}
	if c, ok, err := s.Checkpoint(); err != nil || !ok || c.Offset != 7 || !c.Time.IsZero() {
		t.Errorf("checkpoint without a time read back as %+v, %v, %v", c, ok, err)
	}
}

func TestCheckpointOldFormatIsRead(t *testing.T) {
	t.Parallel()
	db, err := Open("", changelog.Options{InMemory: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	put := func(key, v []byte) {
		t.Helper()
		if err := db.update(func(txn *badger.Txn) error { return txn.Set(key, v) }); err != nil {
			t.Fatal(err)
		}
	}
	raw := func(key []byte) []byte {
		t.Helper()
		var v []byte
		err := db.view(func(txn *badger.Txn) error {
			item, err := txn.Get(key)
			if err != nil {
				return err
			}
			v, err = item.ValueCopy(nil)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	// What weir wrote before checkpoints had a time: the offset alone,
	// 8 bytes big-endian.
	old := db.Space("latest", 0)
	put(old.ckpt, binary.BigEndian.AppendUint64(nil, 1234))
	s := db.Space("latest", 1)
	if err := s.SetCheckpointAt(99, time.UnixMilli(1_700_000_000_000)); err != nil {
		t.Fatal(err)
	}
	// After a rollback the earlier version reads the checkpoint key and
	// requires 8 bytes.
	if v := raw(s.ckpt); len(v) != 8 || binary.BigEndian.Uint64(v) != 99 {
		t.Errorf("checkpoint value %x; want offset 99 as 8 bytes, the earlier versions' format", v)
	}

	if c, ok, err := old.Checkpoint(); err != nil || !ok || c.Offset != 1234 || !c.Time.IsZero() {
		t.Errorf("old checkpoint read as %+v, %v, %v; want offset 1234 and no time", c, ok, err)
	}
	all, err := db.Checkpoints()
	if err != nil {
		t.Fatal(err)
	}
	got := map[int32]Checkpoint{}
	for _, c := range all {
		got[c.Partition] = c
	}
	if c := got[0]; len(all) != 2 || c.Offset != 1234 || !c.Time.IsZero() {
		t.Errorf("Checkpoints = %+v; want partition 0 at 1234 without a time", all)
	}
	if c := got[1]; c.Offset != 99 || c.Time.UnixMilli() != 1_700_000_000_000 {
		t.Errorf("Checkpoints = %+v; want partition 1 at 99, time 1700000000000 ms", all)
	}

	// A time left by an earlier version's Drop, without a checkpoint, is
	// no checkpoint.
	orphan := db.Space("latest", 2)
	put(orphan.ckptTime, binary.BigEndian.AppendUint64(nil, 1_700_000_000_000))
	if c, ok, err := orphan.Checkpoint(); ok || err != nil {
		t.Errorf("a lone checkpoint time read as %+v, %v, %v; want none", c, ok, err)
	}
	if all, err := db.Checkpoints(); err != nil || len(all) != 2 {
		t.Errorf("Checkpoints with a lone checkpoint time = %+v, %v; want the 2 checkpoints", all, err)
	}

	// Any other size is corrupt, not a checkpoint at offset 0.
	put(s.ckptTime, make([]byte, 4))
	if _, _, err := s.Checkpoint(); err == nil {
		t.Error("a 4-byte checkpoint time was read without an error")
	}
	put(old.ckpt, make([]byte, 12))
	if _, _, err := old.Checkpoint(); err == nil {
		t.Error("a 12-byte checkpoint was read without an error")
	}
	if _, err := db.Checkpoints(); err == nil {
		t.Error("Checkpoints listed a 12-byte checkpoint without an error")
	}
}

// Drop removes the checkpoint's time with it, so that it does not outlive
// the state it dated.
func TestDropRemovesCheckpointTime(t *testing.T) {
	t.Parallel()
	db, err := Open("", changelog.Options{InMemory: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	s := db.Space("latest", 0)
	if err := s.SetCheckpointAt(5, time.UnixMilli(1_700_000_000_000)); err != nil {
		t.Fatal(err)
	}
	if err := s.Drop(); err != nil {
		t.Fatal(err)
	}
	err = db.view(func(txn *badger.Txn) error {
		_, err := txn.Get(s.ckptTime)
		return err
	})
	if !errors.Is(err, badger.ErrKeyNotFound) {
		t.Errorf("reading the checkpoint time after Drop: %v; want it gone", err)
	}
}

// LastWritten is the newest modification time in the directory before
// Open, the bound for checkpoints that carry no time.
func TestLastWritten(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "state")
	db, err := Open(dir, changelog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got := db.LastWritten(); !got.IsZero() {
		t.Errorf("LastWritten of a new directory = %v, want zero", got)
	}
	if err := db.Space("s", 0).Put([]byte("k"), []byte("v")); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	// Age every file, then make one younger: that one counts.
	old, newest := time.Now().Add(-72*time.Hour).Truncate(time.Second), time.Now().Add(-30*time.Hour).Truncate(time.Second)
	entries, err := os.ReadDir(dir)
	if err != nil || len(entries) == 0 {
		t.Fatalf("ReadDir = %d entries, %v", len(entries), err)
	}
	for _, e := range entries {
		if err := os.Chtimes(filepath.Join(dir, e.Name()), old, old); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chtimes(filepath.Join(dir, entries[0].Name()), newest, newest); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(dir, old, old); err != nil {
		t.Fatal(err)
	}
	db, err = Open(dir, changelog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if got := db.LastWritten(); !got.Equal(newest) {
		t.Errorf("LastWritten = %v, want the newest file time %v", got, newest)
	}

	mem, err := Open("", changelog.Options{InMemory: true})
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	if got := mem.LastWritten(); !got.IsZero() {
		t.Errorf("LastWritten of an in-memory database = %v, want zero", got)
	}
}

// The log a checkpoint is an offset of is kept per partition and goes
// with the checkpoint when the partition is dropped.
func TestCheckpointLog(t *testing.T) {
	t.Parallel()
	db, err := Open("", changelog.Options{InMemory: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	s, other := db.Space("customers", 1), db.Space("customers", 2)
	if log, err := s.Log(); err != nil || log != "" {
		t.Fatalf("Log of a new partition = %q, %v; want the changelog (\"\")", log, err)
	}
	if err := s.SetCheckpointAt(7, time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := s.SetLog("customers-topic"); err != nil {
		t.Fatal(err)
	}
	if log, err := s.Log(); err != nil || log != "customers-topic" {
		t.Fatalf("Log = %q, %v; want customers-topic", log, err)
	}
	if log, _ := other.Log(); log != "" {
		t.Fatalf("another partition's Log = %q", log)
	}
	if err := s.Drop(); err != nil {
		t.Fatal(err)
	}
	if log, err := s.Log(); err != nil || log != "" {
		t.Fatalf("Log after Drop = %q, %v; want none", log, err)
	}
	if err := s.SetLog("t"); err != nil {
		t.Fatal(err)
	}
	if err := s.SetLog(""); err != nil {
		t.Fatal(err)
	}
	if log, _ := s.Log(); log != "" {
		t.Fatalf("Log after SetLog(\"\") = %q", log)
	}
}

// An encrypted database keeps no plaintext on disk, opens only with its
// key, and a wrong key or none changes nothing.
func TestEncryptedState(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	key := []byte("0123456789abcdef0123456789abcdef")
	secret := []byte("plaintext-marker-7c41e9")
	db, err := Open(dir, changelog.Options{EncryptionKey: key})
	if err != nil {
		t.Fatal(err)
	}
	s := db.Space("users", 3)
	for i := range 100 {
		if err := s.Apply([]Entry{{Key: fmt.Appendf(nil, "%s-key-%d", secret, i), Value: fmt.Appendf(nil, "%s-value-%d", secret, i)}}); err != nil {
			t.Fatal(err)
		}
	}
	assertNoPlaintext(t, dir, secret) // while open: the memtable's log
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	assertNoPlaintext(t, dir, secret) // after close: the tables

	for _, o := range []changelog.Options{{}, {EncryptionKey: []byte("fedcba9876543210fedcba9876543210")}} {
		if db, err := Open(dir, o); !errors.Is(err, changelog.ErrEncryptionKey) {
			if db != nil {
				db.Close()
			}
			t.Fatalf("Open with key %q = %v; want changelog.ErrEncryptionKey", o.EncryptionKey, err)
		}
	}
	db, err = Open(dir, changelog.Options{EncryptionKey: key})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if v, err := db.Space("users", 3).Get(fmt.Appendf(nil, "%s-key-%d", secret, 42)); err != nil || string(v) != string(secret)+"-value-42" {
		t.Fatalf("after refused opens: %q, %v", v, err)
	}

	// A database written without a key refuses one.
	plain := t.TempDir()
	pdb, err := Open(plain, changelog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	pdb.Close()
	if db, err := Open(plain, changelog.Options{EncryptionKey: key}); !errors.Is(err, changelog.ErrEncryptionKey) {
		if db != nil {
			db.Close()
		}
		t.Fatalf("opening a plaintext database with a key = %v; want changelog.ErrEncryptionKey", err)
	}
}

// assertNoPlaintext fails if any file under dir holds b.
func assertNoPlaintext(t *testing.T, dir string, b []byte) {
	t.Helper()
	n := 0
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		n++
		if bytes.Contains(data, b) {
			t.Errorf("%s holds the plaintext %q", path, b)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n == 0 {
		t.Fatal("no files to look at")
	}
}

func TestDropStoreDropsEveryPartitionOfOneStore(t *testing.T) {
	t.Parallel()
	db, err := Open("", changelog.Options{InMemory: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, store := range []string{"a", "ab"} {
		for p := range int32(3) {
			s := db.Space(store, p)
			if err := s.Apply([]Entry{{Key: []byte("k"), Value: []byte(store)}}); err != nil {
				t.Fatal(err)
			}
			if err := s.SetCheckpoint(7); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := db.DropStore("a"); err != nil {
		t.Fatal(err)
	}
	for p := range int32(3) {
		if v, _ := db.Space("a", p).Get([]byte("k")); v != nil {
			t.Errorf("a/%d kept %q", p, v)
		}
		if _, ok, _ := db.Space("a", p).Checkpoint(); ok {
			t.Errorf("a/%d kept its checkpoint", p)
		}
		if v, _ := db.Space("ab", p).Get([]byte("k")); string(v) != "ab" {
			t.Errorf("dropping a touched ab/%d: %q", p, v)
		}
		if _, ok, _ := db.Space("ab", p).Checkpoint(); !ok {
			t.Errorf("dropping a lost ab/%d's checkpoint", p)
		}
	}
}

// A small memtable opens (Badger refuses a value threshold above 15% of
// it, and its default is 1 MiB), and values larger than that threshold
// still round-trip, through the value log, also across a reopen.
func TestSmallMemtable(t *testing.T) {
	dir := t.TempDir()
	o := changelog.Options{MemTableSize: 1 << 20, BlockCacheSize: 1 << 20, IndexCacheSize: 1 << 20}
	db, err := Open(dir, o)
	if err != nil {
		t.Fatalf("Open with a 1 MiB memtable: %v", err)
	}
	big := bytes.Repeat([]byte{7}, 512<<10)
	if err := db.Space("s", 0).Apply([]Entry{{Key: []byte("big"), Value: big}, {Key: []byte("small"), Value: []byte("v")}}); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if db, err = Open(dir, o); err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for k, want := range map[string][]byte{"big": big, "small": []byte("v")} {
		got, err := db.Space("s", 0).Get([]byte(k))
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("Get(%q) = %d bytes, %v; want %d bytes", k, len(got), err, len(want))
		}
	}
}
