package processor

import (
	"errors"
	"fmt"
	"iter"
	"time"

	"github.com/weirstream/weir/internal/graph"
	"github.com/weirstream/weir/internal/statelog"
	"github.com/weirstream/weir/serde"
)

// Windowed names a window of a [WindowStore] or a session of a
// [SessionStore]: a key and a time span, kept to the millisecond (times
// are rounded down, toward the past) and returned in UTC.
//
// For a window, End is Start plus the store's window size, excluded: the
// window holds the records with Start <= timestamp < End (Kafka Streams'
// TimeWindow). For a session, Start and End are the times of its first and
// last records, both included (Kafka Streams' SessionWindow).
type Windowed[K any] struct {
	Key        K
	Start, End time.Time
}

// WindowStore is a typed window store: values kept per key and window
// start, for windows of a fixed size, retained for a fixed time after they
// start. It corresponds to Kafka Streams' WindowStore without duplicates
// (Stores.persistentWindowStore with retainDuplicates false).
//
// Times are kept to the millisecond: every time given is rounded down
// (toward the past), and every time returned is a whole millisecond in
// UTC. Keys are ordered by their serialized bytes (bytes.Compare), as in a
// [KeyValueStore]. Keys and values returned or yielded are decoded from
// copies and belong to the caller.
//
// # Retention
//
// A window that starts before the task's stream time minus the store's
// retention is expired: reads skip it, a Put of it fails with an error
// wrapping changelog.ErrExpired, and it is deleted. Every read and
// write first brings the store up to the task's current stream time
// ([Context.StreamTime]) if it advanced since the last one: deleting the
// windows that expired costs two writes each (one tombstone in the
// changelog), all done by that one call. Before the task has a stream
// time (before its first record), nothing is expired.
//
// Writes are buffered and become durable at the task's next commit; reads
// see them at once. Each Put is one changelog record: the store's time
// index (for FetchAll and expiry) is kept locally and rebuilt on restore.
// The iterators read the store as they go, so collect what a loop finds
// before writing to the store. A WindowStore belongs to its task and is
// used from its goroutine only.
//
// While an input record with a null Kafka key is processed, Put of a key
// that serializes to nothing (serde.String's "") is dropped, and Fetch,
// FetchRange and FetchRangeBackward of it find nothing; FetchAll and All
// are unchanged, and so is expiry. See "Records with a null key" in the
// package documentation.
type WindowStore[K, V any] interface {
	// Put sets the value of key's window starting at windowStart. A window
	// that is already expired is not written and the error wraps
	// changelog.ErrExpired: the caller decides what that means, and a
	// windowed aggregation drops the record and counts it as late (Kafka
	// Streams' dropped-records metric).
	Put(key K, windowStart time.Time, value V) error
	// Fetch returns the value of key's window starting at windowStart and
	// whether it exists; an expired window does not.
	Fetch(key K, windowStart time.Time) (value V, found bool, err error)
	// FetchRange yields the start and value of each of key's windows that
	// start in [from, to], both ends included, in ascending order of
	// start. Kafka Streams' fetch(key, timeFrom, timeTo).
	FetchRange(key K, from, to time.Time) iter.Seq2[time.Time, V]
	// FetchRangeBackward yields the windows of FetchRange in descending
	// order of start. Kafka Streams' backwardFetch(key, timeFrom, timeTo).
	FetchRangeBackward(key K, from, to time.Time) iter.Seq2[time.Time, V]
	// PutStamped is Put with the value's timestamp, kept to the
	// millisecond (see KeyValueStore.PutStamped).
	PutStamped(key K, windowStart time.Time, value V, ts time.Time) error
	// FetchStamped is Fetch with the timestamp PutStamped gave the value,
	// the zero time when it has none. Kafka Streams'
	// TimestampedWindowStore.fetch.
	FetchStamped(key K, windowStart time.Time) (value V, ts time.Time, found bool, err error)
	// FetchAll yields the windows of every key that start in [from, to],
	// both ends included, ordered by start, then by serialized key. Kafka
	// Streams' fetchAll(timeFrom, timeTo).
	FetchAll(from, to time.Time) iter.Seq2[Windowed[K], V]
	// All yields every window, ordered by serialized key, then by start.
	// Kafka Streams' all(), which orders by time instead.
	All() iter.Seq2[Windowed[K], V]
	// Err returns the first error met by an iteration since the last call
	// (a read, decode or expiry failure ends the iteration early) and
	// clears it.
	Err() error
}

// WindowSpec declares a window store with its serdes. Create one with
// [Window].
type WindowSpec[K, V any] struct {
	name      string
	size      time.Duration
	retention time.Duration
	keys      serde.Serde[K]
	values    serde.Serde[V]
}

// Window declares a window store named name, for windows size long,
// retained for retention after they start. size must be a whole number of
// milliseconds, at least one; retention must be at least size, and should
// cover the window size plus the grace period of the windows stored, or
// late records that the grace period admits are refused as expired. Kafka
// Streams' Stores.persistentWindowStore(name, retention, size, false).
//
// Its changelog topic (see [StoreSpec]) is created with
// cleanup.policy=compact,delete and retention.ms of retention plus a day,
// so Kafka drops what the store has expired. A spec that breaks these
// bounds makes Open fail, naming the store.
func Window[K, V any](name string, size, retention time.Duration, keys serde.Serde[K], values serde.Serde[V]) *WindowSpec[K, V] {
	return &WindowSpec[K, V]{name: name, size: size, retention: retention, keys: keys, values: values}
}

// Name implements StoreSpec.
func (s *WindowSpec[K, V]) Name() string { return s.name }

// Size returns the window size given to [Window].
func (s *WindowSpec[K, V]) Size() time.Duration { return s.size }

// Retention returns the retention given to [Window].
func (s *WindowSpec[K, V]) Retention() time.Duration { return s.retention }

func (s *WindowSpec[K, V]) graphStore() *graph.Store {
	return &graph.Store{Name: s.name, Kind: graph.WindowStore, Retention: s.retention}
}

func (s *WindowSpec[K, V]) validate() error {
	var errs []error
	if s.keys == nil || s.values == nil {
		errs = append(errs, fmt.Errorf("processor: store %q: nil serde", s.name))
	}
	if s.size < time.Millisecond || s.size%time.Millisecond != 0 {
		errs = append(errs, fmt.Errorf("processor: store %q: window size %v is not a positive whole number of milliseconds", s.name, s.size))
	}
	if s.retention < s.size {
		errs = append(errs, fmt.Errorf("processor: store %q: retention %v is shorter than the window size %v", s.name, s.retention, s.size))
	}
	return errors.Join(errs...)
}

// Open returns the task's partition of the store; call it from Init of a
// processor the store is attached to. It fails, naming the store, if the
// spec is invalid (see [Window]). The store follows the stream time of
// ctx (see [WindowStore]).
func (s *WindowSpec[K, V]) Open(ctx StoreContext) (WindowStore[K, V], error) {
	if err := s.validate(); err != nil {
		return nil, err
	}
	b, err := ctx.storeBytes(s.name)
	if err != nil {
		return nil, err
	}
	w, err := statelog.NewWindowBytes(b, s.retention, s.size)
	if err != nil {
		return nil, fmt.Errorf("processor: store %q: %w", s.name, err)
	}
	st := &windowStore[K, V]{codec: codec[K, V]{name: s.name, keys: s.keys, values: s.values}, w: w, size: s.size, nulls: nullKeysOf(b)}
	st.clock.init(ctx, w.Expire)
	return st, nil
}

// expiryClock drives a byte store's Expire from the task's stream time,
// once per advance.
type expiryClock struct {
	// src is the Context the store was opened with. Every Context has a
	// StreamTime; a StoreContext that lacks one leaves src nil, and the
	// store then never expires anything.
	src    interface{ StreamTime() time.Time }
	expire func(time.Time) (int, error)
	last   time.Time // the stream time of the last successful Expire
}

func (c *expiryClock) init(ctx StoreContext, expire func(time.Time) (int, error)) {
	c.src, _ = ctx.(interface{ StreamTime() time.Time })
	c.expire = expire
}

// advance expires what the stream time's advance since the last call
// makes expired. Stream time starts at the zero time and never goes back,
// so a zero or unchanged stream time costs one comparison. After an error
// the next call tries again.
func (c *expiryClock) advance(store string) error {
	if c.src == nil {
		return nil
	}
	now := c.src.StreamTime()
	if !now.After(c.last) {
		return nil
	}
	if _, err := c.expire(now); err != nil {
		return fmt.Errorf("store %s: expire: %w", store, err)
	}
	c.last = now
	return nil
}

// windowStore puts serdes over a WindowBytes. The serdes see the store's
// name as their topic.
type windowStore[K, V any] struct {
	codec[K, V]
	w     *statelog.WindowBytes
	size  time.Duration
	clock expiryClock
	// nulls is asked about the user key: w's byte keys put a prefix before
	// it and the start after it, so the Bytes under w never sees it alone.
	nulls nullKeys
}

func (s *windowStore[K, V]) Put(key K, windowStart time.Time, value V) error {
	return s.put(key, windowStart, value, nil)
}

func (s *windowStore[K, V]) PutStamped(key K, windowStart time.Time, value V, ts time.Time) error {
	ms := ts.UnixMilli()
	return s.put(key, windowStart, value, &ms)
}

// put is Put, with the value's timestamp in milliseconds when ms is not
// nil.
func (s *windowStore[K, V]) put(key K, windowStart time.Time, value V, ms *int64) error {
	if err := s.clock.advance(s.name); err != nil {
		return err
	}
	kb, err := s.key(key)
	if err != nil {
		return err
	}
	if s.nulls.drop(kb) {
		return nil
	}
	vb, err := s.value(value)
	if err != nil {
		return err
	}
	if vb == nil {
		vb = []byte{} // a nil value would delete the window
	}
	if ms != nil {
		err = s.w.PutStamped(kb, windowStart, vb, *ms)
	} else {
		err = s.w.Put(kb, windowStart, vb)
	}
	if err != nil {
		return fmt.Errorf("store %s: %w", s.name, err)
	}
	return nil
}

func (s *windowStore[K, V]) Fetch(key K, windowStart time.Time) (V, bool, error) {
	v, _, found, err := s.FetchStamped(key, windowStart)
	return v, found, err
}

func (s *windowStore[K, V]) FetchStamped(key K, windowStart time.Time) (V, time.Time, bool, error) {
	var zero V
	if err := s.clock.advance(s.name); err != nil {
		return zero, time.Time{}, false, err
	}
	kb, err := s.key(key)
	if err != nil {
		return zero, time.Time{}, false, err
	}
	if s.nulls.miss(kb) {
		return zero, time.Time{}, false, nil
	}
	vb, ms, stamped, err := s.w.FetchStamped(kb, windowStart)
	if err != nil || vb == nil {
		return zero, time.Time{}, false, err
	}
	v, err := s.decodeValue(vb)
	if err != nil {
		return zero, time.Time{}, false, err
	}
	return v, stampTime(ms, stamped), true, nil
}

func (s *windowStore[K, V]) FetchRange(key K, from, to time.Time) iter.Seq2[time.Time, V] {
	return s.fetchRange(key, from, to, s.w.FetchRange)
}

func (s *windowStore[K, V]) FetchRangeBackward(key K, from, to time.Time) iter.Seq2[time.Time, V] {
	return s.fetchRange(key, from, to, s.w.FetchRangeBackward)
}

func (s *windowStore[K, V]) fetchRange(key K, from, to time.Time, scan func([]byte, time.Time, time.Time) iter.Seq2[time.Time, []byte]) iter.Seq2[time.Time, V] {
	return func(yield func(time.Time, V) bool) {
		if err := s.clock.advance(s.name); err != nil {
			s.fail(err)
			return
		}
		kb, err := s.key(key)
		if err != nil {
			s.fail(err)
			return
		}
		if s.nulls.miss(kb) {
			return
		}
		defer s.drain()
		for start, vb := range scan(kb, from, to) {
			v, err := s.decodeValue(vb)
			if err != nil {
				s.fail(err)
				return
			}
			if !yield(start, v) {
				return
			}
		}
	}
}

func (s *windowStore[K, V]) FetchAll(from, to time.Time) iter.Seq2[Windowed[K], V] {
	return func(yield func(Windowed[K], V) bool) {
		if err := s.clock.advance(s.name); err != nil {
			s.fail(err)
			return
		}
		s.decode(s.w.FetchAll(from, to), yield)
	}
}

func (s *windowStore[K, V]) All() iter.Seq2[Windowed[K], V] {
	return func(yield func(Windowed[K], V) bool) {
		if err := s.clock.advance(s.name); err != nil {
			s.fail(err)
			return
		}
		s.decode(s.w.All(), yield)
	}
}

// decode yields the windows of seq with their keys and values decoded.
func (s *windowStore[K, V]) decode(seq iter.Seq2[statelog.WindowKey, []byte], yield func(Windowed[K], V) bool) {
	defer s.drain()
	for wk, vb := range seq {
		k, err := s.decodeKey(wk.Key)
		if err != nil {
			s.fail(err)
			return
		}
		v, err := s.decodeValue(vb)
		if err != nil {
			s.fail(err)
			return
		}
		if !yield(Windowed[K]{Key: k, Start: wk.Start, End: wk.Start.Add(s.size)}, v) {
			return
		}
	}
}

// drain moves an error the byte store's iterator met into s.err.
func (s *windowStore[K, V]) drain() {
	if err := s.w.Err(); err != nil {
		s.fail(fmt.Errorf("store %s: %w", s.name, err))
	}
}
