package processor

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/weirstream/weir/changelog"
	"github.com/weirstream/weir/internal/graph"
	"github.com/weirstream/weir/internal/statelog"
	"github.com/weirstream/weir/serde"
)

// VersionedStore is a typed key-value store that keeps each key's
// history: every value with the time it became valid (its validFrom), so
// that a reader can ask what a key was at a given time. A stream-table
// join over a versioned table looks the table up as of the stream
// record's timestamp (a temporal join), whatever order the table's
// updates arrived in. Kafka Streams' VersionedKeyValueStore.
//
// # History
//
// A version is valid from its validFrom until the next version's. A
// deletion is a version too (a tombstone), so a lookup after it finds
// nothing and one before it finds the value it deleted. The store keeps
// the versions that lookups within its history can need: those valid at
// some time after the task's stream time minus the history. Older ones
// are deleted when their key is next written, and a lookup as of a time
// before stream time minus the history finds nothing, as in Kafka
// Streams. Times are kept to the millisecond and must not be negative.
//
// # Changelog format
//
// Each version is one entry, and one changelog record: its key is the
// user key's length (uvarint), the key's bytes and validFrom in
// milliseconds since the epoch (8 bytes, big-endian); its value is one
// byte, 0 for a value (its bytes follow) and 1 for a deletion. The
// changelog is compacted: a version the store deletes is a tombstone for
// its key.
//
// Writes are buffered and become durable at the task's next commit; reads
// see them at once. A VersionedStore belongs to its task and is used from
// its goroutine only. While an input record with a null Kafka key is
// processed, writes of a key that serializes to nothing are dropped and
// reads of it miss (see "Records with a null key").
type VersionedStore[K, V any] interface {
	// Put records value as key's value from validFrom on. A version at
	// the same validFrom is replaced. A version from before the stream
	// time minus the history is not kept, and the error wraps
	// changelog.ErrExpired (Kafka Streams' versioned store does not put
	// it either): the caller decides what that means.
	Put(key K, value V, validFrom time.Time) error
	// Delete records that key has no value from validFrom on; as Put, it
	// refuses a time before the history with changelog.ErrExpired.
	Delete(key K, validFrom time.Time) error
	// Get returns key's latest value and since when it is valid; found
	// is false when key has none or its latest version is a deletion.
	Get(key K) (value V, validFrom time.Time, found bool, err error)
	// GetAsOf returns the value key had at asOf: its newest version
	// valid from asOf or earlier. found is false when there is none or it
	// is a deletion. Before the stream time minus the history only the
	// latest version is known: it is returned when it is valid from asOf
	// or earlier, and found is false otherwise (as in Kafka Streams).
	GetAsOf(key K, asOf time.Time) (value V, validFrom time.Time, found bool, err error)
}

// VersionedSpec declares a versioned store. Create one with [Versioned].
type VersionedSpec[K, V any] struct {
	base    storeSpec[K, V]
	history time.Duration
}

// Versioned declares a versioned store named name, keeping history
// (a whole number of milliseconds, at least one) of each key's versions
// behind the task's stream time. Kafka Streams'
// Stores.persistentVersionedKeyValueStore.
func Versioned[K, V any](name string, history time.Duration, keys serde.Serde[K], values serde.Serde[V]) *VersionedSpec[K, V] {
	return &VersionedSpec[K, V]{base: storeSpec[K, V]{name, keys, values}, history: history}
}

// Name implements StoreSpec.
func (s *VersionedSpec[K, V]) Name() string { return s.base.name }

// History returns the history given to [Versioned].
func (s *VersionedSpec[K, V]) History() time.Duration { return s.history }

func (s *VersionedSpec[K, V]) graphStore() *graph.Store {
	return &graph.Store{Name: s.base.name, Kind: graph.VersionedStore}
}

// Open returns the task's partition of the store; call it from Init of a
// processor the store is attached to. It fails, naming the store, if the
// spec is invalid. The store follows the stream time of ctx.
func (s *VersionedSpec[K, V]) Open(ctx StoreContext) (VersionedStore[K, V], error) {
	invalid := cmp.Or(s.base.checkSerdes(), s.base.checkMillis("history", s.history))
	core, err := s.base.open(ctx, invalid, asIs[statelog.Bytes])
	if err != nil {
		return nil, err
	}
	return &versionedStore[K, V]{typedStore: core, history: s.history.Milliseconds()}, nil
}

// versionedStore keeps the versions of a key in the store's bytes, under
// keys that put the user key inside longer keys (see [VersionedStore]).
type versionedStore[K, V any] struct {
	typedStore[K, V, statelog.Bytes]
	history int64
}

// versionPrefix is the bytes every version of the user key kb starts with.
func versionPrefix(kb []byte) []byte {
	return append(binary.AppendUvarint(make([]byte, 0, len(kb)+binary.MaxVarintLen64+8), uint64(len(kb))), kb...)
}

func versionKey(prefix []byte, ms int64) []byte {
	return binary.BigEndian.AppendUint64(prefix[:len(prefix):len(prefix)], uint64(ms))
}

// cutoff is the earliest time lookups may ask about: stream time minus
// the history (math.MinInt64 before the first record).
func (s *versionedStore[K, V]) cutoff() int64 {
	if s.clock == nil || s.clock.StreamTime().IsZero() {
		return -1 << 63
	}
	return s.clock.StreamTime().UnixMilli() - s.history
}

func (s *versionedStore[K, V]) Put(key K, value V, validFrom time.Time) error {
	vb, err := s.value(value)
	if err != nil {
		return err
	}
	return s.write(key, append([]byte{0}, vb...), validFrom)
}

func (s *versionedStore[K, V]) Delete(key K, validFrom time.Time) error {
	return s.write(key, []byte{1}, validFrom)
}

func (s *versionedStore[K, V]) write(key K, v []byte, validFrom time.Time) error {
	ms := validFrom.UnixMilli()
	if ms < 0 {
		return fmt.Errorf("store %s: version at negative time %d ms", s.name, ms)
	}
	if cut := s.cutoff(); ms < cut {
		return fmt.Errorf("store %s: %w: a version from %v is before the history's start %v", s.name, changelog.ErrExpired, time.UnixMilli(ms).UTC(), time.UnixMilli(cut).UTC())
	}
	kb, ok, err := s.userKey(key, s.nulls.drop)
	if !ok {
		return err
	}
	p := versionPrefix(kb)
	if err := s.b.Put(versionKey(p, ms), v); err != nil {
		return s.wrap(err)
	}
	return s.trim(p)
}

// trim deletes the versions of a key that no lookup within the history
// can need: those older than its newest version valid at the cutoff.
func (s *versionedStore[K, V]) trim(p []byte) error {
	cut := s.cutoff()
	if cut < 0 {
		return nil
	}
	var old [][]byte
	keep := true // the newest version at or before the cutoff stays
	for k := range s.b.Backward(versionKey(p, 0), versionKey(p, cut+1)) {
		if keep {
			keep = false
			continue
		}
		old = append(old, append([]byte(nil), k...))
	}
	if err := s.b.Err(); err != nil {
		return s.wrap(err)
	}
	for _, k := range old {
		if err := s.b.Delete(k); err != nil {
			return s.wrap(err)
		}
	}
	return nil
}

func (s *versionedStore[K, V]) Get(key K) (V, time.Time, bool, error) {
	return s.find(key, 1<<62)
}

func (s *versionedStore[K, V]) GetAsOf(key K, asOf time.Time) (V, time.Time, bool, error) {
	ms := asOf.UnixMilli()
	if ms < 0 {
		var zero V
		return zero, time.Time{}, false, nil
	}
	if ms < s.cutoff() {
		// Beyond the history only the latest version is certain.
		v, from, found, err := s.find(key, 1<<62)
		if err != nil || from.UnixMilli() <= ms {
			return v, from, found, err
		}
		var zero V
		return zero, time.Time{}, false, nil
	}
	return s.find(key, ms)
}

// find returns key's newest version valid from ms or earlier.
func (s *versionedStore[K, V]) find(key K, ms int64) (V, time.Time, bool, error) {
	var zero V
	kb, ok, err := s.userKey(key, s.nulls.miss)
	if !ok {
		return zero, time.Time{}, false, err
	}
	p := versionPrefix(kb)
	var k, v []byte
	for bk, bv := range s.b.Backward(versionKey(p, 0), versionKey(p, ms+1)) {
		k, v = bk, bv
		break
	}
	if err := s.b.Err(); err != nil {
		return zero, time.Time{}, false, s.wrap(err)
	}
	if k == nil {
		return zero, time.Time{}, false, nil
	}
	if len(k) != len(p)+8 || len(v) == 0 || v[0] > 1 {
		return zero, time.Time{}, false, errors.New("store " + s.name + ": a version entry is malformed")
	}
	from := time.UnixMilli(int64(binary.BigEndian.Uint64(k[len(p):]))).UTC()
	if v[0] == 1 {
		return zero, from, false, nil
	}
	val, err := s.decodeValue(v[1:])
	if err != nil {
		return zero, time.Time{}, false, err
	}
	return val, from, true, nil
}
