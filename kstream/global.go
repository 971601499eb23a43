package kstream

import (
	"github.com/weirstream/weir/processor"
	"github.com/weirstream/weir/serde"
)

// GlobalTable is a table every instance of the application holds whole:
// all partitions of its topic, restored before any task starts and kept
// current while the application runs. A stream joins it by any key it
// can compute from its records ([Stream.JoinGlobal]), without
// repartitioning. It suits reference data that is small enough to be
// kept on every instance. Kafka Streams' GlobalKTable.
type GlobalTable[K, V any] struct {
	b    *Builder
	name string
	spec *processor.KeyValueSpec[K, V]
}

// Name returns the table's name, which is also its store's name.
func (g *GlobalTable[K, V]) Name() string { return g.name }

// GlobalTable reads topic as a global table materialized in the global
// store name (see processor.Topology.AddGlobalStore): the topic's records
// are the store's contents as they are, a null value deleting its key,
// and the topic is the store's changelog (it should be compacted; no
// changelog of its own is created). The table is not synchronized with
// the records being processed: an update becomes visible to lookups once
// the instance has read it, shortly after it is committed to the topic.
// Kafka Streams' StreamsBuilder.globalTable.
func (b *Builder) GlobalTable[K, V any](name, topic string, keys serde.Serde[K], values serde.Serde[V]) *GlobalTable[K, V] {
	spec := processor.KeyValue(name, keys, values)
	b.t.AddGlobalStore(spec, topic)
	return &GlobalTable[K, V]{b: b, name: name, spec: spec}
}

// JoinGlobal joins every record of s with the row of the global table g
// under the key that key computes from the record, and forwards joiner's
// result with the record's key, timestamp and headers. A record whose
// key has no row, and a tombstone, produce nothing. s need not be
// partitioned in any way. Its node is named Name()+"-join-"+g.Name()
// unless [Named]. Kafka Streams' KStream.join with a GlobalKTable.
func (s *Stream[K, V]) JoinGlobal[KG, VG, VR any](g *GlobalTable[KG, VG], key func(key K, value V) KG, joiner func(key K, value V, row VG) VR, opts ...Option) *Stream[K, VR] {
	if joiner == nil {
		s.b.fail("join of %q: nil joiner", s.name)
	}
	return globalJoin(s, g, "join", key, func(k K, v V, row VG, found bool) (VR, bool) {
		if !found {
			var zero VR
			return zero, false
		}
		return joiner(k, v, row), true
	}, opts)
}

// LeftJoinGlobal is [Stream.JoinGlobal] that also forwards the records
// whose key has no row: joiner then gets the zero VG and found false. Its
// node is named Name()+"-leftjoin-"+g.Name() unless [Named]. Kafka
// Streams' KStream.leftJoin with a GlobalKTable.
func (s *Stream[K, V]) LeftJoinGlobal[KG, VG, VR any](g *GlobalTable[KG, VG], key func(key K, value V) KG, joiner func(key K, value V, row VG, found bool) VR, opts ...Option) *Stream[K, VR] {
	if joiner == nil {
		s.b.fail("leftjoin of %q: nil joiner", s.name)
	}
	return globalJoin(s, g, "leftjoin", key, func(k K, v V, row VG, found bool) (VR, bool) {
		return joiner(k, v, row, found), true
	}, opts)
}

func globalJoin[K, V, KG, VG, VR any](s *Stream[K, V], g *GlobalTable[KG, VG], op string, key func(K, V) KG, join func(K, V, VG, bool) (VR, bool), opts []Option) *Stream[K, VR] {
	if g == nil || g.b != s.b {
		s.b.fail("%s of %q: the global table is nil or from another Builder", op, s.name)
		return &Stream[K, VR]{b: s.b, name: s.name}
	}
	if key == nil {
		s.b.fail("%s of %q with %q: nil key function", op, s.name, g.name)
	}
	name := nameOf(s.name, op+"-"+g.name, opts)
	l := storeLookup(g.spec)
	n := s.b.t.AddProcessor(name, func() processor.Processor[K, V, K, VR] {
		return &tableJoiner[K, V, KG, VG, VR]{lookup: l, keyOf: key, join: join}
	}, s.node)
	s.b.t.ConnectStore(n, g.name)
	return derive(s, n, name)
}
