// Package kstream is weir's DSL: a fluent, fully typed way to describe a
// stream processing topology, in the style of Kafka Streams' DSL. A
// program compiles to a [processor.Topology] and runs on the same runtime
// as one built with the Processor API.
//
//	b := kstream.NewBuilder()
//	b.Stream("lines", "text-input", serde.Bytes(), serde.String()).
//		FlatMapValues(strings.Fields).
//		GroupBy("by-word", func(_ []byte, w string) string { return w }, serde.String(), serde.String()).
//		Count("counts").
//		ToStream().
//		To("word-counts", serde.String(), serde.Int64())
//	app, err := weir.New(b, cfg) // or: topology, err := b.Build()
//
// Every step is a method whose type arguments are inferred from the
// functions passed, so a Stream[K, V] becomes a Stream[K, V2] with
// MapValues and the compiler checks each step against the one before.
//
// # Names
//
// A name is a node's, a store's or an internal topic's identity across
// deployments, so weir never derives one from the position of an
// operation in the program (Kafka Streams' generated names, which change
// when an operation is added before them, are what stops its users from
// changing a topology).
//
//   - Operations that create state or an internal topic take a name as
//     their first argument: [Builder.Stream] (the source), [Stream.GroupBy]
//     and [Stream.Repartition] (the topic "<application id>-<name>-repartition"),
//     [Grouped.Count], [Grouped.Reduce] and [Grouped.Aggregate] and their
//     windowed forms on [WindowedGrouped] and [SessionWindowedGrouped],
//     [WindowedTable.Suppress] (the
//     store and its changelog "<application id>-<name>-changelog"),
//     [Builder.Table], [Table.GroupBy] and its aggregations,
//     [Table.JoinOnForeignKey], the stream-stream joins
//     ([Stream.JoinStream]), [Stream.Process] and [Stream.ProcessValues].
//   - Stateless operations are named after the stream they read: the
//     stream's name, a dash and the operation in lower case
//     ("lines-flatmapvalues"), and the stream they return carries that
//     name on. [Named] gives one a name of its own. Two stateless steps
//     of the same kind on one stream (two branches filtering "lines")
//     would get the same name: Build reports it, and Named settles it.
//   - [Stream.Split] takes a name for its node; each branch's node is
//     named after it and the branch ("<split>-<branch>", "<split>-default").
//   - [Table.ToStream] adds a node named after the table plus "-tostream";
//     its stream has the table's name. [WindowedTable.ToStream] maps the
//     keys in a node of its own, named as a stateless step. Stream-table
//     and table-table joins are named as stateless steps
//     ("orders-leftjoin-customers").
//
// [Builder.Build] reports every empty or duplicate name at once, with
// every other problem it finds.
//
// # Repartitioning
//
// Records with equal keys must meet in one task to be aggregated. Steps
// that may change the key ([Stream.Map], [Stream.FlatMap],
// [Stream.SelectKey], [Stream.Process], [WindowedTable.ToStream]) mark
// the stream they return; a [Stream.GroupByKey] of a marked stream is a
// Build error naming the step, since the repartition it needs would have
// no name. [Stream.GroupBy] always repartitions through its named topic,
// and [Stream.Repartition] clears the mark. Steps that keep the key ([Stream.Filter],
// [Stream.MapValues], [Stream.FlatMapValues], [Stream.Peek],
// [Stream.ProcessValues]) keep the mark
// as they found it, and [Stream.Merge] is marked when either input is.
//
// # Aggregations and null keys
//
// [Grouped.Count], [Grouped.Reduce] and [Grouped.Aggregate] keep their
// result in a key-value store and return a [Table] whose
// [Table.ToStream] emits its updates (through the record cache when
// Config.CacheMaxBytes turns it on), each with its version in the header
// processor.VersionHeader, so that a sink can apply only newer updates
// (docs/operations.md, "Idempotent sinks"). A
// record whose Kafka key is null is skipped by an aggregation, as in
// Kafka Streams: it changes no state, emits nothing, and is counted in
// weir_records_dropped_total{reason="null_key"}. A record that a GroupBy
// gives a key of its own is aggregated under that key whatever its input
// key was.
//
// # Windows
//
// [Grouped.WindowedBy] cuts a grouped stream into [Tumbling] or
// [Hopping] windows, aligned to the Unix epoch, start included and end
// excluded; [WindowedGrouped.Count], [WindowedGrouped.Reduce] and
// [WindowedGrouped.Aggregate] keep one aggregate per key and window in a
// window store (see processor.Window) and return a [WindowedTable],
// whose [WindowedTable.ToStream] emits every update keyed by the key and
// its window ([Windowed]; [WindowedSerde] writes it in Kafka Streams'
// format). The semantics are Kafka Streams':
//
//   - A record updates every window that contains its timestamp: one
//     tumbling window, up to size/advance (rounded up) hopping ones.
//   - Time is the stream time the aggregation has observed: the largest
//     timestamp among the records that reached it, this record's included
//     (records dropped before it, by a filter or for a null key, do not
//     count; see docs/semantics.md). A window closes when that stream
//     time reaches its end plus the grace period ([TimeWindows.Grace],
//     default 0). Records may arrive out of order: one for a window still
//     open updates it.
//   - A record for a closed window is late: that window is not updated
//     and nothing is emitted for it. A record that missed at least one
//     window is counted once in weir_records_late_total
//     (labelled by thread and task) and logged at debug level with its
//     topic, partition, offset, timestamp and the windows it missed. A
//     hopping record may be late for its older windows and still update
//     the newer ones.
//   - The window store keeps a window for its retention after the window
//     starts, size + grace by default ([TimeWindows.Retention]); its
//     changelog is compacted and deleted after the retention plus a day.
//   - Records with a null key are skipped, as by the key-value
//     aggregations; records with a negative timestamp belong to no window
//     and are skipped.
//
// [Grouped.SlidingWindowedBy] aggregates over [Sliding] windows instead:
// windows defined by the records, [start, start+d] with both ends
// included, one ending at each record and one starting right after it
// when later records fall within d (Kafka Streams' sliding-window
// aggregation, record by record); each update is stamped with the largest
// timestamp in its window, and the store keeps windows 2d + grace by
// default.
//
// [Grouped.SessionWindowedBy] aggregates over [Sessions]: a key's records
// less than the inactivity gap apart form one session, [start, end] with
// both ends included. A record that bridges sessions merges them: the
// table's stream carries a tombstone for each merged session and then the
// merged one, as Kafka Streams' session aggregation does; a session
// closes once stream time passes its end plus gap plus grace, and
// [SessionWindowedSerde] writes its keys in Kafka Streams' format. A
// Suppress(UntilWindowCloses) of sessions emits each final session once;
// a session merged away never shows.
//
// [WindowedTable.Suppress] with [UntilWindowCloses] holds a window's
// updates back in a store of its own and emits the final aggregate once,
// when the window closes; with [UntilTimeLimit] it emits each key and
// window's latest update at most once per time limit, from a bounded
// buffer. [Suppression.CloseWhenIdle] also closes windows by the wall
// clock when a partition goes quiet (beyond Kafka Streams).
// [WindowedGrouped.LateTo] writes the records dropped as late to a topic
// of their own.
//
// # Tables and joins
//
// A [Table] is the latest value per key: read from a topic
// ([Builder.Table], where a null value deletes its key), or the result of
// an aggregation, a [Table.Filter], a [Table.MapValues] or a join. Its
// nodes pass on each update with the value it replaces, so deletions
// reach every step downstream: a filter deletes a key whose new value
// stops matching, [Table.GroupBy] subtracts a row from the group it
// leaves, and [Table.ToStream] emits a deletion as a tombstone
// (processor.Record.Tombstone), which a sink writes with a null value.
//
// Joins follow Kafka Streams' semantics, record by record (the tests port
// the tables of its developer guide):
//
//   - stream-table: [Stream.Join] and [Stream.LeftJoin]; the stream
//     triggers, the table as it stands when the record is processed;
//   - table-table: [Table.Join], [Table.LeftJoin], [Table.OuterJoin]; an
//     update of either side updates the result;
//   - stream-stream: [Stream.JoinStream], [Stream.LeftJoinStream],
//     [Stream.OuterJoinStream] within [JoinWithin] windows; unmatched
//     records are emitted only once their window has closed;
//   - foreign-key: [Table.JoinOnForeignKey] and
//     [Table.LeftJoinOnForeignKey] (KIP-213);
//   - stream-global-table: [Stream.JoinGlobal] and [Stream.LeftJoinGlobal]
//     by a key computed from the record, with no repartition: a
//     [GlobalTable] ([Builder.GlobalTable]) is held whole by every
//     instance, restored before any task starts and kept current.
//
// The sides of a join that is not by foreign key must be partitioned by
// the key alike: Build refuses a side re-keyed since its last repartition,
// and Run checks that their topics have the same partition count.
// Package ktable reads a running application's tables (their key-value
// stores) from outside the topology. [Builder.VersionedTable] keeps each
// key's history, and a stream joins it as of each record's timestamp (a
// temporal join), whatever order the two topics arrive in.
//
// # Testing
//
// Package weirtest runs a Builder in memory, record by record, with no
// broker.
package kstream
