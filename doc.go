// Package weir runs stateful stream processing applications on Apache
// Kafka, in the style of Kafka Streams.
//
// An application describes a topology with the Processor API (package
// processor) or the typed DSL (package kstream) and runs it with an
// [App]. Any number of instances of the application share its input
// partitions through a Kafka consumer group: each instance runs
// Config.Threads stream threads, each thread is one group member that
// processes the tasks assigned to it, and a task is one sub-topology on
// one partition of its input topics.
//
//	app, err := weir.New(topology, weir.Config{
//		ApplicationID: "wordcount",
//		Brokers:       []string{"localhost:9092"},
//		Guarantee:     weir.AtLeastOnce,
//	})
//	if err != nil {
//		return err
//	}
//	return app.Run(ctx) // until ctx ends; then commits and leaves cleanly
//
// # Flow
//
// Each input partition has a bounded queue (Config.Queue). A full queue
// stops fetching that partition, so a slow task makes lag grow, never
// memory. A task processes the record with the smallest timestamp among
// its partitions' heads.
//
// # Commits
//
// A thread commits every Config.CommitInterval, when it loses tasks in a
// rebalance and when it stops. Under AtLeastOnce a commit waits until the
// broker acknowledged every record the processed input produced, then
// commits the input offsets; a crash repeats at most the records processed
// since the last commit.
package weir
