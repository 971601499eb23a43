// Package task runs one task of a topology: a sub-topology on one
// partition of its input topics. It owns the task's inputs (the queues of
// its partitions, the choice of the next record by timestamp, the error
// policies of records that cannot be decoded or processed), its node
// instances and punctuators, its stores (their write buffers, the restore
// from their changelogs, and standby copies), and what it commits: each
// input partition's offset with its progress (stream time, table
// versions, the replay mark; see Progress).
//
// A task runs against small interfaces (Host, the thread that owns it; the
// Shared runtime of its instance), so that weirtest and unit tests run it
// without a broker. The errors and policies it reports and follows are
// package processor's.
package task
