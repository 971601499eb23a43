package statelog

// Local indexes: the entries a store keeps in its Bytes only to find its
// primary entries in another order (the window and session stores' time
// indexes, the TTL store's expiry index). They are written to Badger with
// the commit, as every change of the write buffer is, but not to the
// changelog: each can be computed from a primary entry, so the restore
// rebuilds them (RestoreEntries) instead of reading them back. An update
// thus costs one changelog record, not one per entry it wrote.
//
// Which keys are index keys is a property of the store's layout, not of
// the write: every layout with an index puts a kind byte first, 0x01
// (prefixByKey) for primary entries and 0x02 (prefixByTime) for index
// entries, and the Index of the store's kind tells them apart. The
// key-value store, whose keys are the user's, has none.
//
// # Changelogs written before
//
// weir versions before local indexes sent the index entries of window and
// session stores to the changelog too. RestoreEntries drops such records:
// the primary records beside them rebuild the same index entries, a put
// its entry and a tombstone its deletion, so restoring an old changelog
// gives the state it gave before. They stay in the topic until retention
// deletes them (those changelogs are compact,delete), as nothing sends
// their tombstones any more. The reverse does not hold: a version before
// local indexes restores a changelog written since without building the
// index, so that its FetchAll and Expire miss the restored windows and
// sessions. Going back to such a version with window or session stores
// whose state it must restore is not supported.

import (
	"fmt"
)

// Index is the local index of a store kind (see "Local indexes" in
// index.go's header): which entries of the store's Bytes are index
// entries, kept in Badger but never sent to the changelog, and how a
// primary entry implies them. Implementations hold no state and are safe
// for concurrent use.
type Index interface {
	// Holds reports whether key is an index entry: written to the store's
	// Bytes, never to its changelog.
	Holds(key []byte) bool
	// Derive appends to dst the index entries that applying primary entry
	// e (not an index entry) implies, and returns the extended slice: the
	// index entry to write for a value, the one to delete for a deletion
	// where the key alone names it. It fails, wrapping changelog.ErrMalformedKey,
	// when e cannot be an entry of the store. The entries appended share
	// no memory with e.
	Derive(dst []Entry, e Entry) ([]Entry, error)
}

// RestoreEntries appends to dst the entries that applying the changelog
// records recs, in order, writes to a store whose index is idx (nil for
// none), and returns the extended slice: each record as an entry (a nil
// value is a deletion), followed by the index entries it implies. A
// record's timestamp is its value's (Entry.Stamped) when the record carries
// TimeHeader, or when fromSource says the changelog is the store's input
// topic, whose records' timestamps are the rows' (as Kafka Streams reads a
// source table's).
//
// A record of an index entry, which changelogs written before local
// indexes hold, is dropped: the primary records rebuild the index (see
// "Changelogs written before" in index.go's header).
func RestoreEntries(dst []Entry, recs []Record, idx Index, fromSource bool) ([]Entry, error) {
	for _, r := range recs {
		e := Entry{Key: r.Key, Value: r.Value, Deleted: r.Value == nil}
		if !e.Deleted && (r.Stamped || fromSource) {
			e.Stamped, e.Time = true, r.Time
		}
		if idx == nil {
			dst = append(dst, e)
			continue
		}
		if idx.Holds(r.Key) {
			continue
		}
		dst = append(dst, e)
		var err error
		if dst, err = idx.Derive(dst, e); err != nil {
			return dst, fmt.Errorf("changelog: record at offset %d: %w", r.Offset, err)
		}
	}
	return dst, nil
}

// WindowIndex returns the index of the window store (WindowBytes): its
// time index, one entry per window.
func WindowIndex() Index { return windowIndex{} }

// SessionIndex returns the index of the session store (SessionBytes): its
// index by end time, one entry per session.
func SessionIndex() Index { return sessionIndex{} }

// TTLIndex returns the index of the TTL store (TTLBytes): its expiry
// index, one entry per key, and after a restore possibly stale ones (see
// ttl.go). The restore derives no deletion from a tombstone, which
// carries no expiry.
func TTLIndex() Index { return ttlIndex{} }

// holdsIndex is Holds of every layout with a kind byte.
func holdsIndex(key []byte) bool { return len(key) > 0 && key[0] == prefixByTime }

// indexOf returns the index entry for primary entry e with key ik: a
// value for a value, a deletion for a deletion.
func indexOf(dst []Entry, e Entry, ik []byte) []Entry {
	if e.Deleted {
		return append(dst, Entry{Key: ik, Deleted: true})
	}
	return append(dst, Entry{Key: ik, Value: []byte{}})
}

// primaryParts checks that key is a primary entry of a layout whose user
// key (AppendKey's encoding) is followed by times TimeLen bytes, and
// returns the encoded user key and the times. It checks the terminator,
// not every escape: that is the reads' job, as for a key written locally.
func primaryParts(key []byte, times int, store string) (enc, tail []byte, err error) {
	n := len(key) - times*TimeLen
	if len(key) == 0 || key[0] != prefixByKey || n < 3 || key[n-2] != escByte || key[n-1] != escTerm {
		return nil, nil, malformed("not a %s entry", key, store)
	}
	return key[1:n], key[n:], nil
}

type windowIndex struct{}

func (windowIndex) Holds(key []byte) bool { return holdsIndex(key) }

// Derive maps 0x01 | key | start to 0x02 | start | key.
func (windowIndex) Derive(dst []Entry, e Entry) ([]Entry, error) {
	enc, start, err := primaryParts(e.Key, 1, "window store")
	if err != nil {
		return dst, err
	}
	ik := make([]byte, 0, len(e.Key))
	ik = append(append(append(ik, prefixByTime), start...), enc...)
	return indexOf(dst, e, ik), nil
}

type sessionIndex struct{}

func (sessionIndex) Holds(key []byte) bool { return holdsIndex(key) }

// Derive maps 0x01 | key | end | start to 0x02 | end | key | start.
func (sessionIndex) Derive(dst []Entry, e Entry) ([]Entry, error) {
	enc, times, err := primaryParts(e.Key, 2, "session store")
	if err != nil {
		return dst, err
	}
	ik := make([]byte, 0, len(e.Key))
	ik = append(append(append(append(ik, prefixByTime), times[:TimeLen]...), enc...), times[TimeLen:]...)
	return indexOf(dst, e, ik), nil
}
