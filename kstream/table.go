package kstream

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/weirstream/weir/changelog"
	"github.com/weirstream/weir/internal/streamtime"
	"github.com/weirstream/weir/processor"
	"github.com/weirstream/weir/serde"
)

// Table is a changelog stream read as a table: the latest value per key.
// Tables come from [Builder.Table], from aggregations, and from
// operations on other tables. Kafka Streams' KTable.
//
// A table's nodes pass on changes, each update with the value it
// replaces, so that a deletion (a Kafka tombstone, or an update a
// [Table.Filter] drops) reaches every operation downstream: a filtered
// table deletes a key whose new value no longer matches, and a
// [Table.GroupBy] subtracts a row from the group it leaves.
type Table[K, V any] struct {
	b      *Builder
	node   processor.Node[K, change[V]]
	name   string
	keys   serde.Serde[K]
	values serde.Serde[V] // nil after a MapValues
	// lookup reads the table's current value of a key, for a join; nil
	// when the table cannot be looked up (after a Suppress).
	lookup *lookup[K, V]
	// stream is the table's ToStream, made once.
	stream *Stream[K, V]
}

// lookup reads a table's value of a key in a processor that looks the
// table up (a join): from the store that materializes it, through the
// filters and mappings between that store and the table (Kafka Streams'
// KTableValueGetter).
type lookup[K, V any] struct {
	stores []string // the stores to connect to the processor
	open   func(ctx processor.StoreContext) (getter[K, V], error)
	// asOf, for a versioned table, reads the value a key had at a time: a
	// stream-table join looks it up as of the stream record's timestamp.
	asOf func(ctx processor.StoreContext) (func(key K, at time.Time) (V, bool, error), error)
}

// getter reads a table's row of a key: its value, its timestamp (the
// zero time for a row stored without one) and whether it exists.
type getter[K, V any] func(key K) (value V, ts time.Time, found bool, err error)

// Name returns the table's name: its store's name for a materialized
// table, otherwise the name of the node that produces it.
func (t *Table[K, V]) Name() string { return t.name }

// Table reads topic as a table materialized in the key-value store name
// (changelog "<application id>-<name>-changelog"): every record is the
// latest value of its key, and a record with a null value (a tombstone)
// deletes the key. name is required: it names the store, the node that
// materializes it, and the source node (name+"-source"). Records with a
// null key are dropped and counted, as in [Grouped.Count]. A tombstone
// for a key the table does not hold changes nothing but is passed on, as
// Kafka Streams passes it: [Table.ToStream] emits it, and a join emits a
// deletion where the other table holds the key (or, for the other side of
// a left or outer join, the row again). Kafka Streams'
// StreamsBuilder.table.
//
// When the topic is compacted and its records cannot be skipped (the
// topic's DeserializationErrors policy is Fail, the default), the topic
// is the store's changelog: weir writes none, and restores the store from
// the topic up to the group's committed offset (Kafka Streams'
// source-topic optimization; see processor.Topology.UseSourceAsChangelog).
// The restored keys are the topic's bytes, so keys must serialize to the
// bytes they were read from (serde.String, serde.Bytes and the integer
// serdes do; JSON keys written by another program may not). Otherwise
// the store has a changelog of its own.
func (b *Builder) Table[K, V any](name, topic string, keys serde.Serde[K], values serde.Serde[V]) *Table[K, V] {
	src := b.t.AddSource(name+"-source", topic, keys, values, processor.WithTombstones[K, V]())
	spec := processor.KeyValue(name, keys, values)
	n := b.t.AddProcessor(name, func() processor.Processor[K, V, K, change[V]] {
		return &tableSource[K, V]{spec: spec, keys: keys, name: name}
	}, src)
	b.t.AddStore(spec, n)
	b.t.KeyedByPartition(name)
	b.t.UseSourceAsChangelog(name, src)
	return &Table[K, V]{b: b, node: n, name: name, keys: keys, values: values, lookup: storeLookup(spec)}
}

// VersionedTable reads topic as a versioned table: like [Builder.Table],
// but materialized in a versioned store (processor.Versioned) that keeps
// each key's values with the times they became valid (the records'
// timestamps) for history behind stream time. A stream joined to it
// ([Stream.Join], [Stream.LeftJoin]) looks a key up as of the stream
// record's timestamp, not as the table stands when the record is
// processed, so the join does not depend on the order in which the
// broker delivers the two topics (a temporal join). A table record older
// than the key's latest version is kept in the history, for lookups of
// its time, and is not passed on: the table's latest value did not
// change. The history reaches back from the largest timestamp the table
// has read (not the task's stream time), as in Kafka Streams: a record
// from before it is dropped and counted as late, and a lookup of a time
// before it finds only a latest version valid then. Kafka Streams' table
// materialized as a versioned store.
func (b *Builder) VersionedTable[K, V any](name, topic string, keys serde.Serde[K], values serde.Serde[V], history time.Duration) *Table[K, V] {
	src := b.t.AddSource(name+"-source", topic, keys, values, processor.WithTombstones[K, V]())
	spec := processor.Versioned(name, history, keys, values)
	times := &perTask[streamtime.Observed]{}
	n := b.t.AddProcessor(name, func() processor.Processor[K, V, K, change[V]] {
		return &versionedSource[K, V]{spec: spec, keys: keys, name: name, times: times}
	}, src)
	b.t.AddStore(spec, n)
	b.t.KeyedByPartition(name)
	// The store's history follows the largest timestamp put into it, as
	// Kafka Streams' versioned stores do, for its writer and its readers
	// alike.
	open := func(ctx processor.StoreContext) (processor.VersionedStore[K, V], error) {
		task := ""
		if c, ok := ctx.(interface{ TaskID() string }); ok { // a processor's Context
			task = c.TaskID()
		}
		return spec.Open(observedStores{ctx, times.get(task)})
	}
	l := &lookup[K, V]{stores: []string{name},
		open: func(ctx processor.StoreContext) (getter[K, V], error) {
			st, err := open(ctx)
			if err != nil {
				return nil, err
			}
			return func(k K) (V, time.Time, bool, error) {
				// A version's timestamp is the time it became valid.
				return st.Get(k)
			}, nil
		},
		asOf: func(ctx processor.StoreContext) (func(K, time.Time) (V, bool, error), error) {
			st, err := open(ctx)
			if err != nil {
				return nil, err
			}
			return func(k K, at time.Time) (V, bool, error) {
				v, _, found, err := st.GetAsOf(k, at)
				return v, found, err
			}, nil
		}}
	return &Table[K, V]{b: b, node: n, name: name, keys: keys, values: values, lookup: l}
}

// versionedSource materializes a topic's records as versions and passes
// on the updates of each key's latest version.
type versionedSource[K, V any] struct {
	spec  *processor.VersionedSpec[K, V]
	keys  serde.Serde[K]
	name  string
	store processor.VersionedStore[K, V]
	// times holds, per task, the largest timestamp put into the store.
	times *perTask[streamtime.Observed]
	task  string
	now   *streamtime.Observed
}

func (p *versionedSource[K, V]) Init(ctx processor.Context[K, change[V]]) (err error) {
	p.task = ctx.TaskID()
	p.now = p.times.get(p.task)
	p.store, err = p.spec.Open(observedStores{ctx, p.now})
	return err
}

func (p *versionedSource[K, V]) Close() error {
	p.times.drop(p.task)
	return nil
}

func (p *versionedSource[K, V]) Process(ctx processor.Context[K, change[V]], rec processor.Record[K, V]) error {
	if null, err := nullInputKey(ctx, p.keys, p.name, rec.Key); err != nil {
		return err
	} else if !null {
		p.now.Observe(ctx, rec.Timestamp.UnixMilli())
	}
	old, from, found, err := p.store.Get(rec.Key)
	if err != nil {
		return err
	}
	latest := !rec.Timestamp.Before(from) // from is zero when the key has no version
	if rec.Tombstone {
		err = p.store.Delete(rec.Key, rec.Timestamp)
	} else {
		err = p.store.Put(rec.Key, rec.Value, rec.Timestamp)
	}
	if errors.Is(err, changelog.ErrExpired) {
		// Older than the history: not kept and not passed on, as Kafka
		// Streams' versioned table drops it; counted as late.
		processor.CountLate(ctx)
		ctx.Logger().Debug("versioned table: record older than the history dropped", "store", p.name)
		return nil
	}
	if err != nil || !latest {
		return err
	}
	if rec.Tombstone && !found {
		// Passed on, as Builder.Table passes it, unless the key is null.
		if null, err := nullInputKey(ctx, p.keys, p.name, rec.Key); err != nil || null {
			return err
		}
	}
	c := change[V]{old: old, hasOld: found}
	if !rec.Tombstone {
		c.new, c.hasNew = rec.Value, true
	}
	return ctx.Forward(processor.Record[K, change[V]]{Key: rec.Key, Value: c, Timestamp: rec.Timestamp, Headers: rec.Headers})
}

// storeLookup looks a key up in the store spec declares.
func storeLookup[K, V any](spec *processor.KeyValueSpec[K, V]) *lookup[K, V] {
	return &lookup[K, V]{stores: []string{spec.Name()}, open: func(ctx processor.StoreContext) (getter[K, V], error) {
		st, err := spec.Open(ctx)
		if err != nil {
			return nil, err
		}
		return st.GetStamped, nil
	}}
}

// tableSource materializes a topic's records in a store and passes each
// update on as a change.
type tableSource[K, V any] struct {
	spec  *processor.KeyValueSpec[K, V]
	keys  serde.Serde[K]
	name  string
	store processor.KeyValueStore[K, V]
}

func (p *tableSource[K, V]) Init(ctx processor.Context[K, change[V]]) (err error) {
	p.store, err = p.spec.Open(ctx)
	return err
}

func (p *tableSource[K, V]) Close() error { return nil }

func (p *tableSource[K, V]) Process(ctx processor.Context[K, change[V]], rec processor.Record[K, V]) error {
	old, found, err := p.store.Get(rec.Key)
	if err != nil {
		return err
	}
	c := change[V]{old: old, hasOld: found}
	if rec.Tombstone {
		if !found {
			// Passed on as an empty change, as Kafka Streams does, unless
			// the key is null: the runtime drops (and counts) its write.
			null, err := nullInputKey(ctx, p.keys, p.name, rec.Key)
			if err != nil {
				return err
			}
			if null {
				return p.store.Delete(rec.Key)
			}
		} else if err := p.store.Delete(rec.Key); err != nil {
			return err
		}
	} else {
		// The row keeps its record's timestamp, which a join's result
		// takes when it is the later side's (Kafka Streams' rule).
		if err := p.store.PutStamped(rec.Key, rec.Value, rec.Timestamp); err != nil {
			return err
		}
		if skip, err := droppedNullKey(p.store, p.keys, p.name, rec.Key); err != nil || skip {
			return err
		}
		c.new, c.hasNew = rec.Value, true
	}
	return ctx.Forward(processor.Record[K, change[V]]{Key: rec.Key, Value: c, Timestamp: rec.Timestamp, Headers: rec.Headers})
}

// nullInputKey reports whether key is the null Kafka key of the input
// record being processed: that record's key was null and key serializes
// to nothing, so the runtime drops (and counts) what is written under it
// (package processor, "Records with a null key"). A processor that
// re-keyed the record gave it a key of its own. Kafka Streams drops such
// records before its tables, joins and aggregations.
func nullInputKey[K any](ctx any, keys serde.Serde[K], name string, key K) (bool, error) {
	if n, ok := ctx.(interface{ InputKeyNull() bool }); !ok || !n.InputKeyNull() {
		return false, nil
	}
	return emptyKey(keys, name, key)
}

// emptyKey reports whether key serializes to nothing, as a null key does.
func emptyKey[K any](keys serde.Serde[K], name string, key K) (bool, error) {
	kb, err := keys.Serialize(name, key)
	if err != nil {
		return false, fmt.Errorf("kstream: %s: serialize key: %w", name, err)
	}
	return len(kb) == 0, nil
}

// droppedNullKey reports whether the runtime dropped the write of key to
// store because the input record's Kafka key is null (package processor,
// "Records with a null key"): such a record is skipped, as Kafka Streams'
// tables and aggregations skip null keys, so nothing is forwarded either.
// Only a key that serializes to nothing can be one; for it, a read-back
// that misses means the write was dropped (and counted). A present but
// empty key was stored and is kept as any other.
func droppedNullKey[K, V any](store processor.KeyValueStore[K, V], keys serde.Serde[K], name string, key K) (bool, error) {
	if empty, err := emptyKey(keys, name, key); err != nil || !empty {
		return false, err
	}
	_, found, err := store.Get(key)
	return !found, err
}

// ToStream returns the stream of the table's updates: one record per
// update, with the key, the new value, the update's timestamp and the
// headers of the input record that caused it, plus the update's version in the
// header processor.VersionHeader (a key's versions increase, so that a
// sink can apply an update only if it is newer: see VersionHeader). A
// deletion is a tombstone (processor.Record.Tombstone, the zero value),
// which a sink writes with a null value. An aggregation's record cache (see [Grouped.Count]) makes
// a key's updates between two commits one record, the latest. The stream
// is named as the table and is partitioned by its key. Kafka Streams'
// KTable.toStream.
//
// An update's timestamp is Kafka Streams': a row read from a topic has
// its record's; an aggregation's update the largest timestamp among the
// records (changes) of its key so far; a table-table join's result the
// later of the two rows' (the update's alone when the other side has
// none); a foreign-key join's result the later of the row's and the
// foreign row's, or the foreign row change's own. Tables keep these
// timestamps with their values, in their changelogs too (see
// docs/semantics.md, "Result timestamps").
func (t *Table[K, V]) ToStream() *Stream[K, V] {
	if t.stream != nil {
		return t.stream
	}
	n := t.b.t.AddProcessor(t.name+"-tostream", processor.Func(func(ctx processor.Context[K, V], rec processor.Record[K, change[V]]) error {
		return ctx.Forward(processor.Record[K, V]{Key: rec.Key, Value: rec.Value.new, Timestamp: rec.Timestamp,
			Headers: processor.StampVersion(rec.Headers, ctx.NextVersion()), Tombstone: !rec.Value.hasNew})
	}), t.node)
	t.stream = &Stream[K, V]{b: t.b, node: n, name: t.name, keys: t.keys}
	return t.stream
}

// Filter returns the table of the rows of t for which pred is true. A row
// whose new value fails pred is deleted from the result (a key that was
// in it gets a deletion; one that was not gets nothing). Its node is
// named Name()+"-filter" unless [Named]. The result is not materialized:
// a join looks it up through t. Kafka Streams' KTable.filter, except
// that Kafka Streams writes a tombstone for every update it rejects, also
// of a row that was never in its result (a deliberate difference, see
// docs/semantics.md, "Tables and tombstones").
func (t *Table[K, V]) Filter(pred func(key K, value V) bool, opts ...Option) *Table[K, V] {
	return t.filter("filter", pred, true, opts)
}

// FilterNot returns the table of the rows of t for which pred is false,
// as [Table.Filter] does. Kafka Streams' KTable.filterNot.
func (t *Table[K, V]) FilterNot(pred func(key K, value V) bool, opts ...Option) *Table[K, V] {
	return t.filter("filternot", pred, false, opts)
}

func (t *Table[K, V]) filter(op string, pred func(K, V) bool, keep bool, opts []Option) *Table[K, V] {
	if pred == nil {
		t.b.fail("%s of table %q: nil predicate", op, t.name)
	}
	name := nameOf(t.name, op, opts)
	n := t.b.t.AddProcessor(name, processor.Func(func(ctx processor.Context[K, change[V]], rec processor.Record[K, change[V]]) error {
		c := rec.Value
		c.hasNew = c.hasNew && pred(rec.Key, c.new) == keep
		c.hasOld = c.hasOld && pred(rec.Key, c.old) == keep
		if !c.hasNew && !c.hasOld {
			return nil // not in the result before or after
		}
		if !c.hasNew {
			var zero V
			c.new = zero
		}
		rec.Value = c
		return ctx.Forward(rec)
	}), t.node)
	out := &Table[K, V]{b: t.b, node: n, name: name, keys: t.keys, values: t.values}
	if l := t.lookup; l != nil {
		out.lookup = &lookup[K, V]{stores: l.stores, open: func(ctx processor.StoreContext) (getter[K, V], error) {
			get, err := l.open(ctx)
			if err != nil {
				return nil, err
			}
			return func(k K) (V, time.Time, bool, error) {
				v, ts, ok, err := get(k)
				if err != nil || !ok || pred(k, v) == keep {
					return v, ts, ok, err
				}
				var zero V
				return zero, time.Time{}, false, nil
			}, nil
		}}
	}
	return out
}

// MapValues returns the table of fn applied to every value of t; keys and
// deletions pass through. fn must be deterministic: it is applied again
// to a row's old value when the row changes, and by joins that look the
// result up. Its node is named Name()+"-mapvalues" unless [Named]. The
// result is not materialized, and its value serde is unknown: a Suppress
// of it fails Build. Kafka Streams' KTable.mapValues.
func (t *Table[K, V]) MapValues[V2 any](fn func(key K, value V) V2, opts ...Option) *Table[K, V2] {
	if fn == nil {
		t.b.fail("mapvalues of table %q: nil function", t.name)
	}
	name := nameOf(t.name, "mapvalues", opts)
	n := t.b.t.AddProcessor(name, processor.Func(func(ctx processor.Context[K, change[V2]], rec processor.Record[K, change[V]]) error {
		var c change[V2]
		if rec.Value.hasNew {
			c.new, c.hasNew = fn(rec.Key, rec.Value.new), true
		}
		if rec.Value.hasOld {
			c.old, c.hasOld = fn(rec.Key, rec.Value.old), true
		}
		return ctx.Forward(processor.Record[K, change[V2]]{Key: rec.Key, Value: c, Timestamp: rec.Timestamp, Headers: rec.Headers})
	}), t.node)
	out := &Table[K, V2]{b: t.b, node: n, name: name, keys: t.keys}
	if l := t.lookup; l != nil {
		out.lookup = &lookup[K, V2]{stores: l.stores, open: func(ctx processor.StoreContext) (getter[K, V2], error) {
			get, err := l.open(ctx)
			if err != nil {
				return nil, err
			}
			return func(k K) (V2, time.Time, bool, error) {
				v, ts, ok, err := get(k)
				if err != nil || !ok {
					var zero V2
					return zero, time.Time{}, false, err
				}
				return fn(k, v), ts, true, nil
			}, nil
		}}
	}
	return out
}

// perTask holds one T per task, for processors of a task that share it
// (a versioned table's writer and its readers). Safe for concurrent use:
// tasks of several threads share it.
type perTask[T any] struct {
	mu sync.Mutex
	m  map[string]*T
}

// get returns task's T, made on first use.
func (p *perTask[T]) get(task string) *T {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.m == nil {
		p.m = map[string]*T{}
	}
	t := p.m[task]
	if t == nil {
		t = new(T)
		p.m[task] = t
	}
	return t
}

// drop forgets task's T: the task closed.
func (p *perTask[T]) drop(task string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.m, task)
}
