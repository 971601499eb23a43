package statelog

// The window store's layout in its Bytes: two entries per window.
//
//	0x01 | AppendKey(key) | time(start)  -> value   (by key: Fetch, FetchRange, All)
//	0x02 | time(start) | AppendKey(key)  -> empty   (by time: FetchAll, Expire)
//
// The 0x02 entries are a local index (WindowIndex, see index.go): written
// to Badger, never to the changelog, rebuilt from the 0x01 entries on
// restore. A window update is one changelog record.
//
// Put writes the index entry before the window's entry and deletion removes
// the window's entry first, so a failure between the two writes leaves at
// worst an index entry without its window, which readers skip and Expire
// removes, never a window that Expire cannot find.

import (
	"errors"
	"fmt"
	"github.com/weirstream/weir/changelog"
	"iter"
	"math"
	"slices"
	"time"
)

const (
	prefixByKey  = 0x01
	prefixByTime = 0x02

	// expireBatch bounds the index entries Expire collects before deleting
	// them, so that it holds no iterator while it writes (see the cost in
	// WindowBytes.Expire's doc).
	expireBatch = 512
)

// WindowKey names a window of a WindowBytes: the user key and the window's
// start. Key belongs to the receiver; Start is in UTC, to the millisecond.
type WindowKey struct {
	Key   []byte
	Start time.Time
}

// WindowBytes is a window store on byte keys, built on a Bytes that it uses
// alone: values are kept per (key, window start), and windows older than
// the retention are removed by Expire. It corresponds to Kafka Streams'
// WindowStore<Bytes, byte[]> without duplicates; serdes go on top.
//
// Times are kept to the millisecond (see AppendTime), and returned in UTC.
// Slices passed in are not retained; slices returned or yielded belong to
// the caller. Iterators read the Bytes as they go: changing the store from
// inside a loop is safe only if the Bytes allows it (Memory does), so
// collect first, then write. An error met while iterating ends the
// iteration and is reported by Err.
//
// Each window costs two entries of the Bytes, and each Put or deletion two
// writes, of which one changelog record: the time index is local, see the
// layout at the top of window.go and [WindowIndex].
//
// A WindowBytes is used by one goroutine at a time.
type WindowBytes struct {
	b         Bytes
	retention time.Duration
	size      time.Duration
	clock     retentionClock
	err       error
}

// NewWindowBytes returns a window store on b, which it must use alone. Its
// windows are size long and retained for retention (at least size; Kafka
// Streams' retention of a windowed store, Materialized.withRetention,
// which must cover the window size plus the grace period): a window
// starting at or before the stream time seen by Expire minus retention is
// expired, as Kafka Streams' window stores return only later windows.
// size must be at least a millisecond, the store's precision; it is kept
// for Size, the store needs only starts.
func NewWindowBytes(b Bytes, retention, size time.Duration) (*WindowBytes, error) {
	var errs []error
	if b == nil {
		errs = append(errs, errors.New("changelog: window store: Bytes is nil"))
	}
	if size < time.Millisecond {
		errs = append(errs, fmt.Errorf("changelog: window store: size %v is below one millisecond", size))
	}
	if retention < size {
		errs = append(errs, fmt.Errorf("changelog: window store: retention %v is shorter than the window size %v", retention, size))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	clock := newRetentionClock(retention)
	clock.exclusive = true
	return &WindowBytes{b: b, retention: retention, size: size, clock: clock}, nil
}

// Size returns the window size given to NewWindowBytes.
func (w *WindowBytes) Size() time.Duration { return w.size }

// Retention returns the retention given to NewWindowBytes.
func (w *WindowBytes) Retention() time.Duration { return w.retention }

func windowKey(key []byte, startMs int64) []byte {
	k := AppendKey(append(make([]byte, 0, len(key)+3+TimeLen), prefixByKey), key)
	return appendMillis(k, startMs)
}

func windowIndexKey(key []byte, startMs int64) []byte {
	k := appendMillis(append(make([]byte, 0, len(key)+3+TimeLen), prefixByTime), startMs)
	return AppendKey(k, key)
}

// Put sets the value of key's window starting at windowStart. A nil value
// deletes the window (an empty, non-nil value is stored as empty). A
// window that expired already (it starts at or before the stream time
// seen by Expire minus the retention) is not written, and the error wraps
// changelog.ErrExpired; deleting one is allowed.
func (w *WindowBytes) Put(key []byte, windowStart time.Time, value []byte) error {
	return w.put(key, windowStart, value, nil)
}

// PutStamped is Put with the value's timestamp, ts in milliseconds (see
// Bytes.PutStamped).
func (w *WindowBytes) PutStamped(key []byte, windowStart time.Time, value []byte, ts int64) error {
	return w.put(key, windowStart, value, &ts)
}

// put is Put, with the value's timestamp when ts is not nil.
func (w *WindowBytes) put(key []byte, windowStart time.Time, value []byte, ts *int64) error {
	start := windowStart.UnixMilli()
	if value == nil {
		return w.delete(key, start)
	}
	if cutoff := w.clock.cutoff(); start < cutoff {
		return fmt.Errorf("%w: window starting %v is before the retention cutoff %v", changelog.ErrExpired, millisTime(start), millisTime(cutoff))
	}
	w.clock.indexed(start)
	if err := w.b.Put(windowIndexKey(key, start), []byte{}); err != nil {
		return fmt.Errorf("changelog: window put: %w", err)
	}
	var err error
	if ts != nil {
		err = w.b.PutStamped(windowKey(key, start), value, *ts)
	} else {
		err = w.b.Put(windowKey(key, start), value)
	}
	if err != nil {
		return fmt.Errorf("changelog: window put: %w", err)
	}
	return nil
}

func (w *WindowBytes) delete(key []byte, start int64) error {
	if err := w.b.Delete(windowKey(key, start)); err != nil {
		return fmt.Errorf("changelog: window delete: %w", err)
	}
	if err := w.b.Delete(windowIndexKey(key, start)); err != nil {
		return fmt.Errorf("changelog: window delete: %w", err)
	}
	return nil
}

// Fetch returns the value of key's window starting at windowStart, or nil
// when there is none or it expired.
func (w *WindowBytes) Fetch(key []byte, windowStart time.Time) ([]byte, error) {
	v, _, _, err := w.FetchStamped(key, windowStart)
	return v, err
}

// FetchStamped is Fetch with the value's timestamp in milliseconds;
// stamped is false for a value put without one (see Bytes.GetStamped).
func (w *WindowBytes) FetchStamped(key []byte, windowStart time.Time) (value []byte, ts int64, stamped bool, err error) {
	start := windowStart.UnixMilli()
	if start < w.clock.cutoff() {
		return nil, 0, false, nil
	}
	v, ts, stamped, err := w.b.GetStamped(windowKey(key, start))
	if err != nil {
		return nil, 0, false, fmt.Errorf("changelog: window fetch: %w", err)
	}
	return v, ts, stamped, nil
}

// FetchRange yields key's windows that start in [from, to], both ends
// included, in ascending order of start, with their values. Expired
// windows are skipped. It corresponds to Kafka Streams' fetch(key,
// timeFrom, timeTo).
func (w *WindowBytes) FetchRange(key []byte, from, to time.Time) iter.Seq2[time.Time, []byte] {
	return w.fetchRange(key, from, to, false)
}

// FetchRangeBackward yields the windows of FetchRange in descending order
// of start (Kafka Streams' backwardFetch).
func (w *WindowBytes) FetchRangeBackward(key []byte, from, to time.Time) iter.Seq2[time.Time, []byte] {
	return w.fetchRange(key, from, to, true)
}

func (w *WindowBytes) fetchRange(key []byte, from, to time.Time, backward bool) iter.Seq2[time.Time, []byte] {
	return func(yield func(time.Time, []byte) bool) {
		lo := max(from.UnixMilli(), w.clock.cutoff())
		hi := to.UnixMilli()
		if lo > hi {
			return
		}
		defer w.drain()
		// [key|lo, key|hi + 0x00): the smallest key after key|hi is itself
		// followed by a zero byte, as every entry of key has the same length.
		loKey := windowKey(key, lo)
		scan := w.b.Range
		if backward {
			scan = w.b.Backward
		}
		for k, v := range scan(loKey, append(windowKey(key, hi), 0)) {
			if len(k) != len(loKey) {
				w.fail(malformed("window entry is %d bytes, not %d", k, len(k), len(loKey)))
				return
			}
			ms, _ := decodeMillis(k[len(k)-TimeLen:])
			if !yield(millisTime(ms), v) {
				return
			}
		}
	}
}

// FetchAll yields the windows of every key that start in [from, to], both
// ends included, ordered by start, then by key (bytes.Compare), with their
// values. Expired windows are skipped. It reads the time index, then each
// window by key: one point read per window yielded.
func (w *WindowBytes) FetchAll(from, to time.Time) iter.Seq2[WindowKey, []byte] {
	return func(yield func(WindowKey, []byte) bool) {
		lo := max(from.UnixMilli(), w.clock.cutoff())
		hi := to.UnixMilli()
		if lo > hi {
			return
		}
		defer w.drain()
		loKey := appendMillis([]byte{prefixByTime}, lo)
		hiKey := PrefixEnd(appendMillis([]byte{prefixByTime}, hi))
		for ik := range w.b.Range(loKey, hiKey) {
			key, start, err := decodeWindowIndexKey(ik)
			if err != nil {
				w.fail(err)
				return
			}
			v, err := w.b.Get(windowKey(key, start))
			if err != nil {
				w.fail(fmt.Errorf("changelog: window fetch: %w", err))
				return
			}
			if v == nil {
				continue // an index entry whose window is gone: see the layout
			}
			if !yield(WindowKey{Key: key, Start: millisTime(start)}, v) {
				return
			}
		}
	}
}

// All yields every window that has not expired, ordered by key
// (bytes.Compare), then by start, with its values (Kafka Streams' all(),
// in key order rather than time order). It reads no index.
func (w *WindowBytes) All() iter.Seq2[WindowKey, []byte] {
	return func(yield func(WindowKey, []byte) bool) {
		defer w.drain()
		cutoff := w.clock.cutoff()
		for k, v := range w.b.Range([]byte{prefixByKey}, []byte{prefixByKey + 1}) {
			key, rest, err := DecodeKey(k[1:])
			if err != nil {
				w.fail(err)
				return
			}
			start, err := decodeMillis(rest)
			if err != nil {
				w.fail(err)
				return
			}
			if start < cutoff {
				continue
			}
			if !yield(WindowKey{Key: key, Start: millisTime(start)}, v) {
				return
			}
		}
	}
}

func decodeWindowIndexKey(ik []byte) (key []byte, start int64, err error) {
	if len(ik) < 1+TimeLen {
		return nil, 0, malformed("window index entry is %d bytes", ik, len(ik))
	}
	start, _ = decodeMillis(ik[1 : 1+TimeLen])
	key, rest, err := DecodeKey(ik[1+TimeLen:])
	if err != nil {
		return nil, 0, err
	}
	if len(rest) != 0 {
		return nil, 0, malformed("window index entry has %d trailing bytes", ik, len(rest))
	}
	return key, start, nil
}

// Expire advances the store's stream time to streamTime (it never goes
// back) and deletes every window that starts before stream time minus the
// retention, returning how many it deleted. Later Puts of such windows
// fail with changelog.ErrExpired, and reads skip them even before Expire deleted
// them.
//
// Expire reads the time index from where its last call stopped, so its
// cost is one seek per 512 expired windows plus two deletes per expired
// window (one changelog tombstone), and a call that does not move the cutoff costs nothing. It
// removes every expired window before it returns, however many: after a
// long pause of the stream that can be many writes at once. On error some
// expired windows may remain (reads skip them); the next call that moves
// the cutoff deletes them. The first call after the store is opened scans
// the index from its start.
//
// Stream time is known from Expire alone: Put does not advance it, and a
// new store (or one reopened) has none, so nothing is expired until the
// first call.
func (w *WindowBytes) Expire(streamTime time.Time) (removed int, err error) {
	return expire(w.b, &w.clock, streamTime, func(ik []byte) error {
		key, start, err := decodeWindowIndexKey(ik)
		if err != nil {
			return err
		}
		return w.delete(key, start)
	})
}

// expire advances clock to streamTime and calls del with each entry of the
// time index (prefixByTime, then the time) below the new cutoff that
// earlier calls did not clear, counting them. It holds no iterator of b
// while del runs.
func expire(b Bytes, clock *retentionClock, streamTime time.Time, del func(indexKey []byte) error) (removed int, err error) {
	cutoff, from, ok := clock.advance(streamTime.UnixMilli())
	if !ok {
		return 0, nil
	}
	if clock.lowestKnown && cutoff <= clock.lowest {
		// Nothing is indexed below the cutoff: no scan. Stream time moves
		// with every record, windows expire only now and then.
		clock.expired(cutoff)
		return 0, nil
	}
	lo := []byte{prefixByTime}
	if from != math.MinInt64 {
		lo = appendMillis(lo, from)
	}
	hi := appendMillis([]byte{prefixByTime}, cutoff)
	for {
		batch := make([][]byte, 0, expireBatch)
		for ik := range b.Range(lo, hi) {
			batch = append(batch, ik)
			if len(batch) == expireBatch {
				break
			}
		}
		if err := b.Err(); err != nil {
			return removed, fmt.Errorf("changelog: expire: %w", err)
		}
		for _, ik := range batch {
			if err := del(ik); err != nil {
				return removed, err
			}
			removed++
		}
		if len(batch) < expireBatch {
			clock.expired(cutoff)
			return removed, findLowest(b, clock, hi)
		}
		lo = append(batch[len(batch)-1], 0)
	}
}

// Err returns the first error an iterator of w met since the last call,
// and clears it.
func (w *WindowBytes) Err() error {
	err := w.err
	w.err = nil
	if err == nil {
		w.drain()
		err, w.err = w.err, nil
	}
	return err
}

func (w *WindowBytes) fail(err error) {
	if w.err == nil {
		w.err = err
	}
}

// drain moves an error of the Bytes' iterator into w.err.
func (w *WindowBytes) drain() {
	if err := w.b.Err(); err != nil {
		w.fail(fmt.Errorf("changelog: window scan: %w", err))
	}
}

// retentionClock tracks the stream time a store has seen through Expire, in
// Unix milliseconds, and what it implies: the cutoff below which records
// are expired, and how far Expire has deleted.
type retentionClock struct {
	retention int64 // milliseconds
	observed  int64 // highest stream time seen; math.MinInt64 before any
	// clearedTo is the cutoff up to which every expired entry is deleted:
	// Expire's next scan starts there, as no Put can write below a cutoff.
	clearedTo int64
	// lowest, when lowestKnown, bounds the index from below: no entry is
	// indexed at an earlier time. Expire skips its scan while the cutoff
	// has not passed it (a scan costs an iterator, and stream time moves
	// with every record); a Put below it lowers it (indexed). A store
	// whose uncommitted writes are dropped is opened anew, clock included.
	lowest      int64
	lowestKnown bool
	// exclusive expires the time at the stream time minus the retention
	// too: a window store keeps what is later than that, as Kafka
	// Streams' window stores return only windows that start after it (a
	// stream-stream join finds what Kafka Streams' finds). A session
	// store keeps a session that ends at it, as Kafka Streams' session
	// aggregation still merges into it.
	exclusive bool
}

func newRetentionClock(retention time.Duration) retentionClock {
	return retentionClock{retention: retention.Milliseconds(), observed: math.MinInt64, clearedTo: math.MinInt64}
}

// cutoff returns the oldest time, in milliseconds, that is not expired.
func (c *retentionClock) cutoff() int64 {
	if c.observed < math.MinInt64+c.retention {
		return math.MinInt64 // no stream time yet, or saturated
	}
	if c.exclusive {
		return c.observed - c.retention + 1
	}
	return c.observed - c.retention
}

// advance moves the stream time to streamTime if it is later, and returns
// the range [from, cutoff) that Expire has to clear; ok is false when it
// is empty.
func (c *retentionClock) advance(streamTime int64) (cutoff, from int64, ok bool) {
	c.observed = max(c.observed, streamTime)
	cutoff = c.cutoff()
	return cutoff, c.clearedTo, cutoff > c.clearedTo
}

// expired records that every entry below cutoff is deleted.
func (c *retentionClock) expired(cutoff int64) { c.clearedTo = max(c.clearedTo, cutoff) }

// indexed records that an entry is indexed at time t, which lowers the
// bound Expire skips its scan below.
func (c *retentionClock) indexed(t int64) {
	if c.lowestKnown && t < c.lowest {
		c.lowest = t
	}
}

// findLowest sets clock's lowest index time to that of the first index
// entry at or after from (an index key), or to the largest time when
// there is none.
func findLowest(b Bytes, clock *retentionClock, from []byte) error {
	var first []byte
	for ik := range b.Range(from, []byte{prefixByTime + 1}) {
		first = slices.Clone(ik)
		break
	}
	if err := b.Err(); err != nil {
		return fmt.Errorf("changelog: expire: %w", err)
	}
	lowest := int64(math.MaxInt64)
	if first != nil {
		if len(first) < 1+TimeLen {
			return fmt.Errorf("changelog: expire: %w", malformed("an index key is %d bytes, shorter than a time", first, len(first)))
		}
		t, err := decodeMillis(first[1 : 1+TimeLen])
		if err != nil {
			return fmt.Errorf("changelog: expire: %w", err)
		}
		lowest = t
	}
	clock.lowest, clock.lowestKnown = lowest, true
	return nil
}
