// Package stream runs an instance's stream threads. It owns:
//
//   - the loop (thread.go): a thread is one member of the application's
//     consumer group; it takes the tasks the group assigns it (claims.go),
//     feeds their records from bounded per-partition queues to the tasks
//     in timestamp order, punctuates them, and commits every
//     Config.CommitInterval;
//   - the commit (commit.go): each task's PrepareCommit (its caches,
//     changelog records and positions), then, exactly once, one Kafka
//     transaction per thread holding the tasks' output, their changelog
//     records and the input offsets with the group's metadata; at least
//     once, a flush then an offset commit. Local state is written only
//     after that succeeded (one Badger batch for the thread's tasks), and
//     each task's PostCommit ends the commit;
//   - the collector (collector.go): the send path every record takes to
//     the producer, and what a refused record becomes;
//   - the failure authority (failure.go): every failure of a record, a
//     punctuation or a commit reaches settle, which alone decides whether
//     the thread goes on (after an abort and a rewind of its tasks to their
//     last commit) or stops;
//   - the producer (producer.go): building and rebuilding it, with its
//     repair.Guard, whose open-transaction checks run when it is built,
//     after every abort and after every commit (package repair owns
//     them);
//   - the instance's standby copies and warm-ups (standby.go, probe.go),
//     and the status the App reports (status.go).
//
// Tasks themselves (inputs, stores, restore, punctuation) are package
// task's; a thread reaches them through task.Host, which it implements.
package stream
