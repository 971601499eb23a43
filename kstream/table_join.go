package kstream

import (
	"time"

	"github.com/weirstream/weir/processor"
)

// Join returns the table joining the rows of t and other under the same
// key: a key has a row in the result while both tables have one, with
// value joiner(key, left, right). An update of either side updates the
// result (with the other side as it stands then), and a deletion of
// either side deletes the key from the result; so does, again, a
// tombstone for a key one table does not hold while the other holds it
// (see [Builder.Table]), as in Kafka Streams. Each result carries the
// later of the update's timestamp and the other row's, as Kafka Streams'
// does (the update's alone when the other side has no row).
//
// t and other must be materialized or read through filters and mappings
// of materialized tables (not a Suppress), and co-partitioned: their
// topics must have the same partition count, which Run checks. The
// result is not materialized; a join looks it up through both tables.
// The nodes are named Name()+"-join-"+other.Name() (the result) and
// that name + "-left" and "-right" unless [Named]. Kafka Streams'
// KTable.join.
func (t *Table[K, V]) Join[VO, VR any](other *Table[K, VO], joiner func(key K, left V, right VO) VR, opts ...Option) *Table[K, VR] {
	if joiner == nil {
		t.b.fail("join of table %q: nil joiner", t.name)
	}
	return tableJoin(t, other, "join", func(k K, l V, lok bool, r VO, rok bool) (VR, bool) {
		if !lok || !rok {
			var zero VR
			return zero, false
		}
		return joiner(k, l, r), true
	}, opts)
}

// LeftJoin is [Table.Join] keeping every row of t: a key has a row in the
// result while t has one, joined with other's row or, when other has
// none, with the zero VO and found false. Kafka Streams' KTable.leftJoin.
func (t *Table[K, V]) LeftJoin[VO, VR any](other *Table[K, VO], joiner func(key K, left V, right VO, found bool) VR, opts ...Option) *Table[K, VR] {
	if joiner == nil {
		t.b.fail("leftjoin of table %q: nil joiner", t.name)
	}
	return tableJoin(t, other, "leftjoin", func(k K, l V, lok bool, r VO, rok bool) (VR, bool) {
		if !lok {
			var zero VR
			return zero, false
		}
		return joiner(k, l, r, rok), true
	}, opts)
}

// OuterJoin is [Table.Join] keeping every row of both tables: a key has a
// row in the result while either table has one; joiner gets the zero
// value and false for a side without a row. Kafka Streams'
// KTable.outerJoin.
func (t *Table[K, V]) OuterJoin[VO, VR any](other *Table[K, VO], joiner func(key K, left V, leftFound bool, right VO, rightFound bool) VR, opts ...Option) *Table[K, VR] {
	if joiner == nil {
		t.b.fail("outerjoin of table %q: nil joiner", t.name)
	}
	return tableJoin(t, other, "outerjoin", func(k K, l V, lok bool, r VO, rok bool) (VR, bool) {
		if !lok && !rok {
			var zero VR
			return zero, false
		}
		return joiner(k, l, lok, r, rok), true
	}, opts)
}

// tableJoin adds the nodes of a table-table join whose combine gives a
// key's result from both sides' rows, and whether the key has one.
func tableJoin[K, V, VO, VR any](t *Table[K, V], other *Table[K, VO], op string, combine func(K, V, bool, VO, bool) (VR, bool), opts []Option) *Table[K, VR] {
	if other == nil || other.b != t.b {
		t.b.fail("%s of table %q: the other table is nil or from another Builder", op, t.name)
		return &Table[K, VR]{b: t.b, name: t.name}
	}
	if t.lookup == nil || other.lookup == nil {
		t.b.fail("%s of tables %q and %q: a table that comes from a Suppress cannot be joined", op, t.name, other.name)
		return &Table[K, VR]{b: t.b, name: t.name}
	}
	name := nameOf(t.name, op+"-"+other.name, opts)
	ll, rl := t.lookup, other.lookup
	left := t.b.t.AddProcessor(name+"-left", func() processor.Processor[K, change[V], K, change[VR]] {
		return &tableSideJoiner[K, V, VO, VR]{other: rl, join: func(k K, c V, cok bool, o VO, ook bool) (VR, bool) { return combine(k, c, cok, o, ook) }}
	}, t.node)
	right := t.b.t.AddProcessor(name+"-right", func() processor.Processor[K, change[VO], K, change[VR]] {
		return &tableSideJoiner[K, VO, V, VR]{other: ll, join: func(k K, c VO, cok bool, o V, ook bool) (VR, bool) { return combine(k, o, ook, c, cok) }}
	}, other.node)
	stores := append(append([]string(nil), ll.stores...), rl.stores...)
	for _, n := range []processor.Node[K, change[VR]]{left, right} {
		t.b.t.ConnectStore(n, stores...)
	}
	n := t.b.t.AddProcessor(name, processor.Func(func(ctx processor.Context[K, change[VR]], rec processor.Record[K, change[VR]]) error {
		return ctx.Forward(rec)
	}), left, right)
	out := &Table[K, VR]{b: t.b, node: n, name: name, keys: t.keys}
	out.lookup = &lookup[K, VR]{stores: stores, open: func(ctx processor.StoreContext) (getter[K, VR], error) {
		lget, err := ll.open(ctx)
		if err != nil {
			return nil, err
		}
		rget, err := rl.open(ctx)
		if err != nil {
			return nil, err
		}
		return func(k K) (VR, time.Time, bool, error) {
			var zero VR
			l, lts, lok, err := lget(k)
			if err != nil {
				return zero, time.Time{}, false, err
			}
			r, rts, rok, err := rget(k)
			if err != nil {
				return zero, time.Time{}, false, err
			}
			v, ok := combine(k, l, lok, r, rok)
			if !ok {
				return zero, time.Time{}, false, nil
			}
			return v, latest(lts, rts), true, nil
		}, nil
	}}
	return out
}

// tableSideJoiner is the processor of one side of a table-table join
// (Kafka Streams' KTableKTableJoinProcessor and its left, right and outer
// forms): an update of its side, looked up against the other side's
// current row, gives the result's new value and the value it replaces.
type tableSideJoiner[K, C, O, VR any] struct {
	other *lookup[K, O]
	get   getter[K, O]
	// join combines this side's row (present or not) with the other's.
	join func(K, C, bool, O, bool) (VR, bool)
}

func (j *tableSideJoiner[K, C, O, VR]) Init(ctx processor.Context[K, change[VR]]) (err error) {
	j.get, err = j.other.open(ctx)
	return err
}

func (j *tableSideJoiner[K, C, O, VR]) Close() error { return nil }

func (j *tableSideJoiner[K, C, O, VR]) Process(ctx processor.Context[K, change[VR]], rec processor.Record[K, change[C]]) error {
	o, ots, ook, err := j.get(rec.Key)
	if err != nil {
		return err
	}
	var out change[VR]
	out.new, out.hasNew = j.join(rec.Key, rec.Value.new, rec.Value.hasNew, o, ook)
	out.old, out.hasOld = j.join(rec.Key, rec.Value.old, rec.Value.hasOld, o, ook)
	if !out.hasNew && !out.hasOld && (rec.Value.hasNew || rec.Value.hasOld || !ook) {
		// Not in the result before or after. A change with neither value
		// (a tombstone for a key the table did not hold) is the exception
		// when the other table holds the key: Kafka Streams passes it on
		// as a deletion of the result.
		return nil
	}
	// The result carries the later of the update's timestamp and the
	// other row's (the update's alone when the other side has no row),
	// as Kafka Streams' does.
	return ctx.Forward(processor.Record[K, change[VR]]{Key: rec.Key, Value: out, Timestamp: latest(rec.Timestamp, ots), Headers: rec.Headers})
}
