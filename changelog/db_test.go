package changelog

import (
	"slices"
	"testing"
)

func TestSpacesAreIsolatedAndDurable(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db, err := Open(dir, Options{})
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

	db, err = Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	s1 = db.Space("a", 1)
	if off, ok, err := s1.Checkpoint(); err != nil || !ok || off != 42 {
		t.Errorf("checkpoint after reopen = %d, %v, %v", off, ok, err)
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
	if _, err := Open(t.TempDir(), Options{EncryptionKey: []byte("short")}); err == nil {
		t.Fatal("accepted a 5-byte key")
	}
	db, err := Open(t.TempDir(), Options{EncryptionKey: make([]byte, 32)})
	if err != nil {
		t.Fatal(err)
	}
	db.Close()
}

func TestBufferOverBadger(t *testing.T) {
	t.Parallel()
	db, err := Open("", Options{InMemory: true})
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
	db, err := Open("", Options{InMemory: true})
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
	want := map[Checkpoint]bool{{"counts", 3, 10}: true, {"c", 300, 7}: true, {"counts", 0, 1}: true}
	if len(got) != len(want) {
		t.Fatalf("Checkpoints = %+v", got)
	}
	for _, c := range got {
		if !want[c] {
			t.Errorf("unexpected checkpoint %+v", c)
		}
	}
	if n, err := s.Count(); err != nil || n != 3 {
		t.Errorf("Count = %d, %v; want 3", n, err)
	}
}
