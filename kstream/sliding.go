package kstream

import (
	"encoding/binary"
	"fmt"
	"slices"
	"time"

	"github.com/weirstream/weir/internal/streamtime"
	"github.com/weirstream/weir/processor"
	"github.com/weirstream/weir/serde"
)

// SlidingWindows are windows defined by the records themselves, of a
// fixed time difference d: two records fall in a common window when their
// timestamps are at most d apart. A window [start, start+d] includes both
// ends (unlike [TimeWindows]); the aggregation keeps one window ending at
// each record's timestamp (the record and those up to d before it) and
// one starting just after it (those up to d after it, once such records
// arrive), so that every distinct set of records within d of each other
// has its window, and no empty window exists. Kafka Streams'
// SlidingWindows, with its sliding-window aggregation semantics: a record
// earlier than the time difference after the epoch has no window ending
// at it, and updates the window [0, difference] instead, which holds every
// such record.
//
// SlidingWindows is a value: Grace and Retention return a modified copy.
// Durations must be whole milliseconds; [Grouped.SlidingWindowedBy]
// checks them and Build reports what is wrong.
type SlidingWindows struct {
	diff, grace, retention time.Duration
}

// Sliding returns sliding windows of time difference maxDifference, at
// least 1 ms. The grace period is 0 until [SlidingWindows.Grace] sets it
// (Kafka Streams' SlidingWindows.ofTimeDifferenceWithNoGrace).
func Sliding(maxDifference time.Duration) SlidingWindows {
	return SlidingWindows{diff: maxDifference}
}

// Grace returns w with grace period d, at least 0: a window closes when
// the aggregation's stream time reaches its end plus d, as for [TimeWindows];
// a record whose windows are all closed is dropped and counted in
// weir_records_late_total, and one for which only some are closed
// updates the others and is counted too. Kafka Streams'
// SlidingWindows.ofTimeDifferenceAndGrace.
func (w SlidingWindows) Grace(d time.Duration) SlidingWindows {
	w.grace = d
	return w
}

// Retention returns w with retention d for the aggregation's window
// store, at least twice the time difference plus the grace period (a
// record reads the windows up to two differences before it). Default:
// exactly that.
func (w SlidingWindows) Retention(d time.Duration) SlidingWindows {
	w.retention = d
	return w
}

// Difference returns the windows' time difference (their size).
func (w SlidingWindows) Difference() time.Duration { return w.diff }

// GracePeriod returns the grace period.
func (w SlidingWindows) GracePeriod() time.Duration { return w.grace }

// RetentionPeriod returns the window store's retention: the one set with
// [SlidingWindows.Retention], else 2 * difference + grace.
func (w SlidingWindows) RetentionPeriod() time.Duration {
	if w.retention == 0 {
		return 2*w.diff + w.grace
	}
	return w.retention
}

func (w SlidingWindows) problems() []string {
	var p []string
	if w.diff < time.Millisecond || !wholeMS(w.diff) {
		p = append(p, fmt.Sprintf("time difference %v is not a positive whole number of milliseconds", w.diff))
	}
	if w.grace < 0 || !wholeMS(w.grace) {
		p = append(p, fmt.Sprintf("grace %v is not a whole number of milliseconds, 0 or more", w.grace))
	}
	if w.retention != 0 && (w.retention < 2*w.diff+w.grace || !wholeMS(w.retention)) {
		p = append(p, fmt.Sprintf("retention %v is not a whole number of milliseconds of at least 2 * difference + grace (%v)", w.retention, 2*w.diff+w.grace))
	}
	return p
}

// asTimeWindows describes the windows to what WindowedTable does with
// them (Suppress closes a window at start + size + grace; WindowedSerde
// gives End = start + size): size d, for windows that end at start + d.
func (w SlidingWindows) asTimeWindows() TimeWindows {
	return TimeWindows{size: w.diff, advance: w.diff, grace: w.grace, retention: w.RetentionPeriod()}
}

// SlidingWindowedGrouped is a grouped stream aggregated over sliding
// windows. Kafka Streams' TimeWindowedKStream over SlidingWindows.
type SlidingWindowedGrouped[K, V any] struct {
	b       *Builder
	node    processor.Node[K, V]
	name    string
	keys    serde.Serde[K]
	windows SlidingWindows
}

// SlidingWindowedBy aggregates the grouped stream over the sliding
// windows w, with [SlidingWindowedGrouped.Count], Reduce or Aggregate.
// Invalid windows are reported by Build. Kafka Streams'
// KGroupedStream.windowedBy(SlidingWindows).
func (g *Grouped[K, V]) SlidingWindowedBy(w SlidingWindows) *SlidingWindowedGrouped[K, V] {
	for _, p := range w.problems() {
		g.b.fail("SlidingWindowedBy of %q: %s", g.name, p)
	}
	return &SlidingWindowedGrouped[K, V]{b: g.b, node: g.node, name: g.name, keys: g.keys, windows: w}
}

// Count counts the records of each key in each sliding window into the
// window store name (changelog "<application id>-<name>-changelog"),
// emitting every window's new count as a record updates or creates it:
// the table's keys are Windowed with End = Start + difference (both
// included), and each update is stamped with the largest record
// timestamp in its window, as in Kafka Streams. Records with a null key
// are skipped; late records as [SlidingWindows.Grace] says. Records less
// than the difference after the Unix epoch get windows that start before
// it (Kafka Streams clamps those to the epoch). With caching on, updates
// go through a record cache unless a Suppress(UntilWindowCloses) follows,
// as for [WindowedGrouped.Count]. Kafka Streams'
// TimeWindowedKStream.count over SlidingWindows.
func (g *SlidingWindowedGrouped[K, V]) Count(name string, opts ...AggregateOption) *WindowedTable[K, int64] {
	return slidingAggregate(g, name, serde.Int64(), serde.Int64(), func() int64 { return 0 }, func(_ K, _ V, n int64) int64 { return n + 1 }, identity[int64], opts)
}

// Reduce combines the values of each key in each sliding window: a
// window's first value as it is, every later one as fn(aggregate,
// value). As [SlidingWindowedGrouped.Count] otherwise.
func (g *SlidingWindowedGrouped[K, V]) Reduce(name string, fn func(aggregate, value V) V, values serde.Serde[V], opts ...AggregateOption) *WindowedTable[K, V] {
	if fn == nil {
		g.b.fail("Reduce %q of %q: nil reducer", name, g.name)
	}
	// A reduce has no initial value: the sliding algorithm starts windows
	// from an "empty" aggregate, which the first value replaces.
	var stored serde.Serde[reduced[V]]
	if values != nil {
		stored = reducedSerde[V]{values}
	}
	return slidingAggregate(g, name, stored, values,
		func() reduced[V] { return reduced[V]{} },
		func(_ K, v V, agg reduced[V]) reduced[V] {
			if !agg.ok {
				return reduced[V]{v: v, ok: true}
			}
			return reduced[V]{v: fn(agg.v, v), ok: true}
		},
		func(r reduced[V]) V { return r.v }, opts)
}

// Aggregate folds the values of each key in each sliding window: a
// window's aggregate starts as init() and becomes fn(key, value,
// aggregate) with every record. As [SlidingWindowedGrouped.Count]
// otherwise.
func (g *SlidingWindowedGrouped[K, V]) Aggregate[A any](name string, init func() A, fn func(key K, value V, aggregate A) A, aggregates serde.Serde[A], opts ...AggregateOption) *WindowedTable[K, A] {
	if init == nil || fn == nil {
		g.b.fail("Aggregate %q of %q: nil initializer or aggregator", name, g.name)
	}
	return slidingAggregate(g, name, aggregates, aggregates, init, fn, identity[A], opts)
}

func identity[A any](a A) A { return a }

// reduced is a Reduce's aggregate: no value yet, or one.
type reduced[V any] struct {
	v  V
	ok bool
}

type reducedSerde[V any] struct{ values serde.Serde[V] }

func (s reducedSerde[V]) Serialize(topic string, r reduced[V]) ([]byte, error) {
	if !r.ok {
		return []byte{0}, nil
	}
	b, err := s.values.Serialize(topic, r.v)
	return append([]byte{1}, b...), err
}

func (s reducedSerde[V]) Deserialize(topic string, data []byte) (reduced[V], error) {
	if len(data) == 0 {
		return reduced[V]{}, fmt.Errorf("kstream: a reduce aggregate of 0 bytes")
	}
	if data[0] == 0 {
		return reduced[V]{}, nil
	}
	v, err := s.values.Deserialize(topic, data[1:])
	return reduced[V]{v: v, ok: true}, err
}

// slidingAggregate adds the node and window store of a sliding-window
// aggregation. The store keeps each window's aggregate (A, with values)
// with the largest record timestamp in it; the table's values are out(A),
// with outValues. (Reduce's aggregate says whether it holds a value; a
// table of it would make the compiler instantiate the DSL's types
// without end.)
func slidingAggregate[K, V, A, O any](g *SlidingWindowedGrouped[K, V], name string, values serde.Serde[A], outValues serde.Serde[O], init func() A, fn func(K, V, A) A, out func(A) O, opts []AggregateOption) *WindowedTable[K, O] {
	if values == nil || outValues == nil {
		g.b.fail("aggregation %q of %q: nil value serde", name, g.name)
	}
	w := g.windows
	var stored serde.Serde[stamped[A]]
	if values != nil {
		stored = stampedSerde[A]{values}
	}
	spec := processor.Window(name, w.diff+time.Millisecond, w.RetentionPeriod(), g.keys, stored)
	cached := new(cachedBy(opts))
	n := g.b.t.AddProcessor(name, func() processor.Processor[K, V, Windowed[K], O] {
		return &slidingAggregator[K, V, A, O]{spec: spec, keys: g.keys, name: name, windows: w, init: init, fn: fn, out: out, cached: *cached}
	}, g.node)
	g.b.t.AddStore(spec, n)
	g.b.t.KeyedByPartition(name)
	return &WindowedTable[K, O]{b: g.b, node: n, name: name, keys: g.keys, values: outValues, windows: w.asTimeWindows(), cached: cached}
}

// stamped is a sliding window's aggregate and the largest timestamp (ms)
// of the records in it.
type stamped[A any] struct {
	agg A
	ts  int64
}

// stampedSerde writes the timestamp as 8 bytes big-endian, then the
// aggregate with its serde.
type stampedSerde[A any] struct{ values serde.Serde[A] }

func (s stampedSerde[A]) Serialize(topic string, v stamped[A]) ([]byte, error) {
	b, err := s.values.Serialize(topic, v.agg)
	if err != nil {
		return nil, err
	}
	return append(binary.BigEndian.AppendUint64(make([]byte, 0, 8+len(b)), uint64(v.ts)), b...), nil
}

func (s stampedSerde[A]) Deserialize(topic string, data []byte) (stamped[A], error) {
	if len(data) < 8 {
		return stamped[A]{}, fmt.Errorf("kstream: a sliding window aggregate of %d bytes, shorter than its timestamp", len(data))
	}
	agg, err := s.values.Deserialize(topic, data[8:])
	return stamped[A]{agg: agg, ts: int64(binary.BigEndian.Uint64(data))}, err
}

// slidingAggregator is Kafka Streams' KStreamSlidingWindowAggregate
// (its backward scan, and its forward one for early records): for a
// record at t it updates the windows that hold t, creates the window
// ending at t and the window starting at t+1 when records after t exist,
// and the window starting just after the previous record when this record
// is the first after it.
type slidingAggregator[K, V, A, O any] struct {
	spec    *processor.WindowSpec[K, stamped[A]]
	keys    serde.Serde[K]
	name    string
	windows SlidingWindows
	init    func() A
	fn      func(K, V, A) A
	out     func(A) O
	store   processor.WindowStore[K, stamped[A]]
	cached  bool
	cache   *processor.RecordCache[Windowed[K], O]
	ctx     processor.Context[Windowed[K], O]
	// emptyKey: the record being processed has a key that serializes to
	// nothing.
	emptyKey bool
	// now is the stream time this aggregation has observed, which closes
	// its windows.
	now streamtime.Observed
}

func (a *slidingAggregator[K, V, A, O]) Init(ctx processor.Context[Windowed[K], O]) (err error) {
	a.ctx = ctx
	if a.cached {
		a.cache = processor.NewRecordCache(ctx, windowID(a.keys, a.name), nil)
	}
	a.store, err = a.spec.Open(observedStores{ctx, &a.now})
	return err
}

func (a *slidingAggregator[K, V, A, O]) Close() error { return nil }

func (a *slidingAggregator[K, V, A, O]) Process(ctx processor.Context[Windowed[K], O], rec processor.Record[K, V]) error {
	if rec.Tombstone {
		return nil // aggregations skip records without a value
	}
	now, err := a.observe(ctx, rec)
	if err != nil {
		return err
	}
	t := rec.Timestamp.UnixMilli()
	closeAt := now - a.windows.grace.Milliseconds()
	if t+1+a.windows.diff.Milliseconds() <= closeAt {
		// Even the window starting right after the record is closed.
		a.late(ctx, t, now)
		return nil
	}
	sc, err := a.scan(rec.Key, t)
	if err != nil {
		return err
	}
	missed, err := a.aggregate(sc, rec, closeAt)
	if err != nil {
		return err
	}
	if missed {
		a.late(ctx, t, now)
	}
	return nil
}

// observe notes whether rec's key serializes to nothing and returns the
// stream time, advanced to rec's timestamp unless its key is empty.
func (a *slidingAggregator[K, V, A, O]) observe(ctx processor.Context[Windowed[K], O], rec processor.Record[K, V]) (now int64, err error) {
	kb, err := a.keys.Serialize(a.name, rec.Key)
	if err != nil {
		return 0, fmt.Errorf("kstream: %s: serialize key: %w", a.name, err)
	}
	// A key that serializes to nothing may be a null Kafka key's, whose
	// writes the runtime drops (and counts): put checks each write back.
	a.emptyKey = len(kb) == 0
	now, _ = a.now.Get()
	if !a.emptyKey {
		now = a.now.Observe(ctx, rec.Timestamp.UnixMilli())
	}
	return now, nil
}

// aggregate adds rec to the windows that hold it and creates its new
// windows, in Kafka Streams' order (which decides the order of the
// updates downstream), and reports whether a window of rec was closed.
func (a *slidingAggregator[K, V, A, O]) aggregate(sc slidingScan[A], rec processor.Record[K, V], closeAt int64) (missed bool, err error) {
	if err := a.updateHolding(sc, rec, closeAt, &missed); err != nil {
		return missed, err
	}
	if err := a.afterPrevious(sc, rec, closeAt, &missed); err != nil {
		return missed, err
	}
	// The window ending at this record; an early record updates its
	// ([0, d]) last, in Kafka Streams' order.
	if !sc.early {
		if err := a.left(sc, rec, closeAt, &missed); err != nil {
			return missed, err
		}
	}
	if err := a.right(sc, rec, closeAt, &missed); err != nil {
		return missed, err
	}
	if sc.early {
		if err := a.left(sc, rec, closeAt, &missed); err != nil {
			return missed, err
		}
	}
	return missed, nil
}

// updateHolding adds rec to the existing windows that hold its time:
// latest first, as Kafka Streams scans them; for an early record,
// earliest first (its processEarly scans forward).
func (a *slidingAggregator[K, V, A, O]) updateHolding(sc slidingScan[A], rec processor.Record[K, V], closeAt int64, missed *bool) error {
	order := slices.Backward(sc.holding)
	if sc.early {
		order = slices.All(sc.holding)
	}
	for _, w := range order {
		if err := a.update(w.start, w.v, rec, closeAt, missed); err != nil {
			return err
		}
	}
	return nil
}

// afterPrevious creates the window starting right after the previous
// record, if it does not exist and now holds this record: this record
// alone.
func (a *slidingAggregator[K, V, A, O]) afterPrevious(sc slidingScan[A], rec processor.Record[K, V], closeAt int64, missed *bool) error {
	t, d := rec.Timestamp.UnixMilli(), a.windows.diff.Milliseconds()
	if sc.prev == nil || sc.starts[*sc.prev+1] || *sc.prev+1+d < t {
		return nil
	}
	agg := stamped[A]{agg: a.fn(rec.Key, rec.Value, a.init()), ts: t}
	return a.put(*sc.prev+1, agg, rec, closeAt, missed)
}

// right creates the window starting right after rec's time t, holding the
// records after it (they were in the window rightAgg came from), unless
// it exists.
func (a *slidingAggregator[K, V, A, O]) right(sc slidingScan[A], rec processor.Record[K, V], closeAt int64, missed *bool) error {
	t := rec.Timestamp.UnixMilli()
	rightAgg := sc.rightAgg
	// For an early record, without a window after it that holds it, the
	// records of [0, d] later than it are the ones after it: the combined
	// window gives the window starting right after it, as in Kafka
	// Streams' processEarly (a record of [0, d] earlier than this one
	// would have made a window after it, found by scan).
	if sc.early && rightAgg == nil && sc.combined != nil && sc.combined.ts > t {
		v := *sc.combined
		rightAgg = &v
	}
	if sc.rightDone || rightAgg == nil || rightAgg.ts <= t {
		return nil
	}
	// Without rec's value: the window holds only the records after rec.
	return a.put(t+1, *rightAgg, processor.Record[K, V]{Key: rec.Key, Timestamp: rec.Timestamp, Headers: rec.Headers}, closeAt, missed)
}

// left adds rec to the window ending at its time t, made from the window
// before it when that holds records within the time difference ([0, d]
// for an early record, from the combined window), unless it existed and
// was updated with the windows holding t.
func (a *slidingAggregator[K, V, A, O]) left(sc slidingScan[A], rec processor.Record[K, V], closeAt int64, missed *bool) error {
	t, d := rec.Timestamp.UnixMilli(), a.windows.diff.Milliseconds()
	base := stamped[A]{agg: a.init(), ts: t}
	if sc.early {
		if sc.combined != nil {
			base = *sc.combined
		}
		return a.update(0, base, rec, closeAt, missed)
	}
	if sc.leftDone {
		return nil
	}
	if sc.prev != nil && t-d <= *sc.prev && sc.leftAgg != nil {
		base = stamped[A]{agg: sc.leftAgg.agg, ts: t}
	}
	return a.update(t-d, base, rec, closeAt, missed)
}

// slidingWindow is a window of the store: its start and aggregate.
type slidingWindow[A any] struct {
	start int64
	v     stamped[A]
}

// slidingScan is what the windows near a record at t say (Kafka Streams'
// scan of them before it creates any).
type slidingScan[A any] struct {
	starts map[int64]bool // the starts of the windows found
	// leftAgg is the latest window ending before t; rightAgg the latest
	// holding t and ending after it.
	leftAgg, rightAgg *stamped[A]
	prev              *int64 // the latest record timestamp before t that the windows show
	// leftDone: the window ending at t exists; rightDone: the window
	// starting at t+1 does.
	leftDone, rightDone bool
	// early: t is before the time difference, so its left window is
	// [0, d], which gathers every such early record (Kafka Streams'
	// processEarly); combined is that window, when it exists.
	early    bool
	combined *stamped[A]
	holding  []slidingWindow[A] // the existing windows that hold t, by start
}

// scan reads the windows of key from t-2d to t+1 and classifies them.
func (a *slidingAggregator[K, V, A, O]) scan(key K, t int64) (slidingScan[A], error) {
	d := a.windows.diff.Milliseconds()
	sc := slidingScan[A]{starts: map[int64]bool{}, early: 0 <= t && t < d}
	var found []slidingWindow[A]
	for start, v := range a.store.FetchRange(key, time.UnixMilli(t-2*d), time.UnixMilli(t+1)) {
		found = append(found, slidingWindow[A]{start.UnixMilli(), v})
	}
	if err := a.store.Err(); err != nil {
		return sc, err
	}
	for _, w := range found {
		sc.starts[w.start] = true
		end := w.start + d
		switch {
		case sc.early && w.start == 0:
			// Updated after the previous record's right window is made,
			// in Kafka Streams' order.
			sc.leftDone = true
			v := w.v
			sc.combined = &v
			if w.v.ts < t {
				ts := w.v.ts
				sc.prev = &ts
			}
		case end < t:
			v := w.v
			sc.leftAgg, sc.prev = &v, &v.ts
		case end == t:
			sc.leftDone = true
			if w.v.ts < t {
				ts := w.v.ts
				sc.prev = &ts
			}
			sc.holding = append(sc.holding, w)
		case w.start <= t: // end > t: the window holds t
			v := w.v
			sc.rightAgg = &v
			sc.holding = append(sc.holding, w)
		case w.start == t+1:
			sc.rightDone = true
		}
	}
	return sc, nil
}

// update adds rec to the window starting at start, whose aggregate was
// v, unless the window is closed (missed is then set).
func (a *slidingAggregator[K, V, A, O]) update(start int64, v stamped[A], rec processor.Record[K, V], closeAt int64, missed *bool) error {
	t := rec.Timestamp.UnixMilli()
	return a.put(start, stamped[A]{agg: a.fn(rec.Key, rec.Value, v.agg), ts: max(t, v.ts)}, rec, closeAt, missed)
}

// put stores and forwards the window starting at start, unless it is
// closed (missed is then set).
func (a *slidingAggregator[K, V, A, O]) put(start int64, v stamped[A], rec processor.Record[K, V], closeAt int64, missed *bool) error {
	d := a.windows.diff.Milliseconds()
	if start+d <= closeAt {
		*missed = true
		return nil
	}
	ws := time.UnixMilli(start).UTC()
	if err := a.store.Put(rec.Key, ws, v); err != nil {
		return err
	}
	if a.emptyKey {
		// A null Kafka key's write was dropped: skip the record, as the
		// other aggregations do (see droppedNullKey).
		if _, found, err := a.store.Fetch(rec.Key, ws); err != nil || !found {
			return err
		}
	}
	rout := processor.Record[Windowed[K], O]{
		Key:   Windowed[K]{Key: rec.Key, Start: ws, End: time.UnixMilli(start + d).UTC()},
		Value: a.out(v.agg), Timestamp: time.UnixMilli(v.ts).UTC(), Headers: rec.Headers,
	}
	if a.cache != nil {
		return a.cache.Forward(rout)
	}
	return a.ctx.Forward(rout)
}

// late counts a record dropped from at least one closed window.
func (a *slidingAggregator[K, V, A, O]) late(ctx processor.Context[Windowed[K], O], t, now int64) {
	processor.CountLate(ctx)
	ctx.Logger().Debug("weir: late record dropped from closed sliding windows",
		"store", a.name, "timestamp_ms", t, "stream_time_ms", now, "grace", a.windows.grace)
}
