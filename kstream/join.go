package kstream

import (
	"time"

	"github.com/weirstream/weir/processor"
)

// Join joins every record of s with the row of table under the same key,
// as the table stands when the record is processed (for a table from
// [Builder.VersionedTable], as it stood at the record's timestamp), and
// forwards
// joiner's result with the record's key, timestamp and headers. A record
// whose key has no row, a record with a null key and a tombstone produce
// nothing. Updates of the table produce nothing either: the stream side
// triggers (Kafka Streams' KStream.join with a KTable).
//
// s and table must be partitioned alike: s must not have been re-keyed
// since it was last partitioned by key (Build fails and names the step;
// repartition it first), and their topics must have the same partition
// count, which Run checks. The join's node is named
// Name()+"-join-"+table.Name() unless [Named]; it reads the store that
// materializes the table.
func (s *Stream[K, V]) Join[VT, VR any](table *Table[K, VT], joiner func(key K, value V, row VT) VR, opts ...Option) *Stream[K, VR] {
	if joiner == nil {
		s.b.fail("join of %q: nil joiner", s.name)
	}
	return streamTableJoin(s, table, "join", func(k K, v V, row VT, found bool) (VR, bool) {
		if !found {
			var zero VR
			return zero, false
		}
		return joiner(k, v, row), true
	}, opts)
}

// LeftJoin is [Stream.Join] that also forwards the records whose key has
// no row in table: joiner then gets the zero VT and found false. Records
// with a null key are joined with no row (Kafka Streams 3.7's KIP-962);
// tombstones produce nothing. The node is named
// Name()+"-leftjoin-"+table.Name() unless [Named]. Kafka Streams'
// KStream.leftJoin with a KTable.
func (s *Stream[K, V]) LeftJoin[VT, VR any](table *Table[K, VT], joiner func(key K, value V, row VT, found bool) VR, opts ...Option) *Stream[K, VR] {
	if joiner == nil {
		s.b.fail("leftjoin of %q: nil joiner", s.name)
	}
	return streamTableJoin(s, table, "leftjoin", func(k K, v V, row VT, found bool) (VR, bool) {
		return joiner(k, v, row, found), true
	}, opts)
}

// streamTableJoin adds the node of a stream-table join whose join gives
// the result of a record and its row, and whether to forward it.
func streamTableJoin[K, V, VT, VR any](s *Stream[K, V], table *Table[K, VT], op string, join func(K, V, VT, bool) (VR, bool), opts []Option) *Stream[K, VR] {
	switch {
	case table == nil || table.b != s.b:
		s.b.fail("%s of %q: the table is nil or from another Builder", op, s.name)
		return &Stream[K, VR]{b: s.b, name: s.name}
	case table.lookup == nil:
		s.b.fail("%s of %q with table %q: the table cannot be looked up (it comes from a Suppress)", op, s.name, table.name)
	case s.rekeyedBy != "":
		s.b.fail("%s of %q with table %q: the key was changed by %q and the stream is not partitioned by it; "+
			"add a named repartition with Repartition(name, keySerde, valueSerde)", op, s.name, table.name, s.rekeyedBy)
	}
	name := nameOf(s.name, op+"-"+table.name, opts)
	l := table.lookup
	n := s.b.t.AddProcessor(name, func() processor.Processor[K, V, K, VR] {
		return &tableJoiner[K, V, K, VT, VR]{lookup: l, keyOf: recordKey[K, V], join: join}
	}, s.node)
	if l != nil {
		s.b.t.ConnectStore(n, l.stores...)
	}
	return derive(s, n, name)
}

// tableJoiner is the processor of a stream-table join: Kafka Streams'
// KStreamKTableJoinProcessor. It looks a record up under keyOf(record):
// the record's key for a table, a key computed from the record for a
// global table. Over a versioned table it looks the table up as of the
// stream record's timestamp.
type tableJoiner[K, V, KT, VT, VR any] struct {
	lookup *lookup[KT, VT]
	keyOf  func(K, V) KT
	get    func(KT, time.Time) (VT, bool, error)
	join   func(K, V, VT, bool) (VR, bool)
}

// recordKey is a stream-table join's keyOf: the record's own key.
func recordKey[K, V any](k K, _ V) K { return k }

func (j *tableJoiner[K, V, KT, VT, VR]) Init(ctx processor.Context[K, VR]) error {
	if j.lookup.asOf != nil {
		get, err := j.lookup.asOf(ctx)
		j.get = get
		return err
	}
	get, err := j.lookup.open(ctx)
	j.get = func(k KT, _ time.Time) (VT, bool, error) {
		v, _, found, err := get(k)
		return v, found, err
	}
	return err
}

func (j *tableJoiner[K, V, KT, VT, VR]) Close() error { return nil }

func (j *tableJoiner[K, V, KT, VT, VR]) Process(ctx processor.Context[K, VR], rec processor.Record[K, V]) error {
	if rec.Tombstone {
		// A record without a value joins nothing (Kafka Streams drops
		// it too).
		ctx.Logger().Debug("join skips a record without a value")
		return nil
	}
	row, found, err := j.get(j.keyOf(rec.Key, rec.Value), rec.Timestamp)
	if err != nil {
		return err
	}
	out, ok := j.join(rec.Key, rec.Value, row, found)
	if !ok {
		return nil
	}
	return ctx.Forward(processor.Record[K, VR]{Key: rec.Key, Value: out, Timestamp: rec.Timestamp, Headers: rec.Headers})
}
