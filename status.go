package weir

import (
	"slices"
	"strings"
	"time"

	"github.com/weirstream/weir/internal/stream"
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
}

// Tasks returns the tasks this instance runs now, sorted by id. It is safe
// to call from any goroutine, while Run runs or not.
func (a *App) Tasks() []TaskInfo {
	a.mu.Lock()
	threads := slices.Clone(a.threads)
	a.mu.Unlock()
	var out []TaskInfo
	for _, th := range threads {
		out = append(out, taskInfos(th.Tasks())...)
	}
	slices.SortFunc(out, func(x, y TaskInfo) int { return strings.Compare(x.ID, y.ID) })
	return out
}

// taskInfos converts the runtime's task status to TaskInfo.
func taskInfos(ts []stream.TaskStatus) []TaskInfo {
	out := make([]TaskInfo, len(ts))
	for i, t := range ts {
		info := TaskInfo{ID: t.ID, Thread: t.Thread, Restoring: t.Restoring, StreamTime: t.StreamTime}
		for _, p := range t.Partitions {
			info.Partitions = append(info.Partitions, PartitionInfo(p))
		}
		for _, r := range t.Restores {
			info.Restores = append(info.Restores, RestoreInfo(r))
		}
		out[i] = info
	}
	return out
}
