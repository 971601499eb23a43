package console

import (
	"context"
	"net/http"
	"time"

	"github.com/weirstream/weir/internal/metrics"
)

// Backend is what the console needs of the App it shows. The App
// implements it; tests give their own. Every method is called from HTTP
// handlers and from the sampler's goroutine, so it must be safe for
// concurrent use.
type Backend interface {
	// Raw returns what the instance knows of itself now.
	Raw() Raw
	// Topology returns the application's topology.
	Topology() Topology
	// LogEnds returns the end offsets of those of tps it could look up
	// within ctx.
	LogEnds(ctx context.Context, tps []TopicPartition) map[TopicPartition]int64
	// Hosts returns the group's instances that advertise an address, as
	// of the newest assignment, and its generation.
	Hosts() ([]Host, int32)
	// Authorize decides whether req may see the console: nil allows it.
	Authorize(req *http.Request) error
	// Details reports whether req may also see the text of errors.
	Details(req *http.Request) bool
}

// TopicPartition names a partition.
type TopicPartition struct {
	Topic     string
	Partition int32
}

// Host is an instance of the group's host map.
type Host struct {
	Addr            string
	Active, Standby []string // task ids, sorted
}

// Raw is what an instance knows of itself at one moment.
type Raw struct {
	Time          time.Time
	Addr          string
	ProcessID     string
	ApplicationID string
	State         string
	Version       string
	Guarantee     string
	Threads       []RawThread
	Tasks         []RawTask
	// Claimed are input partitions the threads claim whose task has not
	// published its status yet.
	Claimed     []RawPartition
	Standbys    []RawStandby
	Checkpoints []RawCheckpoint
	// StoreBytes is the estimated disk of each store held here.
	StoreBytes map[string]int64
	Figures    metrics.Figures
	// Generation and RebalancedAt are the newest assignment's generation
	// and when it arrived.
	Generation   int32
	RebalancedAt time.Time
}

// RawThread is a thread's time accounting.
type RawThread struct {
	Thread                    int
	Busy, Idle, Backpressured time.Duration
}

// RawTask is an active task.
type RawTask struct {
	ID          string
	Subtopology int
	Partition   int32
	Thread      int
	Restoring   bool
	StreamTime  time.Time
	Partitions  []RawPartition
	Restores    []RawRestore
}

// RawPartition is an input partition.
type RawPartition struct {
	Topic         string
	Partition     int32
	LogEnd        int64 // -1 unknown
	Position      int64 // -1 unknown
	Committed     int64 // -1 unknown
	OldestUnread  time.Time
	Retention     time.Duration // 0 unknown or infinite
	QueuedRecords int
}

// RawRestore is a store partition restoring.
type RawRestore struct {
	Store     string
	Partition int32
	Remaining int64
}

// RawStandby is a standby or warm-up copy of a task.
type RawStandby struct {
	ID          string
	Subtopology int
	Partition   int32
	Warmup      bool
	// Lags are its stores' lags; UnknownLag for one nobody knows.
	Lags map[string]int64
}

// UnknownLag is the lag of a standby copy nobody knows how far behind
// it is (math.MaxInt64, as the runtime reports it).
const UnknownLag int64 = 1<<63 - 1

// RawCheckpoint is a store partition held on disk and its checkpoint.
type RawCheckpoint struct {
	Store     string
	Partition int32
	Offset    int64
}
