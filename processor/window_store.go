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
	base      storeSpec[K, V]
	size      time.Duration
	retention time.Duration
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
	return &WindowSpec[K, V]{base: storeSpec[K, V]{name, keys, values}, size: size, retention: retention}
}

// Name implements StoreSpec.
func (s *WindowSpec[K, V]) Name() string { return s.base.name }

// Size returns the window size given to [Window].
func (s *WindowSpec[K, V]) Size() time.Duration { return s.size }

// Retention returns the retention given to [Window].
func (s *WindowSpec[K, V]) Retention() time.Duration { return s.retention }

func (s *WindowSpec[K, V]) graphStore() *graph.Store {
	return &graph.Store{Name: s.base.name, Kind: graph.WindowStore, Retention: s.retention}
}

func (s *WindowSpec[K, V]) validate() error {
	var short error
	if s.retention < s.size {
		short = fmt.Errorf("processor: store %q: retention %v is shorter than the window size %v", s.base.name, s.retention, s.size)
	}
	return errors.Join(s.base.checkSerdes(), s.base.checkMillis("window size", s.size), short)
}

// Open returns the task's partition of the store; call it from Init of a
// processor the store is attached to. It fails, naming the store, if the
// spec is invalid (see [Window]). The store follows the stream time of
// ctx (see [WindowStore]).
func (s *WindowSpec[K, V]) Open(ctx StoreContext) (WindowStore[K, V], error) {
	core, err := s.base.open(ctx, s.validate(), func(b statelog.Bytes) (*statelog.WindowBytes, error) {
		return statelog.NewWindowBytes(b, s.retention, s.size)
	})
	if err != nil {
		return nil, err
	}
	core.expire = onAdvance(core.b.Expire)
	return &windowStore[K, V]{typedStore: core, size: s.size}, nil
}

// windowStore puts serdes over a WindowBytes, whose byte keys put a prefix
// before the user key and the start after it. The serdes see the store's
// name as their topic.
type windowStore[K, V any] struct {
	typedStore[K, V, *statelog.WindowBytes]
	size time.Duration
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
	kb, ok, err := s.userKey(key, s.nulls.drop)
	if !ok {
		return err
	}
	vb, err := s.value(value)
	if err != nil {
		return err
	}
	if vb == nil {
		vb = []byte{} // a nil value would delete the window
	}
	if ms != nil {
		return s.wrap(s.b.PutStamped(kb, windowStart, vb, *ms))
	}
	return s.wrap(s.b.Put(kb, windowStart, vb))
}

func (s *windowStore[K, V]) Fetch(key K, windowStart time.Time) (V, bool, error) {
	v, _, found, err := s.FetchStamped(key, windowStart)
	return v, found, err
}

func (s *windowStore[K, V]) FetchStamped(key K, windowStart time.Time) (V, time.Time, bool, error) {
	kb, ok, err := s.userKey(key, s.nulls.miss)
	if !ok {
		var zero V
		return zero, time.Time{}, false, err
	}
	return s.foundStamped(s.b.FetchStamped(kb, windowStart))
}

func (s *windowStore[K, V]) FetchRange(key K, from, to time.Time) iter.Seq2[time.Time, V] {
	return s.scanKey(key, func(kb []byte) iter.Seq2[time.Time, []byte] {
		return s.b.FetchRange(kb, from, to)
	}, asIs)
}

func (s *windowStore[K, V]) FetchRangeBackward(key K, from, to time.Time) iter.Seq2[time.Time, V] {
	return s.scanKey(key, func(kb []byte) iter.Seq2[time.Time, []byte] {
		return s.b.FetchRangeBackward(kb, from, to)
	}, asIs)
}

func (s *windowStore[K, V]) FetchAll(from, to time.Time) iter.Seq2[Windowed[K], V] {
	return s.scan(s.b.FetchAll(from, to), s.windowed)
}

func (s *windowStore[K, V]) All() iter.Seq2[Windowed[K], V] {
	return s.scan(s.b.All(), s.windowed)
}

// windowed decodes the key of a window, which ends the store's window size
// after it starts.
func (s *windowStore[K, V]) windowed(wk statelog.WindowKey) (Windowed[K], error) {
	k, err := s.decodeKey(wk.Key)
	return Windowed[K]{Key: k, Start: wk.Start, End: wk.Start.Add(s.size)}, err
}
