package task

// A task takes part in its thread's commit in three steps, as Kafka
// Streams' tasks do under its TaskExecutor:
//
//  1. PrepareCommit, before the commit: everything the task holds for it
//     goes out (record caches, changelog records) and its positions are
//     added to the offsets to commit;
//  2. the thread commits (one transaction, or a flush and an offset
//     commit), then writes the state changes of all its tasks to Badger
//     in one batch: Stage adds each task's, Applied follows the batch's
//     flush. They are two passes because the batch is shared;
//  3. PostCommit, once the offsets are committed.
//
// A commit that fails runs none of the steps after it: the thread rewinds
// the task (Rewind) or closes it, and DiscardState drops what it staged.

// PrepareCommit readies the task for its thread's next commit: it
// forwards what the task's record caches hold (Flush), adds the task's
// uncommitted positions and their metadata to offsets and metadata
// (Offsets), and sends its buffered store changes to their changelogs
// (SendChangelog), so that the commit carries all of them. An error comes
// from a processor (a flushed record) or from the send path; the thread's
// failure authority settles it, and the commit does not happen.
func (t *Task) PrepareCommit(offsets map[string]map[int32]int64, metadata map[string]map[int32]string) error {
	if err := t.Flush(); err != nil {
		return err
	}
	t.Offsets(offsets, metadata)
	return t.SendChangelog()
}
