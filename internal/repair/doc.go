// Package repair finds and ends records of transactions that Kafka left
// open: records of an earlier incarnation's transaction whose coordinator
// no longer has it open (a lost or skipped marker), and records of the
// transaction a thread just committed whose commit marker the coordinator
// did not write to every partition. A stream thread runs its checks when
// it builds a producer, after an abort and after every commit, and starts
// no transaction until they pass (docs/operations.md gives the rules).
//
// The checks ask the brokers (DescribeTransactions, DescribeProducers) and
// end what they find with a transaction of the same transactional id that
// writes the marker the records lack: CommitOver when the coordinator's
// last transaction committed, an abort otherwise. What cannot be proven
// is reported (DanglingError), never guessed.
//
// Guard is the thread's side (guard.go): when each check runs, and the
// fail-safe rule that a check that cannot be made is retried while no
// transaction starts. takeover.go ends the records that a process of the
// application which left the group holds open on the group's offsets
// partition or a changelog partition, and abort.go the transaction that
// ends aborted records.
package repair
