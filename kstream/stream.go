package kstream

import (
	"github.com/weirstream/weir/processor"
	"github.com/weirstream/weir/serde"
)

// Stream is a typed handle to a record stream: the output of one node of
// the topology under construction, whose records have keys of type K and
// values of type V. Kafka Streams' KStream.
//
// A stream may carry tombstones, records without a value
// (processor.Record.Tombstone): the records of its topic whose value is
// null, and a table's deletions, through [Table.ToStream]. Steps that decide on or compute a value (Filter,
// FilterNot, MapValues, FlatMapValues) pass a tombstone on as it is,
// without calling their function; steps that compute a key (Map, FlatMap,
// SelectKey, GroupBy) and Peek and Foreach call theirs with the zero value,
// and what they forward stays a tombstone; a sink writes it with a null
// value; aggregations and joins skip it, as Kafka Streams' skip records
// without a value.
//
// Operations return new handles and leave s as it is, so one stream can
// feed several branches. The zero Stream is invalid; streams come from
// [Builder.Stream] and from operations on other streams and tables.
type Stream[K, V any] struct {
	b    *Builder
	node processor.Node[K, V]
	name string
	// keys is the key serde when it is known: from the source, a
	// repartition or a grouping, kept by steps that keep the key. nil
	// after a key change.
	keys serde.Serde[K]
	// rekeyedBy names the step that changed the key since the records
	// were last partitioned by key, "" when none did: a grouping must
	// repartition such a stream first.
	rekeyedBy string
}

// Pair is one record produced by [Stream.FlatMap]: a key and a value.
// Kafka Streams' KeyValue.
type Pair[K, V any] struct {
	Key   K
	Value V
}

// KeyValue is Pair. In weir, KeyValue names the kind of store
// (processor.KeyValue, ktable.KeyValue), never a pair.
//
// Deprecated: use Pair.
type KeyValue[K, V any] = Pair[K, V]

// Name returns the stream's name: the name of the node it reads, which
// the stateless steps that follow derive their names from.
func (s *Stream[K, V]) Name() string { return s.name }

// stateless adds a processor that runs fn on every record of s.
func stateless[K, V, K2, V2 any](s *Stream[K, V], op string, fn func(ctx processor.Context[K2, V2], rec processor.Record[K, V]) error, opts []Option) (processor.Node[K2, V2], string) {
	name := nameOf(s.name, op, opts)
	return s.b.t.AddProcessor(name, processor.Func(fn), s.node), name
}

// derive returns a stream of node n, named name, keyed as s is.
func derive[K, V, V2 any](s *Stream[K, V], n processor.Node[K, V2], name string) *Stream[K, V2] {
	return &Stream[K, V2]{b: s.b, node: n, name: name, keys: s.keys, rekeyedBy: s.rekeyedBy}
}

// rekeyed returns a stream of node n, named name, whose keys step op
// changed.
func rekeyed[K2, V2 any](b *Builder, n processor.Node[K2, V2], name string) *Stream[K2, V2] {
	return &Stream[K2, V2]{b: b, node: n, name: name, rekeyedBy: name}
}

// Filter keeps the records for which pred is true. A tombstone (a record
// read with a null value, processor.Record.Tombstone) passes without
// asking pred, which has no null value to be given: Kafka Streams'
// filter((k, v) -> v != null && p(k, v)) is DropTombstones().Filter(p).
// Its node is named Name()+"-filter" unless [Named]. Kafka Streams'
// KStream.filter.
func (s *Stream[K, V]) Filter(pred func(key K, value V) bool, opts ...Option) *Stream[K, V] {
	return s.filter("filter", pred, true, opts)
}

// DropTombstones keeps the records that have a value: tombstones
// (records read with a null value, processor.Record.Tombstone) are
// dropped, as Kafka Streams' filter((k, v) -> v != null) drops them. Its
// node is named Name()+"-droptombstones" unless [Named].
func (s *Stream[K, V]) DropTombstones(opts ...Option) *Stream[K, V] {
	n, name := stateless(s, "droptombstones", func(ctx processor.Context[K, V], rec processor.Record[K, V]) error {
		if rec.Tombstone {
			return nil
		}
		return ctx.Forward(rec)
	}, opts)
	return derive(s, n, name)
}

// FilterNot keeps the records for which pred is false. A tombstone
// passes, as through [Stream.Filter]. Its node is named
// Name()+"-filternot" unless [Named]. Kafka Streams' KStream.filterNot.
func (s *Stream[K, V]) FilterNot(pred func(key K, value V) bool, opts ...Option) *Stream[K, V] {
	return s.filter("filternot", pred, false, opts)
}

func (s *Stream[K, V]) filter(op string, pred func(K, V) bool, keep bool, opts []Option) *Stream[K, V] {
	if pred == nil {
		s.b.fail("%s of %q: nil predicate", op, s.name)
	}
	n, name := stateless(s, op, func(ctx processor.Context[K, V], rec processor.Record[K, V]) error {
		if !rec.Tombstone && pred(rec.Key, rec.Value) != keep {
			return nil
		}
		return ctx.Forward(rec)
	}, opts)
	return derive(s, n, name)
}

// Map turns every record into one record with a new key and value; the
// timestamp and headers are kept. It changes the key, so a later
// grouping needs a repartition. Its node is named Name()+"-map" unless
// [Named]. Kafka Streams' KStream.map.
func (s *Stream[K, V]) Map[K2, V2 any](fn func(key K, value V) (K2, V2), opts ...Option) *Stream[K2, V2] {
	if fn == nil {
		s.b.fail("map of %q: nil function", s.name)
	}
	n, name := stateless(s, "map", func(ctx processor.Context[K2, V2], rec processor.Record[K, V]) error {
		k, v := fn(rec.Key, rec.Value)
		if rec.Tombstone {
			var zero V2
			v = zero
		}
		return ctx.Forward(processor.Record[K2, V2]{Key: k, Value: v, Timestamp: rec.Timestamp, Headers: rec.Headers, Tombstone: rec.Tombstone})
	}, opts)
	return rekeyed(s.b, n, name)
}

// MapValues turns every record's value into a new value, keeping its key,
// timestamp and headers. Its node is named Name()+"-mapvalues" unless
// [Named]. Kafka Streams' KStream.mapValues.
func (s *Stream[K, V]) MapValues[V2 any](fn func(value V) V2, opts ...Option) *Stream[K, V2] {
	if fn == nil {
		s.b.fail("mapvalues of %q: nil function", s.name)
	}
	n, name := stateless(s, "mapvalues", func(ctx processor.Context[K, V2], rec processor.Record[K, V]) error {
		if rec.Tombstone {
			return ctx.Forward(processor.Record[K, V2]{Key: rec.Key, Timestamp: rec.Timestamp, Headers: rec.Headers, Tombstone: true})
		}
		return ctx.Forward(processor.Record[K, V2]{Key: rec.Key, Value: fn(rec.Value), Timestamp: rec.Timestamp, Headers: rec.Headers})
	}, opts)
	return derive(s, n, name)
}

// FlatMap turns every record into zero or more records, in the order fn
// returns them, each with the input's timestamp and headers. It changes
// the key, so a later grouping needs a repartition. Its node is named
// Name()+"-flatmap" unless [Named]. Kafka Streams' KStream.flatMap.
func (s *Stream[K, V]) FlatMap[K2, V2 any](fn func(key K, value V) []Pair[K2, V2], opts ...Option) *Stream[K2, V2] {
	if fn == nil {
		s.b.fail("flatmap of %q: nil function", s.name)
	}
	n, name := stateless(s, "flatmap", func(ctx processor.Context[K2, V2], rec processor.Record[K, V]) error {
		for _, kv := range fn(rec.Key, rec.Value) {
			if rec.Tombstone {
				var zero V2
				kv.Value = zero
			}
			if err := ctx.Forward(processor.Record[K2, V2]{Key: kv.Key, Value: kv.Value, Timestamp: rec.Timestamp, Headers: rec.Headers, Tombstone: rec.Tombstone}); err != nil {
				return err
			}
		}
		return nil
	}, opts)
	return rekeyed(s.b, n, name)
}

// FlatMapValues turns every record into zero or more records with the
// input's key, timestamp and headers and the values fn returns, in order.
// Its node is named Name()+"-flatmapvalues" unless [Named]. Kafka
// Streams' KStream.flatMapValues.
func (s *Stream[K, V]) FlatMapValues[V2 any](fn func(value V) []V2, opts ...Option) *Stream[K, V2] {
	if fn == nil {
		s.b.fail("flatmapvalues of %q: nil function", s.name)
	}
	n, name := stateless(s, "flatmapvalues", func(ctx processor.Context[K, V2], rec processor.Record[K, V]) error {
		if rec.Tombstone {
			return ctx.Forward(processor.Record[K, V2]{Key: rec.Key, Timestamp: rec.Timestamp, Headers: rec.Headers, Tombstone: true})
		}
		for _, v := range fn(rec.Value) {
			if err := ctx.Forward(processor.Record[K, V2]{Key: rec.Key, Value: v, Timestamp: rec.Timestamp, Headers: rec.Headers}); err != nil {
				return err
			}
		}
		return nil
	}, opts)
	return derive(s, n, name)
}

// SelectKey gives every record the key fn returns, keeping its value,
// timestamp and headers. It changes the key, so a later grouping needs a
// repartition. Its node is named Name()+"-selectkey" unless [Named].
// Kafka Streams' KStream.selectKey.
func (s *Stream[K, V]) SelectKey[K2 any](fn func(key K, value V) K2, opts ...Option) *Stream[K2, V] {
	if fn == nil {
		s.b.fail("selectkey of %q: nil function", s.name)
	}
	n, name := stateless(s, "selectkey", func(ctx processor.Context[K2, V], rec processor.Record[K, V]) error {
		return ctx.Forward(processor.Record[K2, V]{Key: fn(rec.Key, rec.Value), Value: rec.Value, Timestamp: rec.Timestamp, Headers: rec.Headers, Tombstone: rec.Tombstone})
	}, opts)
	return rekeyed(s.b, n, name)
}

// Peek calls fn with every record and passes the record on unchanged, for
// side effects such as logging. fn runs on the task's goroutine and may
// run again for the same record after a failure (records are processed
// again from the last commit). Its node is named Name()+"-peek" unless
// [Named]. Kafka Streams' KStream.peek.
func (s *Stream[K, V]) Peek(fn func(key K, value V), opts ...Option) *Stream[K, V] {
	if fn == nil {
		s.b.fail("peek of %q: nil function", s.name)
	}
	n, name := stateless(s, "peek", func(ctx processor.Context[K, V], rec processor.Record[K, V]) error {
		fn(rec.Key, rec.Value)
		return ctx.Forward(rec)
	}, opts)
	return derive(s, n, name)
}

// Foreach calls fn with every record and ends the stream. As with [Peek],
// fn may see a record again after a failure. Its node is named
// Name()+"-foreach" unless [Named]. Kafka Streams' KStream.foreach.
func (s *Stream[K, V]) Foreach(fn func(key K, value V), opts ...Option) {
	if fn == nil {
		s.b.fail("foreach of %q: nil function", s.name)
	}
	stateless(s, "foreach", func(ctx processor.Context[K, V], rec processor.Record[K, V]) error {
		fn(rec.Key, rec.Value)
		return nil
	}, opts)
}

// Merge returns a stream of the records of s and of other, each passed on
// as it arrives; no order between the two is promised beyond each one's
// own. The result needs a repartition before a grouping when either input
// does. Its node is named Name()+"-merge-"+other.Name() unless [Named].
// Kafka Streams' KStream.merge.
func (s *Stream[K, V]) Merge(other *Stream[K, V], opts ...Option) *Stream[K, V] {
	if other == nil || other.b != s.b {
		s.b.fail("merge of %q: the other stream is nil or from another Builder", s.name)
		other = s
	}
	name := nameOf(s.name, "merge-"+other.name, opts)
	n := s.b.t.AddProcessor(name, processor.Func(func(ctx processor.Context[K, V], rec processor.Record[K, V]) error {
		return ctx.Forward(rec)
	}), s.node, other.node)
	out := derive(s, n, name)
	if out.keys == nil {
		out.keys = other.keys
	}
	if out.rekeyedBy == "" {
		out.rekeyedBy = other.rekeyedBy
	}
	return out
}

// To writes every record to topic with the given serdes, partitioned by
// Kafka's murmur2 hash of the serialized key. weir does not create topic:
// it must exist when the application starts. The sink node is named
// Name()+"-to-"+topic unless [Named]. Kafka Streams' KStream.to.
func (s *Stream[K, V]) To(topic string, keys serde.Serde[K], values serde.Serde[V], opts ...Option) {
	s.b.t.AddSink(nameOf(s.name, "to-"+topic, opts), topic, keys, values, s.node)
}

// ToDynamic writes every record to the topic topicFor returns for it,
// with the given serdes, partitioned by Kafka's murmur2 hash of the
// serialized key. The topics must exist; weir cannot check them at start
// (see [processor.Topology.AddDynamicSink] for what happens to a record
// for a missing topic). The sink node is named Name()+"-to-dynamic"
// unless [Named]. Kafka Streams' KStream.to(TopicNameExtractor).
func (s *Stream[K, V]) ToDynamic(topicFor func(key K, value V) string, keys serde.Serde[K], values serde.Serde[V], opts ...Option) {
	s.b.t.AddDynamicSink(nameOf(s.name, "to-dynamic", opts), topicFor, keys, values, s.node)
}

// Repartition writes the stream to the internal topic
// "<application id>-<name>-repartition", partitioned by key, and returns
// the stream read back from it: records with equal keys then meet in one
// task. name is required and names the topic, so it must stay the same
// across deployments. opts may set the topic's partition count
// ([processor.Partitions]); the default is the largest partition count of
// the writing sub-topology's inputs. The returned stream is named name.
// Kafka Streams' KStream.repartition.
func (s *Stream[K, V]) Repartition(name string, keys serde.Serde[K], values serde.Serde[V], opts ...processor.RepartitionOption) *Stream[K, V] {
	n := s.b.t.AddRepartition(name, keys, values, s.node, opts...)
	return &Stream[K, V]{b: s.b, node: n, name: name, keys: keys}
}

// Process runs the processors supplier creates (one per task) on the
// stream, with the given stores attached, and returns the stream of what
// they forward. name names the node and is required. A processor may
// forward any key, so the result needs a repartition before a grouping.
// The stores are attached to this processor only (a store has one
// owner; share one between processors with package processor). Kafka
// Streams' KStream.process.
func (s *Stream[K, V]) Process[KOut, VOut any](name string, supplier func() processor.Processor[K, V, KOut, VOut], stores ...processor.StoreSpec) *Stream[KOut, VOut] {
	n := s.b.t.AddProcessor(name, supplier, s.node)
	for _, st := range stores {
		s.b.t.AddStore(st, n)
	}
	return rekeyed(s.b, n, name)
}
