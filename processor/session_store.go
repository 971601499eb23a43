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

// SessionStore is a typed session store: values kept per key and session,
// a session being the span from its first record's time to its last's,
// both included. It corresponds to Kafka Streams' SessionStore.
//
// Times are kept to the millisecond: every time given is rounded down
// (toward the past), and every time returned is a whole millisecond in
// UTC. Keys are ordered by their serialized bytes (bytes.Compare), as in a
// [KeyValueStore]. Keys and values returned or yielded are decoded from
// copies and belong to the caller.
//
// A session-window aggregation with inactivity gap g, for a record of key
// k at time t, merges the sessions FindSessions(k, t-g, t+g) yields with
// the record: it collects them, removes each, and puts the merged session,
// from the earliest start to the latest end (t included).
//
// # Retention
//
// A session that ended before the task's stream time minus the store's
// retention is expired: reads skip it, a Put of it fails with an error
// wrapping changelog.ErrExpired, and it is deleted. Every read and
// write first brings the store up to the task's current stream time
// ([Context.StreamTime]) if it advanced since the last one: deleting the
// sessions that expired costs two writes each (one tombstone in the
// changelog), all done by that one call. Before the task has a stream
// time (before its first record), nothing is expired.
//
// Writes are buffered and become durable at the task's next commit; reads
// see them at once. Each Put or Remove is one changelog record: the
// store's index by end time (for expiry) is kept locally and rebuilt on
// restore. The iterators read the store as they go, so collect what a
// loop finds before writing to the store. A SessionStore belongs to its
// task and is used from its goroutine only.
//
// While an input record with a null Kafka key is processed, Put and Remove
// of a key that serializes to nothing (serde.String's "") are dropped, and
// Fetch and FindSessions of it find nothing; All is unchanged, and so is
// expiry. See "Records with a null key" in the package documentation.
type SessionStore[K, V any] interface {
	// Put sets the value of the session session.Key from session.Start to
	// session.End; Start must not be after End. A session that is already
	// expired is not written and the error wraps changelog.ErrExpired:
	// the caller decides what that means, and a session-window
	// aggregation drops the record and counts it as late (Kafka Streams'
	// dropped-records metric).
	Put(session Windowed[K], value V) error
	// Remove deletes the session with exactly that key, start and end;
	// removing an absent session is not an error.
	Remove(session Windowed[K]) error
	// Fetch returns the value of the session with exactly that key, start
	// and end, and whether it exists; an expired session does not. Kafka
	// Streams' fetchSession.
	Fetch(session Windowed[K]) (value V, found bool, err error)
	// FindSessions yields key's sessions that end at or after earliestEnd
	// and start at or before latestStart (both bounds included), ordered
	// by end, then by start. Kafka Streams' findSessions(key,
	// earliestSessionEndTime, latestSessionStartTime).
	FindSessions(key K, earliestEnd, latestStart time.Time) iter.Seq2[Windowed[K], V]
	// All yields every session, ordered by serialized key, then by end,
	// then by start.
	All() iter.Seq2[Windowed[K], V]
	// Err returns the first error met by an iteration since the last call
	// (a read, decode or expiry failure ends the iteration early) and
	// clears it.
	Err() error
}

// SessionSpec declares a session store with its serdes. Create one with
// [Session].
type SessionSpec[K, V any] struct {
	name      string
	retention time.Duration
	keys      serde.Serde[K]
	values    serde.Serde[V]
}

// Session declares a session store named name, whose sessions are
// retained for retention after they end. retention must be at least a
// millisecond, and should cover the inactivity gap plus the grace period
// of the sessions stored, or late records that the grace period admits
// are refused as expired. Kafka Streams'
// Stores.persistentSessionStore(name, retention).
//
// Its changelog topic (see [StoreSpec]) is created with
// cleanup.policy=compact,delete and retention.ms of retention plus a day,
// so Kafka drops what the store has expired. A spec that breaks these
// bounds makes Open fail, naming the store.
func Session[K, V any](name string, retention time.Duration, keys serde.Serde[K], values serde.Serde[V]) *SessionSpec[K, V] {
	return &SessionSpec[K, V]{name: name, retention: retention, keys: keys, values: values}
}

// Name implements StoreSpec.
func (s *SessionSpec[K, V]) Name() string { return s.name }

// Retention returns the retention given to [Session].
func (s *SessionSpec[K, V]) Retention() time.Duration { return s.retention }

func (s *SessionSpec[K, V]) graphStore() *graph.Store {
	return &graph.Store{Name: s.name, Kind: graph.SessionStore, Retention: s.retention}
}

func (s *SessionSpec[K, V]) validate() error {
	var errs []error
	if s.keys == nil || s.values == nil {
		errs = append(errs, fmt.Errorf("processor: store %q: nil serde", s.name))
	}
	if s.retention < time.Millisecond {
		errs = append(errs, fmt.Errorf("processor: store %q: retention %v is below one millisecond", s.name, s.retention))
	}
	return errors.Join(errs...)
}

// Open returns the task's partition of the store; call it from Init of a
// processor the store is attached to. It fails, naming the store, if the
// spec is invalid (see [Session]). The store follows the stream time of
// ctx (see [SessionStore]).
func (s *SessionSpec[K, V]) Open(ctx StoreContext) (SessionStore[K, V], error) {
	if err := s.validate(); err != nil {
		return nil, err
	}
	b, err := ctx.storeBytes(s.name)
	if err != nil {
		return nil, err
	}
	sb, err := statelog.NewSessionBytes(b, s.retention)
	if err != nil {
		return nil, fmt.Errorf("processor: store %q: %w", s.name, err)
	}
	st := &sessionStore[K, V]{codec: codec[K, V]{name: s.name, keys: s.keys, values: s.values}, s: sb, nulls: nullKeysOf(b)}
	st.clock.init(ctx, sb.Expire)
	return st, nil
}

// sessionStore puts serdes over a SessionBytes. The serdes see the
// store's name as their topic.
type sessionStore[K, V any] struct {
	codec[K, V]
	s     *statelog.SessionBytes
	clock expiryClock
	// nulls is asked about the user key: s's byte keys put a prefix before
	// it and the session's times after it, so the Bytes under s never sees
	// it alone.
	nulls nullKeys
}

func (s *sessionStore[K, V]) Put(session Windowed[K], value V) error {
	if err := s.clock.advance(s.name); err != nil {
		return err
	}
	kb, err := s.key(session.Key)
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
		vb = []byte{} // a nil value would remove the session
	}
	if err := s.s.Put(kb, session.Start, session.End, vb); err != nil {
		return fmt.Errorf("store %s: %w", s.name, err)
	}
	return nil
}

func (s *sessionStore[K, V]) Remove(session Windowed[K]) error {
	if err := s.clock.advance(s.name); err != nil {
		return err
	}
	kb, err := s.key(session.Key)
	if err != nil {
		return err
	}
	if s.nulls.drop(kb) {
		return nil
	}
	if err := s.s.Remove(kb, session.Start, session.End); err != nil {
		return fmt.Errorf("store %s: %w", s.name, err)
	}
	return nil
}

func (s *sessionStore[K, V]) Fetch(session Windowed[K]) (V, bool, error) {
	var zero V
	if err := s.clock.advance(s.name); err != nil {
		return zero, false, err
	}
	kb, err := s.key(session.Key)
	if err != nil {
		return zero, false, err
	}
	if s.nulls.miss(kb) {
		return zero, false, nil
	}
	vb, err := s.s.FetchSession(kb, session.Start, session.End)
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

func (s *sessionStore[K, V]) FindSessions(key K, earliestEnd, latestStart time.Time) iter.Seq2[Windowed[K], V] {
	return func(yield func(Windowed[K], V) bool) {
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
		s.decode(s.s.FindSessions(kb, earliestEnd, latestStart), yield)
	}
}

func (s *sessionStore[K, V]) All() iter.Seq2[Windowed[K], V] {
	return func(yield func(Windowed[K], V) bool) {
		if err := s.clock.advance(s.name); err != nil {
			s.fail(err)
			return
		}
		s.decode(s.s.All(), yield)
	}
}

// decode yields the sessions of seq with their keys and values decoded.
// A key is decoded even where the caller gave it (FindSessions), so that
// what is yielded is the caller's own copy.
func (s *sessionStore[K, V]) decode(seq iter.Seq2[statelog.SessionKey, []byte], yield func(Windowed[K], V) bool) {
	defer s.drain()
	for sk, vb := range seq {
		k, err := s.decodeKey(sk.Key)
		if err != nil {
			s.fail(err)
			return
		}
		v, err := s.decodeValue(vb)
		if err != nil {
			s.fail(err)
			return
		}
		if !yield(Windowed[K]{Key: k, Start: sk.Start, End: sk.End}, v) {
			return
		}
	}
}

// drain moves an error the byte store's iterator met into s.err.
func (s *sessionStore[K, V]) drain() {
	if err := s.s.Err(); err != nil {
		s.fail(fmt.Errorf("store %s: %w", s.name, err))
	}
}
