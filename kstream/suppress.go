package kstream

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/weirstream/weir/internal/streamtime"
	"github.com/weirstream/weir/processor"
	"github.com/weirstream/weir/serde"
)

// Suppression says which updates of a table [WindowedTable.Suppress] or
// [Table.Suppress] holds back. The zero Suppression is invalid; create one
// with [UntilWindowCloses] (windowed tables only) or [UntilTimeLimit].
// Kafka Streams' Suppressed.
type Suppression struct {
	untilWindowCloses bool
	// idleClose is CloseWhenIdle's: 0 means stream time only.
	idleClose time.Duration
	// timeLimit, limit and whenFull are UntilTimeLimit's.
	timeLimit time.Duration
	limit     BufferLimit
	whenFull  WhenFull
}

// UntilWindowCloses holds every update of a window back until the window
// closes, then emits the window's final aggregate, once: Kafka Streams'
// Suppressed.untilWindowCloses.
//
// The buffer holds one entry per key and open window (the latest
// aggregate), in a key-value store on disk with a changelog, not in
// memory; so it is bounded by the keys and windows open at once, as the
// window store is, and not by a memory limit (Kafka Streams'
// BufferConfig.unbounded, which keeps its buffer in memory).
//
// A limit, if given (at most one), bounds the buffer further: an update
// that takes the buffer past it (limit.MaxRecords entries, or
// limit.MaxBytes bytes of serialized keys and values plus 8 per entry)
// fails the task with [ErrSuppressionBufferFull], as Kafka Streams'
// BufferConfig.shutDownWhenFull does; final results cannot be emitted
// early. The count is kept in memory and rebuilt from the store when the
// task starts.
func UntilWindowCloses(limit ...BufferLimit) Suppression {
	s := Suppression{untilWindowCloses: true}
	switch len(limit) {
	case 0:
	case 1:
		s.limit, s.whenFull = limit[0], FailWhenFull
	default:
		s.whenFull = -1 // reported by problems
	}
	return s
}

// CloseWhenIdle returns s, an [UntilWindowCloses] suppression, closing
// windows by the wall clock too when the suppression's stream time stops: once
// the stream time has not moved for d of wall-clock time, the suppression
// acts as if it had moved on with the wall clock since it stopped, and
// emits the windows that such a stream time would have closed. A quiet
// partition (no more records, so no stream time) then still gets its
// final results. Beyond Kafka Streams, which emits them only when records
// arrive again.
//
// What it costs: a window closed this way is final. An update of it that
// arrives later (the records were only late) is dropped by the
// suppression and counted in weir_records_late_total, as a record after
// the grace period is. The point up to which windows were closed is kept
// in the buffer's store, so a restart does not emit a window twice.
// Checked every d/2 of wall-clock time (at least every millisecond). d
// must be a whole number of milliseconds, at least one.
func (s Suppression) CloseWhenIdle(d time.Duration) Suppression {
	s.idleClose = d
	if d == 0 {
		s.idleClose = -1 // reported by problems
	}
	return s
}

// BufferLimit bounds the buffer of an [UntilTimeLimit] suppression. At
// least one field must be positive; 0 sets no limit of that kind. Kafka
// Streams' BufferConfig.maxRecords and maxBytes.
type BufferLimit struct {
	// MaxRecords is the most entries the buffer holds: one per key and
	// window with updates held back.
	MaxRecords int
	// MaxBytes is the most bytes the entries take serialized, keys and
	// values as the buffer's store holds them.
	MaxBytes int64
}

// WhenFull says what an [UntilTimeLimit] suppression does when an update
// takes its buffer past its [BufferLimit].
type WhenFull int

const (
	// EmitEarlyWhenFull emits the entries buffered longest, before their
	// time limit, until the buffer is within its limit again: results
	// may come more often than the limit says, never later. Kafka
	// Streams' emitEarlyWhenFull.
	EmitEarlyWhenFull WhenFull = iota
	// FailWhenFull fails the task with [ErrSuppressionBufferFull]: the
	// update is not committed (under exactly once) and the application
	// stops rather than emit more often than the limit says. Kafka
	// Streams' shutDownWhenFull.
	FailWhenFull
)

// ErrSuppressionBufferFull is the error of a suppression with
// [FailWhenFull] whose buffer an update took past its [BufferLimit].
var ErrSuppressionBufferFull = errors.New("kstream: suppression buffer full")

// UntilTimeLimit holds the updates of each key and window back for d of
// stream time from the first update held, then emits the latest one:
// the update of an entry buffered at time t is emitted once the task's
// stream time reaches t + d, at a record of this table (an update that
// arrives out of order, already past its limit, is emitted at once) or
// at the first later record of the task that takes the stream time
// there. Updates that follow an emission start a new entry. The buffer
// is bounded by limit, and whenFull says what happens past it. d must be
// a whole number of milliseconds, 0 or more. Kafka Streams'
// Suppressed.untilTimeLimit.
//
// The buffer is a key-value store with a changelog, as for
// [UntilWindowCloses], ordered by the time each entry was buffered; the
// task also keeps an index of the entries in memory (a few dozen bytes
// per entry plus the serialized key), rebuilt from the store when the
// task starts.
func UntilTimeLimit(d time.Duration, limit BufferLimit, whenFull WhenFull) Suppression {
	return Suppression{timeLimit: d, limit: limit, whenFull: whenFull}
}

// problems returns what is wrong with s, for Build.
func (s Suppression) problems() []string {
	switch {
	case s.idleClose != 0 && !s.untilWindowCloses:
		return []string{"CloseWhenIdle applies to UntilWindowCloses only"}
	case s.idleClose != 0 && (s.idleClose < time.Millisecond || !wholeMS(s.idleClose)):
		return []string{fmt.Sprintf("CloseWhenIdle %v is not a positive whole number of milliseconds", s.idleClose)}
	case s.untilWindowCloses && s.whenFull == -1:
		return []string{"UntilWindowCloses takes one BufferLimit at most"}
	case s.untilWindowCloses && s.limit != (BufferLimit{}) && (s.limit.MaxRecords < 0 || s.limit.MaxBytes < 0):
		return []string{fmt.Sprintf("buffer limit %+v: MaxRecords and MaxBytes must not be negative", s.limit)}
	case s.untilWindowCloses:
		return nil
	case s == Suppression{}:
		return []string{"the zero Suppression; use UntilWindowCloses() or UntilTimeLimit"}
	}
	var p []string
	if s.timeLimit < 0 || !wholeMS(s.timeLimit) {
		p = append(p, fmt.Sprintf("time limit %v is not a whole number of milliseconds, 0 or more", s.timeLimit))
	}
	if s.limit.MaxRecords < 0 || s.limit.MaxBytes < 0 || (s.limit.MaxRecords == 0 && s.limit.MaxBytes == 0) {
		p = append(p, fmt.Sprintf("buffer limit %+v: set MaxRecords or MaxBytes, neither negative", s.limit))
	}
	if s.whenFull != EmitEarlyWhenFull && s.whenFull != FailWhenFull {
		p = append(p, fmt.Sprintf("unknown WhenFull %d", s.whenFull))
	}
	return p
}

// Suppress returns the table of the updates of t that s lets through.
//
// With [UntilWindowCloses], a window's updates are kept in the key-value
// store name (changelog "<application id>-<name>-changelog") and its
// final aggregate is emitted when the suppression's stream time (the
// largest timestamp of the updates that reached it; records the
// aggregation dropped as late do not) reaches the window's end plus the
// grace period of t's windows: at the first update that takes it there,
// whatever its key, after that update is buffered. Windows closed by one record are
// emitted in order of end, then start, then serialized key. Each final
// result keeps the timestamp of the window's last update and carries no
// headers. With [UntilTimeLimit], the store holds the entries of that
// suppression, which are emitted as it says, in the order they were
// buffered, with the same timestamps and no headers. name is required:
// it names the store and the node.
//
// Under exactly once the buffer's writes and deletes commit in the same
// transaction as the results they hold back or emit, so a crash neither
// loses a result nor emits one twice. A window whose suppression's stream
// time stops advancing (no more updates reach it) is not
// emitted until it moves on, as in Kafka Streams. Kafka Streams'
// KTable.suppress.
func (t *WindowedTable[K, V]) Suppress(name string, s Suppression) *WindowedTable[K, V] {
	for _, p := range s.problems() {
		t.b.fail("Suppress %q of %q: %s", name, t.name, p)
	}
	w, lag := t.windows, t.closeLag()
	if !s.untilWindowCloses {
		return t.suppressTimeLimit(name, s)
	}
	if t.cached != nil {
		// Final results need every update before the window closes.
		*t.cached = false
	}
	var spec *processor.KeyValueSpec[bufferKey[K], bufferValue[V]]
	if t.keys != nil && t.values != nil {
		spec = processor.KeyValue(name, serde.Serde[bufferKey[K]](bufferKeySerde[K]{t.keys}), serde.Serde[bufferValue[V]](bufferValueSerde[V]{t.values}))
	} else {
		// The aggregation reported its nil serde; Build fails.
		spec = processor.KeyValue[bufferKey[K], bufferValue[V]](name, nil, nil)
	}
	n := t.b.t.AddProcessor(name, func() processor.Processor[Windowed[K], V, Windowed[K], V] {
		return &suppressor[K, V]{spec: spec, closeLag: lag, name: name, limit: s.limit, idle: s.idleClose,
			keys: bufferKeySerde[K]{t.keys}, values: bufferValueSerde[V]{t.values}}
	}, t.node)
	t.b.t.AddStore(spec, n)
	t.b.t.KeyedByPartition(name) // the key after the window (bufferKeySerde.KeyLayout)
	return &WindowedTable[K, V]{b: t.b, node: n, name: name, keys: t.keys, values: t.values, windows: w, sessions: t.sessions}
}

// Suppress returns the table of the updates of t that s lets through: s
// must be [UntilTimeLimit] (a table without windows has none to close).
// Each key's updates are held back for the suppression's time of stream
// time and emitted as its latest, as for a windowed table (see
// [WindowedTable.Suppress]), which rate-limits a table's downstream
// updates. The buffer is the key-value store name (changelog
// "<application id>-<name>-changelog"), committed with the results under
// exactly once; the nodes are named name, name+"-windowed" and
// name+"-unwindowed". Kafka Streams' KTable.suppress.
func (t *Table[K, V]) Suppress(name string, s Suppression) *Table[K, V] {
	if s.untilWindowCloses {
		t.b.fail("Suppress %q of %q: UntilWindowCloses needs a windowed table; use UntilTimeLimit", name, t.name)
		return t
	}
	for _, p := range s.problems() {
		t.b.fail("Suppress %q of %q: %s", name, t.name, p)
	}
	// The time-limit suppressor buffers by key and window: every key
	// gets the same empty window at the epoch, taken off again after. It
	// buffers the table's changes, each merged with the one it replaces
	// so that the old value is the one emitted last.
	zero := time.UnixMilli(0).UTC()
	in := t.b.t.AddProcessor(name+"-windowed", processor.Func(func(ctx processor.Context[Windowed[K], change[V]], rec processor.Record[K, change[V]]) error {
		return ctx.Forward(processor.Record[Windowed[K], change[V]]{Key: Windowed[K]{Key: rec.Key, Start: zero, End: zero},
			Value: rec.Value, Timestamp: rec.Timestamp, Headers: rec.Headers})
	}), t.node)
	var values serde.Serde[change[V]]
	if t.values != nil {
		values = changeSerde[V]{t.values}
	}
	merge := func(held, next change[V]) change[V] {
		next.old, next.hasOld = held.old, held.hasOld
		return next
	}
	if t.values == nil {
		t.b.fail("Suppress %q of %q: the table's value serde is unknown (it comes from a MapValues); the buffer needs one", name, t.name)
	}
	held := addTimeLimitSuppressor(t.b, in, name, t.keys, values, s, merge)
	out := t.b.t.AddProcessor(name+"-unwindowed", processor.Func(func(ctx processor.Context[K, change[V]], rec processor.Record[Windowed[K], change[V]]) error {
		return ctx.Forward(processor.Record[K, change[V]]{Key: rec.Key.Key, Value: rec.Value, Timestamp: rec.Timestamp, Headers: rec.Headers})
	}), held)
	return &Table[K, V]{b: t.b, node: out, name: name, keys: t.keys, values: t.values}
}

// suppressor is the processor of Suppress(UntilWindowCloses()): Kafka
// Streams' KTableSuppressProcessor with a final-results buffer.
type suppressor[K, V any] struct {
	spec *processor.KeyValueSpec[bufferKey[K], bufferValue[V]]
	// closeLag is how far stream time passes a window's end when the
	// window closes (WindowedTable.closeLag).
	closeLag int64
	name     string
	buf      processor.KeyValueStore[bufferKey[K], bufferValue[V]]
	ctx      processor.Context[Windowed[K], V]
	// limit, when not zero, bounds the buffer (UntilWindowCloses(limit)):
	// entries and bytes count what it holds, once counted is set.
	limit          BufferLimit
	keys           bufferKeySerde[K]
	values         bufferValueSerde[V]
	entries, bytes int64
	counted        bool
	// earliest, when known, is the earliest window end in the buffer
	// (math.MaxInt64 when it is empty), so that emit opens no iterator
	// while no window can close: stream time moves with every record.
	earliest      int64
	earliestKnown bool
	// idle is CloseWhenIdle's (0: none). closedThrough is the window end
	// up to which the wall clock has closed windows (math.MinInt64 none),
	// kept in the store under closedKey; lastST and since are the stream
	// time last seen by the idle check and the wall-clock time it was
	// first seen.
	idle          time.Duration
	closedThrough int64
	lastST        int64
	since         time.Time
	// now is the stream time the suppression has observed: the
	// timestamps of the updates that reached it, which close windows.
	now streamtime.Observed
}

// closedMark is the end and start of the buffer entry that keeps the
// point up to which the wall clock closed windows (CloseWhenIdle): after
// every window in the store's order (end, big-endian), so that emit,
// which stops at the first window still open, never reaches it.
const closedMark = math.MaxInt64

func (s *suppressor[K, V]) closedKey() bufferKey[K] {
	return bufferKey[K]{end: closedMark, start: closedMark}
}

func (s *suppressor[K, V]) Init(ctx processor.Context[Windowed[K], V]) (err error) {
	if s.buf, err = s.spec.Open(ctx); err != nil {
		return err
	}
	s.ctx = ctx
	s.earliestKnown = false // the first emit reads the restored buffer
	// Windows close as the updates reaching the suppression move its
	// stream time (Process), not the task's: records dropped before the
	// aggregation, or late for it, close nothing (Kafka Streams'
	// KTableSuppressProcessor).
	if s.idle <= 0 {
		return nil
	}
	s.closedThrough, s.since = math.MinInt64, time.Time{}
	v, found, err := s.buf.Get(s.closedKey())
	if err != nil {
		return err
	}
	if found {
		s.closedThrough = v.ts
	}
	_, err = ctx.Schedule(max(s.idle/2, time.Millisecond), processor.WallClockTime, s.idleTick)
	return err
}

// idleTick closes windows by the wall clock once the stream time has not
// moved for s.idle (see CloseWhenIdle).
func (s *suppressor[K, V]) idleTick(now time.Time) error {
	ms, ok := s.now.Get()
	if !ok {
		return nil
	}
	if ms != s.lastST || s.since.IsZero() {
		s.lastST, s.since = ms, now
		return nil
	}
	idleFor := now.Sub(s.since)
	if idleFor < s.idle {
		return nil
	}
	closeAt := s.lastST + idleFor.Milliseconds() - s.closeLag
	if closeAt <= s.closedThrough {
		return nil
	}
	s.closedThrough = closeAt
	if err := s.buf.Put(s.closedKey(), bufferValue[V]{ts: closeAt}); err != nil {
		return err
	}
	return s.emitUpTo(closeAt)
}

func (s *suppressor[K, V]) Close() error { return nil }

// Process buffers an update, then emits the windows that the stream time
// observed with it closes.
func (s *suppressor[K, V]) Process(ctx processor.Context[Windowed[K], V], rec processor.Record[Windowed[K], V]) error {
	closeAt := s.now.Observe(ctx, rec.Timestamp.UnixMilli()) - s.closeLag
	if err := s.add(ctx, rec, closeAt); err != nil {
		return err
	}
	return s.emitUpTo(closeAt)
}

// add buffers an update. The aggregation forwards updates of open
// windows only, so the entry waits for the stream time to close its
// window.
func (s *suppressor[K, V]) add(ctx processor.Context[Windowed[K], V], rec processor.Record[Windowed[K], V], closeAt int64) error {
	k := bufferKey[K]{end: rec.Key.End.UnixMilli(), start: rec.Key.Start.UnixMilli(), key: rec.Key.Key}
	if s.idle > 0 && k.end <= s.closedThrough {
		// The wall clock closed this window, and emitted its result.
		if !rec.Tombstone {
			processor.CountLate(ctx)
			ctx.Logger().Debug("weir: update of a window closed by the wall clock dropped", "store", s.name,
				"window_end_ms", k.end, "closed_through_ms", s.closedThrough)
		}
		return nil
	}
	if rec.Tombstone {
		// A session merged into another: it has no final result.
		return s.drop(k)
	}
	v := bufferValue[V]{value: rec.Value, ts: rec.Timestamp.UnixMilli()}
	s.earliest = min(s.earliest, k.end)
	if s.limit == (BufferLimit{}) {
		return s.buf.Put(k, v)
	}
	if err := s.account(k, v); err != nil {
		return err
	}
	if err := s.buf.Put(k, v); err != nil {
		return err
	}
	if s.full() {
		// Windows this record's stream time closes go first, as the
		// punctuation after it would emit them.
		if err := s.emitUpTo(closeAt); err != nil {
			return err
		}
	}
	if s.full() {
		return fmt.Errorf("kstream: suppression %s: %d entries of %d bytes, past the limit %+v: %w",
			s.name, s.entries, s.bytes, s.limit, ErrSuppressionBufferFull)
	}
	return nil
}

// drop deletes the buffered entry k, if there is one.
func (s *suppressor[K, V]) drop(k bufferKey[K]) error {
	old, found, err := s.buf.Get(k)
	if err != nil || !found {
		return err
	}
	if s.counted {
		n, err := s.size(k, old)
		if err != nil {
			return err
		}
		s.entries, s.bytes = s.entries-1, s.bytes-n
	}
	return s.buf.Delete(k)
}

// full reports whether the buffer holds more than its limit allows.
func (s *suppressor[K, V]) full() bool {
	return (s.limit.MaxRecords > 0 && s.entries > int64(s.limit.MaxRecords)) || (s.limit.MaxBytes > 0 && s.bytes > s.limit.MaxBytes)
}

// account counts the entry k, v that Process is about to write, for the
// buffer's limit.
func (s *suppressor[K, V]) account(k bufferKey[K], v bufferValue[V]) error {
	if !s.counted {
		for k, v := range s.buf.All() {
			if k.end == closedMark {
				continue // CloseWhenIdle's mark, not a window
			}
			n, err := s.size(k, v)
			if err != nil {
				return err
			}
			s.entries, s.bytes = s.entries+1, s.bytes+n
		}
		if err := s.buf.Err(); err != nil {
			return err
		}
		s.counted = true
	}
	n, err := s.size(k, v)
	if err != nil {
		return err
	}
	old, found, err := s.buf.Get(k)
	if err != nil {
		return err
	}
	if found {
		m, err := s.size(k, old)
		if err != nil {
			return err
		}
		s.bytes += n - m
	} else {
		s.entries, s.bytes = s.entries+1, s.bytes+n
	}
	return nil
}

// size is what an entry counts towards a limit's MaxBytes.
func (s *suppressor[K, V]) size(k bufferKey[K], v bufferValue[V]) (int64, error) {
	_, n, err := bufferEntrySize(s.name, s.keys, s.values, k, v)
	return n, err
}

// emitUpTo forwards and deletes the buffered windows that end at closeAt
// or earlier.
func (s *suppressor[K, V]) emitUpTo(closeAt int64) error {
	if s.earliestKnown && s.earliest > closeAt {
		return nil
	}
	type entry struct {
		k bufferKey[K]
		v bufferValue[V]
	}
	var closed []entry
	next := int64(math.MaxInt64)
	for k, v := range s.buf.All() {
		if k.end > closeAt {
			next = k.end
			break
		}
		closed = append(closed, entry{k, v})
	}
	if err := s.buf.Err(); err != nil {
		return err
	}
	s.earliest, s.earliestKnown = next, true
	for _, e := range closed {
		if err := s.buf.Delete(e.k); err != nil {
			return err
		}
		if s.counted {
			n, err := s.size(e.k, e.v)
			if err != nil {
				return err
			}
			s.entries, s.bytes = s.entries-1, s.bytes-n
		}
		out := processor.Record[Windowed[K], V]{
			Key:       Windowed[K]{Key: e.k.key, Start: time.UnixMilli(e.k.start).UTC(), End: time.UnixMilli(e.k.end).UTC()},
			Value:     e.v.value,
			Timestamp: time.UnixMilli(e.v.ts),
		}
		if err := s.ctx.Forward(out); err != nil {
			return err
		}
	}
	return nil
}

// bufferKey is a suppression buffer's key: a window and a record key,
// serialized as the window end and start in ms (big-endian, so that the
// store orders entries by end: windows start at the epoch or later) and
// the key's bytes.
type bufferKey[K any] struct {
	end, start int64
	key        K
}

type bufferKeySerde[K any] struct{ keys serde.Serde[K] }

func (s bufferKeySerde[K]) Serialize(topic string, k bufferKey[K]) ([]byte, error) {
	kb, err := s.keys.Serialize(topic, k.key)
	if err != nil {
		return nil, err
	}
	out := make([]byte, 16, 16+len(kb))
	binary.BigEndian.PutUint64(out, uint64(k.end))
	binary.BigEndian.PutUint64(out[8:], uint64(k.start))
	return append(out, kb...), nil
}

func (s bufferKeySerde[K]) Deserialize(topic string, data []byte) (bufferKey[K], error) {
	if len(data) < 16 {
		return bufferKey[K]{}, errors.New("kstream: suppression buffer key: fewer than 16 bytes")
	}
	k, err := s.keys.Deserialize(topic, data[16:])
	if err != nil {
		return bufferKey[K]{}, err
	}
	return bufferKey[K]{end: int64(binary.BigEndian.Uint64(data)), start: int64(binary.BigEndian.Uint64(data[8:])), key: k}, nil
}

// bufferValue is a suppression buffer's value: the latest aggregate of a
// window and the timestamp of its update, serialized as the timestamp in
// ms (big-endian), a byte that is 1 when the aggregate serialized to nil,
// and the aggregate's bytes.
type bufferValue[V any] struct {
	value V
	ts    int64
}

type bufferValueSerde[V any] struct{ values serde.Serde[V] }

func (s bufferValueSerde[V]) Serialize(topic string, v bufferValue[V]) ([]byte, error) {
	vb, err := s.values.Serialize(topic, v.value)
	if err != nil {
		return nil, err
	}
	out := make([]byte, 9, 9+len(vb))
	binary.BigEndian.PutUint64(out, uint64(v.ts))
	if vb == nil {
		out[8] = 1
	}
	return append(out, vb...), nil
}

func (s bufferValueSerde[V]) Deserialize(topic string, data []byte) (bufferValue[V], error) {
	if len(data) < 9 {
		return bufferValue[V]{}, fmt.Errorf("kstream: suppression buffer value: %d bytes, fewer than 9", len(data))
	}
	body := data[9:]
	if data[8] == 1 {
		body = nil
	}
	v, err := s.values.Deserialize(topic, body)
	if err != nil {
		return bufferValue[V]{}, err
	}
	return bufferValue[V]{value: v, ts: int64(binary.BigEndian.Uint64(data))}, nil
}
