package processor

import (
	"cmp"
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
	base storeSpec[K, V]
	ttl  time.Duration
}

// TTL declares a TTL store named name, whose entries expire ttl after
// they were last written, in stream time (see [TTLStore]). ttl must be a
// positive whole number of milliseconds, or Open fails, naming the store.
// Kafka Streams has no such store; its deduplication examples keep a
// window store and delete old entries from a punctuator, which this
// store does for you.
func TTL[K, V any](name string, ttl time.Duration, keys serde.Serde[K], values serde.Serde[V]) *TTLSpec[K, V] {
	return &TTLSpec[K, V]{base: storeSpec[K, V]{name, keys, values}, ttl: ttl}
}

// Name implements StoreSpec.
func (s *TTLSpec[K, V]) Name() string { return s.base.name }

// TTL returns the ttl given to [TTL].
func (s *TTLSpec[K, V]) TTL() time.Duration { return s.ttl }

func (s *TTLSpec[K, V]) graphStore() *graph.Store {
	return &graph.Store{Name: s.base.name, Kind: graph.TTLStore}
}

// Open returns the task's partition of the store; call it from Init of a
// processor the store is attached to. It fails, naming the store, if the
// spec is invalid (see [TTL]). The store follows the stream time of ctx.
func (s *TTLSpec[K, V]) Open(ctx StoreContext) (TTLStore[K, V], error) {
	invalid := cmp.Or(s.base.checkSerdes(), s.base.checkMillis("ttl", s.ttl))
	core, err := s.base.open(ctx, invalid, func(b statelog.Bytes) (*statelog.TTLBytes, error) {
		return statelog.NewTTLBytes(b, s.ttl)
	})
	if err != nil {
		return nil, err
	}
	purge := core.b.Expire
	core.expire = func(now time.Time) error {
		_, err := purge(now, ttlPurgeLimit)
		return err
	}
	return &ttlStore[K, V]{core}, nil
}

// ttlStore puts serdes over a TTLBytes, whose byte keys put a prefix
// before the user key. The serdes see the store's name as their topic.
// Every call first deletes up to ttlPurgeLimit expired entries.
type ttlStore[K, V any] struct {
	typedStore[K, V, *statelog.TTLBytes]
}

func (s *ttlStore[K, V]) Get(key K) (V, bool, error) {
	kb, ok, err := s.userKey(key, s.nulls.miss)
	if !ok {
		var zero V
		return zero, false, err
	}
	vb, err := s.b.Get(kb)
	return s.found(vb, s.wrap(err))
}

func (s *ttlStore[K, V]) Put(key K, value V) error {
	kb, ok, err := s.userKey(key, s.nulls.drop)
	if !ok {
		return err
	}
	vb, err := s.value(value)
	if err != nil {
		return err
	}
	return s.wrap(s.b.Put(kb, vb))
}

func (s *ttlStore[K, V]) Delete(key K) error {
	kb, ok, err := s.userKey(key, s.nulls.drop)
	if !ok {
		return err
	}
	return s.wrap(s.b.Delete(kb))
}

func (s *ttlStore[K, V]) All() iter.Seq2[K, V] {
	return s.scan(s.b.All(), s.decodeKey)
}
