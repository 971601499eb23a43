package statelog

import (
	"github.com/weirstream/weir/changelog"

	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
)

func collect(seq func(func([]byte, []byte) bool)) []string {
	var out []string
	for k, v := range seq {
		out = append(out, string(k)+"="+string(v))
	}
	return out
}

func TestBufferMergesWithBase(t *testing.T) {
	t.Parallel()
	base := &Memory{}
	for _, k := range []string{"a", "c", "e", "g"} {
		base.Put([]byte(k), []byte("base-"+k))
	}
	b := NewBuffer(base)
	b.Put([]byte("b"), []byte("buf-b")) // new key between base keys
	b.Put([]byte("c"), []byte("buf-c")) // overrides the base
	b.Delete([]byte("e"))               // hides the base
	b.Delete([]byte("z"))               // absent everywhere: a tombstone only
	b.Put([]byte("h"), []byte("buf-h")) // after every base key

	if v, _ := b.Get([]byte("c")); string(v) != "buf-c" {
		t.Errorf("Get(c) = %q", v)
	}
	if v, _ := b.Get([]byte("e")); v != nil {
		t.Errorf("Get(e) = %q, want deleted", v)
	}
	if v, _ := b.Get([]byte("g")); string(v) != "base-g" {
		t.Errorf("Get(g) = %q", v)
	}
	want := []string{"a=base-a", "b=buf-b", "c=buf-c", "g=base-g", "h=buf-h"}
	if got := collect(b.Range(nil, nil)); !slices.Equal(got, want) {
		t.Errorf("Range = %v\nwant    %v", got, want)
	}
	slices.Reverse(want)
	if got := collect(b.Backward(nil, nil)); !slices.Equal(got, want) {
		t.Errorf("Backward = %v\nwant       %v", got, want)
	}
	if got := collect(b.Range([]byte("b"), []byte("g"))); !slices.Equal(got, []string{"b=buf-b", "c=buf-c"}) {
		t.Errorf("Range[b,g) = %v", got)
	}
	// The base is untouched until Flush.
	if v, _ := base.Get([]byte("c")); string(v) != "base-c" {
		t.Fatalf("base changed before flush: %q", v)
	}
	changes := b.Changes()
	if len(changes) != 5 || string(changes[0].Key) != "b" || !changes[4].Deleted || string(changes[4].Key) != "z" {
		t.Errorf("Changes = %+v", changes)
	}
	if err := b.Flush(); err != nil {
		t.Fatal(err)
	}
	if b.Len() != 0 || b.Size() != 0 {
		t.Errorf("buffer not empty after flush: %d keys, %d bytes", b.Len(), b.Size())
	}
	if got := collect(base.Range(nil, nil)); !slices.Equal(got, []string{"a=base-a", "b=buf-b", "c=buf-c", "g=base-g", "h=buf-h"}) {
		t.Errorf("base after flush = %v", got)
	}
}

func TestBufferDedupsAndClears(t *testing.T) {
	t.Parallel()
	base := &Memory{}
	base.Put([]byte("k"), []byte("committed"))
	b := NewBuffer(base)
	for i := range 100 {
		b.Put([]byte("k"), []byte(fmt.Sprint(i)))
	}
	if b.Len() != 1 || len(b.Changes()) != 1 || string(b.Changes()[0].Value) != "99" {
		t.Fatalf("100 writes of one key gave %d changes: %+v", b.Len(), b.Changes())
	}
	if b.Size() != len("k")+len("99") {
		t.Errorf("Size = %d, want %d", b.Size(), len("k")+len("99"))
	}
	b.Clear() // an aborted commit
	if v, _ := b.Get([]byte("k")); string(v) != "committed" {
		t.Errorf("after Clear Get = %q, want the committed value", v)
	}
}

// TestBufferMatchesModel drives a buffer over a base and a plain model
// with the same random operations, flushing now and then, and compares
// every read and scan.
func TestBufferMatchesModel(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	base := &Memory{}
	b := NewBuffer(base)
	model := map[string]string{}
	key := func() []byte { return []byte{byte('a' + rng.IntN(12))} }
	for step := range 5000 {
		k := key()
		switch op := rng.IntN(10); {
		case op < 5:
			v := fmt.Sprint(step)
			b.Put(k, []byte(v))
			model[string(k)] = v
		case op < 7:
			b.Delete(k)
			delete(model, string(k))
		case op < 8:
			if err := b.Flush(); err != nil {
				t.Fatal(err)
			}
		default:
			lo, hi := key(), key()
			if string(lo) > string(hi) {
				lo, hi = hi, lo
			}
			var want []string
			for mk, mv := range model {
				if mk >= string(lo) && mk < string(hi) {
					want = append(want, mk+"="+mv)
				}
			}
			slices.Sort(want)
			if got := collect(b.Range(lo, hi)); !slices.Equal(got, want) {
				t.Fatalf("step %d: Range[%s,%s) = %v, want %v", step, lo, hi, got, want)
			}
			slices.Reverse(want)
			if got := collect(b.Backward(lo, hi)); !slices.Equal(got, want) {
				t.Fatalf("step %d: Backward[%s,%s) = %v, want %v", step, lo, hi, got, want)
			}
		}
		got, _ := b.Get(k)
		if mv, ok := model[string(k)]; ok != (got != nil) || ok && string(got) != mv {
			t.Fatalf("step %d: Get(%s) = %q, model %q (%v)", step, k, got, mv, ok)
		}
	}
}

// TestBufferClearLetsGoOfALargeBuffer pins a bug where Clear kept the map
// and key slices of a buffer at their peak size: after one commit interval
// that buffered very many keys, the task held that memory for good. A
// buffer keeps its map while its intervals use a quarter of it (no
// regrowing every interval, small or large), and gets a new map and gives
// up its key slices after an interval that used less.
func TestBufferClearLetsGoOfALargeBuffer(t *testing.T) {
	t.Parallel()
	mapID := func(b *Buffer) uintptr { return uintptr(reflect.ValueOf(b.index).UnsafePointer()) }
	fill := func(b *Buffer, n int) {
		for i := range n {
			b.Put([]byte(fmt.Sprintf("k%07d", i)), []byte("v"))
		}
		b.Changes() // sorts the keys, as a commit does
	}
	b := NewBuffer(&Memory{})

	fill(b, retainKeys)
	small := mapID(b)
	b.Clear()
	if mapID(b) != small {
		t.Errorf("Clear of %d keys replaced the map; want it reused", retainKeys)
	}

	fill(b, 100*retainKeys)
	large := mapID(b)
	b.Clear()
	fill(b, 30*retainKeys)
	if mapID(b) != large {
		t.Errorf("an interval of %d keys after one of %d got a new map; want it reused", 30*retainKeys, 100*retainKeys)
	}
	b.Clear()
	fill(b, retainKeys)
	b.Clear()
	if mapID(b) == large {
		t.Errorf("Clear of %d keys after intervals of %d kept the map at its peak size", retainKeys, 100*retainKeys)
	}
	if cap(b.sorted) > retainKeys || cap(b.pending) > retainKeys {
		t.Errorf("Clear of %d keys kept key slices of capacity %d and %d; want at most %d",
			retainKeys, cap(b.sorted), cap(b.pending), retainKeys)
	}
	// The buffer works on after the swap.
	b.Put([]byte("a"), []byte("1"))
	if v, _ := b.Get([]byte("a")); string(v) != "1" || b.Len() != 1 || len(b.Changes()) != 1 {
		t.Errorf("after Clear: Get = %q, Len = %d, Changes = %+v", v, b.Len(), b.Changes())
	}
}

// A key Badger could not hold is refused when it is put, so it never
// reaches the changelog (which every later restore would then fail on).
func TestBufferRefusesKeysBadgerCannotHold(t *testing.T) {
	t.Parallel()
	db, err := Open("", changelog.Options{InMemory: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	b := NewBuffer(db.Space("s", 0))
	long := bytes.Repeat([]byte("k"), changelog.MaxKeyBytes+1)
	if err := b.Put(long, []byte("v")); !errors.Is(err, changelog.ErrKeyTooLarge) || strings.Contains(err.Error(), "kkkk") {
		t.Fatalf("Put of a %d-byte key = %v; want changelog.ErrKeyTooLarge, without the key", len(long), err)
	}
	if err := b.Delete(long); !errors.Is(err, changelog.ErrKeyTooLarge) {
		t.Fatalf("Delete = %v", err)
	}
	if b.Len() != 0 || len(b.Changes()) != 0 {
		t.Fatalf("the refused key was buffered: %d changes", len(b.Changes()))
	}
	if err := b.Put(long[:changelog.MaxKeyBytes], []byte("v")); err != nil {
		t.Fatalf("Put of a %d-byte key: %v", changelog.MaxKeyBytes, err)
	}
	if err := b.Flush(); err != nil {
		t.Fatalf("the longest key taken does not fit in Badger: %v", err)
	}
}

// Changes made once serve the commit's two readers (the changelog and the
// database), and a change after them is seen by the next call.
func TestBufferChangesFollowEveryChange(t *testing.T) {
	t.Parallel()
	b := NewBuffer(&Memory{})
	keys := func() []string {
		var out []string
		for _, e := range b.Changes() {
			s := string(e.Key)
			if e.Deleted {
				s += "-"
			}
			out = append(out, s)
		}
		return out
	}
	b.Put([]byte("b"), []byte("1"))
	b.Put([]byte("a"), []byte("1"))
	first := b.Changes()
	if again := b.Changes(); &again[0] != &first[0] {
		t.Errorf("a second call without a change made the changes again")
	}
	b.Delete([]byte("c"))
	if got := keys(); !slices.Equal(got, []string{"a", "b", "c-"}) {
		t.Errorf("after a Delete: %v", got)
	}
	b.PutStamped([]byte("a"), []byte("2"), 5)
	if c := b.Changes(); string(c[0].Value) != "2" || !c[0].Stamped || c[0].Time != 5 {
		t.Errorf("after a PutStamped of a held key: %+v", c[0])
	}
	b.Clear()
	if got := keys(); len(got) != 0 {
		t.Errorf("after Clear: %v", got)
	}
	b.Put([]byte("z"), []byte("1"))
	if got := keys(); !slices.Equal(got, []string{"z"}) {
		t.Errorf("after Clear and a Put: %v", got)
	}
}
