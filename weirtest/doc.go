// Package weirtest runs a weir topology in memory, deterministically,
// with no broker: for unit tests of topologies built with package
// processor or package kstream. Kafka Streams' TopologyTestDriver.
//
// The [Driver] runs the topology through weir's own runtime task, the
// same node, processor and store code an application runs, with stores
// in memory: it is not a second implementation of the semantics. Every
// topic has one partition and every sub-topology one task.
//
//	d, err := weirtest.New(b, weirtest.Config{})
//	in := weirtest.Input(d, "text-input", serde.Bytes(), serde.String())
//	out := weirtest.Output(d, "word-counts", serde.String(), serde.Int64())
//	err = in.Pipe(nil, "to be or not to be", time.UnixMilli(1000))
//	recs, err := out.ReadAll() // {to 1} {be 1} {or 1} {not 1} {to 2} {be 2}
//	n, found, err := weirtest.KeyValueStore(d, "counts", serde.String(), serde.Int64()).Get("to")
//
// # Processing
//
// [InputTopic.Pipe] processes a record before it returns: through its
// task, then every record that sends to a repartition topic through the
// task reading that topic, in the order they were sent (breadth first),
// each as an input record of its own. Each record is committed (its
// state changes become the stores' state, and, with Config.CacheMaxBytes,
// what the record caches hold is forwarded) before the next. A failure
// stops the driver, as it would stop an application: the failing call and
// every later one return it.
//
// A record piped to the topic of a global store (a kstream.GlobalTable)
// goes into the store at once, as the application's global updater
// writes it; [InputTopic.PipeTombstone] deletes a key from a table or a
// global table. An output record with a null value is read back as a
// tombstone (processor.Record.Tombstone).
//
// # Time
//
// Stream time follows the records' timestamps, as in an application.
// The wall clock is the driver's own: it starts at [Config.WallClock] and
// moves only with [Driver.AdvanceWallClock], which runs the wall-clock
// punctuators then due.
package weirtest
