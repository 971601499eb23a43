package integration

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/weirstream/weir/processor"
	"github.com/weirstream/weir/serde"
	"github.com/weirstream/weir/weirtest/kafka"
)

// TestRepartitionRoutesByKeyAndPurges: records re-keyed through a
// repartition topic meet in one task per key, the topic is created with
// the upstream partition count, and consumed records are purged from it.
func TestRepartitionRoutesByKeyAndPurges(t *testing.T) {
	t.Parallel()
	c := kafka.Cluster(t)
	in, out, app := c.Name(t, "in"), c.Name(t, "out"), c.Name(t, "app")
	c.CreateTopic(t, in, 4, nil)
	c.CreateTopic(t, out, 4, nil)

	words := []string{"alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"}
	var msgs []*sarama.ProducerMessage
	for i := range 200 {
		line := words[i%len(words)] + " " + words[(i*3)%len(words)]
		msgs = append(msgs, &sarama.ProducerMessage{Topic: in, Key: sarama.StringEncoder(fmt.Sprintf("line-%d", i)), Value: sarama.StringEncoder(line)})
	}
	kafka.Produce(t, c, msgs...)

	var mu sync.Mutex
	taskOf := map[string]map[string]bool{} // word -> tasks that saw it
	seen := 0
	top := processor.NewTopology()
	lines := top.AddSource("lines", in, serde.String(), serde.String())
	split := top.AddProcessor("split", processor.Func(func(ctx processor.Context[string, string], rec processor.Record[string, string]) error {
		for _, w := range strings.Fields(rec.Value) {
			if err := ctx.Forward(processor.Record[string, string]{Key: w, Value: w, Timestamp: rec.Timestamp}); err != nil {
				return err
			}
		}
		return nil
	}), lines)
	byWord := top.AddRepartition("by-word", serde.String(), serde.String(), split)
	record := top.AddProcessor("record", processor.Func(func(ctx processor.Context[string, string], rec processor.Record[string, string]) error {
		mu.Lock()
		if taskOf[rec.Key] == nil {
			taskOf[rec.Key] = map[string]bool{}
		}
		taskOf[rec.Key][ctx.TaskID()] = true
		seen++
		mu.Unlock()
		return ctx.Forward(rec)
	}), byWord)
	top.AddSink("out", out, serde.String(), serde.String(), record)

	cfg := baseConfig(c, app, t)
	cfg.Threads = 2
	cfg.Topics.PurgeInterval = 100 * time.Millisecond
	a := start(t, top, cfg)

	kafka.Eventually(t, 60*time.Second, 50*time.Millisecond, func() (bool, string) {
		mu.Lock()
		defer mu.Unlock()
		return seen == 400, fmt.Sprintf("%d of 400 words processed", seen)
	})
	mu.Lock()
	for w, tasks := range taskOf {
		if len(tasks) != 1 {
			t.Errorf("word %q processed by tasks %v, want one", w, tasks)
		}
		for id := range tasks {
			if !strings.HasPrefix(id, "1_") {
				t.Errorf("word %q processed by task %s, want sub-topology 1", w, id)
			}
		}
	}
	mu.Unlock()

	repart := app + "-by-word-repartition"
	client, err := sarama.NewClient(c.Brokers, c.SaramaConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	parts, err := client.Partitions(repart)
	if err != nil || len(parts) != 4 {
		t.Fatalf("repartition topic %s has partitions %v (%v), want 4", repart, parts, err)
	}
	kafka.Eventually(t, 30*time.Second, 100*time.Millisecond, func() (bool, string) {
		purged := int64(0)
		for _, p := range parts {
			oldest, err := client.GetOffset(repart, p, sarama.OffsetOldest)
			if err != nil {
				return false, err.Error()
			}
			purged += oldest
		}
		return purged == 400, fmt.Sprintf("%d of 400 repartition records purged", purged)
	})
	if err := a.stop(t); err != nil {
		t.Fatal(err)
	}
}
