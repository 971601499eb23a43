package kstream

import (
	"github.com/weirstream/weir/processor"
	"github.com/weirstream/weir/serde"
)

// GroupedTable is a table regrouped by a new key, ready for an
// aggregation with an adder and a subtractor. Kafka Streams'
// KGroupedTable.
type GroupedTable[K, V any] struct {
	b    *Builder
	node processor.Node[K, change[V]]
	name string
	keys serde.Serde[K]
}

// GroupBy regroups the rows of t by the key and value fn selects, through
// the internal topic "<application id>-<name>-repartition". When a row
// changes, its old key and value leave their group and its new ones join
// theirs, so the aggregation subtracts the old value and adds the new:
// a row that moves to another group is taken out of the old one. name is
// required and names the selector's node and the topic. fn must be
// deterministic: it is applied again to a row's old value. Kafka
// Streams' KTable.groupBy.
func (t *Table[K, V]) GroupBy[K2, V2 any](name string, fn func(key K, value V) (K2, V2), keys serde.Serde[K2], values serde.Serde[V2]) *GroupedTable[K2, V2] {
	if fn == nil {
		t.b.fail("GroupBy %q of table %q: nil selector", name, t.name)
	}
	var cs serde.Serde[change[V2]]
	if values != nil {
		cs = changeSerde[V2]{values}
	} else {
		t.b.fail("GroupBy %q of table %q: nil value serde", name, t.name)
	}
	sel := t.b.t.AddProcessor(name, processor.Func(func(ctx processor.Context[K2, change[V2]], rec processor.Record[K, change[V]]) error {
		c := rec.Value
		var add, sub processor.Record[K2, change[V2]]
		if c.hasNew {
			k, v := fn(rec.Key, c.new)
			add = processor.Record[K2, change[V2]]{Key: k, Value: change[V2]{new: v, hasNew: true}, Timestamp: rec.Timestamp, Headers: rec.Headers}
		}
		if c.hasOld {
			k, v := fn(rec.Key, c.old)
			sub = processor.Record[K2, change[V2]]{Key: k, Value: change[V2]{old: v, hasOld: true}, Timestamp: rec.Timestamp, Headers: rec.Headers}
		}
		if c.hasNew && c.hasOld && sameKey(keys, name, add.Key, sub.Key) {
			// One update of the group: subtract and add at once.
			add.Value.old, add.Value.hasOld = sub.Value.old, true
			return ctx.Forward(add)
		}
		if c.hasOld {
			if err := ctx.Forward(sub); err != nil {
				return err
			}
		}
		if c.hasNew {
			return ctx.Forward(add)
		}
		return nil
	}), t.node)
	n := t.b.t.AddRepartition(name, keys, cs, sel)
	return &GroupedTable[K2, V2]{b: t.b, node: n, name: name, keys: keys}
}

// sameKey reports whether two keys serialize alike.
func sameKey[K any](keys serde.Serde[K], topic string, a, b K) bool {
	if keys == nil {
		return false
	}
	ab, err1 := keys.Serialize(topic, a)
	bb, err2 := keys.Serialize(topic, b)
	return err1 == nil && err2 == nil && string(ab) == string(bb)
}

// Count counts the rows of each group into the key-value store name,
// whose values are serde.Int64: a row joining the group adds one, a row
// leaving it subtracts one. A group whose rows all left keeps the count
// 0. name is required. Updates go through the record cache as in
// [Grouped.Count]. Kafka Streams' KGroupedTable.count.
func (g *GroupedTable[K, V]) Count(name string, opts ...AggregateOption) *Table[K, int64] {
	return tableAggregate(g, name, serde.Int64(), func(_ K, c change[V], n int64, _ bool) int64 {
		if c.hasOld {
			n--
		}
		if c.hasNew {
			n++
		}
		return n
	}, opts)
}

// Reduce combines the rows of each group into the key-value store name:
// a row joining the group is added with adder (the first row of a group
// is its aggregate as it is), a row leaving it is taken out with
// subtractor. name is required. Kafka Streams' KGroupedTable.reduce; unlike
// it, a group whose rows all left keeps its last aggregate rather than
// being deleted (a Go value cannot be null).
func (g *GroupedTable[K, V]) Reduce(name string, adder, subtractor func(aggregate, value V) V, values serde.Serde[V], opts ...AggregateOption) *Table[K, V] {
	if adder == nil || subtractor == nil {
		g.b.fail("Reduce %q of %q: nil adder or subtractor", name, g.name)
	}
	return tableAggregate(g, name, values, func(_ K, c change[V], agg V, found bool) V {
		if c.hasOld && found {
			agg = subtractor(agg, c.old)
		}
		if c.hasNew {
			if !found {
				return c.new
			}
			agg = adder(agg, c.new)
		}
		return agg
	}, opts)
}

// Aggregate folds the rows of each group into the key-value store name:
// a group's aggregate starts as init(), a row joining it is added with
// adder, a row leaving it taken out with subtractor (when a row changes
// within its group, the subtractor runs first). name is required. Kafka
// Streams' KGroupedTable.aggregate.
func (g *GroupedTable[K, V]) Aggregate[A any](name string, init func() A, adder, subtractor func(key K, value V, aggregate A) A, aggregates serde.Serde[A], opts ...AggregateOption) *Table[K, A] {
	if init == nil || adder == nil || subtractor == nil {
		g.b.fail("Aggregate %q of %q: nil initializer, adder or subtractor", name, g.name)
	}
	return tableAggregate(g, name, aggregates, func(k K, c change[V], agg A, found bool) A {
		if !found {
			agg = init()
		}
		if c.hasOld {
			agg = subtractor(k, c.old, agg)
		}
		if c.hasNew {
			agg = adder(k, c.new, agg)
		}
		return agg
	}, opts)
}

// tableAggregate adds the node and store of a grouped table's
// aggregation, whose step gives a group's new aggregate from a change and
// the group's aggregate (the zero A and found false for a new group).
func tableAggregate[K, V, A any](g *GroupedTable[K, V], name string, values serde.Serde[A], step func(key K, c change[V], agg A, found bool) A, opts []AggregateOption) *Table[K, A] {
	if values == nil {
		g.b.fail("aggregation %q of %q: nil value serde", name, g.name)
	}
	cached := cachedBy(opts)
	spec := processor.KeyValue(name, g.keys, values)
	keys := g.keys
	n := g.b.t.AddProcessor(name, func() processor.Processor[K, change[V], K, change[A]] {
		return &tableAggregator[K, V, A]{spec: spec, keys: keys, name: name, step: step, cached: cached}
	}, g.node)
	g.b.t.AddStore(spec, n)
	g.b.t.KeyedByPartition(name)
	return &Table[K, A]{b: g.b, node: n, name: name, keys: g.keys, values: values, lookup: storeLookup(spec)}
}

// tableAggregator is the processor of a grouped table's aggregations:
// Kafka Streams' KTableAggregate and KTableReduce.
type tableAggregator[K, V, A any] struct {
	spec   *processor.KeyValueSpec[K, A]
	keys   serde.Serde[K]
	name   string
	step   func(key K, c change[V], agg A, found bool) A
	cached bool
	store  processor.KeyValueStore[K, A]
	cache  *processor.RecordCache[K, change[A]]
}

func (a *tableAggregator[K, V, A]) Init(ctx processor.Context[K, change[A]]) (err error) {
	if a.cached {
		a.cache = newChangeCache(ctx, a.keys, a.name)
	}
	a.store, err = a.spec.Open(ctx)
	return err
}

func (a *tableAggregator[K, V, A]) Close() error { return nil }

func (a *tableAggregator[K, V, A]) Process(ctx processor.Context[K, change[A]], rec processor.Record[K, change[V]]) error {
	if rec.Tombstone || (!rec.Value.hasNew && !rec.Value.hasOld) {
		return nil
	}
	old, oldTS, found, err := a.store.GetStamped(rec.Key)
	if err != nil {
		return err
	}
	agg := a.step(rec.Key, rec.Value, old, found)
	// The group's update carries the largest timestamp of the changes
	// that made it, as Kafka Streams' does.
	ts := latest(rec.Timestamp, oldTS)
	if err := a.store.PutStamped(rec.Key, agg, ts); err != nil {
		return err
	}
	if skip, err := droppedNullKey(a.store, a.keys, a.name, rec.Key); err != nil || skip {
		return err
	}
	return forwardChange(ctx, a.cache, processor.Record[K, change[A]]{Key: rec.Key,
		Value: change[A]{new: agg, old: old, hasNew: true, hasOld: found}, Timestamp: ts, Headers: rec.Headers})
}
