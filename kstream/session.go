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

// SessionWindows are windows of activity: a key's records less than the
// inactivity gap apart (by timestamp) fall in one session, which grows
// as records arrive and merges with its neighbours when a record bridges
// the gap. Make them with [Sessions]. Kafka Streams' SessionWindows.
type SessionWindows struct {
	gap, grace, retention time.Duration
}

// Sessions returns session windows with inactivity gap gap (a whole
// number of milliseconds, at least 1 ms) and no grace period. Kafka
// Streams' SessionWindows.ofInactivityGapWithNoGrace.
func Sessions(gap time.Duration) SessionWindows { return SessionWindows{gap: gap} }

// Grace returns w with grace period d: a session closes once stream time
// passes its end plus the gap plus d, and a record that would fall in a
// closed session is late. Kafka Streams'
// SessionWindows.ofInactivityGapAndGrace.
func (w SessionWindows) Grace(d time.Duration) SessionWindows {
	w.grace = d
	return w
}

// Retention returns w with its session store keeping a session for d
// after its end, instead of the default gap + grace; d must be at least
// that. Kafka Streams' Materialized.withRetention.
func (w SessionWindows) Retention(d time.Duration) SessionWindows {
	w.retention = d
	return w
}

// RetentionPeriod returns how long the session store keeps a session after
// its end: as set by [SessionWindows.Retention], else gap + grace.
func (w SessionWindows) RetentionPeriod() time.Duration {
	if w.retention > 0 {
		return w.retention
	}
	return w.gap + w.grace
}

func (w SessionWindows) problems() []string {
	var out []string
	if w.gap < time.Millisecond || !wholeMS(w.gap) {
		out = append(out, fmt.Sprintf("session gap %v is not a positive whole number of milliseconds", w.gap))
	}
	if w.grace < 0 || !wholeMS(w.grace) {
		out = append(out, fmt.Sprintf("session grace %v is not a whole number of milliseconds, at least 0", w.grace))
	}
	if w.retention != 0 && (w.retention < w.gap+w.grace || !wholeMS(w.retention)) {
		out = append(out, fmt.Sprintf("session retention %v is shorter than gap + grace or not whole milliseconds", w.retention))
	}
	return out
}

// SessionWindowedGrouped is a grouped stream cut into sessions, ready for
// a session aggregation. Kafka Streams' SessionWindowedKStream.
type SessionWindowedGrouped[K, V any] struct {
	b       *Builder
	node    processor.Node[K, V]
	name    string
	keys    serde.Serde[K]
	windows SessionWindows
}

// SessionWindowedBy cuts the grouped stream into the sessions w, for a
// session [SessionWindowedGrouped.Count], [SessionWindowedGrouped.Reduce]
// or [SessionWindowedGrouped.Aggregate]. Invalid windows are reported by
// Build. Kafka Streams' KGroupedStream.windowedBy(SessionWindows).
func (g *Grouped[K, V]) SessionWindowedBy(w SessionWindows) *SessionWindowedGrouped[K, V] {
	for _, p := range w.problems() {
		g.b.fail("SessionWindowedBy of %q: %s", g.name, p)
	}
	return &SessionWindowedGrouped[K, V]{b: g.b, node: g.node, name: g.name, keys: g.keys, windows: w}
}

// Count counts the records of each key's sessions into the session store
// name (changelog "<application id>-<name>-changelog"), whose values are
// serde.Int64, and returns the table of the sessions. Each session is
// keyed by its key and its first and last record times, both included
// ([Windowed]). When a record joins sessions together, the sessions it
// merges are deleted (the table's stream carries a tombstone for each,
// stamped with its end) and the merged session is written (stamped with
// its end), as in Kafka Streams. A record that would fall in a session
// closed by stream time (its end plus gap plus grace passed) is dropped
// and counted in weir_records_late_total. Records with a null key are
// skipped. Updates go through the record cache, as for time windows.
// Kafka Streams' SessionWindowedKStream.count.
func (g *SessionWindowedGrouped[K, V]) Count(name string) *WindowedTable[K, int64] {
	return sessionAggregate(g, name, serde.Int64(), true,
		func(_ K, _ V, n int64, _ bool) int64 { return n + 1 },
		func(_ K, n int64, _ bool, m int64) int64 { return n + m })
}

// Reduce combines the values of each key's sessions with fn into the
// session store name with the given serde; merged sessions are combined
// with fn too. name is required. Kafka Streams'
// SessionWindowedKStream.reduce.
func (g *SessionWindowedGrouped[K, V]) Reduce(name string, fn func(aggregate, value V) V, values serde.Serde[V]) *WindowedTable[K, V] {
	if fn == nil {
		g.b.fail("Reduce %q of %q: nil reducer", name, g.name)
	}
	return sessionAggregate(g, name, values, false,
		func(_ K, v V, agg V, found bool) V {
			if !found {
				return v
			}
			return fn(agg, v)
		},
		func(_ K, acc V, has bool, next V) V {
			if !has {
				return next
			}
			return fn(acc, next)
		})
}

// Aggregate folds the values of each key's sessions into the session store
// name with the given serde: a session's aggregate starts as init() and
// becomes fn(key, value, aggregate) with every record; when sessions
// merge, their aggregates are combined with merger(key, a, b), in the
// order of the sessions. name is required. Kafka Streams'
// SessionWindowedKStream.aggregate.
func (g *SessionWindowedGrouped[K, V]) Aggregate[A any](name string, init func() A, fn func(key K, value V, aggregate A) A, merger func(key K, a, b A) A, aggregates serde.Serde[A]) *WindowedTable[K, A] {
	if init == nil || fn == nil || merger == nil {
		g.b.fail("Aggregate %q of %q: nil initializer, aggregator or merger", name, g.name)
	}
	return sessionAggregate(g, name, aggregates, false,
		func(k K, v V, agg A, found bool) A {
			if !found {
				agg = init()
			}
			return fn(k, v, agg)
		},
		func(k K, acc A, has bool, next A) A {
			if !has {
				acc = init()
			}
			return merger(k, acc, next)
		})
}

// sessionAggregate adds the node and session store of a session
// aggregation. step gives a session's aggregate after a record from the
// aggregate so far (found false for none yet), merge folds the aggregate
// of a merged session into the aggregate so far (has false for none yet).
// tombstones is as for windowAggregate.
func sessionAggregate[K, V, A any](g *SessionWindowedGrouped[K, V], name string, values serde.Serde[A], tombstones bool, step func(K, V, A, bool) A, merge func(K, A, bool, A) A) *WindowedTable[K, A] {
	if values == nil {
		g.b.fail("aggregation %q of %q: nil value serde", name, g.name)
	}
	w := g.windows
	spec := processor.Session(name, w.RetentionPeriod(), g.keys, values)
	cached := new(true)
	keys := g.keys
	n := g.b.t.AddProcessor(name, func() processor.Processor[K, V, Windowed[K], A] {
		return &sessionAggregator[K, V, A]{spec: spec, keys: keys, name: name, windows: w, step: step, merge: merge, cached: *cached, tombstones: tombstones}
	}, g.node)
	g.b.t.AddStore(spec, n)
	g.b.t.KeyedByPartition(name)
	return &WindowedTable[K, A]{b: g.b, node: n, name: name, keys: g.keys, values: values, sessions: &w, cached: cached}
}

// sessionID is a session aggregation's record-cache identity of a
// session: the key serialized as for the store, then its start and end
// (two sessions of a key may share a start: one merged away, one merged
// into).
func sessionID[K any](keys serde.Serde[K], name string) func(Windowed[K]) (string, error) {
	return func(w Windowed[K]) (string, error) {
		b, err := keys.Serialize(name, w.Key)
		b = binary.BigEndian.AppendUint64(b, uint64(w.Start.UnixMilli()))
		return string(binary.BigEndian.AppendUint64(b, uint64(w.End.UnixMilli()))), err
	}
}

// sessionAggregator is the processor of the session Count, Reduce and
// Aggregate: Kafka Streams' KStreamSessionWindowAggregate.
type sessionAggregator[K, V, A any] struct {
	spec    *processor.SessionSpec[K, A]
	keys    serde.Serde[K]
	name    string
	windows SessionWindows
	step    func(K, V, A, bool) A
	merge   func(K, A, bool, A) A
	cached  bool
	cache   *processor.RecordCache[Windowed[K], A]
	store   processor.SessionStore[K, A]
	// now is the stream time this aggregation has observed, which closes
	// its sessions.
	now streamtime.Observed
	// tombstones: records without a value count (see sessionAggregate).
	tombstones bool
}

func (a *sessionAggregator[K, V, A]) Init(ctx processor.Context[Windowed[K], A]) (err error) {
	if a.cached {
		a.cache = processor.NewRecordCache(ctx, sessionID(a.keys, a.name), nil)
	}
	a.store, err = a.spec.Open(observedStores{ctx, &a.now})
	return err
}

func (a *sessionAggregator[K, V, A]) Close() error { return nil }

func (a *sessionAggregator[K, V, A]) forward(ctx processor.Context[Windowed[K], A], rec processor.Record[Windowed[K], A]) error {
	if a.cache != nil {
		return a.cache.Forward(rec)
	}
	return ctx.Forward(rec)
}

func (a *sessionAggregator[K, V, A]) Process(ctx processor.Context[Windowed[K], A], rec processor.Record[K, V]) error {
	if rec.Tombstone && !a.tombstones {
		return nil // see sessionAggregate
	}
	ts := rec.Timestamp.UnixMilli()
	if ts < 0 {
		ctx.Logger().Debug("weir: record with a negative timestamp skipped by a session aggregation", "timestamp_ms", ts)
		return nil
	}
	gap := a.windows.gap.Milliseconds()
	type session struct {
		w Windowed[K]
		v A
	}
	var merged []session
	start, end := ts, ts
	for w, v := range a.store.FindSessions(rec.Key, time.UnixMilli(ts-gap), time.UnixMilli(ts+gap)) {
		merged = append(merged, session{w, v})
		start, end = min(start, w.Start.UnixMilli()), max(end, w.End.UnixMilli())
	}
	if err := a.store.Err(); err != nil {
		return err
	}
	// A null key's record observes no time: it is dropped (its writes
	// are, by the runtime).
	now, _ := a.now.Get()
	if kb, err := a.keys.Serialize(a.name, rec.Key); err != nil {
		return fmt.Errorf("kstream: %s: serialize key: %w", a.name, err)
	} else if len(kb) > 0 {
		now = a.now.Observe(ctx, ts)
	}
	closeAt := now - gap - a.windows.grace.Milliseconds()
	if end < closeAt {
		processor.CountLate(ctx)
		ctx.Logger().Debug("weir: late record dropped from a closed session", "store", a.name, "timestamp_ms", ts,
			"session_start_ms", start, "session_end_ms", end, "stream_time_ms", now)
		return nil
	}
	var agg A
	for i, s := range merged {
		agg = a.merge(rec.Key, agg, i > 0, s.v)
	}
	if len(merged) > 0 && (start != ts || end != ts) {
		for _, s := range merged {
			if err := a.store.Remove(s.w); err != nil {
				return err
			}
			if err := a.forward(ctx, processor.Record[Windowed[K], A]{Key: s.w, Timestamp: s.w.End, Headers: rec.Headers, Tombstone: true}); err != nil {
				return err
			}
		}
	}
	agg = a.step(rec.Key, rec.Value, agg, len(merged) > 0)
	w := Windowed[K]{Key: rec.Key, Start: time.UnixMilli(start).UTC(), End: time.UnixMilli(end).UTC()}
	if err := a.store.Put(w, agg); err != nil {
		return err
	}
	if kb, err := a.keys.Serialize(a.name, rec.Key); err != nil {
		return fmt.Errorf("kstream: %s: serialize key: %w", a.name, err)
	} else if len(kb) == 0 {
		// A null Kafka key's write was dropped (and counted) by the
		// runtime: skip the record (see droppedNullKey).
		if _, found, err := a.store.Fetch(w); err != nil || !found {
			return err
		}
	}
	return a.forward(ctx, processor.Record[Windowed[K], A]{Key: w, Value: agg, Timestamp: w.End, Headers: rec.Headers})
}

// SessionWindowedSerde returns a serde for the keys of a session
// aggregation's stream, in Kafka Streams' format for sessions
// (SessionWindowedSerializer): the bytes of the key serialized with keys,
// then the session's end and start in milliseconds since the epoch, each
// a big-endian 8-byte integer.
func SessionWindowedSerde[K any](keys serde.Serde[K]) serde.Serde[Windowed[K]] {
	return sessionWindowedSerde[K]{keys}
}

type sessionWindowedSerde[K any] struct{ keys serde.Serde[K] }

func (s sessionWindowedSerde[K]) Serialize(topic string, w Windowed[K]) ([]byte, error) {
	b, err := s.keys.Serialize(topic, w.Key)
	if err != nil {
		return nil, err
	}
	b = binary.BigEndian.AppendUint64(b, uint64(w.End.UnixMilli()))
	return binary.BigEndian.AppendUint64(b, uint64(w.Start.UnixMilli())), nil
}

func (s sessionWindowedSerde[K]) Deserialize(topic string, data []byte) (Windowed[K], error) {
	var w Windowed[K]
	if len(data) < 16 {
		return w, errors.New("kstream: a session key needs 16 bytes of end and start")
	}
	n := len(data) - 16
	k, err := s.keys.Deserialize(topic, data[:n])
	if err != nil {
		return w, err
	}
	w.Key = k
	w.End = time.UnixMilli(int64(binary.BigEndian.Uint64(data[n:]))).UTC()
	w.Start = time.UnixMilli(int64(binary.BigEndian.Uint64(data[n+8:]))).UTC()
	return w, nil
}
