package kstream

import (
	"time"

	"github.com/weirstream/weir/processor"
	"github.com/weirstream/weir/serde"
)

// Grouped is a stream grouped by key, ready for an aggregation: every
// record of a key reaches the same task. Kafka Streams' KGroupedStream.
type Grouped[K, V any] struct {
	b    *Builder
	node processor.Node[K, V]
	name string
	keys serde.Serde[K]
}

// GroupByKey groups the stream by its current key. The stream must be
// partitioned by that key: when a step since the last repartition changed
// the key (Map, FlatMap, SelectKey, Process), Build fails and names that
// step; repartition it first with [Stream.Repartition], or use
// [Stream.GroupBy], which does. weir never creates an unnamed repartition
// topic (Kafka Streams names it after the operator's position). Kafka
// Streams' KStream.groupByKey.
func (s *Stream[K, V]) GroupByKey() *Grouped[K, V] {
	if s.rekeyedBy != "" {
		s.b.fail("GroupByKey of %q: the key was changed by %q and the stream is not partitioned by it; "+
			"add a named repartition with Repartition(name, keySerde, valueSerde) or group with GroupBy(name, ...)", s.name, s.rekeyedBy)
	}
	return &Grouped[K, V]{b: s.b, node: s.node, name: s.name, keys: s.keys}
}

// GroupBy groups the stream by the key fn selects. It always repartitions,
// through the internal topic "<application id>-<name>-repartition" written
// with keys and values, as Kafka Streams' groupBy does. name is required
// and names the key selector's node and the topic (whose nodes are
// name+"-sink" and name+"-source"). A record whose input key was null and
// whose selected key serializes to nothing is dropped at the repartition
// and counted (see "Records with a null key" in package processor). Kafka
// Streams' KStream.groupBy.
func (s *Stream[K, V]) GroupBy[K2 any](name string, fn func(key K, value V) K2, keys serde.Serde[K2], values serde.Serde[V]) *Grouped[K2, V] {
	if fn == nil {
		s.b.fail("GroupBy %q of %q: nil key selector", name, s.name)
	}
	sel := s.b.t.AddProcessor(name, processor.Func(func(ctx processor.Context[K2, V], rec processor.Record[K, V]) error {
		return ctx.Forward(processor.Record[K2, V]{Key: fn(rec.Key, rec.Value), Value: rec.Value, Timestamp: rec.Timestamp, Headers: rec.Headers, Tombstone: rec.Tombstone})
	}), s.node)
	n := s.b.t.AddRepartition(name, keys, values, sel)
	return &Grouped[K2, V]{b: s.b, node: n, name: name, keys: keys}
}

// AggregateOption configures a key-value aggregation: [Grouped.Count],
// [Grouped.Reduce] or [Grouped.Aggregate].
type AggregateOption struct{ noCache bool }

// WithoutCache turns the aggregation's record cache off, so that its
// table forwards every update at once even when Config.CacheMaxBytes
// turns caching on: for a stream of running balances that must
// show each one, say. Kafka Streams' Materialized.withCachingDisabled.
func WithoutCache() AggregateOption { return AggregateOption{noCache: true} }

// cachedBy reports whether opts leave an aggregation's record cache on.
func cachedBy(opts []AggregateOption) bool {
	for _, o := range opts {
		if o.noCache {
			return false
		}
	}
	return true
}

// Count counts the records of each key into the key-value store name
// (changelog "<application id>-<name>-changelog"), whose values are
// serde.Int64. name is required: it names the store and the aggregation's
// node. Records with a null key are skipped: not counted, not forwarded,
// and counted in weir_records_dropped_total{reason="null_key"}. Kafka
// Streams' KGroupedStream.count.
//
// With caching on (Config.CacheMaxBytes > 0), Count, like every
// aggregation, forwards through a record cache (processor.RecordCache):
// a key's updates between two commits are forwarded once, with the latest
// count, at the commit (earlier when the instance's caches pass their
// budget), as in Kafka Streams, whose cache is on by default. The table's
// stream then holds a key's latest count at every commit, not each step
// on the way; [WithoutCache] forwards each step whatever the Config.
func (g *Grouped[K, V]) Count(name string, opts ...AggregateOption) *Table[K, int64] {
	return aggregate(g, name, serde.Int64(), func(_ K, _ V, n int64, _ bool) int64 { return n + 1 }, opts)
}

// Reduce combines the values of each key into the key-value store name
// with the given value serde: the first value of a key is stored as it
// is, every later one as fn(aggregate, value). name is required: it names
// the store and the aggregation's node. Records with a null key are
// skipped and updates cached, as in [Grouped.Count]. Kafka Streams'
// KGroupedStream.reduce.
func (g *Grouped[K, V]) Reduce(name string, fn func(aggregate, value V) V, values serde.Serde[V], opts ...AggregateOption) *Table[K, V] {
	if fn == nil {
		g.b.fail("Reduce %q of %q: nil reducer", name, g.name)
	}
	return aggregate(g, name, values, func(_ K, v V, agg V, found bool) V {
		if !found {
			return v
		}
		return fn(agg, v)
	}, opts)
}

// Aggregate folds the values of each key into the key-value store name
// with the given serde: a key's aggregate starts as init() and becomes
// fn(key, value, aggregate) with every record. name is required: it names
// the store and the aggregation's node. Records with a null key are
// skipped and updates cached, as in [Grouped.Count]. Kafka Streams'
// KGroupedStream.aggregate.
func (g *Grouped[K, V]) Aggregate[A any](name string, init func() A, fn func(key K, value V, aggregate A) A, aggregates serde.Serde[A], opts ...AggregateOption) *Table[K, A] {
	if init == nil || fn == nil {
		g.b.fail("Aggregate %q of %q: nil initializer or aggregator", name, g.name)
	}
	return aggregate(g, name, aggregates, func(k K, v V, agg A, found bool) A {
		if !found {
			agg = init()
		}
		return fn(k, v, agg)
	}, opts)
}

// aggregate adds the node and store of an aggregation whose step gives a
// key's new aggregate from a record and the key's aggregate (the zero A
// and found false for a new key).
func aggregate[K, V, A any](g *Grouped[K, V], name string, values serde.Serde[A], step func(key K, value V, agg A, found bool) A, opts []AggregateOption) *Table[K, A] {
	cached := cachedBy(opts)
	// A nil g.keys is a re-keyed stream's, which GroupByKey has reported.
	if values == nil {
		g.b.fail("aggregation %q of %q: nil value serde", name, g.name)
	}
	spec := processor.KeyValue(name, g.keys, values)
	n := g.b.t.AddProcessor(name, func() processor.Processor[K, V, K, change[A]] {
		return &aggregator[K, V, A]{spec: spec, keys: g.keys, name: name, step: step, cached: cached}
	}, g.node)
	g.b.t.AddStore(spec, n)
	g.b.t.KeyedByPartition(name)
	return &Table[K, A]{b: g.b, node: n, name: name, keys: g.keys, values: values, lookup: storeLookup(spec)}
}

// aggregator is the processor of Count, Reduce and Aggregate.
type aggregator[K, V, A any] struct {
	spec  *processor.KeyValueSpec[K, A]
	keys  serde.Serde[K]
	name  string
	store processor.KeyValueStore[K, A]
	step  func(key K, value V, agg A, found bool) A
	// cached: updates go through cache (see Grouped.Count).
	cached bool
	cache  *processor.RecordCache[K, change[A]]
}

func (a *aggregator[K, V, A]) Init(ctx processor.Context[K, change[A]]) (err error) {
	if a.cached {
		a.cache = newChangeCache(ctx, a.keys, a.name)
	}
	a.store, err = a.spec.Open(ctx)
	return err
}

func (a *aggregator[K, V, A]) Close() error { return nil }

func (a *aggregator[K, V, A]) Process(ctx processor.Context[K, change[A]], rec processor.Record[K, V]) error {
	if rec.Tombstone {
		// A stream aggregation ignores records without a value, as Kafka
		// Streams' does.
		ctx.Logger().Debug("aggregation skips a tombstone", "aggregation", a.name)
		return nil
	}
	old, oldTS, found, err := a.store.GetStamped(rec.Key)
	if err != nil {
		return err
	}
	agg := a.step(rec.Key, rec.Value, old, found)
	// The update carries the largest timestamp the key has seen, as
	// Kafka Streams' does: a late record does not move the aggregate's
	// time back.
	ts := latest(rec.Timestamp, oldTS)
	if err := a.store.PutStamped(rec.Key, agg, ts); err != nil {
		return err
	}
	skip, err := droppedNullKey(a.store, a.keys, a.name, rec.Key)
	if err != nil || skip {
		return err
	}
	return forwardChange(ctx, a.cache, processor.Record[K, change[A]]{Key: rec.Key,
		Value: change[A]{new: agg, old: old, hasNew: true, hasOld: found}, Timestamp: ts, Headers: rec.Headers})
}

// newChangeCache returns the record cache of a node that forwards a
// table's changes.
func newChangeCache[K, A any](ctx processor.Context[K, change[A]], keys serde.Serde[K], name string) *processor.RecordCache[K, change[A]] {
	return processor.NewRecordCache(ctx, cacheID(keys, name), nil)
}

// cacheID returns the identity of a key in a record cache: its serialized
// form; for keys of the built-in string serde, which serializes a string
// as its bytes, the string itself, which the cache then looks up without
// serializing and copying the key twice per record.
func cacheID[K any](keys serde.Serde[K], name string) func(K) (string, error) {
	if any(keys) == any(serde.String()) {
		// K is string: the function's type is func(K) (string, error).
		return any(func(s string) (string, error) { return s, nil }).(func(K) (string, error))
	}
	return func(k K) (string, error) {
		b, err := keys.Serialize(name, k)
		return string(b), err
	}
}

// forwardChange forwards a table's change, through cache when it is not
// nil: a change that replaces one the cache holds keeps the held one's old
// value, which is what was forwarded last.
func forwardChange[K, A any](ctx processor.Context[K, change[A]], cache *processor.RecordCache[K, change[A]], rec processor.Record[K, change[A]]) error {
	if cache == nil {
		return ctx.Forward(rec)
	}
	return cache.Merge(rec, keepOld[K, A])
}

// keepOld merges a table change into the one held for its key.
func keepOld[K, A any](held, next processor.Record[K, change[A]]) processor.Record[K, change[A]] {
	next.Value.old, next.Value.hasOld = held.Value.old, held.Value.hasOld
	return next
}

// latest returns the later of two timestamps; the zero time, a stored
// value's when it has none, is earlier than any.
func latest(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
