package processor

import (
	"fmt"
	"iter"
	"time"

	"github.com/weirstream/weir/internal/graph"
	"github.com/weirstream/weir/internal/statelog"
	"github.com/weirstream/weir/serde"
)

// ttlPurgeLimit is the most expired entries a TTL store deletes in one
// call. Each call writes at most one entry, so 64 keeps up with any rate
// of writes (see statelog.TTLBytes.Expire) while bounding what one call
// adds to a commit: at most 64 tombstones in the changelog and 128
// deletes in the write buffer, even when a long pause of the stream
// expired a whole store at once.
const ttlPurgeLimit = 64

// TTLStore is a typed key-value store whose entries expire: the store for
// deduplication, which needs to remember a key for a while, not forever.
// Each entry is kept for the store's TTL after it was last written, in
// the task's stream time ([Context.StreamTime]): an entry written when
// the stream time is s is found while the stream time is before s + TTL,
// and expired from then on. Writing a key again starts its TTL over.
//
// # Which clock
//
// Stream time, the largest record timestamp the task has processed, not
// the wall clock and not the timestamp of the record being processed:
//
//   - It follows the data, so reprocessing the same input (after a
//     failure, a rewind under exactly once, or a reset of the application)
//     finds the same entries live and makes the same decisions, which a
//     wall clock would not; and a backlog processed after downtime is
//     deduplicated over the span of event time the TTL names, not over
//     the few seconds it takes to read it.
//   - It never goes back, so a late record (an old timestamp) does not
//     write an entry that expires early, and expiry is in the order
//     entries were written.
//
// The task's stream time starts at the zero time until its first record
// (after a restart too): an entry written before then, in Init or a
// punctuator, expires with the first record. Times are kept to the
// millisecond.
//
// # Expiry and the changelog
//
// An expired entry is invisible at once: Get misses it and All skips it.
// The store deletes expired entries itself, in bounded steps: every call
// first deletes up to 64 of them, so the work one record adds to a commit
// stays bounded however many expired at once, and deletion keeps up with
// the writes. Each Put and Delete is one changelog record, and each
// deleted expired entry one tombstone; the changelog topic is compacted
// (cleanup.policy=compact, as for a [KeyValueStore]). The expiry index the
// store keeps to find expired entries is local: it is not in the
// changelog, and a restore rebuilds it. A restored entry keeps the expiry
// it was written with.
//
// Writes are buffered and become durable at the task's next commit; reads
// see them at once. Keys are ordered by their serialized bytes, as in a
// [KeyValueStore]. A TTLStore belongs to its task and is used from its
// goroutine only.
//
// While an input record with a null Kafka key is processed, Put and Delete
// of a key that serializes to nothing (serde.String's "") are dropped and
// Get of it is a miss; All is unchanged, and so is expiry. See "Records
// with a null key" in the package documentation.
type TTLStore[K, V any] interface {
	// Get returns the value of key and whether it exists; an expired entry
	// does not.
	Get(key K) (value V, found bool, err error)
	// Put sets the value of key, which expires the store's TTL after the
	// task's current stream time.
	Put(key K, value V) error
	// Delete removes key; deleting an absent key is not an error.
	Delete(key K) error
	// All yields every entry that has not expired, in key order.
	All() iter.Seq2[K, V]
	// Err returns the first error met by an iteration since the last call
	// (a read, decode or expiry failure ends the iteration early) and
	// clears it.
	Err() error
}

// TTLSpec declares a TTL store with its serdes. Create one with [TTL].
type TTLSpec[K, V any] struct {
	name   string
	ttl    time.Duration
	keys   serde.Serde[K]
	values serde.Serde[V]
}

// TTL declares a TTL store named name, whose entries expire ttl after
// they were last written, in stream time (see [TTLStore]). ttl must be a
// positive whole number of milliseconds, or Open fails, naming the store.
// Kafka Streams has no such store; its deduplication examples keep a
// window store and delete old entries from a punctuator, which this
// store does for you.
func TTL[K, V any](name string, ttl time.Duration, keys serde.Serde[K], values serde.Serde[V]) *TTLSpec[K, V] {
	return &TTLSpec[K, V]{name: name, ttl: ttl, keys: keys, values: values}
}

// Name implements StoreSpec.
func (s *TTLSpec[K, V]) Name() string { return s.name }

// TTL returns the ttl given to [TTL].
func (s *TTLSpec[K, V]) TTL() time.Duration { return s.ttl }

func (s *TTLSpec[K, V]) graphStore() *graph.Store {
	return &graph.Store{Name: s.name, Kind: graph.TTLStore}
}

// Open returns the task's partition of the store; call it from Init of a
// processor the store is attached to. It fails, naming the store, if the
// spec is invalid (see [TTL]). The store follows the stream time of ctx.
func (s *TTLSpec[K, V]) Open(ctx StoreContext) (TTLStore[K, V], error) {
	if s.keys == nil || s.values == nil {
		return nil, fmt.Errorf("processor: store %q: nil serde", s.name)
	}
	if s.ttl < time.Millisecond || s.ttl%time.Millisecond != 0 {
		return nil, fmt.Errorf("processor: store %q: ttl %v is not a positive whole number of milliseconds", s.name, s.ttl)
	}
	b, err := ctx.storeBytes(s.name)
	if err != nil {
		return nil, err
	}
	tb, err := statelog.NewTTLBytes(b, s.ttl)
	if err != nil {
		return nil, fmt.Errorf("processor: store %q: %w", s.name, err)
	}
	st := &ttlStore[K, V]{codec: codec[K, V]{name: s.name, keys: s.keys, values: s.values}, b: tb, nulls: nullKeysOf(b)}
	st.clock, _ = ctx.(interface{ StreamTime() time.Time })
	return st, nil
}

// ttlStore puts serdes over a TTLBytes. The serdes see the store's name
// as their topic.
type ttlStore[K, V any] struct {
	codec[K, V]
	b *statelog.TTLBytes
	// clock is the Context the store was opened with. Every Context has a
	// StreamTime; a StoreContext that lacks one leaves clock nil, and the
	// store then stays at the zero stream time.
	clock interface{ StreamTime() time.Time }
	// nulls is asked about the user key: b's byte keys put a prefix before
	// it, so the Bytes under b never sees it alone.
	nulls nullKeys
}

// expire brings the store to the task's stream time, deleting up to
// ttlPurgeLimit expired entries.
func (s *ttlStore[K, V]) expire() error {
	if s.clock == nil {
		return nil
	}
	if _, err := s.b.Expire(s.clock.StreamTime(), ttlPurgeLimit); err != nil {
		return fmt.Errorf("store %s: expire: %w", s.name, err)
	}
	return nil
}

func (s *ttlStore[K, V]) Get(key K) (V, bool, error) {
	var zero V
	if err := s.expire(); err != nil {
		return zero, false, err
	}
	kb, err := s.key(key)
	if err != nil {
		return zero, false, err
	}
	if s.nulls.miss(kb) {
		return zero, false, nil
	}
	vb, err := s.b.Get(kb)
	if err != nil {
		return zero, false, fmt.Errorf("store %s: %w", s.name, err)
	}
	if vb == nil {
		return zero, false, nil
	}
	v, err := s.decodeValue(vb)
	if err != nil {
		return zero, false, err
	}
	return v, true, nil
}

func (s *ttlStore[K, V]) Put(key K, value V) error {
	if err := s.expire(); err != nil {
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
	if err := s.b.Put(kb, vb); err != nil {
		return fmt.Errorf("store %s: %w", s.name, err)
	}
	return nil
}

func (s *ttlStore[K, V]) Delete(key K) error {
	if err := s.expire(); err != nil {
		return err
	}
	kb, err := s.key(key)
	if err != nil {
		return err
	}
	if s.nulls.drop(kb) {
		return nil
	}
	if err := s.b.Delete(kb); err != nil {
		return fmt.Errorf("store %s: %w", s.name, err)
	}
	return nil
}

func (s *ttlStore[K, V]) All() iter.Seq2[K, V] {
	return func(yield func(K, V) bool) {
		if err := s.expire(); err != nil {
			s.fail(err)
			return
		}
		defer s.drain()
		s.decodeEach(s.b.All(), func() error { return nil }, yield)
	}
}

// drain moves an error the byte store's iterator met into s.err.
func (s *ttlStore[K, V]) drain() {
	if err := s.b.Err(); err != nil {
		s.fail(fmt.Errorf("store %s: %w", s.name, err))
	}
}
