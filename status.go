package weir

import (
	"slices"
	"strings"
)

// TaskInfo describes a task an instance runs, for operators and tests.
type TaskInfo struct {
	ID         string          // "<sub-topology>_<partition>"
	Thread     int             // index of the stream thread running it
	Partitions []PartitionInfo // its input partitions
}

// PartitionInfo is an input partition of a task.
type PartitionInfo struct {
	Topic     string
	Partition int32
	// Queued are the records and bytes fetched and not yet processed;
	// bounded by Config.Queue.
	QueuedRecords int
	QueuedBytes   int
	// Committed is the next offset to process after a restart, -1 before
	// the task's first commit.
	Committed int64

	q *msgQueue
}

// Tasks returns the tasks this instance runs now, sorted by id. It is safe
// to call from any goroutine, while Run runs or not.
func (a *App) Tasks() []TaskInfo {
	a.mu.Lock()
	threads := slices.Clone(a.threads)
	a.mu.Unlock()
	var out []TaskInfo
	for _, th := range threads {
		out = append(out, th.snapshot()...)
	}
	slices.SortFunc(out, func(x, y TaskInfo) int { return strings.Compare(x.ID, y.ID) })
	return out
}

// publish records the thread's tasks for Tasks; called by the loop when
// they change or commit.
func (th *thread) publish() {
	infos := make([]TaskInfo, 0, len(th.order))
	for _, id := range th.order {
		t := th.tasks[id]
		info := TaskInfo{ID: t.name, Thread: th.idx}
		for _, p := range t.parts {
			info.Partitions = append(info.Partitions, PartitionInfo{Topic: p.tp.topic, Partition: p.tp.partition, Committed: p.committed, q: p.q})
		}
		infos = append(infos, info)
	}
	th.statusMu.Lock()
	th.status = infos
	th.statusMu.Unlock()
}

// snapshot returns the published tasks with live queue sizes.
func (th *thread) snapshot() []TaskInfo {
	th.statusMu.Lock()
	defer th.statusMu.Unlock()
	out := make([]TaskInfo, len(th.status))
	for i, info := range th.status {
		info.Partitions = slices.Clone(info.Partitions)
		for j := range info.Partitions {
			p := &info.Partitions[j]
			if p.q != nil {
				p.QueuedRecords, p.QueuedBytes = p.q.Len()
			}
			p.q = nil
		}
		out[i] = info
	}
	return out
}
