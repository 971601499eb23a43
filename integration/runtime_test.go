package integration

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/processor"
	"github.com/weirstream/weir/serde"
	"github.com/weirstream/weir/weirtest/kafka"
)

// instance is one running App of a test.
type instance struct {
	app  *weir.App
	done chan error
}

// start runs an App on t's cluster until the test ends.
func start(t *testing.T, top weir.Topology, cfg weir.Config) *instance {
	t.Helper()
	app, err := weir.New(top, cfg)
	if err != nil {
		t.Fatalf("weir.New: %v", err)
	}
	in := &instance{app: app, done: make(chan error, 1)}
	go func() { in.done <- app.Run(context.Background()) }()
	t.Cleanup(func() { _ = app.Close() })
	return in
}

// stop closes the App and returns what Run returned.
func (in *instance) stop(t *testing.T) error {
	t.Helper()
	in.app.Close()
	select {
	case err := <-in.done:
		return err
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return within 30 s of Close")
		return nil
	}
}

// testLogger collects an App's logs. If the test fails, the whole log goes
// to a file (its path is printed) and only its last warnings and errors
// to the test output, so the failure's own message stays near the end of
// the output, where CI shows it.
func testLogger(t *testing.T) *slog.Logger {
	var mu sync.Mutex
	var buf bytes.Buffer
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		t.Logf("weir logs: %s\n%s", saveLog(t, buf.Bytes()), lastWarnings(buf.String(), 8))
	})
	return slog.New(slog.NewTextHandler(lockedWriter{&mu, &buf}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// saveLog writes a failed test's log under the system's temporary
// directory (not t.TempDir, which is removed) and returns where.
func saveLog(t *testing.T, log []byte) string {
	f, err := os.CreateTemp("", "weir-it-"+strings.NewReplacer("/", "-", " ", "_").Replace(t.Name())+"-*.log")
	if err != nil {
		return fmt.Sprintf("not saved (%v)", err)
	}
	defer f.Close()
	if _, err := f.Write(log); err != nil {
		return fmt.Sprintf("not saved (%v)", err)
	}
	return f.Name()
}

// lastWarnings returns the last n lines of log at level WARN or ERROR.
func lastWarnings(log string, n int) string {
	var lines []string
	for line := range strings.Lines(log) {
		if strings.Contains(line, "level=WARN") || strings.Contains(line, "level=ERROR") {
			lines = append(lines, line)
		}
	}
	if len(lines) > n {
		lines = append([]string{fmt.Sprintf("(%d earlier warnings in the file)\n", len(lines)-n)}, lines[len(lines)-n:]...)
	}
	return strings.Join(lines, "")
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func baseConfig(c *kafka.Env, app string, t *testing.T) weir.Config {
	return weir.Config{
		Logger:         testLogger(t),
		ApplicationID:  app,
		Brokers:        c.Brokers,
		StateDir:       t.TempDir(),
		Guarantee:      weir.AtLeastOnce,
		CommitInterval: 200 * time.Millisecond,
		Consumer:       weir.ConsumerConfig{SessionTimeout: 6 * time.Second, HeartbeatInterval: 500 * time.Millisecond},
		// The tests' handlers listen on loopback only.
		Authorizer: weir.AllowAll,
	}
}

// passthrough copies input to output unchanged.
func passthrough(in, out string) *processor.Topology {
	t := processor.NewTopology()
	src := t.AddSource("in", in, serde.String(), serde.String())
	p := t.AddProcessor("copy", processor.Func(func(ctx processor.Context[string, string], rec processor.Record[string, string]) error {
		return ctx.Forward(rec)
	}), src)
	t.AddSink("out", out, serde.String(), serde.String(), p)
	return t
}

func records(topic string, keys, perKey, from int) []*sarama.ProducerMessage {
	var msgs []*sarama.ProducerMessage
	for seq := from; seq < from+perKey; seq++ {
		for k := range keys {
			msgs = append(msgs, &sarama.ProducerMessage{
				Topic: topic,
				Key:   sarama.StringEncoder("key-" + strconv.Itoa(k)),
				Value: sarama.StringEncoder(strconv.Itoa(seq)),
			})
		}
	}
	return msgs
}

func tasksPerThread(in *instance) map[int]int {
	out := map[int]int{}
	for _, ti := range in.app.Tasks() {
		out[ti.Thread]++
	}
	return out
}

// TestTasksSpreadAndMoveOnStop runs 2 instances × 2 threads on an
// 8-partition topic: each thread gets 2 tasks; when one instance stops,
// the other takes all 8; at least once, every input record reaches the
// output, and each key's records keep their order.
func TestTasksSpreadAndMoveOnStop(t *testing.T) {
	t.Parallel()
	c := kafka.Cluster(t)
	in, out, app := c.Name(t, "in"), c.Name(t, "out"), c.Name(t, "app")
	c.CreateTopic(t, in, 8, nil)
	c.CreateTopic(t, out, 8, nil)
	const keys, perKey = 40, 100
	kafka.Produce(t, c, records(in, keys, perKey/2, 0)...)

	top := passthrough(in, out)
	cfg := baseConfig(c, app, t)
	cfg.Threads = 2
	a := start(t, top, cfg)
	cfgB := cfg
	cfgB.StateDir = t.TempDir()
	b := start(t, top, cfgB)

	kafka.Eventually(t, 60*time.Second, 100*time.Millisecond, func() (bool, string) {
		ta, tb := tasksPerThread(a), tasksPerThread(b)
		ok := ta[0] == 2 && ta[1] == 2 && tb[0] == 2 && tb[1] == 2
		return ok, fmt.Sprintf("tasks per thread: a=%v b=%v", ta, tb)
	})
	seen := map[string]bool{}
	for _, in := range [][]weir.TaskInfo{a.app.Tasks(), b.app.Tasks()} {
		for _, ti := range in {
			if seen[ti.ID] {
				t.Errorf("task %s runs twice", ti.ID)
			}
			seen[ti.ID] = true
		}
	}
	if len(seen) != 8 {
		t.Errorf("%d distinct tasks run, want 8", len(seen))
	}

	if err := b.stop(t); err != nil {
		t.Fatalf("instance b: Run returned %v after Close", err)
	}
	kafka.Eventually(t, 60*time.Second, 100*time.Millisecond, func() (bool, string) {
		n := len(a.app.Tasks())
		return n == 8, fmt.Sprintf("instance a runs %d tasks", n)
	})
	kafka.Produce(t, c, records(in, keys, perKey/2, perKey/2)...)

	// Every (key, seq) must arrive; records of one key are in one output
	// partition, so the first time each seq shows up must be in order.
	firstSeen := map[string][]int{}
	got := map[string]bool{}
	kafka.ReadAll(t, c, out, sarama.ReadCommitted, func(msgs []*sarama.ConsumerMessage) bool {
		if len(msgs) == 0 {
			return false
		}
		m := msgs[len(msgs)-1]
		id := string(m.Key) + "/" + string(m.Value)
		if !got[id] {
			got[id] = true
			seq, _ := strconv.Atoi(string(m.Value))
			firstSeen[string(m.Key)] = append(firstSeen[string(m.Key)], seq)
		}
		return len(got) == keys*perKey
	})
	for k, seqs := range firstSeen {
		for i, s := range seqs {
			if s != i {
				t.Fatalf("key %s: output order %v, want 0..%d in order", k, seqs, perKey-1)
			}
		}
	}
	if err := a.stop(t); err != nil {
		t.Fatalf("instance a: Run returned %v after Close", err)
	}
}

// TestStartChecks: topics that are not co-partitioned, a missing source
// topic and a second instance on one state directory all stop Run at once
// with an error that names the problem.
func TestStartChecks(t *testing.T) {
	t.Parallel()
	c := kafka.Cluster(t)

	t.Run("copartitioning", func(t *testing.T) {
		left, right, out := c.Name(t, "left"), c.Name(t, "right"), c.Name(t, "out")
		c.CreateTopic(t, left, 3, nil)
		c.CreateTopic(t, right, 4, nil)
		c.CreateTopic(t, out, 1, nil)
		top := processor.NewTopology()
		l := top.AddSource("left", left, serde.String(), serde.String())
		r := top.AddSource("right", right, serde.String(), serde.String())
		merged := top.AddProcessor("merge", processor.Func(func(ctx processor.Context[string, string], rec processor.Record[string, string]) error {
			return ctx.Forward(rec)
		}), l, r)
		top.AddSink("out", out, serde.String(), serde.String(), merged)
		err := runUntilDone(t, top, baseConfig(c, c.Name(t, "app"), t))
		var cp *weir.CopartitionError
		if !errors.As(err, &cp) {
			t.Fatalf("Run = %v, want a CopartitionError", err)
		}
		for _, want := range []string{left + " has 3", right + " has 4"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not say %q", err, want)
			}
		}
	})

	t.Run("missing topic", func(t *testing.T) {
		missing, out := c.Name(t, "missing"), c.Name(t, "out")
		c.CreateTopic(t, out, 1, nil)
		err := runUntilDone(t, passthrough(missing, out), baseConfig(c, c.Name(t, "app"), t))
		var mt *weir.MissingTopicError
		if !errors.As(err, &mt) || !strings.Contains(err.Error(), missing) {
			t.Fatalf("Run = %v, want a MissingTopicError naming %s", err, missing)
		}
	})

	t.Run("state dir in use", func(t *testing.T) {
		in, out := c.Name(t, "in"), c.Name(t, "out")
		c.CreateTopic(t, in, 1, nil)
		c.CreateTopic(t, out, 1, nil)
		cfg := baseConfig(c, c.Name(t, "app"), t)
		first := start(t, passthrough(in, out), cfg)
		kafka.Eventually(t, 30*time.Second, 50*time.Millisecond, func() (bool, string) {
			return len(first.app.Tasks()) == 1, "first instance has no task yet"
		})
		err := runUntilDone(t, passthrough(in, out), cfg)
		if !errors.Is(err, weir.ErrStateDirLocked) {
			t.Fatalf("second Run on the same state dir = %v, want ErrStateDirLocked", err)
		}
		if err := first.stop(t); err != nil {
			t.Fatalf("first instance: %v", err)
		}
	})
}

// runUntilDone runs an App that is expected to fail on its own.
func runUntilDone(t *testing.T, top weir.Topology, cfg weir.Config) error {
	t.Helper()
	app, err := weir.New(top, cfg)
	if err != nil {
		t.Fatalf("weir.New: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = app.Run(ctx)
	if ctx.Err() != nil {
		t.Fatal("Run did not fail within 30 s")
	}
	return err
}

// TestSlowProcessorBoundsQueues: a processor slower than the input keeps
// the partition queue within its bound while the backlog stays on the
// broker.
func TestSlowProcessorBoundsQueues(t *testing.T) {
	t.Parallel()
	c := kafka.Cluster(t)
	in, out, app := c.Name(t, "in"), c.Name(t, "out"), c.Name(t, "app")
	c.CreateTopic(t, in, 1, nil)
	c.CreateTopic(t, out, 1, nil)
	const total, maxQueued = 3000, 20
	kafka.Produce(t, c, records(in, 1, total, 0)...)

	top := processor.NewTopology()
	src := top.AddSource("in", in, serde.String(), serde.String())
	var mu sync.Mutex
	processed := 0
	slow := top.AddProcessor("slow", processor.Func(func(ctx processor.Context[string, string], rec processor.Record[string, string]) error {
		time.Sleep(5 * time.Millisecond) // the slowness under test
		mu.Lock()
		processed++
		mu.Unlock()
		return ctx.Forward(rec)
	}), src)
	top.AddSink("out", out, serde.String(), serde.String(), slow)
	cfg := baseConfig(c, app, t)
	cfg.Queue = weir.QueueConfig{MaxRecords: maxQueued, MaxBytes: 1 << 20}
	a := start(t, top, cfg)

	samples, full := 0, 0
	kafka.Eventually(t, 60*time.Second, 20*time.Millisecond, func() (bool, string) {
		for _, ti := range a.app.Tasks() {
			for _, p := range ti.Partitions {
				if p.QueuedRecords > maxQueued {
					t.Fatalf("queue of %s/%d holds %d records, bound %d", p.Topic, p.Partition, p.QueuedRecords, maxQueued)
				}
				samples++
				if p.QueuedRecords == maxQueued {
					full++
				}
			}
		}
		mu.Lock()
		n := processed
		mu.Unlock()
		return samples >= 50 && full >= 10 && n > 100, fmt.Sprintf("%d samples, %d full, %d processed", samples, full, n)
	})
	mu.Lock()
	n := processed
	mu.Unlock()
	if n >= total {
		t.Fatalf("processed all %d records: the processor was not slower than the input", n)
	}
	if err := a.stop(t); err != nil {
		t.Fatal(err)
	}
}

// TestPunctuators: a stream-time punctuator fires only when records move
// stream time past its next due time (once per record however far time
// jumps); a wall-clock punctuator fires on its own.
func TestPunctuators(t *testing.T) {
	t.Parallel()
	c := kafka.Cluster(t)
	in, out, app := c.Name(t, "in"), c.Name(t, "out"), c.Name(t, "app")
	c.CreateTopic(t, in, 1, nil)
	c.CreateTopic(t, out, 1, nil)

	var mu sync.Mutex
	var streamFires []time.Time
	wallFires := 0
	top := processor.NewTopology()
	src := top.AddSource("in", in, serde.String(), serde.String())
	p := top.AddProcessor("punct", func() processor.Processor[string, string, string, string] {
		return &punctProc{init: func(ctx processor.Context[string, string]) error {
			if _, err := ctx.Schedule(10*time.Second, processor.StreamTime, func(ts time.Time) error {
				mu.Lock()
				streamFires = append(streamFires, ts)
				mu.Unlock()
				return ctx.Forward(processor.Record[string, string]{Key: "punct", Value: strconv.FormatInt(ts.UnixMilli(), 10), Timestamp: ts})
			}); err != nil {
				return err
			}
			_, err := ctx.Schedule(50*time.Millisecond, processor.WallClockTime, func(time.Time) error {
				mu.Lock()
				wallFires++
				mu.Unlock()
				return nil
			})
			return err
		}}
	}, src)
	top.AddSink("out", out, serde.String(), serde.String(), p)

	// Recent times: the broker deletes records older than its retention.
	base := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	offsets := []time.Duration{0, time.Second, 5 * time.Second, 12 * time.Second, 11 * time.Second, 13 * time.Second, 45 * time.Second}
	var msgs []*sarama.ProducerMessage
	for i, off := range offsets {
		msgs = append(msgs, &sarama.ProducerMessage{Topic: in, Key: sarama.StringEncoder("k"), Value: sarama.StringEncoder(strconv.Itoa(i)), Timestamp: base.Add(off)})
	}
	kafka.Produce(t, c, msgs...)
	a := start(t, top, baseConfig(c, app, t))

	// The punctuation that the last record triggers is the last output.
	lastFire := strconv.FormatInt(base.Add(45*time.Second).UnixMilli(), 10)
	kafka.ReadAll(t, c, out, sarama.ReadCommitted, func(got []*sarama.ConsumerMessage) bool {
		return len(got) > 0 && string(got[len(got)-1].Key) == "punct" && string(got[len(got)-1].Value) == lastFire
	})
	mu.Lock()
	fires := append([]time.Time(nil), streamFires...)
	mu.Unlock()
	want := []time.Time{base, base.Add(12 * time.Second), base.Add(45 * time.Second)}
	if len(fires) != len(want) {
		t.Fatalf("stream-time punctuations at %v, want %v", fires, want)
	}
	for i := range want {
		if !fires[i].Equal(want[i]) {
			t.Fatalf("stream-time punctuations at %v, want %v", fires, want)
		}
	}
	kafka.Eventually(t, 10*time.Second, 20*time.Millisecond, func() (bool, string) {
		mu.Lock()
		defer mu.Unlock()
		return wallFires >= 5, fmt.Sprintf("%d wall-clock punctuations", wallFires)
	})
	mu.Lock()
	if len(streamFires) != len(want) {
		t.Errorf("stream-time punctuator fired without records: %v", streamFires)
	}
	mu.Unlock()
	if err := a.stop(t); err != nil {
		t.Fatal(err)
	}
}

type punctProc struct {
	init func(ctx processor.Context[string, string]) error
}

func (p *punctProc) Init(ctx processor.Context[string, string]) error { return p.init(ctx) }
func (p *punctProc) Process(ctx processor.Context[string, string], rec processor.Record[string, string]) error {
	return ctx.Forward(rec)
}
func (p *punctProc) Close() error { return nil }

// TestPoisonRecordStopsWithCoordinates: a value the serde cannot read
// stops the application with the record's topic, partition and offset and
// the source node under the default policy, and is skipped under Skip.
func TestPoisonRecordStopsWithCoordinates(t *testing.T) {
	t.Parallel()
	c := kafka.Cluster(t)
	in, out := c.Name(t, "in"), c.Name(t, "out")
	c.CreateTopic(t, in, 1, nil)
	c.CreateTopic(t, out, 1, nil)
	good := func(v int64) *sarama.ProducerMessage {
		return &sarama.ProducerMessage{Topic: in, Key: sarama.StringEncoder("k"), Value: sarama.ByteEncoder(binary.BigEndian.AppendUint64(nil, uint64(v)))}
	}
	kafka.Produce(t, c, good(1), &sarama.ProducerMessage{Topic: in, Key: sarama.StringEncoder("k"), Value: sarama.StringEncoder("bad")}, good(3))

	top := processor.NewTopology()
	src := top.AddSource("in", in, serde.String(), serde.Int64())
	top.AddSink("out", out, serde.String(), serde.Int64(), src)

	err := runUntilDone(t, top, baseConfig(c, c.Name(t, "fail"), t))
	var re *weir.RecordError
	if !errors.As(err, &re) || re.Topic != in || re.Partition != 0 || re.Offset != 1 || re.Node != "in" {
		t.Fatalf("Run = %v, want a RecordError at %s/0@1 naming the source node in", err, in)
	}

	cfg := baseConfig(c, c.Name(t, "skip"), t)
	cfg.DeserializationErrors = weir.Skip
	a := start(t, top, cfg)
	got := kafka.ReadAll(t, c, out, sarama.ReadCommitted, func(got []*sarama.ConsumerMessage) bool {
		return len(got) >= 3 // the failing run wrote record 1; the skipping run writes 1 and 3
	})
	last := int64(binary.BigEndian.Uint64(got[len(got)-1].Value))
	if last != 3 {
		t.Fatalf("last output %d, want 3 after skipping the bad record", last)
	}
	if err := a.stop(t); err != nil {
		t.Fatal(err)
	}
}
