package statelog

import (
	"github.com/weirstream/weir/changelog"

	"bytes"
	"math"
	"testing"

	"github.com/dgraph-io/badger/v4"
)

// State written with Badger's own timestamps, as weir kept it before one
// version an opening (versionFloor), reads the same and takes new values
// and deletions; and what such a version writes after weir did (a
// downgrade) is neither shadowed nor shadows what weir writes next.
func TestStateOfBadgerTimestampsReadsAndUpdates(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	key := func(k string) []byte { return append(spacePrefix(kindData, "s", 0), k...) }
	// Badger outside managed mode: a timestamp a commit, counting from 1.
	unmanaged := func(writes ...[2]string) {
		t.Helper()
		bdb, err := badger.Open(badger.DefaultOptions(dir).WithLogger(nil))
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range writes {
			if err := bdb.Update(func(txn *badger.Txn) error { return txn.Set(key(w[0]), []byte(w[1])) }); err != nil {
				t.Fatal(err)
			}
		}
		if err := bdb.Close(); err != nil {
			t.Fatal(err)
		}
	}
	check := func(db *DB, want map[string]string) {
		t.Helper()
		s := db.Space("s", 0)
		for k, w := range want {
			v, err := s.Get([]byte(k))
			if err != nil {
				t.Fatal(err)
			}
			if w == "" && v != nil || w != "" && string(v) != w {
				t.Errorf("%s = %q; want %q", k, v, w)
			}
		}
	}
	reopen := func(db *DB) *DB {
		t.Helper()
		if db != nil {
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
		}
		db, err := Open(dir, changelog.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return db
	}

	unmanaged([2]string{"k", "a"}, [2]string{"k", "b"}, [2]string{"d", "x"})
	db := reopen(nil)
	check(db, map[string]string{"k": "b", "d": "x"})
	s := db.Space("s", 0)
	if err := s.Put([]byte("k"), []byte("c")); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete([]byte("d")); err != nil {
		t.Fatal(err)
	}
	check(db, map[string]string{"k": "c", "d": ""})
	db = reopen(db)
	check(db, map[string]string{"k": "c", "d": ""})
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	unmanaged([2]string{"k", "e"}) // an older weir, after this one
	db = reopen(nil)
	check(db, map[string]string{"k": "e", "d": ""})
	if err := db.Space("s", 0).Put([]byte("k"), []byte("f")); err != nil {
		t.Fatal(err)
	}
	check(db, map[string]string{"k": "f"})
	db = reopen(db)
	check(db, map[string]string{"k": "f", "d": ""})
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
}

// Every write of an opening is at one version, and compactions keep what
// Badger keeps with a timestamp a commit: a key's newest value only, and
// nothing of a deleted key once its tombstone reaches the last level.
func TestCompactionKeepsOneVersionAKey(t *testing.T) {
	t.Parallel()
	db, err := Open(t.TempDir(), changelog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	s := db.Space("s", 0)
	flush := func() {
		t.Helper()
		if err := db.flushMemtables(); err != nil {
			t.Fatal(err)
		}
	}
	for i, v := range []string{"1", "2", "3"} {
		if err := s.Put([]byte("k"), []byte(v)); err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			if err := s.Put([]byte("gone"), []byte("x")); err != nil {
				t.Fatal(err)
			}
		}
		flush()
	}
	if err := s.Delete([]byte("gone")); err != nil {
		t.Fatal(err)
	}
	flush()
	if err := db.bdb.Flatten(1); err != nil {
		t.Fatal(err)
	}
	versions := map[string][][]byte{}
	txn := db.bdb.NewTransactionAt(math.MaxUint64, false)
	defer txn.Discard()
	it := txn.NewIterator(badger.IteratorOptions{AllVersions: true, Prefix: s.prefix})
	for it.Rewind(); it.Valid(); it.Next() {
		item := it.Item()
		if item.Version() != db.ts {
			t.Errorf("%q at version %d; want the database's %d", item.Key(), item.Version(), db.ts)
		}
		var v []byte
		if !item.IsDeletedOrExpired() {
			v, _ = item.ValueCopy(nil)
		}
		k := string(item.Key()[len(s.prefix):])
		versions[k] = append(versions[k], v)
	}
	it.Close()
	if got := versions["k"]; len(got) != 1 || !bytes.Equal(got[0], []byte("3")) {
		t.Errorf("k's versions after compaction: %q; want only the newest, 3", got)
	}
	if got, ok := versions["gone"]; ok {
		t.Errorf("a deleted key after compaction into the last level: %d versions; want none", len(got))
	}
}
