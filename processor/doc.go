// Package processor is weir's Processor API: the low-level way to describe
// a stream processing topology as a graph of named nodes.
//
// # Building a topology
//
// A [Topology] starts from sources (a topic with key and value serdes),
// adds processors (user code implementing [Processor]) and ends in sinks.
// Every node has an explicit, stable name. Nodes are connected through the
// typed handles the Add methods return, so a processor's input types are
// checked by the compiler against its parents' output types:
//
//	t := processor.NewTopology()
//	lines := t.AddSource("lines", "text-input", serde.String(), serde.String())
//	words := t.AddProcessor("split", splitWords, lines)
//	byWord := t.AddRepartition("words-by-word", serde.String(), serde.String(), words)
//	t.AddSink("out", "word-counts", serde.String(), serde.String(), byWord)
//
// Problems (a duplicate name, a nil serde, a handle from another topology,
// a [Child] handle naming no child) are collected and reported together by
// [Topology.Validate], which weir.New calls.
//
// # Sub-topologies and repartitioning
//
// A repartition node writes its input to an internal topic named
// "<application id>-<name>-repartition", keyed by the record key, and reads
// it back in another sub-topology: so records with the same key meet in the
// same task after a key change. Each connected part of the graph is a
// sub-topology; a task is one sub-topology on one partition.
// [Topology.Describe] prints them.
//
// # State stores
//
// A processor keeps state in stores declared with [KeyValue], [TTL] (a
// key-value store whose entries expire, for deduplication), [Window] or
// [Session], attached to it with [Topology.AddStore] and opened in its Init:
//
//	counts := processor.KeyValue("counts", serde.String(), serde.Int64())
//	t.AddStore(counts, count)
//	// in Init: c.store, err = counts.Open(ctx)
//
// Each task has its own partition of a store, kept in the instance's Badger
// database and backed by the compacted changelog topic
// "<application id>-<name>-changelog". Writes are buffered and become
// durable with the task's commit (atomically with its output under exactly
// once); a moved or restarted task restores only what its local state
// lacks. Window and session stores drop what falls out of their retention
// as stream time advances, TTL stores what is older than their TTL.
//
// # Records with a null key
//
// A record whose Kafka key is null reaches a processor with the key
// serde's decoding of nil: "" for serde.String, nil for serde.Bytes. State
// kept under that key would pile every such record onto one key, so weir
// drops it, as Kafka Streams drops null-key records before its stateful
// operations and repartitions. While a record with a null Kafka key is
// processed:
//
//   - a store write (Put, Delete, Remove) whose key serializes to nothing
//     is dropped;
//   - a read of that key (Get, Fetch, FetchRange, FetchRangeBackward,
//     FindSessions) finds nothing, even if a record with a present key
//     stored something there: the record has no key, so no state;
//   - a record forwarded to a repartition node ([Topology.AddRepartition])
//     whose key serializes to nothing is not written to the repartition
//     topic.
//
// Only the empty key is affected: a processor that gives the record a key
// of its own writes and repartitions it as usual, and so does a record
// whose Kafka key is present but empty, which is not null. Scans (Range,
// All, PrefixScan, Count, FetchAll), sinks to other topics and punctuators,
// which run for no record, are unchanged. Window and session stores apply
// the rule to the key the processor gives, not to the longer byte keys
// they store, so their expiry is never dropped.
//
// An input record that lost any write this way is counted once in the
// metric weir_records_dropped_total{reason="null_key"} and logged at warn
// level with its topic, partition and offset and the store or repartition
// topic, never its key or value. Kafka Streams' Processor API fails on a
// null key instead; weir drops, so that one such record cannot stop an
// application.
//
// # Processing
//
// A [Processor] gets a [Context] with every record: it forwards records to
// its children, reads the input record's [Metadata], logs through
// [Context.Logger] (whose lines name the task, the node and the record's
// coordinates), and schedules punctuators on stream time or wall-clock
// time. One task runs on one goroutine, so a processor instance needs no
// locks.
//
// [Context.Forward] sends a record to every child. To send it to one child
// only, take a typed handle to that child with [Node.Child] while building
// the topology and pass it to [Context.ForwardTo]; Validate, and so
// weir.New, fails when the node has no child of that name.
package processor
