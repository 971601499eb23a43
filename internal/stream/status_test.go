package stream

import (
	"testing"

	"github.com/weirstream/weir/internal/queue"
	"github.com/weirstream/weir/internal/task"
)

// A claimed partition reports its position and log end from the claim's
// start, before its task exists and before the first fetch: lag is known
// from the assignment on.
func TestClaimedPartitionsReportLagBeforeTheirTask(t *testing.T) {
	t.Parallel()
	var fetched int64 // the claim's high watermark: 0 until a fetch
	th := &Thread{claims: map[task.TP]*claim{
		{Topic: "in", Partition: 2}: {
			q:         queue.New(queue.Limits{Items: 10, Bytes: 1 << 20}, task.RecordSize, nil),
			hwm:       claimHighWatermark(func() int64 { return fetched }, 50),
			start:     10,
			committed: 10,
		},
	}}
	got := th.Claimed()
	if len(got) != 1 {
		t.Fatalf("Claimed = %v, want one partition", got)
	}
	if p := got[0]; p.Topic != "in" || p.Partition != 2 || p.Position != 10 || p.LogEnd != 50 || p.Committed != 10 {
		t.Errorf("before the first fetch: %+v, want position 10, log end 50, committed 10", p)
	}
	fetched = 70
	if p := th.Claimed()[0]; p.LogEnd != 70 {
		t.Errorf("after a fetch: log end %d, want the claim's high watermark 70", p.LogEnd)
	}
}
