package stream

import (
	"time"

	"github.com/weirstream/weir/internal/task"
)

// TaskStatus is a task as weir.App.Tasks reports it (weir.TaskInfo, whose
// documentation says what each field holds).
type TaskStatus struct {
	ID         string
	Thread     int
	Restoring  bool
	StreamTime time.Time
	Partitions []PartitionStatus
	Restores   []RestoreStatus
}

// PartitionStatus is weir.PartitionInfo.
type PartitionStatus struct {
	Topic         string
	Partition     int32
	QueuedRecords int
	QueuedBytes   int
	Committed     int64
	Position      int64
	LogEnd        int64
	OldestUnread  time.Time
}

// RestoreStatus is weir.RestoreInfo.
type RestoreStatus struct {
	Store     string
	Partition int32
	Remaining int64
}

// publishInterval is how often the loop refreshes what App.Tasks and the
// metrics see of its tasks (besides after every change).
const publishInterval = time.Second

// publish records the thread's tasks for Tasks; called by the loop when
// they change or commit.
func (th *Thread) publish() {
	infos := make([]task.Info, 0, len(th.order))
	for _, id := range th.order {
		infos = append(infos, th.tasks[id].Info())
	}
	th.statusMu.Lock()
	th.status = infos
	th.statusMu.Unlock()
	th.in.OnPublish()
}

// Tasks returns the tasks the thread published last, with live queue
// sizes, log ends and restore progress. Safe for concurrent use.
func (th *Thread) Tasks() []TaskStatus {
	th.statusMu.Lock()
	infos := th.status
	th.statusMu.Unlock()
	out := make([]TaskStatus, len(infos))
	for i, info := range infos {
		ts := TaskStatus{ID: info.ID, Thread: th.idx, Restoring: info.Restoring, StreamTime: info.StreamTime}
		for _, r := range info.Restores {
			ts.Restores = append(ts.Restores, RestoreStatus{Store: r.Store, Partition: r.Partition, Remaining: r.Remaining.Load()})
		}
		for _, in := range info.Inputs {
			p := PartitionStatus{Topic: in.Topic, Partition: in.Partition, Committed: in.Committed, Position: in.Position, LogEnd: -1}
			if in.Queue != nil {
				p.QueuedRecords, p.QueuedBytes = in.Queue.Len()
				if m, ok := in.Queue.Peek(); ok {
					p.OldestUnread = m.Timestamp
					if p.Position < 0 {
						p.Position = m.Offset // nothing processed yet
					}
				}
			}
			if in.HighWatermark != nil {
				p.LogEnd = in.HighWatermark()
			}
			if p.Position < 0 && in.Start >= 0 {
				p.Position = in.Start // nothing fetched or processed yet
			}
			ts.Partitions = append(ts.Partitions, p)
		}
		out[i] = ts
	}
	return out
}

// Aborting reports whether the thread's last transaction aborted and none
// has committed since: the App is degraded.
func (th *Thread) Aborting() bool { return th.aborts.Load() > 0 }

// Index returns the thread's index in its instance.
func (th *Thread) Index() int { return th.idx }

// Assigned reports whether the thread's group session has its assignment,
// runs every task of it, and waits for no task that a cooperative
// hand-over withholds until the follow-up rebalance (the App is not
// rebalancing for it).
func (th *Thread) Assigned() bool {
	if !th.assigned.Load() || th.pendingTasks.Load() > 0 {
		return false
	}
	th.statusMu.Lock()
	n := len(th.status)
	th.statusMu.Unlock()
	return n >= int(th.assignedTasks.Load())
}

// Time returns the thread's busy and idle time so far, and the time its
// partitions' fetchers spent blocked on full queues.
func (th *Thread) Time() (busy, idle, backpressured time.Duration) {
	busy, idle = th.clock.read()
	return busy, idle, th.backpressured()
}

// Claimed returns every partition the thread claims now, with the offset
// its claim started at as position and the log end: what the lag gauges
// show for a partition whose task has not published yet (the loop may be
// busy in another task's record), so that lag is known from the assignment
// on. Safe for concurrent use.
func (th *Thread) Claimed() []PartitionStatus {
	th.mu.Lock()
	defer th.mu.Unlock()
	out := make([]PartitionStatus, 0, len(th.claims))
	for p, c := range th.claims {
		ps := PartitionStatus{Topic: p.Topic, Partition: p.Partition, Committed: c.committed, Position: c.start, LogEnd: c.hwm()}
		ps.QueuedRecords, ps.QueuedBytes = c.q.Len()
		if m, ok := c.q.Peek(); ok {
			ps.OldestUnread = m.Timestamp
		}
		out = append(out, ps)
	}
	return out
}
