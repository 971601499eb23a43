package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/kstream"
	"github.com/weirstream/weir/serde"
	"github.com/weirstream/weir/weirtest/kafka"
)

// TestResultTimestampsSurviveAFullRestore: the timestamps that tables and
// aggregations keep with their values (Kafka Streams' result timestamps,
// docs/semantics.md) come back from the changelog after the state
// directory is lost: a count's from its own changelog (records carrying
// the weir.time header), a table's from its compacted source topic (the
// records' own timestamps). After the restore, a late record's count and
// a table join's result still carry the later, restored timestamps.
func TestResultTimestampsSurviveAFullRestore(t *testing.T) {
	t.Parallel()
	c := kafka.Cluster(t)
	in, left, right, counts, joined, app := c.Name(t, "in"), c.Name(t, "left"), c.Name(t, "right"), c.Name(t, "counts"), c.Name(t, "joined"), c.Name(t, "app")
	compact := map[string]string{"cleanup.policy": "compact"}
	c.CreateTopic(t, in, 1, nil)
	c.CreateTopic(t, left, 1, compact)
	c.CreateTopic(t, right, 1, compact)
	c.CreateTopic(t, counts, 1, nil)
	c.CreateTopic(t, joined, 1, nil)

	b := kstream.NewBuilder()
	b.Stream("in", in, serde.String(), serde.String()).GroupByKey().Count("counts").ToStream().To(counts, serde.String(), serde.Int64())
	l := b.Table("left", left, serde.String(), serde.String())
	r := b.Table("right", right, serde.String(), serde.String())
	l.Join(r, func(_, a, b string) string { return a + "|" + b }).ToStream().To(joined, serde.String(), serde.String())

	// Recent times: the broker deletes records older than its retention.
	base := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	late, later := base, base.Add(10*time.Minute)
	msg := func(topic, key, value string, ts time.Time) *sarama.ProducerMessage {
		return &sarama.ProducerMessage{Topic: topic, Key: sarama.StringEncoder(key), Value: sarama.StringEncoder(value), Timestamp: ts}
	}
	kafka.Produce(t, c, msg(in, "k", "1", later), msg(right, "k", "r", later))

	cfg := baseConfig(c, app, t)
	cfg.Guarantee = weir.ExactlyOnce
	first := start(t, b, cfg)
	kafka.ReadAll(t, c, counts, sarama.ReadCommitted, func(got []*sarama.ConsumerMessage) bool { return len(got) == 1 })
	waitLagZero(t, c, c.Admin(t), app, right)
	if err := first.stop(t); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(cfg.StateDir, app)); err != nil {
		t.Fatal(err)
	}

	second := start(t, b, cfg)
	defer second.stop(t)
	kafka.Produce(t, c, msg(in, "k", "2", late), msg(left, "k", "l", late))
	gotCounts := kafka.ReadAll(t, c, counts, sarama.ReadCommitted, func(got []*sarama.ConsumerMessage) bool { return len(got) == 2 })
	gotJoined := kafka.ReadAll(t, c, joined, sarama.ReadCommitted, func(got []*sarama.ConsumerMessage) bool { return len(got) == 1 })
	show := func(m *sarama.ConsumerMessage) string {
		return fmt.Sprintf("%s@%s", m.Key, m.Timestamp.Sub(base))
	}
	if m := gotCounts[1]; !m.Timestamp.Equal(later) {
		t.Errorf("after the restore, the late record's count was stamped %s; want the key's largest time, %s", show(m), later.Sub(base))
	}
	if m := gotJoined[0]; string(m.Value) != "l|r" || !m.Timestamp.Equal(later) {
		t.Errorf("after the restore, the join's result is %q stamped %s; want l|r at the right row's later time, %s", m.Value, show(m), later.Sub(base))
	}
}
