package integration

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/processor"
	"github.com/weirstream/weir/serde"
	"github.com/weirstream/weir/weirtest/kafka"
)

// These tests inject records that Kafka refuses into an exactly-once
// application and check the failure authority of the runtime: a refused
// or lost output record never lets its input offset commit, whatever the
// processor does with the error, and the job neither loops nor hides the
// failure.

const failureInput = 100 // records per test, on one partition

// offsetEcho forwards, for every input record, one record keyed "k" whose
// value is the input offset; bad decides which input offsets produce a
// refused record instead (see refuse). swallow makes the processor log and
// drop Forward's error, as careless user code does.
func offsetEcho(in, out string, bad func(offset int64) bool, refuse func(processor.Record[[]byte, string]) processor.Record[[]byte, string], swallow bool) *processor.Topology {
	top := processor.NewTopology()
	src := top.AddSource("in", in, serde.Bytes(), serde.String())
	p := top.AddProcessor("echo", processor.Func(func(ctx processor.Context[[]byte, string], rec processor.Record[[]byte, string]) error {
		md, _ := ctx.Metadata()
		outRec := processor.Record[[]byte, string]{Key: []byte("k"), Value: strconv.FormatInt(md.Offset, 10), Timestamp: rec.Timestamp}
		if bad(md.Offset) {
			outRec = refuse(outRec)
		}
		err := ctx.Forward(outRec)
		if swallow {
			return nil
		}
		return err
	}), src)
	top.AddSink("out", out, serde.Bytes(), serde.String(), p)
	return top
}

func bigValue(r processor.Record[[]byte, string]) processor.Record[[]byte, string] {
	r.Value = strings.Repeat("x", 2<<20)
	return r
}

func noKey(r processor.Record[[]byte, string]) processor.Record[[]byte, string] {
	r.Key = nil
	return r
}

func produceFailureInput(t *testing.T, c *kafka.Env, topic string, from, to int) {
	t.Helper()
	var msgs []*sarama.ProducerMessage
	for i := from; i < to; i++ {
		msgs = append(msgs, &sarama.ProducerMessage{Topic: topic, Partition: 0, Key: sarama.StringEncoder("in"), Value: sarama.StringEncoder(strconv.Itoa(i))})
	}
	kafka.Produce(t, c, msgs...)
}

// echoed reads the committed output up to a sentinel written after the App
// stopped and returns how often each input offset was echoed.
func echoed(t *testing.T, c *kafka.Env, out string) map[int64]int {
	t.Helper()
	kafka.Produce(t, c, &sarama.ProducerMessage{Topic: out, Partition: 0, Key: sarama.StringEncoder("sentinel"), Value: sarama.StringEncoder("-1")})
	msgs := kafka.ReadAll(t, c, out, sarama.ReadCommitted, func(got []*sarama.ConsumerMessage) bool {
		return len(got) > 0 && string(got[len(got)-1].Key) == "sentinel"
	})
	counts := map[int64]int{}
	for _, m := range msgs[:len(msgs)-1] {
		off, err := strconv.ParseInt(string(m.Value), 10, 64)
		if err != nil {
			t.Fatalf("output record %q is not an input offset", m.Value)
		}
		counts[off]++
	}
	return counts
}

// checkEchoedUpTo asserts that exactly the input offsets below committed
// (minus skip) were echoed, each once.
func checkEchoedUpTo(t *testing.T, counts map[int64]int, committed int64, skip map[int64]bool) {
	t.Helper()
	var missing, dup, beyond []int64
	for off := int64(0); off < committed; off++ {
		switch n := counts[off]; {
		case skip[off]:
			if n != 0 {
				dup = append(dup, off)
			}
		case n == 0:
			missing = append(missing, off)
		case n > 1:
			dup = append(dup, off)
		}
	}
	for off := range counts {
		if off >= committed {
			beyond = append(beyond, off)
		}
	}
	if len(missing)+len(dup)+len(beyond) > 0 {
		t.Fatalf("input committed up to %d: %d committed inputs without output %v, %d echoed more than once (or echoed when skipped) %v, %d outputs of uncommitted inputs %v",
			committed, len(missing), missing, len(dup), dup, len(beyond), beyond)
	}
}

func committedOffset(t *testing.T, c *kafka.Env, group, topic string) int64 {
	t.Helper()
	got, err := groupCommitted(c.Admin(t), group, topic, 1)
	if err != nil {
		t.Fatalf("committed offsets of %s: %v", group, err)
	}
	return got[0]
}

func waitRun(t *testing.T, in *instance, within time.Duration) error {
	t.Helper()
	select {
	case err := <-in.done:
		return err
	case <-time.After(within):
		t.Fatalf("Run did not return within %v", within)
		return nil
	}
}

func eosFailureConfig(c *kafka.Env, app string, t *testing.T) weir.Config {
	cfg := baseConfig(c, app, t)
	cfg.Guarantee = weir.ExactlyOnce
	cfg.CommitInterval = 100 * time.Millisecond
	cfg.Metrics = prometheus.NewRegistry()
	return cfg
}

// TestRefusedOutputStopsWithItsCoordinates: record 50 of 100 produces a
// 2 MB value, over the producer's and the topic's limit. Whether the
// processor returns or swallows Forward's error, Run returns a
// *ProductionError naming input record 50, the sink, the size and the
// limit; every committed input has its output exactly once and nothing
// from record 50 on is committed.
func TestRefusedOutputStopsWithItsCoordinates(t *testing.T) {
	t.Parallel()
	for _, swallow := range []bool{false, true} {
		t.Run(fmt.Sprintf("swallow=%v", swallow), func(t *testing.T) {
			t.Parallel()
			c := kafka.Cluster(t)
			in, out, app := c.Name(t, "in"), c.Name(t, "out"), c.Name(t, "app")
			c.CreateTopic(t, in, 1, nil)
			c.CreateTopic(t, out, 1, nil)
			produceFailureInput(t, c, in, 0, failureInput)
			top := offsetEcho(in, out, func(off int64) bool { return off == 50 }, bigValue, swallow)
			inst := start(t, top, eosFailureConfig(c, app, t))

			err := waitRun(t, inst, 60*time.Second)
			var pe *weir.ProductionError
			if !errors.As(err, &pe) {
				t.Fatalf("Run = %v, want a *weir.ProductionError", err)
			}
			if pe.Topic != in || pe.Partition != 0 || pe.Offset != 50 || pe.Sink != out || pe.Size < 2<<20 || pe.Limit <= 0 || pe.Limit >= pe.Size {
				t.Errorf("ProductionError = %+v, want input %s/0@50, sink %s, size over 2 MiB and its limit", pe, in, out)
			}
			if !errors.Is(err, weir.ErrRecordTooLarge) {
				t.Errorf("Run = %v, want it to wrap ErrRecordTooLarge", err)
			}
			committed := committedOffset(t, c, app, in)
			if committed > 50 {
				t.Fatalf("input committed up to %d, past the refused record 50", committed)
			}
			checkEchoedUpTo(t, echoed(t, c, out), max(committed, 0), nil)
		})
	}
}

// TestSkippedOutputLeavesTheRestExactlyOnce: with ProductionErrors=Skip
// the refused record is dropped and counted, and every other input record
// is echoed exactly once, all 100 committed.
func TestSkippedOutputLeavesTheRestExactlyOnce(t *testing.T) {
	t.Parallel()
	c := kafka.Cluster(t)
	in, out, app := c.Name(t, "in"), c.Name(t, "out"), c.Name(t, "app")
	c.CreateTopic(t, in, 1, nil)
	c.CreateTopic(t, out, 1, nil)
	produceFailureInput(t, c, in, 0, failureInput)
	top := offsetEcho(in, out, func(off int64) bool { return off == 50 }, bigValue, true)
	cfg := eosFailureConfig(c, app, t)
	cfg.ProductionErrors = weir.Skip
	inst := start(t, top, cfg)
	kafka.Eventually(t, 60*time.Second, 100*time.Millisecond, func() (bool, string) {
		off := committedOffset(t, c, app, in)
		return off == failureInput, fmt.Sprintf("committed offset %d", off)
	})
	if err := inst.stop(t); err != nil {
		t.Fatalf("Run = %v", err)
	}
	checkEchoedUpTo(t, echoed(t, c, out), failureInput, map[int64]bool{50: true})
	if n := skippedProduction(t, cfg.Metrics.(*prometheus.Registry)); n != 1 {
		t.Errorf("weir_records_skipped_total{reason=production} = %v, want 1", n)
	}
}

func skippedProduction(t *testing.T, reg *prometheus.Registry) float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var n float64
	for _, f := range fams {
		if f.GetName() != "weir_records_skipped_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "reason" && l.GetValue() == "production" {
					n += m.GetCounter().GetValue()
				}
			}
		}
	}
	return n
}

// compactLater makes topic compacted while an App runs, so that a record
// without key is refused by the broker, not by the checks weir made at
// start: the failure arrives asynchronously, from the producer.
func compactLater(t *testing.T, c *kafka.Env, topic string) {
	t.Helper()
	policy := "compact"
	if err := c.Admin(t).AlterConfig(sarama.TopicResource, topic, map[string]*string{"cleanup.policy": &policy}, false); err != nil {
		t.Fatalf("making %s compacted: %v", topic, err)
	}
	kafka.Eventually(t, 30*time.Second, 100*time.Millisecond, func() (bool, string) {
		entries, err := c.Admin(t).DescribeConfig(sarama.ConfigResource{Type: sarama.TopicResource, Name: topic, ConfigNames: []string{"cleanup.policy"}})
		if err != nil || len(entries) == 0 {
			return false, fmt.Sprintf("describing %s: %v", topic, err)
		}
		return entries[0].Value == "compact", "cleanup.policy=" + entries[0].Value
	})
}

// TestBrokerRefusalIsNeverCommitted: the broker refuses an output record
// (no key, on a topic made compacted after start) while the processor
// swallows every Forward error. The producer's failure is sticky: the
// transaction holding the refused record never commits, Run stops with a
// *ProductionError, and every committed input has its output exactly once.
func TestBrokerRefusalIsNeverCommitted(t *testing.T) {
	t.Parallel()
	c := kafka.Cluster(t)
	in, out, app := c.Name(t, "in"), c.Name(t, "out"), c.Name(t, "app")
	c.CreateTopic(t, in, 1, nil)
	c.CreateTopic(t, out, 1, map[string]string{"cleanup.policy": "delete"})
	produceFailureInput(t, c, in, 0, 50)
	top := offsetEcho(in, out, func(off int64) bool { return off == 50 }, noKey, true)
	inst := start(t, top, eosFailureConfig(c, app, t))
	kafka.Eventually(t, 60*time.Second, 100*time.Millisecond, func() (bool, string) {
		off := committedOffset(t, c, app, in)
		return off == 50, fmt.Sprintf("committed offset %d", off)
	})
	compactLater(t, c, out)
	produceFailureInput(t, c, in, 50, failureInput)

	err := waitRun(t, inst, 60*time.Second)
	var pe *weir.ProductionError
	if !errors.As(err, &pe) || pe.Sink != out || pe.Topic != in {
		t.Fatalf("Run = %v, want a *weir.ProductionError for sink %s from %s", err, out, in)
	}
	if !errors.Is(err, sarama.ErrInvalidRecord) {
		t.Errorf("Run = %v, want it to wrap the broker's INVALID_RECORD", err)
	}
	committed := committedOffset(t, c, app, in)
	if committed > 50 {
		t.Fatalf("input committed up to %d, past the refused record 50", committed)
	}
	checkEchoedUpTo(t, echoed(t, c, out), committed, nil)
}

// TestRefusalInAWallClockPunctuatorIsSettledLikeARecord: a wall-clock
// punctuator's record is refused by the broker once. With
// ProductionErrors=Skip the transaction is aborted and the tasks replay;
// the App keeps running and echoes every input record exactly once.
func TestRefusalInAWallClockPunctuatorIsSettledLikeARecord(t *testing.T) {
	t.Parallel()
	c := kafka.Cluster(t)
	in, out, ticks, app := c.Name(t, "in"), c.Name(t, "out"), c.Name(t, "ticks"), c.Name(t, "app")
	c.CreateTopic(t, in, 1, nil)
	c.CreateTopic(t, out, 1, nil)
	c.CreateTopic(t, ticks, 1, map[string]string{"cleanup.policy": "delete"})
	produceFailureInput(t, c, in, 0, 50)

	armed := make(chan struct{})
	top := processor.NewTopology()
	src := top.AddSource("in", in, serde.Bytes(), serde.String())
	echo := top.AddProcessor("echo", processor.Func(func(ctx processor.Context[[]byte, string], rec processor.Record[[]byte, string]) error {
		md, _ := ctx.Metadata()
		return ctx.Forward(processor.Record[[]byte, string]{Key: []byte("k"), Value: strconv.FormatInt(md.Offset, 10), Timestamp: rec.Timestamp})
	}), src)
	top.AddSink("out", out, serde.Bytes(), serde.String(), echo)
	fired := false
	tick := top.AddProcessor("tick", func() processor.Processor[[]byte, string, []byte, string] {
		return &ticker{armed: armed, fired: &fired}
	}, src)
	top.AddSink("ticks", ticks, serde.Bytes(), serde.String(), tick)

	cfg := eosFailureConfig(c, app, t)
	cfg.ProductionErrors = weir.Skip
	cfg.CommitInterval = time.Second
	inst := start(t, top, cfg)
	kafka.Eventually(t, 60*time.Second, 100*time.Millisecond, func() (bool, string) {
		off := committedOffset(t, c, app, in)
		return off == 50, fmt.Sprintf("committed offset %d", off)
	})
	compactLater(t, c, ticks)
	close(armed)
	// The punctuator fires every 50 ms and the thread commits every
	// second, so the punctuator's next record is what meets the failed
	// transaction first.
	notStopped := func() {
		select {
		case err := <-inst.done:
			t.Fatalf("Run returned %v; a refused punctuator record under Skip must not stop the App", err)
		default:
		}
	}
	reg := cfg.Metrics.(*prometheus.Registry)
	kafka.Eventually(t, 30*time.Second, 50*time.Millisecond, func() (bool, string) {
		notStopped()
		n := skippedProduction(t, reg)
		return n >= 1, fmt.Sprintf("%v refused records skipped", n)
	})
	produceFailureInput(t, c, in, 50, failureInput)
	kafka.Eventually(t, 60*time.Second, 100*time.Millisecond, func() (bool, string) {
		notStopped()
		off := committedOffset(t, c, app, in)
		return off == failureInput, fmt.Sprintf("committed offset %d", off)
	})
	if err := inst.stop(t); err != nil {
		t.Fatalf("Run = %v", err)
	}
	checkEchoedUpTo(t, echoed(t, c, out), failureInput, nil)
}

// ticker's wall-clock punctuator writes one record without key once armed
// is closed (the topic it writes has become compacted by then), and a
// keyed record at every later firing: those meet the failed transaction.
type ticker struct {
	armed <-chan struct{}
	fired *bool
}

func (p *ticker) Init(ctx processor.Context[[]byte, string]) error {
	_, err := ctx.Schedule(50*time.Millisecond, processor.WallClockTime, func(now time.Time) error {
		select {
		case <-p.armed:
		default:
			return nil
		}
		if *p.fired {
			return ctx.Forward(processor.Record[[]byte, string]{Key: []byte("t"), Value: "tick", Timestamp: now})
		}
		*p.fired = true
		return ctx.Forward(processor.Record[[]byte, string]{Value: "tick", Timestamp: now})
	})
	return err
}

func (p *ticker) Process(processor.Context[[]byte, string], processor.Record[[]byte, string]) error {
	return nil
}

func (p *ticker) Close() error { return nil }
