package statelog

// The TTL store's layout in its Bytes: two entries per key.
//
//	0x01 | key                 -> time(expiry) | value   (by key: Get, All)
//	0x02 | time(expiry) | key  -> empty                  (by expiry: Expire)
//
// Keys are stored as they are: after the kind byte, or after the
// fixed-length time, the rest is the key. The 0x02 entries are a local
// index (TTLIndex, see index.go): written to Badger, never to the
// changelog, rebuilt from the 0x01 entries on restore, so a Put is one
// changelog record.
//
// Put and Delete read the key's old entry to delete its index entry, so
// the index has one entry per key. A restore cannot do that: it derives
// index entries from the records it applies, without reading the state,
// and a tombstone carries no expiry to find one by. After a restore the
// index may therefore hold stale entries, of an expiry a key no longer
// has: one per record of the key that the restore applied before its
// last. Expire checks each index entry it meets against the key's primary
// entry and deletes the key only when that has expired, so a stale entry
// costs space until its own expiry, at most the TTL, never a live key.

import (
	"errors"
	"fmt"
	"iter"
	"math"
	"time"
)

// TTLBytes is a key-value store on byte keys whose entries expire, built
// on a Bytes that it uses alone: each entry is kept for the TTL after it
// was last written, measured in the stream time the store is given
// through Expire. An expired entry is invisible to Get and All at once,
// and deleted by Expire, a bounded number per call. It corresponds to a
// Kafka Streams key-value store with a punctuator deleting old entries,
// the usual deduplication store; serdes go on top.
//
// Stream time is known from Expire alone and starts at the zero time (the
// stream time of a task before its first record): an entry written
// before the first call expires as soon as Expire is given a real stream
// time. Times are kept to the millisecond.
//
// Each key costs two entries of the Bytes (see the layout at the top of
// ttl.go), and each Put or Delete one changelog record: the expiry index
// is local (see [TTLIndex]). Slices passed in are not retained; slices
// returned or yielded belong to the caller. An error met while iterating
// ends the iteration and is reported by Err.
//
// A TTLBytes is used by one goroutine at a time.
type TTLBytes struct {
	b   Bytes
	ttl int64 // milliseconds
	now int64 // the stream time, in Unix milliseconds
	// nextDue is a time before which no index entry expires: Expire does
	// nothing while the stream time is before it. math.MinInt64 when not
	// known (a store just opened has not read its index yet).
	nextDue int64
	// from is where Expire's next scan of the index starts: every index
	// entry below it is deleted. Entries that Puts add later land above
	// it, as their expiry is after the stream time Expire saw.
	from []byte
	err  error
}

// zeroMillis is the zero time.Time in Unix milliseconds,
// time.Time{}.UnixMilli(): the stream time of a task that has processed
// no record.
const zeroMillis = -62135596800000

// NewTTLBytes returns a TTL store on b, which it must use alone. Entries
// expire ttl after they were written; ttl must be a positive whole number
// of milliseconds, the store's precision.
func NewTTLBytes(b Bytes, ttl time.Duration) (*TTLBytes, error) {
	var errs []error
	if b == nil {
		errs = append(errs, errors.New("changelog: ttl store: Bytes is nil"))
	}
	if ttl < time.Millisecond || ttl%time.Millisecond != 0 {
		errs = append(errs, fmt.Errorf("changelog: ttl store: ttl %v is not a positive whole number of milliseconds", ttl))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return &TTLBytes{b: b, ttl: ttl.Milliseconds(), now: zeroMillis, nextDue: math.MinInt64}, nil
}

// TTL returns the ttl given to NewTTLBytes.
func (t *TTLBytes) TTL() time.Duration { return time.Duration(t.ttl) * time.Millisecond }

func ttlKey(key []byte) []byte {
	return append(append(make([]byte, 0, len(key)+1), prefixByKey), key...)
}

func ttlIndexKey(key []byte, expiry int64) []byte {
	return append(appendMillis(append(make([]byte, 0, len(key)+1+TimeLen), prefixByTime), expiry), key...)
}

// ttlValue splits a primary entry's value into its expiry and value.
func ttlValue(k, v []byte) (expiry int64, value []byte, err error) {
	if len(v) < TimeLen {
		return 0, nil, malformed("ttl entry's value is %d bytes, shorter than its expiry", k, len(v))
	}
	expiry, _ = decodeMillis(v[:TimeLen])
	return expiry, v[TimeLen:], nil
}

// Get returns the value of key, or nil when it is absent or expired.
func (t *TTLBytes) Get(key []byte) ([]byte, error) {
	k := ttlKey(key)
	v, err := t.b.Get(k)
	if err != nil {
		return nil, fmt.Errorf("changelog: ttl get: %w", err)
	}
	if v == nil {
		return nil, nil
	}
	expiry, value, err := ttlValue(k, v)
	if err != nil || expiry <= t.now {
		return nil, err
	}
	return value, nil
}

// Put sets the value of key, which expires the TTL after the stream time
// Expire last saw. A nil value is stored as empty. Writing a key again
// gives it a new expiry. It reads the key's old entry, if any, to delete
// its index entry: one point read and up to three writes, of which one
// changelog record.
func (t *TTLBytes) Put(key, value []byte) error {
	expiry := math.MaxInt64 - t.ttl // saturated: a stream time this late is not a real one
	if t.now < expiry {
		expiry = t.now + t.ttl
	}
	k := ttlKey(key)
	old, known, err := t.expiryOf(k)
	if err != nil {
		return fmt.Errorf("changelog: ttl put: %w", err)
	}
	v := appendMillis(make([]byte, 0, TimeLen+len(value)), expiry)
	// The new index entry first, the old one last: a failure in between
	// leaves a stale entry, which Expire tolerates, never a key that it
	// cannot find.
	if err := t.b.Put(ttlIndexKey(key, expiry), []byte{}); err != nil {
		return fmt.Errorf("changelog: ttl put: %w", err)
	}
	if err := t.b.Put(k, append(v, value...)); err != nil {
		return fmt.Errorf("changelog: ttl put: %w", err)
	}
	if known && old != expiry {
		if err := t.b.Delete(ttlIndexKey(key, old)); err != nil {
			return fmt.Errorf("changelog: ttl put: %w", err)
		}
	}
	t.nextDue = min(t.nextDue, expiry)
	return nil
}

// Delete removes key, and its index entry; deleting an absent key is not
// an error.
func (t *TTLBytes) Delete(key []byte) error {
	k := ttlKey(key)
	old, known, err := t.expiryOf(k)
	if err != nil {
		return fmt.Errorf("changelog: ttl delete: %w", err)
	}
	if err := t.b.Delete(k); err != nil {
		return fmt.Errorf("changelog: ttl delete: %w", err)
	}
	if known {
		if err := t.b.Delete(ttlIndexKey(key, old)); err != nil {
			return fmt.Errorf("changelog: ttl delete: %w", err)
		}
	}
	return nil
}

// expiryOf returns the expiry of primary entry k, and whether it has one.
// A value too short to hold one (corrupt) has none: writing over it or
// deleting it stays possible, and an index entry of it, if any, is stale
// for Expire to remove.
func (t *TTLBytes) expiryOf(k []byte) (expiry int64, ok bool, err error) {
	v, err := t.b.Get(k)
	if err != nil || len(v) < TimeLen {
		return 0, false, err
	}
	expiry, _ = decodeMillis(v[:TimeLen])
	return expiry, true, nil
}

// All yields every entry that has not expired, in key order
// (bytes.Compare), with its value.
func (t *TTLBytes) All() iter.Seq2[[]byte, []byte] {
	return func(yield func([]byte, []byte) bool) {
		defer t.drain()
		for k, v := range t.b.Range([]byte{prefixByKey}, []byte{prefixByKey + 1}) {
			expiry, value, err := ttlValue(k, v)
			if err != nil {
				t.fail(err)
				return
			}
			if expiry <= t.now {
				continue
			}
			if !yield(k[1:], value) {
				return
			}
		}
	}
}

// Expire advances the store's stream time to streamTime (it never goes
// back), after which an entry whose expiry is not after it is expired,
// and deletes up to limit expired entries, returning how many it
// deleted. Expired entries left for later calls are invisible already.
//
// Its cost is bounded by limit: one scan of the expiry index reading at
// most limit+1 entries, and per entry one point read and at most two
// deletes (one changelog tombstone). A call finds nothing to do without
// reading the index when no entry can be due yet: the store remembers the
// next expiry it saw. Each Put adds at most one index entry, so a caller
// that calls Expire with a limit of at least two before each Put keeps up
// with any rate of writes.
func (t *TTLBytes) Expire(streamTime time.Time, limit int) (removed int, err error) {
	t.now = max(t.now, streamTime.UnixMilli())
	if t.now < t.nextDue || limit <= 0 {
		return 0, nil
	}
	lo := t.from
	if lo == nil {
		lo = []byte{prefixByTime}
	}
	batch := make([][]byte, 0, min(limit, expireBatch))
	next := int64(math.MaxInt64) // the index's first expiry after the batch, if any
	var bad error
	for ik := range t.b.Range(lo, []byte{prefixByTime + 1}) {
		if len(ik) < 1+TimeLen {
			bad = malformed("ttl index entry is %d bytes", ik, len(ik))
			break
		}
		expiry, _ := decodeMillis(ik[1 : 1+TimeLen])
		if expiry > t.now || len(batch) == limit {
			next = expiry
			break
		}
		batch = append(batch, ik)
	}
	if err := errors.Join(t.b.Err(), bad); err != nil {
		return 0, fmt.Errorf("changelog: ttl expire: %w", err)
	}
	for _, ik := range batch {
		gone, err := t.expireEntry(ik)
		if err != nil {
			return removed, err
		}
		if gone {
			removed++
		}
		t.from = append(ik, 0)
	}
	t.nextDue = next
	return removed, nil
}

// expireEntry deletes index entry ik, which has expired, and its key's
// primary entry if that has expired too (the index entry may be stale).
func (t *TTLBytes) expireEntry(ik []byte) (removed bool, err error) {
	k := ttlKey(ik[1+TimeLen:])
	v, err := t.b.Get(k)
	if err != nil {
		return false, fmt.Errorf("changelog: ttl expire: %w", err)
	}
	if v != nil {
		expiry, _, err := ttlValue(k, v)
		if err != nil {
			return false, err
		}
		if expiry <= t.now {
			if err := t.b.Delete(k); err != nil {
				return false, fmt.Errorf("changelog: ttl expire: %w", err)
			}
			removed = true
		}
	}
	if err := t.b.Delete(ik); err != nil {
		return removed, fmt.Errorf("changelog: ttl expire: %w", err)
	}
	return removed, nil
}

// Err returns the first error an iterator of t met since the last call,
// and clears it.
func (t *TTLBytes) Err() error {
	err := t.err
	t.err = nil
	if err == nil {
		t.drain()
		err, t.err = t.err, nil
	}
	return err
}

func (t *TTLBytes) fail(err error) {
	if t.err == nil {
		t.err = err
	}
}

func (t *TTLBytes) drain() {
	if err := t.b.Err(); err != nil {
		t.fail(fmt.Errorf("changelog: ttl scan: %w", err))
	}
}

type ttlIndex struct{}

func (ttlIndex) Holds(key []byte) bool { return holdsIndex(key) }

// Derive maps 0x01 | key -> time(expiry) | value to 0x02 | time(expiry) |
// key. A deletion implies nothing: its index entry is left stale (see the
// layout at the top of ttl.go).
func (ttlIndex) Derive(dst []Entry, e Entry) ([]Entry, error) {
	if len(e.Key) == 0 || e.Key[0] != prefixByKey {
		return dst, malformed("not a ttl store entry", e.Key)
	}
	if e.Deleted {
		return dst, nil
	}
	if len(e.Value) < TimeLen {
		return dst, malformed("ttl entry's value is %d bytes, shorter than its expiry", e.Key, len(e.Value))
	}
	ik := make([]byte, 0, len(e.Key)+TimeLen)
	ik = append(append(append(ik, prefixByTime), e.Value[:TimeLen]...), e.Key[1:]...)
	return append(dst, Entry{Key: ik, Value: []byte{}}), nil
}
