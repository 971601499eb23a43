package statelog

import (
	"bytes"
	"iter"
	"slices"
)

// Bytes is an ordered key-value view on byte keys: the layer every store
// of weir is built on. Keys sort as bytes (bytes.Compare).
//
// Slices passed in are not retained: implementations copy what they keep.
// Slices returned by Get and yielded by the iterators belong to the
// caller. An iterator stops cleanly when the loop breaks; an error met
// while iterating ends the iteration and is reported by Err.
//
// A Bytes is used by one goroutine at a time (its task's thread).
type Bytes interface {
	// Get returns the value of key, or nil when it is absent.
	Get(key []byte) ([]byte, error)
	// Put sets key to value. A nil value is stored as empty, not deleted.
	Put(key, value []byte) error
	// Delete removes key; deleting an absent key is not an error.
	Delete(key []byte) error
	// Range yields the entries with lo <= key < hi in ascending order. A nil
	// lo or hi leaves that side open.
	Range(lo, hi []byte) iter.Seq2[[]byte, []byte]
	// Backward yields the same entries as Range in descending order.
	Backward(lo, hi []byte) iter.Seq2[[]byte, []byte]
	// Err returns the first error an iterator met, and clears it.
	Err() error
	// GetStamped returns the value of key as Get does, and the timestamp
	// PutStamped gave it (milliseconds since the epoch); stamped is false
	// when the value has none: it was set by Put, or restored from a
	// changelog record written without one (before weir kept them).
	GetStamped(key []byte) (value []byte, ts int64, stamped bool, err error)
	// PutStamped sets key to value, as Put does, with its timestamp: the
	// event time of the update (Kafka Streams' ValueAndTimestamp). The
	// changelog record of the change carries it as its timestamp.
	PutStamped(key, value []byte, ts int64) error
}

// PrefixEnd returns the smallest key greater than every key that starts
// with prefix, or nil when there is none (prefix is all 0xff): the hi bound
// of a prefix scan.
func PrefixEnd(prefix []byte) []byte {
	end := slices.Clone(prefix)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return nil
}

// inRange reports lo <= k < hi with nil meaning open.
func inRange(k, lo, hi []byte) bool {
	return (lo == nil || bytes.Compare(k, lo) >= 0) && (hi == nil || bytes.Compare(k, hi) < 0)
}

// Memory is a Bytes held in memory: for tests and for stores that need no
// durability. Its zero value is empty and ready to use.
type Memory struct {
	keys [][]byte // sorted
	vals [][]byte
	// stamps holds the timestamps of the values put with one, by key.
	stamps map[string]int64
}

var _ Bytes = (*Memory)(nil)

func (m *Memory) find(key []byte) (int, bool) {
	return slices.BinarySearchFunc(m.keys, key, bytes.Compare)
}

// Get implements Bytes.
func (m *Memory) Get(key []byte) ([]byte, error) {
	if i, ok := m.find(key); ok {
		return slices.Clone(m.vals[i]), nil
	}
	return nil, nil
}

// GetStamped implements Bytes.
func (m *Memory) GetStamped(key []byte) ([]byte, int64, bool, error) {
	v, _ := m.Get(key)
	if v == nil {
		return nil, 0, false, nil
	}
	ts, ok := m.stamps[string(key)]
	return v, ts, ok, nil
}

// PutStamped implements Bytes.
func (m *Memory) PutStamped(key, value []byte, ts int64) error {
	m.set(key, value)
	if m.stamps == nil {
		m.stamps = map[string]int64{}
	}
	m.stamps[string(key)] = ts
	return nil
}

// Put implements Bytes.
func (m *Memory) Put(key, value []byte) error {
	m.set(key, value)
	delete(m.stamps, string(key))
	return nil
}

func (m *Memory) set(key, value []byte) {
	v := append([]byte{}, value...)
	i, ok := m.find(key)
	if ok {
		m.vals[i] = v
		return
	}
	m.keys = slices.Insert(m.keys, i, slices.Clone(key))
	m.vals = slices.Insert(m.vals, i, v)
}

// Delete implements Bytes.
func (m *Memory) Delete(key []byte) error {
	if i, ok := m.find(key); ok {
		m.keys = slices.Delete(m.keys, i, i+1)
		m.vals = slices.Delete(m.vals, i, i+1)
		delete(m.stamps, string(key))
	}
	return nil
}

// bounds returns the index range of [lo, hi).
func (m *Memory) bounds(lo, hi []byte) (int, int) {
	from, to := 0, len(m.keys)
	if lo != nil {
		from, _ = m.find(lo)
	}
	if hi != nil {
		to, _ = m.find(hi)
	}
	return from, max(from, to)
}

// Range implements Bytes. Changing m while iterating is allowed: the
// iterator works on a snapshot of the keys in range.
func (m *Memory) Range(lo, hi []byte) iter.Seq2[[]byte, []byte] {
	lo, hi = cloneBound(lo), cloneBound(hi)
	return func(yield func([]byte, []byte) bool) {
		from, to := m.bounds(lo, hi)
		keys, vals := slices.Clone(m.keys[from:to]), slices.Clone(m.vals[from:to])
		for i := range keys {
			if !yield(slices.Clone(keys[i]), slices.Clone(vals[i])) {
				return
			}
		}
	}
}

// Backward implements Bytes.
func (m *Memory) Backward(lo, hi []byte) iter.Seq2[[]byte, []byte] {
	lo, hi = cloneBound(lo), cloneBound(hi)
	return func(yield func([]byte, []byte) bool) {
		from, to := m.bounds(lo, hi)
		keys, vals := slices.Clone(m.keys[from:to]), slices.Clone(m.vals[from:to])
		for i := len(keys) - 1; i >= 0; i-- {
			if !yield(slices.Clone(keys[i]), slices.Clone(vals[i])) {
				return
			}
		}
	}
}

// Err implements Bytes; a Memory never fails.
func (m *Memory) Err() error { return nil }

// Len returns the number of entries.
func (m *Memory) Len() int { return len(m.keys) }
