package processor

import (
	"fmt"
	"iter"
	"time"

	"github.com/weirstream/weir/internal/graph"
	"github.com/weirstream/weir/internal/statelog"
	"github.com/weirstream/weir/serde"
)

// The typed stores share one core, so that each store's file holds only
// its kind's checks, byte layout and operations: storeSpec is the part of
// every spec, storeSpec.open the prologue of every Open, and typedStore
// the part of every store, with the frame of every read, write and
// iteration.

// storeSpec is what every spec holds, as its base: the store's name and
// serdes. (A field, not an embedded one: embedding would show in the
// exported specs' documentation.)
type storeSpec[K, V any] struct {
	name   string
	keys   serde.Serde[K]
	values serde.Serde[V]
}

// checkSerdes is the check every spec makes: a store needs both serdes.
func (s *storeSpec[K, V]) checkSerdes() error {
	if s.keys == nil || s.values == nil {
		return fmt.Errorf("processor: store %q: nil serde", s.name)
	}
	return nil
}

// checkMillis checks a duration of the spec (what names it) that the
// byte layout keeps in whole milliseconds.
func (s *storeSpec[K, V]) checkMillis(what string, d time.Duration) error {
	if d < time.Millisecond || d%time.Millisecond != 0 {
		return fmt.Errorf("processor: store %q: %s %v is not a positive whole number of milliseconds", s.name, what, d)
	}
	return nil
}

// byteStore is what the core needs of the byte layout under a typed
// store: the error its iterators met, which an iter.Seq2 cannot return.
type byteStore interface{ Err() error }

// open is the prologue of every Open: it refuses a spec whose checks
// failed (invalid), finds the task's partition of the store through ctx
// and lays the kind's byte layout over it.
func (s *storeSpec[K, V]) open[B byteStore](ctx StoreContext, invalid error, layout func(statelog.Bytes) (B, error)) (typedStore[K, V, B], error) {
	if invalid != nil {
		return typedStore[K, V, B]{}, invalid
	}
	b, err := ctx.storeBytes(s.name)
	if err != nil {
		return typedStore[K, V, B]{}, err
	}
	lb, err := layout(b)
	if err != nil {
		return typedStore[K, V, B]{}, fmt.Errorf("processor: store %q: %w", s.name, err)
	}
	clock, _ := ctx.(streamClock)
	return typedStore[K, V, B]{
		codec: codec[K, V]{name: s.name, keys: s.keys, values: s.values},
		b:     lb, nulls: nullKeysOf(b), clock: clock,
	}, nil
}

// asIs is the identity with an error, for the stores that use their bytes
// as they are (layout) and the iterations whose keys need no decoding.
func asIs[T any](t T) (T, error) { return t, nil }

// streamClock is the stream time of the Context a store was opened with.
type streamClock interface{ StreamTime() time.Time }

// typedStore is the core of every typed store: the codec over the byte
// layout b, with what the stores that follow the stream time need.
type typedStore[K, V any, B byteStore] struct {
	codec[K, V]
	b B
	// nulls is asked about the user key by the stores whose byte layout
	// puts it inside longer keys, so that the Bytes under b never see it
	// alone. A key-value store's Bytes apply the rule themselves.
	nulls nullKeys
	// clock is the Context the store was opened with. Every Context has
	// a StreamTime; a StoreContext that lacks one leaves clock nil, and
	// the store then stays at the zero stream time: it expires nothing.
	clock streamClock
	// expire brings the byte layout to the stream time now, for a store
	// whose entries expire; nil for the others.
	expire func(now time.Time) error
}

// catchUp runs expire for the current stream time: every read and write
// of a store whose entries expire starts with it.
func (s *typedStore[K, V, B]) catchUp() error {
	if s.expire == nil || s.clock == nil {
		return nil
	}
	if err := s.expire(s.clock.StreamTime()); err != nil {
		return fmt.Errorf("store %s: expire: %w", s.name, err)
	}
	return nil
}

// onAdvance makes expire run once per advance of the stream time, which
// starts at the zero time and never goes back, so a zero or unchanged
// stream time costs one comparison. After an error the next call tries
// again.
func onAdvance(expire func(time.Time) (int, error)) func(time.Time) error {
	var last time.Time // the stream time of the last successful expire
	return func(now time.Time) error {
		if !now.After(last) {
			return nil
		}
		if _, err := expire(now); err != nil {
			return err
		}
		last = now
		return nil
	}
}

// userKey is the prologue of every call about one key of a store whose
// byte keys hide the user key: it catches up with the stream time,
// serializes key and asks skip (nulls.drop for a write, nulls.miss for a
// read) whether the null-key rule leaves the key out. ok is false when
// the call has nothing more to do: on an error, or for a skipped key.
func (s *typedStore[K, V, B]) userKey(key K, skip func([]byte) bool) (kb []byte, ok bool, err error) {
	if err := s.catchUp(); err != nil {
		return nil, false, err
	}
	if kb, err = s.key(key); err != nil {
		return nil, false, err
	}
	return kb, !skip(kb), nil
}

// scan is an iteration of every entry of seq, which keyOf and the value
// serde decode, after a catch-up with the stream time. Errors end it and
// are kept for Err.
func (s *typedStore[K, V, B]) scan[BK, UK any](seq iter.Seq2[BK, []byte], keyOf func(BK) (UK, error)) iter.Seq2[UK, V] {
	return func(yield func(UK, V) bool) {
		if err := s.catchUp(); err != nil {
			s.fail(err)
			return
		}
		defer s.drain()
		s.each(seq, keyOf, yield)
	}
}

// scanKey is scan for the entries of one user key, which seq yields
// given the key's bytes. A key the null-key rule leaves out has none.
func (s *typedStore[K, V, B]) scanKey[BK, UK any](key K, seq func(kb []byte) iter.Seq2[BK, []byte], keyOf func(BK) (UK, error)) iter.Seq2[UK, V] {
	return func(yield func(UK, V) bool) {
		kb, ok, err := s.userKey(key, s.nulls.miss)
		if !ok {
			s.fail(err)
			return
		}
		defer s.drain()
		s.each(seq(kb), keyOf, yield)
	}
}

// drain keeps the error the byte layout's iterator met, however the loop
// over it ended.
func (s *typedStore[K, V, B]) drain() { s.fail(s.wrap(s.b.Err())) }

// nullKeys asks the runtime whether a serialized user key is the empty key
// of an input record with a null Kafka key (see "Records with a null key"
// in the package documentation, and graph.NullKeyGuard). The bytes of a
// key-value store see the user's keys and apply the rule themselves; a
// window or session store composes the user key into longer byte keys, so
// it asks here first, with the user key. Bytes without a guard (a
// StoreContext other than weir's runtime) drop nothing.
type nullKeys struct{ g graph.NullKeyGuard }

func nullKeysOf(b statelog.Bytes) nullKeys {
	g, _ := b.(graph.NullKeyGuard)
	return nullKeys{g}
}

// miss reports whether a read of key is a miss.
func (n nullKeys) miss(key []byte) bool { return n.g != nil && n.g.NullKey(key) }

// drop reports whether a write of key is dropped; the runtime has then
// counted and logged it.
func (n nullKeys) drop(key []byte) bool { return n.g != nil && n.g.DropNullKey(key) }
