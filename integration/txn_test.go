package integration

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/processor"
	"github.com/weirstream/weir/serde"
	"github.com/weirstream/weir/weirtest/kafka"
)

// failingMaxSeq is the max-seq topology whose processor fails on the
// value "boom" while fail is set.
func failingMaxSeq(in, out string, fail *atomic.Bool) *processor.Topology {
	t := processor.NewTopology()
	src := t.AddSource("in", in, serde.String(), serde.String())
	guard := t.AddProcessor("guard", processor.Func(func(ctx processor.Context[string, string], rec processor.Record[string, string]) error {
		if rec.Value == "boom" {
			if fail.Load() {
				return errors.New("injected failure")
			}
			return nil
		}
		return ctx.Forward(rec)
	}), src)
	track := t.AddProcessor("track", func() processor.Processor[string, string, string, int64] { return &maxSeq{} }, guard)
	t.AddStore(latest, track)
	t.AddSink("out", out, serde.String(), serde.Int64(), track)
	return t
}

func eosConfig(c *kafka.Env, app string, t *testing.T) weir.Config {
	cfg := baseConfig(c, app, t)
	cfg.Guarantee = weir.ExactlyOnce
	cfg.CommitInterval = 100 * time.Millisecond
	return cfg
}

// TestExactlyOnceAbortHidesPartialWork: a record that fails mid
// transaction aborts it. Nothing of the transaction is visible to
// read_committed readers or in the store, although its records were
// written; after a restart processing resumes at the committed offsets
// and every record's effect appears exactly once.
func TestExactlyOnceAbortHidesPartialWork(t *testing.T) {
	t.Parallel()
	c := kafka.Cluster(t)
	in, out, app := c.Name(t, "in"), c.Name(t, "out"), c.Name(t, "app")
	c.CreateTopic(t, in, 1, nil)
	c.CreateTopic(t, out, 1, nil)
	msgs := seqRecords(in, 20, 0, 5) // 100 records, seq 0..4 for 20 keys
	msgs = append(msgs, &sarama.ProducerMessage{Topic: in, Key: sarama.StringEncoder("key-0000"), Value: sarama.StringEncoder("boom")})
	msgs = append(msgs, seqRecords(in, 20, 5, 10)...)
	kafka.Produce(t, c, msgs...)

	var fail atomic.Bool
	fail.Store(true)
	cfg := eosConfig(c, app, t)
	// One long transaction: the failure lands in the first one.
	cfg.CommitInterval = 20 * time.Second
	cfg.TransactionTimeout = 60 * time.Second
	err := runUntilDone(t, failingMaxSeq(in, out, &fail), cfg)
	var re *weir.RecordError
	if !errors.As(err, &re) || re.Offset != 100 || re.Node != "guard" {
		t.Fatalf("Run = %v, want a RecordError at offset 100 in node guard", err)
	}
	// The aborted transaction wrote records: a read_uncommitted reader
	// sees them, a read_committed reader sees none.
	uncommitted := kafka.ReadAll(t, c, out, sarama.ReadUncommitted, func(m []*sarama.ConsumerMessage) bool { return len(m) >= 20 })
	if len(uncommitted) < 20 {
		t.Fatalf("read_uncommitted sees %d records of the aborted transaction", len(uncommitted))
	}
	ends := kafka.EndOffsets(t, c, out)
	committed := kafka.ReadAll(t, c, out, sarama.ReadCommitted, func([]*sarama.ConsumerMessage) bool { return true })
	if len(committed) != 0 {
		t.Fatalf("read_committed sees %d records of the aborted transaction", len(committed))
	}
	if got := readStore(t, cfg.StateDir, app, 1); len(got) != 0 {
		t.Fatalf("the store holds %d keys of the aborted transaction", len(got))
	}

	// Resume: everything is processed once, from offset 0.
	fail.Store(false)
	cfg.CommitInterval = 100 * time.Millisecond
	cfg.TransactionTimeout = 0
	a := start(t, failingMaxSeq(in, out, &fail), cfg)
	waitProcessed(t, c, out, 20, 10)
	if err := a.stop(t); err != nil {
		t.Fatal(err)
	}
	// maxSeq emits every new maximum: seq 1..9 of 20 keys.
	const want = 20 * 9
	got := kafka.ReadAll(t, c, out, sarama.ReadCommitted, func(m []*sarama.ConsumerMessage) bool { return len(m) >= want })
	seen := map[string]bool{}
	for _, m := range got {
		if m.Offset < ends[0] {
			t.Fatalf("read_committed returned offset %d of the aborted transaction", m.Offset)
		}
		n, _ := serde.Int64().Deserialize("", m.Value)
		id := string(m.Key) + "/" + strconv.FormatInt(n, 10)
		if seen[id] {
			t.Fatalf("duplicate output %s", id)
		}
		seen[id] = true
	}
	if len(seen) != want {
		t.Fatalf("%d distinct outputs, want %d", len(seen), want)
	}
	equalStores(t, readStore(t, cfg.StateDir, app, 1), wantLatest(20, 10))
}

// TestExactlyOnceFencedInstanceStops: an instance started with the same
// process id as a running one (a copy of its state directory) takes over
// its transactional ids; the old one's next commit is fenced and it stops
// with ErrFenced, and the new one goes on processing.
func TestExactlyOnceFencedInstanceStops(t *testing.T) {
	t.Parallel()
	c := kafka.Cluster(t)
	in, out, app := c.Name(t, "in"), c.Name(t, "out"), c.Name(t, "app")
	c.CreateTopic(t, in, 1, nil)
	c.CreateTopic(t, out, 1, nil)
	kafka.Produce(t, c, seqRecords(in, 10, 0, 3)...)
	cfgA := eosConfig(c, app, t)
	a := start(t, maxSeqTopology(in, out), cfgA)
	waitProcessed(t, c, out, 10, 3)

	cfgB := eosConfig(c, app, t)
	id, err := os.ReadFile(filepath.Join(cfgA.StateDir, app, "process-id"))
	if err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(filepath.Join(cfgB.StateDir, app), 0o755)
	if err := os.WriteFile(filepath.Join(cfgB.StateDir, app, "process-id"), id, 0o644); err != nil {
		t.Fatal(err)
	}
	b := start(t, maxSeqTopology(in, out), cfgB)
	// Keep records flowing so that A commits, and is fenced.
	seq := 3
	kafka.Eventually(t, 60*time.Second, 100*time.Millisecond, func() (bool, string) {
		select {
		case err := <-a.done:
			if !errors.Is(err, weir.ErrInstanceFenced) {
				t.Fatalf("the old instance's Run = %v, want ErrInstanceFenced", err)
			}
			return true, ""
		default:
		}
		kafka.Produce(t, c, seqRecords(in, 10, seq, seq+1)...)
		seq++
		return false, fmt.Sprintf("old instance still running after %d rounds", seq)
	})
	kafka.Produce(t, c, seqRecords(in, 10, seq, seq+1)...)
	waitProcessed(t, c, out, 10, seq+1)
	if err := b.stop(t); err != nil {
		t.Fatalf("the new instance: %v", err)
	}
}
