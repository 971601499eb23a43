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

// Since gives the newest generation and when it first arrived: an older
// generation arriving late, or the same one from another thread, does not
// move it.
func TestHostsSince(t *testing.T) {
	t.Parallel()
	var h Hosts
	if gen, at := h.Since(); gen != 0 || !at.IsZero() {
		t.Fatalf("before any assignment: %d at %v", gen, at)
	}
	h.set(3, nil)
	gen, first := h.Since()
	if gen != 3 || first.IsZero() {
		t.Fatalf("after generation 3: %d at %v", gen, first)
	}
	h.set(3, nil)
	h.set(2, nil)
	if gen, at := h.Since(); gen != 3 || !at.Equal(first) {
		t.Errorf("after generation 3 again and 2: %d at %v, want 3 at %v", gen, at, first)
	}
}
