package integration

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/weirstream/weir/kstream"
	"github.com/weirstream/weir/serde"
	"github.com/weirstream/weir/weirtest/kafka"
)

// TestDynamicSink: records go to the topic chosen per record, exactly
// once; a record for a topic that does not exist makes the application
// fail within Config.MaxConsecutiveAborts, naming the topic, without
// committing past it.
func TestDynamicSink(t *testing.T) {
	t.Parallel()
	c := kafka.Cluster(t)
	in, app := c.Name(t, "in"), c.Name(t, "app")
	outA, outB, missing := c.Name(t, "out-a"), c.Name(t, "out-b"), c.Name(t, "missing")
	c.CreateTopic(t, in, 1, nil)
	c.CreateTopic(t, outA, 1, nil)
	c.CreateTopic(t, outB, 1, nil)
	route := map[string]string{"a": outA, "b": outB, "x": missing}
	b := kstream.NewBuilder()
	b.Stream("in", in, serde.String(), serde.String()).
		ToDynamic(func(k, _ string) string { return route[k] }, serde.String(), serde.String())

	var msgs []*sarama.ProducerMessage
	for i := range 20 {
		k := "a"
		if i%2 == 1 {
			k = "b"
		}
		msgs = append(msgs, &sarama.ProducerMessage{Topic: in, Key: sarama.StringEncoder(k), Value: sarama.StringEncoder(fmt.Sprint(i))})
	}
	kafka.Produce(t, c, msgs...)
	cfg := eosFailureConfig(c, app, t)
	cfg.MaxConsecutiveAborts = 3
	inst := start(t, b, cfg)
	kafka.Eventually(t, 60*time.Second, 100*time.Millisecond, func() (bool, string) {
		off := committedOffset(t, c, app, in)
		return off == 20, fmt.Sprintf("committed offset %d", off)
	})
	for topic, want := range map[string]int{outA: 10, outB: 10} {
		writeSentinels(t, c, topic, 1)
		if got := len(readToSentinels(t, c, topic, 1, sarama.ReadCommitted)); got != want {
			t.Errorf("%s holds %d records, want %d", topic, got, want)
		}
	}

	kafka.Produce(t, c, &sarama.ProducerMessage{Topic: in, Key: sarama.StringEncoder("x"), Value: sarama.StringEncoder("lost?")})
	err := waitRun(t, inst, 120*time.Second)
	if err == nil || !strings.Contains(err.Error(), "aborted in a row") || !strings.Contains(err.Error(), missing) {
		t.Fatalf("Run = %v, want the abort bound naming %s", err, missing)
	}
	if off := committedOffset(t, c, app, in); off != 20 {
		t.Errorf("committed offset %d, want 20: nothing past the record for the missing topic", off)
	}
}
