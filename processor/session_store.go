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
	base      storeSpec[K, V]
	retention time.Duration
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
	return &SessionSpec[K, V]{base: storeSpec[K, V]{name, keys, values}, retention: retention}
}

// Name implements StoreSpec.
func (s *SessionSpec[K, V]) Name() string { return s.base.name }

// Retention returns the retention given to [Session].
func (s *SessionSpec[K, V]) Retention() time.Duration { return s.retention }

func (s *SessionSpec[K, V]) graphStore() *graph.Store {
	return &graph.Store{Name: s.base.name, Kind: graph.SessionStore, Retention: s.retention}
}

func (s *SessionSpec[K, V]) validate() error {
	var short error
	if s.retention < time.Millisecond {
		short = fmt.Errorf("processor: store %q: retention %v is below one millisecond", s.base.name, s.retention)
	}
	return errors.Join(s.base.checkSerdes(), short)
}

// Open returns the task's partition of the store; call it from Init of a
// processor the store is attached to. It fails, naming the store, if the
// spec is invalid (see [Session]). The store follows the stream time of
// ctx (see [SessionStore]).
func (s *SessionSpec[K, V]) Open(ctx StoreContext) (SessionStore[K, V], error) {
	core, err := s.base.open(ctx, s.validate(), func(b statelog.Bytes) (*statelog.SessionBytes, error) {
		return statelog.NewSessionBytes(b, s.retention)
	})
	if err != nil {
		return nil, err
	}
	core.expire = onAdvance(core.b.Expire)
	return &sessionStore[K, V]{core}, nil
}

// sessionStore puts serdes over a SessionBytes, whose byte keys put a
// prefix before the user key and the session's times after it. The serdes
// see the store's name as their topic.
type sessionStore[K, V any] struct {
	typedStore[K, V, *statelog.SessionBytes]
}

func (s *sessionStore[K, V]) Put(session Windowed[K], value V) error {
	kb, ok, err := s.userKey(session.Key, s.nulls.drop)
	if !ok {
		return err
	}
	vb, err := s.value(value)
	if err != nil {
		return err
	}
	if vb == nil {
		vb = []byte{} // a nil value would remove the session
	}
	return s.wrap(s.b.Put(kb, session.Start, session.End, vb))
}

func (s *sessionStore[K, V]) Remove(session Windowed[K]) error {
	kb, ok, err := s.userKey(session.Key, s.nulls.drop)
	if !ok {
		return err
	}
	return s.wrap(s.b.Remove(kb, session.Start, session.End))
}

func (s *sessionStore[K, V]) Fetch(session Windowed[K]) (V, bool, error) {
	kb, ok, err := s.userKey(session.Key, s.nulls.miss)
	if !ok {
		var zero V
		return zero, false, err
	}
	vb, err := s.b.FetchSession(kb, session.Start, session.End)
	return s.found(vb, s.wrap(err))
}

func (s *sessionStore[K, V]) FindSessions(key K, earliestEnd, latestStart time.Time) iter.Seq2[Windowed[K], V] {
	return s.scanKey(key, func(kb []byte) iter.Seq2[statelog.SessionKey, []byte] {
		return s.b.FindSessions(kb, earliestEnd, latestStart)
	}, s.session)
}

func (s *sessionStore[K, V]) All() iter.Seq2[Windowed[K], V] {
	return s.scan(s.b.All(), s.session)
}

// session decodes the key of a session. A key is decoded even where the
// caller gave it (FindSessions), so that what is yielded is the caller's
// own copy.
func (s *sessionStore[K, V]) session(sk statelog.SessionKey) (Windowed[K], error) {
	k, err := s.decodeKey(sk.Key)
	return Windowed[K]{Key: k, Start: sk.Start, End: sk.End}, err
}
