package statelog

import (
	"github.com/weirstream/weir/changelog"

	"fmt"
	"iter"
	"slices"
	"strings"
)

// Base is committed state under a write buffer: a Bytes that can apply a
// set of changes at once. *Space and *Memory are Bases.
type Base interface {
	Bytes
	Apply(entries []Entry) error
}

// Buffer is a store partition as its task sees it: the changes made since
// the last commit, over the committed state. Reads and scans see the
// changes merged with the base; a deleted key hides the base's value.
//
// Each key is kept once however often it changes, so a commit sends one
// changelog record per changed key. The buffer's size (keys and values of
// the changed entries) is tracked so the runtime can commit early when it
// passes its bound. Not safe for concurrent use: it belongs to one task.
type Buffer struct {
	base Base
	// index finds a key's entry in ents: one hash per read or write of a
	// key, and none for a commit's walk over the changes. An entry stays
	// until Clear; a deletion is an entry.
	index   map[string]int32
	ents    []bufEntry
	sorted  []int32 // ents in key order, without pending
	pending []int32 // ents added since sorted was last merged
	size    int
	peak    int // the most entries index has held since it was made
	// changes is what Changes returned, until the next change: a commit
	// asks twice (the changelog, then the database).
	changes []Entry
}

type bufEntry struct {
	key     string
	value   []byte
	deleted bool
	stamped bool
	ts      int64
}

var _ Bytes = (*Buffer)(nil)

// NewBuffer returns an empty buffer over base.
func NewBuffer(base Base) *Buffer {
	return &Buffer{base: base, index: map[string]int32{}}
}

// Get implements Bytes.
func (b *Buffer) Get(key []byte) ([]byte, error) {
	if i, ok := b.index[string(key)]; ok {
		e := &b.ents[i]
		if e.deleted {
			return nil, nil
		}
		return slices.Clone(nonNil(e.value)), nil
	}
	return b.base.Get(key)
}

// GetStamped implements Bytes.
func (b *Buffer) GetStamped(key []byte) ([]byte, int64, bool, error) {
	if i, ok := b.index[string(key)]; ok {
		e := &b.ents[i]
		if e.deleted {
			return nil, 0, false, nil
		}
		return slices.Clone(nonNil(e.value)), e.ts, e.stamped, nil
	}
	return b.base.GetStamped(key)
}

func nonNil(v []byte) []byte {
	if v == nil {
		return []byte{}
	}
	return v
}

func checkKey(key []byte) error {
	if len(key) > changelog.MaxKeyBytes {
		return fmt.Errorf("%w: a key of %d bytes is over the limit of %d (Badger's is %d with the store's prefix)", changelog.ErrKeyTooLarge, len(key), changelog.MaxKeyBytes, badgerMaxKey)
	}
	return nil
}

// Put implements Bytes. It refuses a key longer than changelog.MaxKeyBytes.
func (b *Buffer) Put(key, value []byte) error {
	if err := checkKey(key); err != nil {
		return err
	}
	b.set(key, bufEntry{value: append([]byte{}, value...)})
	return nil
}

// PutStamped implements Bytes. It refuses a key longer than
// changelog.MaxKeyBytes.
func (b *Buffer) PutStamped(key, value []byte, ts int64) error {
	if err := checkKey(key); err != nil {
		return err
	}
	b.set(key, bufEntry{value: append([]byte{}, value...), stamped: true, ts: ts})
	return nil
}

// Delete implements Bytes. The deletion is buffered even when the key is
// absent from the base, so the changelog gets a tombstone for it. It
// refuses a key longer than changelog.MaxKeyBytes.
func (b *Buffer) Delete(key []byte) error {
	if err := checkKey(key); err != nil {
		return err
	}
	b.set(key, bufEntry{deleted: true})
	return nil
}

// set makes e key's entry: in place when the key has one, which costs
// neither a second hash nor a copy of the key.
func (b *Buffer) set(key []byte, e bufEntry) {
	b.changes = nil
	if i, ok := b.index[string(key)]; ok {
		old := &b.ents[i]
		b.size += len(e.value) - len(old.value)
		e.key = old.key
		*old = e
		return
	}
	e.key = string(key)
	i := int32(len(b.ents))
	b.ents = append(b.ents, e)
	b.index[e.key] = i
	b.pending = append(b.pending, i)
	b.size += len(e.key) + len(e.value)
}

// order returns the buffered entries' indexes in key order, folding in
// pending ones.
func (b *Buffer) order() []int32 {
	if len(b.pending) > 0 {
		slices.SortFunc(b.pending, func(x, y int32) int { return strings.Compare(b.ents[x].key, b.ents[y].key) })
		b.sorted = b.mergeSorted(b.sorted, b.pending)
		b.pending = b.pending[:0]
	}
	return b.sorted
}

// mergeSorted merges two lists of entries in key order.
func (b *Buffer) mergeSorted(a, c []int32) []int32 {
	out := make([]int32, 0, len(a)+len(c))
	i, j := 0, 0
	for i < len(a) && j < len(c) {
		if b.ents[a[i]].key <= b.ents[c[j]].key {
			out = append(out, a[i])
			i++
		} else {
			out = append(out, c[j])
			j++
		}
	}
	out = append(out, a[i:]...)
	return append(out, c[j:]...)
}

// Size is the bytes of keys and values buffered.
func (b *Buffer) Size() int { return b.size }

// Len is the number of keys buffered.
func (b *Buffer) Len() int { return len(b.ents) }

// Changes returns the buffered changes sorted by key. The slices stay
// valid until the buffer is cleared. Calls without a change between them
// return the same entries: callers must not modify them.
func (b *Buffer) Changes() []Entry {
	if b.changes != nil || len(b.ents) == 0 {
		return b.changes
	}
	order := b.order()
	out := make([]Entry, len(order))
	for i, j := range order {
		e := &b.ents[j]
		out[i] = Entry{Key: []byte(e.key), Value: e.value, Deleted: e.deleted, Stamped: e.stamped, Time: e.ts}
	}
	b.changes = out
	return out
}

// Flush writes the changes to the base and empties the buffer.
func (b *Buffer) Flush() error {
	if len(b.ents) == 0 {
		return nil
	}
	if err := b.base.Apply(b.Changes()); err != nil {
		return err
	}
	b.Clear()
	return nil
}

// retainKeys is the most keys a buffer always keeps its map and slices
// for when Clear empties it. Above it, Clear keeps them while the interval
// that ends held at least a quarter of the most keys the map ever held,
// and makes new ones after an interval that held fewer. Reusing them saves
// growing them again every interval, which a task changing many keys per
// interval (a store larger than its caches) would pay at every commit; but
// Go maps never shrink, so a buffer that once held a million keys (a
// burst, a restore-sized interval) would otherwise pin that peak, about 90
// bytes per key for the map alone (on Go 1.27, measured), for the task's
// life. At 1024 keys what is always kept is about 120 KiB per store
// partition (map and key slices).
const retainKeys = 1024

// Clear drops the changes: what an aborted commit does.
func (b *Buffer) Clear() {
	n := len(b.ents)
	b.peak = max(b.peak, n)
	if b.peak > retainKeys && n < b.peak/4 { // the slices grow only with the map
		b.index, b.ents, b.sorted, b.pending, b.size, b.peak, b.changes = map[string]int32{}, nil, nil, nil, 0, 0, nil
		return
	}
	b.changes = nil
	clear(b.index)
	clear(b.ents) // lets the values go
	b.ents, b.sorted, b.pending, b.size = b.ents[:0], b.sorted[:0], b.pending[:0], 0
}

// Range implements Bytes. Changes made during the loop are not seen by it.
func (b *Buffer) Range(lo, hi []byte) iter.Seq2[[]byte, []byte] { return b.merge(lo, hi, false) }

// Backward implements Bytes.
func (b *Buffer) Backward(lo, hi []byte) iter.Seq2[[]byte, []byte] { return b.merge(lo, hi, true) }

// merge walks the buffered keys in range together with the base's,
// preferring the buffer's entry for a key both hold.
func (b *Buffer) merge(lo, hi []byte, reverse bool) iter.Seq2[[]byte, []byte] {
	lo, hi = cloneBound(lo), cloneBound(hi)
	order := b.order()
	search := func(bound []byte) int {
		i, _ := slices.BinarySearchFunc(order, string(bound), func(j int32, t string) int { return strings.Compare(b.ents[j].key, t) })
		return i
	}
	from, to := 0, len(order)
	if lo != nil {
		from = search(lo)
	}
	if hi != nil {
		to = search(hi)
	}
	snap := make([]bufEntry, 0, max(to-from, 0))
	for _, j := range order[from:max(from, to)] {
		snap = append(snap, b.ents[j])
	}
	if reverse {
		slices.Reverse(snap)
	}
	return func(yield func([]byte, []byte) bool) {
		baseSeq := b.base.Range(lo, hi)
		if reverse {
			baseSeq = b.base.Backward(lo, hi)
		}
		next, stop := iter.Pull2(baseSeq)
		defer stop()
		bk, bv, bok := next()
		i := 0
		// before reports whether buffer key k comes before base key x in
		// the walk's direction.
		before := func(k string, x []byte) int {
			c := strings.Compare(k, string(x))
			if reverse {
				return -c
			}
			return c
		}
		for i < len(snap) || bok {
			if i < len(snap) && (!bok || before(snap[i].key, bk) <= 0) {
				if bok && snap[i].key == string(bk) {
					bk, bv, bok = next() // the buffer's entry replaces the base's
				}
				e := snap[i]
				i++
				if e.deleted {
					continue
				}
				if !yield([]byte(e.key), slices.Clone(nonNil(e.value))) {
					return
				}
				continue
			}
			if !yield(bk, bv) {
				return
			}
			bk, bv, bok = next()
		}
	}
}

// Err implements Bytes.
func (b *Buffer) Err() error { return b.base.Err() }

// Apply makes Memory a Base.
func (m *Memory) Apply(entries []Entry) error {
	for _, e := range entries {
		switch {
		case e.Deleted:
			m.Delete(e.Key)
		case e.Stamped:
			m.PutStamped(e.Key, e.Value, e.Time)
		default:
			m.Put(e.Key, e.Value)
		}
	}
	return nil
}

// compile-time checks
var (
	_ Base = (*Memory)(nil)
	_ Base = (*Space)(nil)
)
