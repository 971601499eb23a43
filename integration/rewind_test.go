package integration

import (
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

// coordEcho writes, for every input record, a record with the input's key
// and the value "<partition>:<offset>"; an input whose value is "bad"
// produces a record without key instead.
func coordEcho(in, out string) *processor.Topology {
	top := processor.NewTopology()
	src := top.AddSource("in", in, serde.Bytes(), serde.String())
	p := top.AddProcessor("echo", processor.Func(func(ctx processor.Context[[]byte, string], rec processor.Record[[]byte, string]) error {
		md, _ := ctx.Metadata()
		outRec := processor.Record[[]byte, string]{Key: rec.Key, Value: fmt.Sprintf("%d:%d", md.Partition, md.Offset), Timestamp: rec.Timestamp}
		if rec.Value == "bad" {
			outRec.Key = nil
		}
		return ctx.Forward(outRec)
	}), src)
	top.AddSink("out", out, serde.Bytes(), serde.String(), p)
	return top
}

// counterSum adds up a counter family's values whose labels include want.
func counterSum(t *testing.T, regs []*prometheus.Registry, name string, want map[string]string) float64 {
	t.Helper()
	var sum float64
	for _, reg := range regs {
		fams, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range fams {
			if f.GetName() != name {
				continue
			}
		metric:
			for _, m := range f.GetMetric() {
				labels := map[string]string{}
				for _, l := range m.GetLabel() {
					labels[l.GetName()] = l.GetValue()
				}
				for k, v := range want {
					if labels[k] != v {
						continue metric
					}
				}
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}

// TestAbortRewindsInPlace: three exactly-once instances share six
// partitions; one of them has a transaction aborted (the broker refuses an
// output record, skipped by policy). The thread replays its own records
// from its last commit: no instance receives a new assignment, and every
// input record but the refused one is echoed exactly once.
func TestAbortRewindsInPlace(t *testing.T) {
	t.Parallel()
	c := kafka.Cluster(t)
	in, out, app := c.Name(t, "in"), c.Name(t, "out"), c.Name(t, "app")
	const partitions = 6
	c.CreateTopic(t, in, partitions, nil)
	c.CreateTopic(t, out, partitions, map[string]string{"cleanup.policy": "delete"})
	produce := func(from, to int, bad int) {
		var msgs []*sarama.ProducerMessage
		for i := from; i < to; i++ {
			v := strconv.Itoa(i)
			if i == bad {
				v = "bad"
			}
			msgs = append(msgs, &sarama.ProducerMessage{Topic: in, Key: sarama.StringEncoder("key-" + strconv.Itoa(i%97)), Value: sarama.StringEncoder(v)})
		}
		kafka.Produce(t, c, msgs...)
	}
	const half = 3000
	produce(0, half, -1)

	var regs []*prometheus.Registry
	var insts []*instance
	for range 3 {
		cfg := eosFailureConfig(c, app, t)
		cfg.ProductionErrors = weir.Skip
		cfg.StateDir = t.TempDir()
		regs = append(regs, cfg.Metrics.(*prometheus.Registry))
		insts = append(insts, start(t, coordEcho(in, out), cfg))
	}
	committedAll := func(n int64) func() (bool, string) {
		return func() (bool, string) {
			for _, inst := range insts {
				select {
				case err := <-inst.done:
					t.Fatalf("an instance stopped: %v", err)
				default:
				}
			}
			got, err := groupCommitted(c.Admin(t), app, in, partitions)
			if err != nil {
				return false, err.Error()
			}
			var sum int64
			for _, off := range got {
				sum += max(off, 0)
			}
			return sum == n, fmt.Sprintf("committed %d of %d: %v", sum, n, got)
		}
	}
	kafka.Eventually(t, 90*time.Second, 100*time.Millisecond, func() (bool, string) {
		for i, inst := range insts {
			if n := len(inst.app.Tasks()); n != 2 {
				return false, fmt.Sprintf("instance %d runs %d tasks", i, n)
			}
		}
		return committedAll(half)()
	})
	rebalances := counterSum(t, regs, "weir_rebalances_total", nil)

	compactLater(t, c, out)
	produce(half, 2*half, half+half/2)
	kafka.Eventually(t, 90*time.Second, 100*time.Millisecond, committedAll(2*half))

	aborted := counterSum(t, regs, "weir_transactions_total", map[string]string{"result": "aborted"})
	inPlace := counterSum(t, regs, "weir_rewinds_total", map[string]string{"mode": "in_place"})
	rejoined := counterSum(t, regs, "weir_rewinds_total", map[string]string{"mode": "rejoin"})
	after := counterSum(t, regs, "weir_rebalances_total", nil)
	t.Logf("aborted transactions %v, rewinds in place %v, by rejoining %v; assignments %v before the abort, %v after", aborted, inPlace, rejoined, rebalances, after)
	if aborted < 1 || inPlace < 1 {
		t.Fatalf("the refused record aborted %v transactions and rewound %v times in place; want at least one of each", aborted, inPlace)
	}
	if rejoined != 0 || after != rebalances {
		t.Errorf("the abort cost %v rejoins and %v new assignments; want none", rejoined, after-rebalances)
	}
	if n := counterSum(t, regs, "weir_records_skipped_total", map[string]string{"reason": "production"}); n != 1 {
		t.Errorf("skipped %v refused records, want 1", n)
	}
	for _, inst := range insts {
		if err := inst.stop(t); err != nil {
			t.Fatalf("Run = %v", err)
		}
	}

	// Every input record but the refused one, exactly once.
	writeSentinels(t, c, out, partitions)
	msgs := readToSentinels(t, c, out, partitions, sarama.ReadCommitted)
	seen := map[string]int{}
	for _, m := range msgs {
		seen[string(m.Value)]++
	}
	var dups []string
	for coord, n := range seen {
		if n > 1 {
			dups = append(dups, coord)
		}
	}
	if len(dups) > 0 || len(seen) != 2*half-1 {
		t.Fatalf("%d distinct inputs echoed, want %d; echoed more than once: %s", len(seen), 2*half-1, strings.Join(dups, ", "))
	}
}
