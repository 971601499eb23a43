package kstream

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/weirstream/weir/internal/streamtime"
	"github.com/weirstream/weir/processor"
	"github.com/weirstream/weir/serde"
)

// Windowed is the key of a windowed aggregation's result: the record key
// and the window, Start included and End excluded, whole milliseconds in
// UTC. It is [processor.Windowed], so the results and the window store
// that holds them name windows alike. Kafka Streams' Windowed.
type Windowed[K any] = processor.Windowed[K]

// TimeWindows are fixed-size windows aligned to the Unix epoch: the
// windows start at every multiple of the advance since the epoch, and
// each is Size long, its start included and its end excluded. A record
// belongs to every window whose span contains its timestamp: one for
// [Tumbling] windows, up to Size/Advance (rounded up) for [Hopping]
// ones. Windows starting before the epoch are not created, as in Kafka
// Streams, so a record with a timestamp below Size belongs to fewer
// hopping windows, and a record with a negative timestamp belongs to
// none and is skipped. Kafka Streams' TimeWindows.
//
// TimeWindows is a value: Grace and Retention return a modified copy.
// Durations must be whole milliseconds; [Grouped.WindowedBy] checks them
// and Build reports what is wrong.
type TimeWindows struct {
	size, advance, grace, retention time.Duration
}

// Tumbling returns windows size long that do not overlap: [0, size),
// [size, 2*size), ... since the epoch. size must be at least 1 ms. The
// grace period is 0 until [TimeWindows.Grace] sets it (Kafka Streams'
// TimeWindows.ofSizeWithNoGrace).
func Tumbling(size time.Duration) TimeWindows {
	return TimeWindows{size: size, advance: size}
}

// Hopping returns windows size long that start every advance since the
// epoch, so that they overlap and a record belongs to size/advance of
// them (rounded down or up, by its timestamp, when advance does not
// divide size). advance must be at least 1 ms and at most size;
// Hopping(size, size) is Tumbling(size). The grace period is 0 until
// [TimeWindows.Grace] sets it (Kafka Streams'
// TimeWindows.ofSizeWithNoGrace(size).advanceBy(advance)).
func Hopping(size, advance time.Duration) TimeWindows {
	return TimeWindows{size: size, advance: advance}
}

// Grace returns w with grace period d, at least 0: how long after a
// window's end, in stream time, records for it are still admitted. A
// window closes when the aggregation's stream time reaches its end plus d
// (end + d <= stream time, as in Kafka Streams); a record that arrives
// for a closed window is dropped from it, counted in
// weir_records_late_total, logged at debug level and, with
// [WindowedGrouped.LateTo], written to a topic of late records. Default 0:
// a record older than the latest window end seen is late. Kafka Streams'
// TimeWindows.ofSizeAndGrace.
func (w TimeWindows) Grace(d time.Duration) TimeWindows {
	w.grace = d
	return w
}

// Retention returns w with retention d for the aggregation's window
// store: how long after it starts, in stream time, a window is kept and
// readable. d must be at least size + grace, so that no window is
// deleted before it closes. Default (or 0): size + grace, the least that
// is safe (Kafka Streams' default when Materialized sets no retention).
// Keep windows longer only to read closed windows from the store.
func (w TimeWindows) Retention(d time.Duration) TimeWindows {
	w.retention = d
	return w
}

// Size returns the window size.
func (w TimeWindows) Size() time.Duration { return w.size }

// Advance returns the time between the starts of consecutive windows:
// the size for tumbling windows.
func (w TimeWindows) Advance() time.Duration { return w.advance }

// GracePeriod returns the grace period set with [TimeWindows.Grace].
func (w TimeWindows) GracePeriod() time.Duration { return w.grace }

// RetentionPeriod returns the window store's retention: the one set with
// [TimeWindows.Retention], else size + grace.
func (w TimeWindows) RetentionPeriod() time.Duration {
	if w.retention == 0 {
		return w.size + w.grace
	}
	return w.retention
}

// problems returns what is wrong with w, each as a phrase.
func (w TimeWindows) problems() []string {
	var p []string
	if w.size < time.Millisecond || !wholeMS(w.size) {
		p = append(p, fmt.Sprintf("window size %v is not a positive whole number of milliseconds", w.size))
	}
	if w.advance < time.Millisecond || !wholeMS(w.advance) || w.advance > w.size {
		p = append(p, fmt.Sprintf("advance %v is not a whole number of milliseconds between 1ms and the size %v", w.advance, w.size))
	}
	if w.grace < 0 || !wholeMS(w.grace) {
		p = append(p, fmt.Sprintf("grace %v is not a whole number of milliseconds, 0 or more", w.grace))
	}
	if w.retention != 0 && (w.retention < w.size+w.grace || !wholeMS(w.retention)) {
		p = append(p, fmt.Sprintf("retention %v is not a whole number of milliseconds of at least size + grace (%v)", w.retention, w.size+w.grace))
	}
	return p
}

// wholeMS reports whether d is a whole number of milliseconds.
func wholeMS(d time.Duration) bool { return d%time.Millisecond == 0 }

// firstStart returns the start, in ms since the epoch, of the earliest
// window that holds ts: Kafka Streams' TimeWindows.windowsFor. The
// windows holding ts start there and every advance after, up to ts.
func (w TimeWindows) firstStart(ts int64) int64 {
	size, adv := w.size.Milliseconds(), w.advance.Milliseconds()
	return max(0, ts-size+adv) / adv * adv
}

// WindowedGrouped is a grouped stream cut into time windows, ready for a
// windowed aggregation. Kafka Streams' TimeWindowedKStream.
type WindowedGrouped[K, V any] struct {
	b       *Builder
	node    processor.Node[K, V]
	name    string
	keys    serde.Serde[K]
	windows TimeWindows
}

// WindowedBy cuts the grouped stream into the windows w, for a windowed
// [WindowedGrouped.Count], [WindowedGrouped.Reduce] or
// [WindowedGrouped.Aggregate]. Invalid windows are reported by Build.
// Kafka Streams' KGroupedStream.windowedBy(TimeWindows).
func (g *Grouped[K, V]) WindowedBy(w TimeWindows) *WindowedGrouped[K, V] {
	for _, p := range w.problems() {
		g.b.fail("WindowedBy of %q: %s", g.name, p)
	}
	return &WindowedGrouped[K, V]{b: g.b, node: g.node, name: g.name, keys: g.keys, windows: w}
}

// LateTo also writes the late records of the aggregations that follow to
// topic, with the grouping's key serde and values, as they arrived (key,
// value, timestamp, headers): a record is written there when the
// aggregations drop it from at least one of its windows, because stream
// time had reached that window's end + grace. With hopping windows such a
// record may still have updated its windows that were open. The records
// are written once per LateTo, however many aggregations follow; they are
// still counted in weir_records_late_total. topic must exist when
// the application starts, like any sink's. The node that picks the late
// records is named Name()+"-late" and its sink that name+"-to-"+topic,
// unless [Named] names the first. Kafka Streams has no such output: it
// only drops and counts late records.
func (g *WindowedGrouped[K, V]) LateTo(topic string, values serde.Serde[V], opts ...Option) *WindowedGrouped[K, V] {
	name := nameOf(g.name, "late", opts)
	w := g.windows
	n := g.b.t.AddProcessor(name, processor.Func(func(ctx processor.Context[K, V], rec processor.Record[K, V]) error {
		if !w.dropsAny(rec.Timestamp.UnixMilli(), ctx.StreamTime().UnixMilli()) {
			return nil
		}
		return ctx.Forward(rec)
	}), g.node)
	late := &Stream[K, V]{b: g.b, node: n, name: name, keys: g.keys}
	late.To(topic, g.keys, values)
	return g
}

// dropsAny reports whether a windowed aggregation drops a record with
// timestamp ts (ms) from at least one of its windows at stream time now
// (ms): whether the earliest window holding it closed. It is the test of
// windowAggregator.Process; records with negative timestamps belong to no
// window and are not late.
func (w TimeWindows) dropsAny(ts, now int64) bool {
	return ts >= 0 && w.firstStart(ts)+w.size.Milliseconds() <= now-w.grace.Milliseconds()
}

// WindowedTable is the result of a windowed aggregation: the latest
// aggregate per key and window, kept in a window store. Kafka Streams'
// KTable<Windowed<K>, V>.
type WindowedTable[K, V any] struct {
	b       *Builder
	node    processor.Node[Windowed[K], V]
	name    string
	keys    serde.Serde[K]
	values  serde.Serde[V]
	windows TimeWindows
	// sessions are the session windows of a session aggregation, nil for
	// time windows.
	sessions *SessionWindows
	// cached is the aggregation's cache switch (nil after a Suppress).
	cached *bool
}

// closeLag is how far stream time must pass a window's end for the
// window to close: up to and including the returned milliseconds. A
// time window ([start, end)) closes at end + grace; a session (end
// included) once stream time passes end + gap + grace.
func (t *WindowedTable[K, V]) closeLag() int64 {
	if t.sessions != nil {
		return (t.sessions.gap + t.sessions.grace).Milliseconds() + 1
	}
	return t.windows.grace.Milliseconds()
}

// Name returns the table's name, which is also its store's name: the
// window store of an aggregation, the buffer of a Suppress.
func (t *WindowedTable[K, V]) Name() string { return t.name }

// Windows returns the time windows the table aggregates over (zero for
// sessions).
func (t *WindowedTable[K, V]) Windows() TimeWindows { return t.windows }

// ToStream returns the stream of the table's updates: one record per
// update of a window, keyed by key(window, aggregate), with the new
// aggregate, the largest timestamp among the window's records (as Kafka
// Streams stamps it) and the headers of the input record that caused it,
// plus the update's version in the header
// processor.VersionHeader, as [Table.ToStream] does. Every update is emitted; a table from
// [WindowedTable.Suppress] has one update per window, its final result,
// stamped as Suppress says. Pass [WindowedKey] to keep the
// windowed keys, and write them with [WindowedSerde]:
//
//	counts.ToStream(kstream.WindowedKey).To("out", kstream.WindowedSerde(serde.String(), time.Minute), serde.Int64())
//
// The mapper is in the signature because Go forbids a method of
// WindowedTable[K, V] to return a Stream[Windowed[K], V]: a stream's
// GroupByKey leads back to a WindowedTable[Windowed[K], ...], and the
// compiler rejects the endless chain of types ("instantiation cycle").
//
// The step's node is named Name()+"-tostream" unless [Named]. The key
// it gives is not the key the records are partitioned by, so the stream
// is marked as re-keyed (see "Repartitioning" in the package
// documentation). Kafka Streams' KTable.toStream(KeyValueMapper).
func (t *WindowedTable[K, V]) ToStream[K2 any](key func(window Windowed[K], value V) K2, opts ...Option) *Stream[K2, V] {
	if key == nil {
		t.b.fail("tostream of %q: nil key mapper", t.name)
	}
	name := nameOf(t.name, "tostream", opts)
	n := t.b.t.AddProcessor(name, processor.Func(func(ctx processor.Context[K2, V], rec processor.Record[Windowed[K], V]) error {
		return ctx.Forward(processor.Record[K2, V]{Key: key(rec.Key, rec.Value), Value: rec.Value, Timestamp: rec.Timestamp,
			Headers: processor.StampVersion(rec.Headers, ctx.NextVersion()), Tombstone: rec.Tombstone})
	}), t.node)
	return rekeyed(t.b, n, name)
}

// WindowedKey is the key mapper for [WindowedTable.ToStream] that keeps
// each update's windowed key as it is.
func WindowedKey[K, V any](window Windowed[K], _ V) Windowed[K] { return window }

// Count counts the records of each key and window into the window store
// name (changelog "<application id>-<name>-changelog"), whose values are
// serde.Int64. name is required: it names the store and the
// aggregation's node. A record updates every window it belongs to that
// is still open and emits each update; late records and records with a
// null key are skipped (see "Windows" in the package documentation).
//
// With caching on, updates go through a record cache, as for
// [Grouped.Count]: a window's updates between two commits are forwarded
// once, the latest. A [WindowedTable.Suppress] with [UntilWindowCloses]
// turns the cache off:
// it closes windows on the stream time of the updates that reach it,
// which a cache would hold back.
// Kafka Streams' TimeWindowedKStream.count.
func (g *WindowedGrouped[K, V]) Count(name string) *WindowedTable[K, int64] {
	return windowAggregate(g, name, serde.Int64(), true, func(_ K, _ V, n int64, _ bool) int64 { return n + 1 })
}

// Reduce combines the values of each key and window into the window
// store name with the given value serde: a window's first value is
// stored as it is, every later one as fn(aggregate, value). name is
// required. Records are skipped as by [WindowedGrouped.Count]. Kafka
// Streams' TimeWindowedKStream.reduce.
func (g *WindowedGrouped[K, V]) Reduce(name string, fn func(aggregate, value V) V, values serde.Serde[V]) *WindowedTable[K, V] {
	if fn == nil {
		g.b.fail("Reduce %q of %q: nil reducer", name, g.name)
	}
	return windowAggregate(g, name, values, false, func(_ K, v V, agg V, found bool) V {
		if !found {
			return v
		}
		return fn(agg, v)
	})
}

// Aggregate folds the values of each key and window into the window store
// name with the given serde: a window's aggregate starts as init() and
// becomes fn(key, value, aggregate) with every record. name is required.
// Records are skipped as by [WindowedGrouped.Count]. Kafka Streams'
// TimeWindowedKStream.aggregate.
func (g *WindowedGrouped[K, V]) Aggregate[A any](name string, init func() A, fn func(key K, value V, aggregate A) A, aggregates serde.Serde[A]) *WindowedTable[K, A] {
	if init == nil || fn == nil {
		g.b.fail("Aggregate %q of %q: nil initializer or aggregator", name, g.name)
	}
	return windowAggregate(g, name, aggregates, false, func(k K, v V, agg A, found bool) A {
		if !found {
			agg = init()
		}
		return fn(k, v, agg)
	})
}

// windowAggregate adds the node and window store of a windowed
// aggregation; step is as in aggregate. tombstones: records without a
// value are counted too (Count), as Kafka Streams' windowed aggregations
// skip only records with a null key; Reduce and Aggregate skip them, as a
// Go function has no null value to be given.
func windowAggregate[K, V, A any](g *WindowedGrouped[K, V], name string, values serde.Serde[A], tombstones bool, step func(key K, value V, agg A, found bool) A) *WindowedTable[K, A] {
	if values == nil {
		g.b.fail("aggregation %q of %q: nil value serde", name, g.name)
	}
	w := g.windows
	spec := processor.Window(name, w.size, w.RetentionPeriod(), g.keys, values)
	// Cached unless a Suppress(UntilWindowCloses) follows (see Count),
	// which that Suppress says while the topology is built, before any
	// instance exists.
	cached := new(true)
	n := g.b.t.AddProcessor(name, func() processor.Processor[K, V, Windowed[K], A] {
		return &windowAggregator[K, V, A]{spec: spec, keys: g.keys, name: name, windows: w, step: step, cached: *cached, tombstones: tombstones}
	}, g.node)
	g.b.t.AddStore(spec, n)
	g.b.t.KeyedByPartition(name)
	return &WindowedTable[K, A]{b: g.b, node: n, name: name, keys: g.keys, values: values, windows: w, cached: cached}
}

// windowID is a windowed aggregation's record-cache identity of a window:
// the key serialized as for the store, then the window start.
func windowID[K any](keys serde.Serde[K], name string) func(Windowed[K]) (string, error) {
	return func(w Windowed[K]) (string, error) {
		b, err := keys.Serialize(name, w.Key)
		return string(binary.BigEndian.AppendUint64(b, uint64(w.Start.UnixMilli()))), err
	}
}

// windowAggregator is the processor of the windowed Count, Reduce and
// Aggregate: Kafka Streams' KStreamWindowAggregate.
type windowAggregator[K, V, A any] struct {
	spec    *processor.WindowSpec[K, A]
	keys    serde.Serde[K]
	name    string
	windows TimeWindows
	store   processor.WindowStore[K, A]
	step    func(key K, value V, agg A, found bool) A
	// now is the stream time this aggregation has observed, which closes
	// its windows.
	now streamtime.Observed
	// tombstones: records without a value count (see windowAggregate).
	tombstones bool
	// cached: updates go through cache (see WindowedGrouped.Count).
	cached bool
	cache  *processor.RecordCache[Windowed[K], A]
}

func (a *windowAggregator[K, V, A]) Init(ctx processor.Context[Windowed[K], A]) (err error) {
	if a.cached {
		a.cache = processor.NewRecordCache(ctx, windowID(a.keys, a.name), nil)
	}
	a.store, err = a.spec.Open(observedStores{ctx, &a.now})
	return err
}

func (a *windowAggregator[K, V, A]) Close() error { return nil }

func (a *windowAggregator[K, V, A]) Process(ctx processor.Context[Windowed[K], A], rec processor.Record[K, V]) error {
	if rec.Tombstone && !a.tombstones {
		return nil // see windowAggregate
	}
	ts := rec.Timestamp.UnixMilli()
	if ts < 0 {
		ctx.Logger().Debug("weir: record with a negative timestamp skipped by a windowed aggregation", "timestamp_ms", ts)
		return nil
	}
	kb, err := a.keys.Serialize(a.name, rec.Key)
	if err != nil {
		return fmt.Errorf("kstream: %s: serialize key: %w", a.name, err)
	}
	size, adv := a.windows.size.Milliseconds(), a.windows.advance.Milliseconds()
	// The windows ending at or before closeAt are closed: the stream time
	// this aggregation observed (which counts this record, unless its key
	// is null) has reached their end + grace.
	now, _ := a.now.Get()
	if len(kb) > 0 {
		now = a.now.Observe(ctx, ts)
	}
	closeAt := now - a.windows.grace.Milliseconds()
	var late int
	var lateFrom, lateTo int64 // the starts of the first and last closed windows
	for start := a.windows.firstStart(ts); start <= ts; start += adv {
		end := start + size
		if end <= closeAt {
			if late == 0 {
				lateFrom = start
			}
			late, lateTo = late+1, start
			continue
		}
		ws := time.UnixMilli(start).UTC()
		old, oldTS, found, err := a.store.FetchStamped(rec.Key, ws)
		if err != nil {
			return err
		}
		agg := a.step(rec.Key, rec.Value, old, found)
		// The window's update carries the largest timestamp the window
		// has seen, as Kafka Streams' does.
		outTS := latest(rec.Timestamp, oldTS)
		if err := a.store.PutStamped(rec.Key, ws, agg, outTS); err != nil {
			return err
		}
		if len(kb) == 0 {
			// A null Kafka key's write was dropped (and counted) by the
			// runtime, so the read-back misses: skip the record, as the
			// key-value aggregations do (see droppedNullKey).
			if _, found, err := a.store.Fetch(rec.Key, ws); err != nil || !found {
				return err
			}
		}
		out := processor.Record[Windowed[K], A]{
			Key:   Windowed[K]{Key: rec.Key, Start: ws, End: time.UnixMilli(end).UTC()},
			Value: agg, Timestamp: outTS, Headers: rec.Headers,
		}
		if a.cache != nil {
			err = a.cache.Forward(out)
		} else {
			err = ctx.Forward(out)
		}
		if err != nil {
			return err
		}
	}
	if late > 0 {
		processor.CountLate(ctx)
		ctx.Logger().Debug("weir: late record dropped from closed windows",
			"store", a.name, "timestamp_ms", ts, "stream_time_ms", now,
			"grace", a.windows.grace, "windows", late,
			"first_window_start_ms", lateFrom, "last_window_end_ms", lateTo+size)
	}
	return nil
}

// WindowedSerde returns a serde for the keys of a windowed aggregation's
// stream, in Kafka Streams' format for time windows
// (TimeWindowedSerializer and TimeWindowedDeserializer): the bytes of
// the key serialized with keys, followed by the window start in
// milliseconds since the epoch as a big-endian 8-byte integer. The end is
// not written; Deserialize sets it to the start plus size, which must be
// the windows' size. The serde keys sees the same topic.
func WindowedSerde[K any](keys serde.Serde[K], size time.Duration) serde.Serde[Windowed[K]] {
	return windowedSerde[K]{keys: keys, size: size}
}

type windowedSerde[K any] struct {
	keys serde.Serde[K]
	size time.Duration
}

func (s windowedSerde[K]) Serialize(topic string, w Windowed[K]) ([]byte, error) {
	kb, err := s.keys.Serialize(topic, w.Key)
	if err != nil {
		return nil, err
	}
	out := make([]byte, len(kb)+8)
	copy(out, kb)
	binary.BigEndian.PutUint64(out[len(kb):], uint64(w.Start.UnixMilli()))
	return out, nil
}

func (s windowedSerde[K]) Deserialize(topic string, data []byte) (Windowed[K], error) {
	var w Windowed[K]
	if data == nil {
		return w, fmt.Errorf("kstream: windowed key: %w", serde.ErrNull)
	}
	if len(data) < 8 {
		return w, errors.New("kstream: windowed key: fewer than the 8 bytes of a window start")
	}
	n := len(data) - 8
	k, err := s.keys.Deserialize(topic, data[:n:n])
	if err != nil {
		return w, err
	}
	start := time.UnixMilli(int64(binary.BigEndian.Uint64(data[n:]))).UTC()
	return Windowed[K]{Key: k, Start: start, End: start.Add(s.size)}, nil
}

// observedStores is the context a windowed aggregation opens its store
// with: the store expires windows by the stream time the aggregation
// observed (see internal/streamtime), as Kafka Streams' segmented stores
// expire by the largest timestamp put into them, so that the store never
// expires a window the aggregation still counts open.
type observedStores struct {
	processor.StoreContext
	now *streamtime.Observed
}

// StreamTime is the observed stream time, the zero time before the first
// observation.
func (c observedStores) StreamTime() time.Time {
	ms, ok := c.now.Get()
	if !ok {
		return time.Time{}
	}
	return time.UnixMilli(ms)
}
