package statelog

// The session store's layout in its Bytes: two entries per session.
//
//	0x01 | AppendKey(key) | time(end) | time(start)  -> value  (by key: FindSessions, FetchSession, All)
//	0x02 | time(end) | AppendKey(key) | time(start)  -> empty  (by end: Expire)
//
// Ordering a key's sessions by end makes FindSessions one range scan: the
// sessions with end >= earliestEnd are the tail of the key's entries. The
// two writes are ordered as the window store's are (see window.go), and
// the 0x02 entries are likewise a local index (SessionIndex): one
// changelog record per session update.

import (
	"errors"
	"fmt"
	"github.com/weirstream/weir/changelog"
	"iter"
	"time"
)

// SessionKey names a session of a SessionBytes: the user key and the
// session's first and last record times, both included. Key belongs to the
// receiver; the times are in UTC, to the millisecond.
type SessionKey struct {
	Key        []byte
	Start, End time.Time
}

// SessionBytes is a session store on byte keys, built on a Bytes that it
// uses alone: values are kept per (key, start, end), and sessions that
// ended before the retention are removed by Expire. It corresponds to
// Kafka Streams' SessionStore<Bytes, byte[]>; serdes go on top.
//
// Times are kept to the millisecond (see AppendTime), and returned in UTC.
// Slices passed in are not retained; slices returned or yielded belong to
// the caller. Iterators read the Bytes as they go: changing the store from
// inside a loop is safe only if the Bytes allows it (Memory does), so a
// session merge collects the sessions FindSessions yields, then removes
// and puts. An error met while iterating ends the iteration and is
// reported by Err.
//
// Each session costs two entries of the Bytes, and each Put or Remove two
// writes, of which one changelog record: the index by end is local, see
// the layout at the top of session.go and [SessionIndex].
//
// A SessionBytes is used by one goroutine at a time.
type SessionBytes struct {
	b         Bytes
	retention time.Duration
	clock     retentionClock
	err       error
}

// NewSessionBytes returns a session store on b, which it must use alone.
// Sessions are retained for retention, at least a millisecond (Kafka
// Streams' session store retention, at least the inactivity gap plus the
// grace period): a session that ended before the stream time seen by
// Expire minus retention is expired.
func NewSessionBytes(b Bytes, retention time.Duration) (*SessionBytes, error) {
	var errs []error
	if b == nil {
		errs = append(errs, errors.New("changelog: session store: Bytes is nil"))
	}
	if retention < time.Millisecond {
		errs = append(errs, fmt.Errorf("changelog: session store: retention %v is below one millisecond", retention))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return &SessionBytes{b: b, retention: retention, clock: newRetentionClock(retention)}, nil
}

// Retention returns the retention given to NewSessionBytes.
func (s *SessionBytes) Retention() time.Duration { return s.retention }

func sessionKey(key []byte, start, end int64) []byte {
	k := AppendKey(append(make([]byte, 0, len(key)+3+2*TimeLen), prefixByKey), key)
	return appendMillis(appendMillis(k, end), start)
}

func sessionIndexKey(key []byte, start, end int64) []byte {
	k := appendMillis(append(make([]byte, 0, len(key)+3+2*TimeLen), prefixByTime), end)
	return appendMillis(AppendKey(k, key), start)
}

// Put sets the value of key's session from start to end, both included;
// start must not be after end. A nil value removes the session (an empty,
// non-nil value is stored as empty). A session that expired already (it
// ended before the stream time seen by Expire minus the retention) is not
// written, and the error wraps changelog.ErrExpired.
func (s *SessionBytes) Put(key []byte, start, end time.Time, value []byte) error {
	st, en := start.UnixMilli(), end.UnixMilli()
	if st > en {
		return fmt.Errorf("changelog: session start %v is after its end %v", millisTime(st), millisTime(en))
	}
	if value == nil {
		return s.remove(key, st, en)
	}
	if cutoff := s.clock.cutoff(); en < cutoff {
		return fmt.Errorf("%w: session ending %v is before the retention cutoff %v", changelog.ErrExpired, millisTime(en), millisTime(cutoff))
	}
	s.clock.indexed(en)
	if err := s.b.Put(sessionIndexKey(key, st, en), []byte{}); err != nil {
		return fmt.Errorf("changelog: session put: %w", err)
	}
	if err := s.b.Put(sessionKey(key, st, en), value); err != nil {
		return fmt.Errorf("changelog: session put: %w", err)
	}
	return nil
}

// Remove deletes key's session from start to end; removing an absent
// session is not an error.
func (s *SessionBytes) Remove(key []byte, start, end time.Time) error {
	return s.remove(key, start.UnixMilli(), end.UnixMilli())
}

func (s *SessionBytes) remove(key []byte, start, end int64) error {
	if err := s.b.Delete(sessionKey(key, start, end)); err != nil {
		return fmt.Errorf("changelog: session remove: %w", err)
	}
	if err := s.b.Delete(sessionIndexKey(key, start, end)); err != nil {
		return fmt.Errorf("changelog: session remove: %w", err)
	}
	return nil
}

// FetchSession returns the value of key's session from start to end, or
// nil when there is none or it expired.
func (s *SessionBytes) FetchSession(key []byte, start, end time.Time) ([]byte, error) {
	st, en := start.UnixMilli(), end.UnixMilli()
	if en < s.clock.cutoff() {
		return nil, nil
	}
	v, err := s.b.Get(sessionKey(key, st, en))
	if err != nil {
		return nil, fmt.Errorf("changelog: session fetch: %w", err)
	}
	return v, nil
}

// FindSessions yields key's sessions that end at or after earliestEnd and
// start at or before latestStart, ordered by end, then start, with their
// values; expired sessions are skipped. A session-window aggregation of a
// record at time t with inactivity gap g merges the sessions
// FindSessions(key, t-g, t+g) yields. It corresponds to Kafka Streams'
// findSessions(key, earliestSessionEndTime, latestSessionStartTime).
//
// It scans the key's sessions that end at or after earliestEnd, and skips
// those that start after latestStart.
func (s *SessionBytes) FindSessions(key []byte, earliestEnd, latestStart time.Time) iter.Seq2[SessionKey, []byte] {
	return func(yield func(SessionKey, []byte) bool) {
		defer s.drain()
		lo := max(earliestEnd.UnixMilli(), s.clock.cutoff())
		latest := latestStart.UnixMilli()
		prefix := AppendKey([]byte{prefixByKey}, key)
		for k, v := range s.b.Range(appendMillis(prefix, lo), PrefixEnd(prefix)) {
			if len(k) != len(prefix)+2*TimeLen {
				s.fail(malformed("session entry is %d bytes, not %d", k, len(k), len(prefix)+2*TimeLen))
				return
			}
			en, _ := decodeMillis(k[len(prefix) : len(prefix)+TimeLen])
			st, _ := decodeMillis(k[len(prefix)+TimeLen:])
			if st > latest {
				continue
			}
			sk := SessionKey{Key: append([]byte{}, key...), Start: millisTime(st), End: millisTime(en)}
			if !yield(sk, v) {
				return
			}
		}
	}
}

// All yields every session that has not expired, ordered by key
// (bytes.Compare), then end, then start, with its value.
func (s *SessionBytes) All() iter.Seq2[SessionKey, []byte] {
	return func(yield func(SessionKey, []byte) bool) {
		defer s.drain()
		cutoff := s.clock.cutoff()
		for k, v := range s.b.Range([]byte{prefixByKey}, []byte{prefixByKey + 1}) {
			key, rest, err := DecodeKey(k[1:])
			if err != nil {
				s.fail(err)
				return
			}
			if len(rest) != 2*TimeLen {
				s.fail(malformed("session entry ends in %d bytes, not %d", k, len(rest), 2*TimeLen))
				return
			}
			en, _ := decodeMillis(rest[:TimeLen])
			st, _ := decodeMillis(rest[TimeLen:])
			if en < cutoff {
				continue
			}
			if !yield(SessionKey{Key: key, Start: millisTime(st), End: millisTime(en)}, v) {
				return
			}
		}
	}
}

func decodeSessionIndexKey(ik []byte) (key []byte, start, end int64, err error) {
	if len(ik) < 1+TimeLen {
		return nil, 0, 0, malformed("session index entry is %d bytes", ik, len(ik))
	}
	end, _ = decodeMillis(ik[1 : 1+TimeLen])
	key, rest, err := DecodeKey(ik[1+TimeLen:])
	if err != nil {
		return nil, 0, 0, err
	}
	if start, err = decodeMillis(rest); err != nil {
		return nil, 0, 0, err
	}
	return key, start, end, nil
}

// Expire advances the store's stream time to streamTime (it never goes
// back) and deletes every session that ended before stream time minus the
// retention, returning how many it deleted. Later Puts of such sessions
// fail with changelog.ErrExpired, and reads skip them even before Expire deleted
// them.
//
// Its cost and its stream time are those of WindowBytes.Expire: two
// deletes per expired session (one changelog tombstone) and a seek per
// 512, all expired sessions
// removed before it returns, nothing done when the cutoff does not move,
// and a scan from the index's start on the first call after the store is
// opened. Put does not advance stream time.
func (s *SessionBytes) Expire(streamTime time.Time) (removed int, err error) {
	return expire(s.b, &s.clock, streamTime, func(ik []byte) error {
		key, start, end, err := decodeSessionIndexKey(ik)
		if err != nil {
			return err
		}
		return s.remove(key, start, end)
	})
}

// Err returns the first error an iterator of s met since the last call,
// and clears it.
func (s *SessionBytes) Err() error {
	err := s.err
	s.err = nil
	if err == nil {
		s.drain()
		err, s.err = s.err, nil
	}
	return err
}

func (s *SessionBytes) fail(err error) {
	if s.err == nil {
		s.err = err
	}
}

func (s *SessionBytes) drain() {
	if err := s.b.Err(); err != nil {
		s.fail(fmt.Errorf("changelog: session scan: %w", err))
	}
}
