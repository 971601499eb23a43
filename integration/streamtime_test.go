package integration

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/processor"
	"github.com/weirstream/weir/serde"
	"github.com/weirstream/weir/weirtest/kafka"
)

// TestStreamTimeSurvivesARestart: a task's stream time is committed with
// its offsets, so the instance that takes the task over (here with an
// empty state directory) starts from it. A record older than what was
// processed before the restart does not move stream time back, and so
// cannot reopen windows that were closed.
func TestStreamTimeSurvivesARestart(t *testing.T) {
	t.Parallel()
	for _, g := range []weir.Guarantee{weir.ExactlyOnce, weir.AtLeastOnce} {
		t.Run(g.String(), func(t *testing.T) {
			t.Parallel()
			c := kafka.Cluster(t)
			in, out, app := c.Name(t, "in"), c.Name(t, "out"), c.Name(t, "app")
			c.CreateTopic(t, in, 1, nil)
			c.CreateTopic(t, out, 1, nil)
			top := processor.NewTopology()
			src := top.AddSource("in", in, serde.String(), serde.String())
			p := top.AddProcessor("stream-time", processor.Func(func(ctx processor.Context[string, string], rec processor.Record[string, string]) error {
				return ctx.Forward(processor.Record[string, string]{Key: rec.Key, Value: strconv.FormatInt(ctx.StreamTime().UnixMilli(), 10), Timestamp: rec.Timestamp})
			}), src)
			top.AddSink("out", out, serde.String(), serde.String(), p)

			base := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
			latest := base.Add(99 * time.Second)
			var msgs []*sarama.ProducerMessage
			for i := range 100 {
				msgs = append(msgs, &sarama.ProducerMessage{Topic: in, Key: sarama.StringEncoder(fmt.Sprint(i)), Value: sarama.StringEncoder("v"), Timestamp: base.Add(time.Duration(i) * time.Second)})
			}
			kafka.Produce(t, c, msgs...)
			cfg := baseConfig(c, app, t)
			cfg.Guarantee = g
			cfg.CommitInterval = 100 * time.Millisecond
			first := start(t, top, cfg)
			kafka.Eventually(t, 60*time.Second, 100*time.Millisecond, func() (bool, string) {
				off := committedOffset(t, c, app, in)
				return off == 100, fmt.Sprintf("committed offset %d", off)
			})
			if err := first.stop(t); err != nil {
				t.Fatalf("Run = %v", err)
			}

			// A late record, taken over by an instance with no local state.
			kafka.Produce(t, c, &sarama.ProducerMessage{Topic: in, Key: sarama.StringEncoder("late"), Value: sarama.StringEncoder("v"), Timestamp: base})
			cfg2 := cfg
			cfg2.StateDir = t.TempDir()
			second := start(t, top, cfg2)
			got := kafka.ReadAll(t, c, out, sarama.ReadCommitted, func(got []*sarama.ConsumerMessage) bool {
				return len(got) > 0 && string(got[len(got)-1].Key) == "late"
			})
			if err := second.stop(t); err != nil {
				t.Fatalf("Run = %v", err)
			}
			last := got[len(got)-1]
			if st, _ := strconv.ParseInt(string(last.Value), 10, 64); st != latest.UnixMilli() {
				t.Fatalf("stream time at the late record after the restart = %d, want %d (what the first instance reached), not the late record's %d",
					st, latest.UnixMilli(), base.UnixMilli())
			}
		})
	}
}
