package task

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/weirstream/weir/internal/graph"
	"github.com/weirstream/weir/internal/queue"
)

// stampSource decodes a record to its Kafka timestamp and remembers what
// it processed.
type stampSource struct {
	head      *graph.RawRecord
	processed *[]int64
}

func (s *stampSource) Init() error  { return nil }
func (s *stampSource) Close() error { return nil }
func (s *stampSource) Decode(raw *graph.RawRecord) (time.Time, error) {
	r := *raw
	s.head = &r
	return raw.Timestamp, nil
}
func (s *stampSource) Process() error {
	*s.processed = append(*s.processed, s.head.Offset)
	return nil
}

// twoPartitionTask is a task reading two partitions, as a join would.
func twoPartitionTask(idle time.Duration) (*Task, [2]*Queue, *[]int64) {
	sh := &Shared{Config: Config{MaxTaskIdle: idle}}
	processed := &[]int64{}
	var qs [2]*Queue
	t := &Task{sh: sh, host: &recordingHost{}, name: "0_0", log: slog.New(slog.DiscardHandler), ctx: context.Background(), running: true,
		processed: prometheus.NewCounter(prometheus.CounterOpts{Name: "p"}), bytes: prometheus.NewCounter(prometheus.CounterOpts{Name: "b"}),
		punctuations: prometheus.NewCounter(prometheus.CounterOpts{Name: "u"}), deadLettered: prometheus.NewCounter(prometheus.CounterOpts{Name: "s"})}
	for i := range qs {
		qs[i] = queue.New(queue.Limits{Items: 10, Bytes: 1 << 20}, RecordSize, nil)
		t.parts = append(t.parts, &Input{tp: TP{Topic: string(rune('a' + i))}, src: &stampSource{processed: processed}, q: qs[i], consumed: -1, committed: -1})
	}
	return t, qs, processed
}

func push(t *testing.T, q *Queue, offset int64, ts time.Time) {
	t.Helper()
	if err := q.Push(context.Background(), &sarama.ConsumerMessage{Offset: offset, Timestamp: ts}); err != nil {
		t.Fatal(err)
	}
}

func drain(t *testing.T, tk *Task, now time.Time) {
	t.Helper()
	for {
		p, _, err := tk.Next(now)
		if err != nil {
			t.Fatal(err)
		}
		if p == nil {
			return
		}
		if err := tk.Process(p); err != nil {
			t.Fatal(err)
		}
	}
}

func TestTaskProcessesSmallestTimestampFirst(t *testing.T) {
	t.Parallel()
	tk, qs, processed := twoPartitionTask(0)
	base := time.UnixMilli(1_000_000)
	push(t, qs[0], 10, base.Add(3*time.Second))
	push(t, qs[0], 11, base.Add(5*time.Second))
	push(t, qs[1], 20, base.Add(1*time.Second))
	push(t, qs[1], 21, base.Add(4*time.Second))
	drain(t, tk, time.Now())
	want := []int64{20, 10, 21, 11}
	if len(*processed) != len(want) {
		t.Fatalf("processed %v, want %v", *processed, want)
	}
	for i := range want {
		if (*processed)[i] != want[i] {
			t.Fatalf("processed %v, want %v", *processed, want)
		}
	}
	if !tk.streamTime.Equal(base.Add(5 * time.Second)) {
		t.Errorf("stream time %v, want the largest timestamp", tk.streamTime)
	}
	if tk.parts[0].consumed != 12 || tk.parts[1].consumed != 22 {
		t.Errorf("consumed offsets %d, %d; want 12, 22", tk.parts[0].consumed, tk.parts[1].consumed)
	}
}

func TestMaxTaskIdleWaitsForAnEmptyPartition(t *testing.T) {
	t.Parallel()
	const idle = time.Minute
	tk, qs, processed := twoPartitionTask(idle)
	base := time.UnixMilli(1_000_000)
	push(t, qs[0], 10, base.Add(3*time.Second))
	now := time.Now()
	p, wait, err := tk.Next(now)
	if err != nil || p != nil {
		t.Fatalf("next = %v, %v; want to wait for the empty partition", p, err)
	}
	if !wait.Equal(now.Add(idle)) {
		t.Fatalf("wait until %v, want %v", wait, now.Add(idle))
	}
	// The other partition's record arrives within the idle time and is
	// older: it goes first, and then the task waits again for the
	// partition that ran dry.
	push(t, qs[1], 20, base.Add(time.Second))
	later := now.Add(time.Second)
	drain(t, tk, later)
	if len(*processed) != 1 || (*processed)[0] != 20 {
		t.Fatalf("processed %v, want [20]", *processed)
	}
	if p, wait, _ := tk.Next(later); p != nil || !wait.Equal(later.Add(idle)) {
		t.Fatalf("next = %v waiting until %v; want to wait until %v", p, wait, later.Add(idle))
	}
	// Past the idle time a lone partition is processed anyway.
	drain(t, tk, later.Add(idle))
	if len(*processed) != 2 || (*processed)[1] != 10 {
		t.Fatalf("processed %v, want 10 after the idle time", *processed)
	}
}

// A partition whose log holds records its claim has not delivered yet is
// waited for, at most firstFetchWait, even with MaxTaskIdle 0: a table's
// rows are read before the stream records that join them. A partition
// with nothing beyond its claim's start is not waited for.
func TestTaskWaitsForAPartitionsFirstRecords(t *testing.T) {
	t.Parallel()
	base := time.UnixMilli(1_000_000)
	now := time.Now()

	tk, qs, processed := twoPartitionTask(0)
	tk.parts[0].hwm, tk.parts[0].start = func() int64 { return 11 }, 10
	tk.parts[1].hwm, tk.parts[1].start = func() int64 { return 25 }, 20 // records 20-24 not fetched yet
	push(t, qs[0], 10, base.Add(3*time.Second))
	p, wait, err := tk.Next(now)
	if err != nil || p != nil || !wait.Equal(now.Add(firstFetchWait)) {
		t.Fatalf("next = %v, wait %v, %v; want to wait until %v for the unfetched partition", p, wait, err, now.Add(firstFetchWait))
	}
	push(t, qs[1], 20, base.Add(time.Second)) // the fetch arrives: the older record goes first
	drain(t, tk, now.Add(10*time.Millisecond))
	if len(*processed) != 2 || (*processed)[0] != 20 || (*processed)[1] != 10 {
		t.Fatalf("processed %v, want [20 10]", *processed)
	}

	// Once a partition delivered records, an empty queue is MaxTaskIdle's
	// business again (0: go on).
	push(t, qs[0], 11, base.Add(4*time.Second))
	drain(t, tk, now.Add(20*time.Millisecond))
	if len(*processed) != 3 {
		t.Fatalf("processed %v, want 11 processed without waiting", *processed)
	}

	// Nothing beyond the claim's start: no wait.
	tk2, qs2, processed2 := twoPartitionTask(0)
	tk2.parts[0].hwm, tk2.parts[0].start = func() int64 { return 1 }, 0
	tk2.parts[1].hwm, tk2.parts[1].start = func() int64 { return 7 }, 7
	push(t, qs2[0], 0, base)
	drain(t, tk2, now)
	if len(*processed2) != 1 {
		t.Fatalf("processed %v; a caught-up partition held the task back", *processed2)
	}

	// The wait is bounded: a partition whose unread offsets are markers
	// never delivers.
	tk3, qs3, processed3 := twoPartitionTask(0)
	tk3.parts[0].hwm, tk3.parts[0].start = func() int64 { return 1 }, 0
	tk3.parts[1].hwm, tk3.parts[1].start = func() int64 { return 8 }, 7
	push(t, qs3[0], 0, base)
	if p, _, _ := tk3.Next(now); p != nil {
		t.Fatal("did not wait for the partition with an unread offset")
	}
	drain(t, tk3, now.Add(firstFetchWait))
	if len(*processed3) != 1 {
		t.Fatalf("processed %v after the bound; want the record", *processed3)
	}
}
