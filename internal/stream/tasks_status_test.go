package stream

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/weirstream/weir/internal/queue"
	"github.com/weirstream/weir/internal/task"
	"github.com/weirstream/weir/internal/txntest"
)

// queueOf returns a task queue holding msgs, oldest first.
func queueOf(t *testing.T, msgs ...*sarama.ConsumerMessage) *task.Queue {
	t.Helper()
	q := queue.New(queue.Limits{Items: 10, Bytes: 1 << 20}, task.RecordSize, nil)
	for _, m := range msgs {
		if err := q.Push(context.Background(), m); err != nil {
			t.Fatal(err)
		}
	}
	return q
}

// TestTasksReportLiveStatus: Tasks reports what the loop published last,
// with live queue sizes, log ends and restore progress. A partition's
// position is the next record to process: the one after the last
// processed, else the oldest queued, else where its fetch starts, and -1
// when none is known; a log end not known is -1.
func TestTasksReportLiveStatus(t *testing.T) {
	t.Parallel()
	oldest := time.UnixMilli(1_700_000_000_000)
	streamTime := time.UnixMilli(1_700_000_100_000)
	var hwm atomic.Int64
	hwm.Store(20)
	var remaining atomic.Int64
	remaining.Store(500)
	processing := queueOf(t,
		&sarama.ConsumerMessage{Offset: 13, Timestamp: oldest, Key: []byte("ab"), Value: []byte("cde")},
		&sarama.ConsumerMessage{Offset: 14, Timestamp: oldest.Add(time.Second), Value: []byte("f")})
	th := &Thread{idx: 2}
	th.status = []task.Info{
		{ID: "0_1", StreamTime: streamTime, Inputs: []task.InputInfo{
			// processing: position after the last record processed
			{Topic: "in", Partition: 1, Committed: 10, Position: 12, Queue: processing, HighWatermark: hwm.Load, Start: 3},
			// nothing processed yet, a record queued: its offset
			{Topic: "in2", Partition: 1, Committed: -1, Position: -1, Queue: queueOf(t, &sarama.ConsumerMessage{Offset: 30, Timestamp: oldest}), Start: 25},
			// nothing fetched yet: where the fetch starts
			{Topic: "in3", Partition: 1, Committed: 5, Position: -1, Queue: queueOf(t), Start: 5},
			// nothing known
			{Topic: "in4", Partition: 1, Committed: -1, Position: -1, Start: -1},
		}},
		{ID: "1_1", Restoring: true, Restores: []task.StoreInfo{{Store: "counts", Partition: 1, Remaining: &remaining}}},
	}
	got := th.Tasks()
	if len(got) != 2 {
		t.Fatalf("Tasks = %+v, want 2 tasks", got)
	}
	running, restoring := got[0], got[1]
	if running.ID != "0_1" || running.Thread != 2 || running.Restoring || !running.StreamTime.Equal(streamTime) {
		t.Errorf("task 0_1 = %+v", running)
	}
	want := []PartitionStatus{
		{Topic: "in", Partition: 1, QueuedRecords: 2, QueuedBytes: 6, Committed: 10, Position: 12, LogEnd: 20, OldestUnread: oldest},
		{Topic: "in2", Partition: 1, QueuedRecords: 1, Committed: -1, Position: 30, LogEnd: -1, OldestUnread: oldest},
		{Topic: "in3", Partition: 1, Committed: 5, Position: 5, LogEnd: -1},
		{Topic: "in4", Partition: 1, Committed: -1, Position: -1, LogEnd: -1},
	}
	if len(running.Partitions) != len(want) {
		t.Fatalf("task 0_1 partitions = %+v, want %+v", running.Partitions, want)
	}
	for i, p := range running.Partitions {
		if !p.OldestUnread.Equal(want[i].OldestUnread) {
			t.Errorf("partition %s: oldest unread %v, want %v", p.Topic, p.OldestUnread, want[i].OldestUnread)
		}
		p.OldestUnread = want[i].OldestUnread
		if p != want[i] {
			t.Errorf("partition %d = %+v, want %+v", i, p, want[i])
		}
	}
	if !restoring.Restoring || restoring.Thread != 2 || len(restoring.Restores) != 1 ||
		restoring.Restores[0] != (RestoreStatus{Store: "counts", Partition: 1, Remaining: 500}) {
		t.Errorf("task 1_1 = %+v, want restoring counts/1 with 500 to go", restoring)
	}
	// Live values, without a new publish.
	hwm.Store(40)
	remaining.Store(120)
	if _, ok := processing.Pop(); !ok {
		t.Fatal("empty queue")
	}
	got = th.Tasks()
	if p := got[0].Partitions[0]; p.LogEnd != 40 || p.QueuedRecords != 1 || p.QueuedBytes != 1 || !p.OldestUnread.Equal(oldest.Add(time.Second)) {
		t.Errorf("after the queue and log moved: %+v, want log end 40, one record of 1 byte queued, the next one oldest", p)
	}
	if r := got[1].Restores[0].Remaining; r != 120 {
		t.Errorf("restore remaining %d, want the live 120", r)
	}
}

// TestPublishWithNoTasks: a thread whose tasks are gone publishes that it
// has none (App.Tasks must not keep showing the tasks it closed), and
// tells the instance each time.
func TestPublishWithNoTasks(t *testing.T) {
	t.Parallel()
	th := failureThread(t, Config{}, txntest.New(true))
	published := 0
	th.in.OnPublish = func() { published++ }
	th.status = []task.Info{{ID: "0_0"}}
	th.publish()
	if got := th.Tasks(); len(got) != 0 {
		t.Errorf("Tasks after publishing no tasks = %+v, want none", got)
	}
	if published != 1 {
		t.Errorf("OnPublish called %d times, want 1", published)
	}
}

// TestAssignedWaitsForEveryTask: the thread counts as assigned only once
// its session has an assignment, no task is withheld for a follow-up
// rebalance, and it has published every assigned task.
func TestAssignedWaitsForEveryTask(t *testing.T) {
	t.Parallel()
	th := &Thread{}
	if th.Assigned() {
		t.Fatal("assigned before the session has an assignment")
	}
	th.assigned.Store(true)
	th.assignedTasks.Store(2)
	th.status = []task.Info{{ID: "0_0"}}
	if th.Assigned() {
		t.Fatal("assigned with one of two tasks published")
	}
	th.status = append(th.status, task.Info{ID: "0_1"})
	if !th.Assigned() {
		t.Fatal("not assigned with every task published")
	}
	th.pendingTasks.Store(1)
	if th.Assigned() {
		t.Fatal("assigned while a task is withheld for the follow-up rebalance")
	}
	th.pendingTasks.Store(0)
	th.assigned.Store(false)
	if th.Assigned() {
		t.Fatal("assigned after the session lost its assignment")
	}
}

// TestClaimedReportsQueuedRecords: a claimed partition reports the
// records its fetcher queued and the oldest one's timestamp.
func TestClaimedReportsQueuedRecords(t *testing.T) {
	t.Parallel()
	oldest := time.UnixMilli(1_700_000_000_000)
	th := &Thread{claims: map[task.TP]*claim{
		{Topic: "in", Partition: 0}: {
			q: queueOf(t,
				&sarama.ConsumerMessage{Offset: 10, Timestamp: oldest, Value: []byte("1234")},
				&sarama.ConsumerMessage{Offset: 11, Timestamp: oldest.Add(time.Minute), Value: []byte("56")}),
			hwm: func() int64 { return 12 }, start: 10, committed: -1,
		},
	}}
	got := th.Claimed()
	if len(got) != 1 {
		t.Fatalf("Claimed = %+v, want one partition", got)
	}
	p := got[0]
	if p.QueuedRecords != 2 || p.QueuedBytes != 6 || !p.OldestUnread.Equal(oldest) || p.Committed != -1 || p.Position != 10 || p.LogEnd != 12 {
		t.Errorf("Claimed = %+v, want 2 records of 6 bytes queued, the oldest at %v, position 10, log end 12, nothing committed", p, oldest)
	}
}
