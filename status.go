package weir

import (
	"slices"
	"strings"
	"sync/atomic"
	"time"
)

// TaskInfo describes a task an instance runs, for operators and tests.
type TaskInfo struct {
	ID         string          // "<sub-topology>_<partition>"
	Thread     int             // index of the stream thread running it
	Restoring  bool            // its stores are being restored
	StreamTime time.Time       // largest event time processed; zero before any
	Partitions []PartitionInfo // its input partitions
	Restores   []RestoreInfo   // store partitions still restoring
}

// RestoreInfo is the progress of a store partition's restore.
type RestoreInfo struct {
	Store     string
	Partition int32
	Remaining int64 // changelog records left to apply

	remaining *atomic.Int64
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
	// Position is the next offset to process, -1 before the first record.
	Position int64
	// LogEnd is the partition's high watermark as last fetched, -1
	// unknown.
	LogEnd int64
	// OldestUnread is the timestamp of the next fetched record not yet
	// processed; zero when none is queued.
	OldestUnread time.Time

	q     *msgQueue
	hwm   func() int64
	start int64
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
		info := TaskInfo{ID: t.name, Thread: th.idx, Restoring: !t.running, StreamTime: t.streamTime}
		for _, p := range t.parts {
			info.Partitions = append(info.Partitions, PartitionInfo{
				Topic: p.tp.topic, Partition: p.tp.partition, Committed: p.committed, Position: p.consumed,
				q: p.q, hwm: p.hwm, start: p.start,
			})
		}
		if !t.running {
			for _, st := range t.stores {
				info.Restores = append(info.Restores, RestoreInfo{Store: st.spec.Name, Partition: t.id.Partition, remaining: &st.remaining})
			}
		}
		infos = append(infos, info)
	}
	th.statusMu.Lock()
	th.status = infos
	th.statusMu.Unlock()
	th.app.noteReady()
}

// snapshot returns the published tasks with live queue sizes.
func (th *thread) snapshot() []TaskInfo {
	th.statusMu.Lock()
	defer th.statusMu.Unlock()
	out := make([]TaskInfo, len(th.status))
	for i, info := range th.status {
		info.Partitions = slices.Clone(info.Partitions)
		info.Restores = slices.Clone(info.Restores)
		for j := range info.Restores {
			r := &info.Restores[j]
			r.Remaining, r.remaining = r.remaining.Load(), nil
		}
		for j := range info.Partitions {
			p := &info.Partitions[j]
			p.LogEnd = -1
			if p.q != nil {
				p.QueuedRecords, p.QueuedBytes = p.q.Len()
				if m, ok := p.q.Peek(); ok {
					p.OldestUnread = m.Timestamp
					if p.Position < 0 {
						p.Position = m.Offset // nothing processed yet
					}
				}
			}
			if p.hwm != nil {
				p.LogEnd = p.hwm()
			}
			if p.Position < 0 && p.start >= 0 {
				p.Position = p.start // nothing fetched or processed yet
			}
			p.q, p.hwm = nil, nil
		}
		out[i] = info
	}
	return out
}
