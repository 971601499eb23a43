package statelog

import (
	"github.com/weirstream/weir/changelog"

	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// The read cache never serves a value Badger no longer holds: reads after
// a commit, a restore's Apply, a deletion and a dropped partition see the
// database as it is, including keys first read as absent.
func TestReadCacheStaysCoherent(t *testing.T) {
	t.Parallel()
	db, err := Open(t.TempDir(), changelog.Options{ReadCacheBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	s := db.Space("counts", 0)
	want := func(key, value string, found bool) {
		t.Helper()
		v, err := s.Get([]byte(key))
		if err != nil {
			t.Fatal(err)
		}
		if (v != nil) != found || string(v) != value {
			t.Fatalf("Get(%q) = %q (found %v), want %q (found %v)", key, v, v != nil, value, found)
		}
	}
	commit := func(entries ...Entry) {
		t.Helper()
		c := db.NewCommit()
		if err := c.Stage(s, entries); err != nil {
			t.Fatal(err)
		}
		c.Checkpoint(s, 1, time.Now())
		if err := c.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	want("a", "", false) // cached as absent
	commit(Entry{Key: []byte("a"), Value: []byte("1")})
	want("a", "1", true)
	want("a", "1", true) // from the cache
	commit(Entry{Key: []byte("a"), Value: []byte("2")}, Entry{Key: []byte("b"), Value: []byte("x")})
	want("a", "2", true)
	want("b", "x", true)
	commit(Entry{Key: []byte("b"), Deleted: true})
	want("b", "", false)
	// A restore writes through Apply.
	if err := s.Apply([]Entry{{Key: []byte("a"), Value: []byte("3")}, {Key: []byte("c"), Value: []byte("y")}}); err != nil {
		t.Fatal(err)
	}
	want("a", "3", true)
	want("c", "y", true)
	if err := s.Drop(); err != nil {
		t.Fatal(err)
	}
	want("a", "", false)
	want("c", "", false)
	// A cancelled commit changes nothing.
	c := db.NewCommit()
	if err := c.Stage(s, []Entry{{Key: []byte("a"), Value: []byte("never")}}); err != nil {
		t.Fatal(err)
	}
	c.Cancel()
	want("a", "", false)
}

// A read that missed and read the database before a write of its key
// does not put the value it read in the cache after the write: a store
// view reading beside the owning task's commits must not leave the task
// an old value to count from.
func TestReadCacheRefusesStaleFills(t *testing.T) {
	t.Parallel()
	c := newReadCache(1 << 20)
	key := []byte("k")
	for _, write := range []struct {
		name string
		do   func()
	}{
		{"commit", func() { c.put(key, local{val: []byte("new")}, false) }},
		{"restore", func() { c.forget(key) }},
		{"drop", func() { c.clear() }},
	} {
		c.clear()
		_, _, ok, stamp := c.get(key)
		if ok {
			t.Fatalf("%s: the key is cached before any read", write.name)
		}
		// The reader read "old" from the database; the write lands before
		// the reader fills.
		write.do()
		c.fill(key, local{val: []byte("old")}, false, stamp)
		if v, _, ok, _ := c.get(key); ok && string(v.val) == "old" {
			t.Errorf("%s: a fill from before the write was kept", write.name)
		}
	}
	// Without a write between the miss and the fill, the fill is kept;
	// a write to another key of another stripe does not prevent it.
	c.clear()
	_, _, _, stamp := c.get(key)
	for i := 0; ; i++ {
		other := []byte(fmt.Sprintf("other-%d", i))
		if c.stripe(other) != c.stripe(key) {
			c.put(other, local{val: []byte("x")}, false)
			break
		}
	}
	c.fill(key, local{val: []byte("v")}, false, stamp)
	if v, _, ok, _ := c.get(key); !ok || string(v.val) != "v" {
		t.Errorf("a fill with no write of its key since the miss was not kept: %q, %v", v.val, ok)
	}
}

func TestReadCacheIsBounded(t *testing.T) {
	t.Parallel()
	const limit = 64 << 10
	c := newReadCache(limit)
	for i := range 10_000 {
		c.put([]byte(fmt.Sprintf("key-%05d", i)), local{val: make([]byte, 100)}, false)
		if c.size > limit {
			t.Fatalf("after %d entries the cache holds %d bytes, over its limit %d", i+1, c.size, limit)
		}
	}
	if _, _, ok, _ := c.get([]byte("key-00000")); ok {
		t.Error("the oldest entry was kept")
	}
	if _, _, ok, _ := c.get([]byte("key-09999")); !ok {
		t.Error("the newest entry was evicted")
	}
	// A value larger than an eighth of the cache is not kept.
	c.put([]byte("huge"), local{val: make([]byte, limit/4)}, false)
	if _, _, ok, _ := c.get([]byte("huge")); ok {
		t.Error("a huge value was cached")
	}
}

// With the cache off the database reads Badger every time and stays right.
func TestReadCacheOff(t *testing.T) {
	t.Parallel()
	db, err := Open(t.TempDir(), changelog.Options{ReadCacheBytes: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if db.cache != nil {
		t.Fatal("a cache exists with ReadCacheBytes -1")
	}
	s := db.Space("s", 0)
	if err := s.Put([]byte("k"), []byte("v")); err != nil {
		t.Fatal(err)
	}
	if v, _ := s.Get([]byte("k")); string(v) != "v" {
		t.Fatalf("Get = %q", v)
	}
}

// TestReadCacheEvictsLikeAModel: over random reads, writes, forgets and
// clears, the cache holds what a plain list in order of use would, bounded
// by bytes, evicting the least recently used first; slots freed by
// evictions and forgets are taken again.
func TestReadCacheEvictsLikeAModel(t *testing.T) {
	t.Parallel()
	const limit = 40 * (cacheEntryOverhead + 8)
	c := newReadCache(limit)
	type kv struct{ key, val string }
	var model []kv // most recently used first
	cost := func(e kv) int { return len(e.key) + len(e.val) + cacheEntryOverhead }
	find := func(key string) int {
		return slices.IndexFunc(model, func(e kv) bool { return e.key == key })
	}
	rng := rand.New(rand.NewPCG(3, 7))
	for step := range 20_000 {
		key := fmt.Sprintf("k%03d", rng.IntN(120))
		switch op := rng.IntN(100); {
		case op < 50:
			v, _, ok, _ := c.get([]byte(key))
			i := find(key)
			if ok != (i >= 0) {
				t.Fatalf("step %d: get(%s) found %v, model %v", step, key, ok, i >= 0)
			}
			if ok {
				if string(v.val) != model[i].val {
					t.Fatalf("step %d: get(%s) = %q, model %q", step, key, v.val, model[i].val)
				}
				e := model[i]
				model = append([]kv{e}, slices.Delete(model, i, i+1)...)
			}
		case op < 90:
			e := kv{key, fmt.Sprintf("v%d", rng.IntN(1000))}
			c.put([]byte(e.key), local{val: []byte(e.val)}, false)
			if i := find(key); i >= 0 {
				model = slices.Delete(model, i, i+1)
			}
			model = append([]kv{e}, model...)
			size := 0
			for _, e := range model {
				size += cost(e)
			}
			for size > limit {
				size -= cost(model[len(model)-1])
				model = model[:len(model)-1]
			}
		case op < 99:
			c.forget([]byte(key))
			if i := find(key); i >= 0 {
				model = slices.Delete(model, i, i+1)
			}
		default:
			c.clear()
			model = nil
		}
		if len(c.items) != len(model) {
			t.Fatalf("step %d: the cache holds %d keys, the model %d", step, len(c.items), len(model))
		}
		i, ok := c.order.Front()
		for _, e := range model {
			if !ok || c.order.At(i).key != e.key {
				t.Fatalf("step %d: the order of use differs from the model at %s", step, e.key)
			}
			i, ok = c.order.Next(i)
		}
	}
	if c.order.Slots() > 60 {
		t.Errorf("%d slots for at most %d entries: freed slots are not taken again", c.order.Slots(), limit/cacheEntryOverhead)
	}
}
