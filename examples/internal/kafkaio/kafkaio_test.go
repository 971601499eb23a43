package kafkaio

import (
	"slices"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/weirstream/weir/weirtest/kafka"
)

// partitions returns the partition count of every topic on brokers.
func partitions(t *testing.T, brokers []string) map[string]int {
	t.Helper()
	admin, err := sarama.NewClusterAdmin(brokers, config("test"))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	topics, err := admin.ListTopics()
	if err != nil {
		t.Fatal(err)
	}
	n := map[string]int{}
	for name, d := range topics {
		n[name] = int(d.NumPartitions)
	}
	return n
}

// cleanupPolicy returns the cleanup.policy of topic on brokers.
func cleanupPolicy(t *testing.T, brokers []string, topic string) string {
	t.Helper()
	admin, err := sarama.NewClusterAdmin(brokers, config("test"))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	entries, err := admin.DescribeConfig(sarama.ConfigResource{Type: sarama.TopicResource, Name: topic, ConfigNames: []string{"cleanup.policy"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name == "cleanup.policy" {
			return e.Value
		}
	}
	return ""
}

func TestEnsureTopics(t *testing.T) {
	cluster, err := kafka.StartEmbedded(6, "existing")
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	brokers := cluster.Brokers()

	// A missing input gets DefaultPartitions, whatever the output has.
	created, err := EnsureTopics("test", brokers, "in", "existing")
	if err != nil || !slices.Equal(created, []string{"in (4 partitions)"}) {
		t.Errorf("EnsureTopics(in, existing) = %q, %v", created, err)
	}
	// A missing output gets the input's count.
	created, err = EnsureTopics("test", brokers, "existing", "out")
	if err != nil || !slices.Equal(created, []string{"out (6 partitions)"}) {
		t.Errorf("EnsureTopics(existing, out) = %q, %v", created, err)
	}
	created, err = EnsureTopics("test", brokers, "in", "out")
	if err != nil || len(created) != 0 {
		t.Errorf("EnsureTopics of existing topics = %q, %v", created, err)
	}

	// Missing topics get the count of the first topic that exists.
	created, err = EnsureCopartitioned("test", brokers, Topic{Name: "orders"}, Topic{Name: "existing"}, Topic{Name: "table", Compact: true})
	if err != nil || !slices.Equal(created, []string{"orders (6 partitions)", "table (6 partitions)"}) {
		t.Errorf("EnsureCopartitioned(orders, existing, table) = %q, %v", created, err)
	}
	created, err = EnsureCopartitioned("test", brokers, Topic{Name: "global", Compact: true})
	if err != nil || !slices.Equal(created, []string{"global (4 partitions)"}) {
		t.Errorf("EnsureCopartitioned(global) = %q, %v", created, err)
	}
	for topic, policy := range map[string]string{"table": "compact", "global": "compact", "orders": "delete"} {
		if got := cleanupPolicy(t, brokers, topic); got != policy {
			t.Errorf("topic %s: cleanup.policy %q, want %q", topic, got, policy)
		}
	}
	want := map[string]int{"existing": 6, "in": 4, "out": 6, "orders": 6, "table": 6, "global": 4}
	got := partitions(t, brokers)
	for topic, n := range want {
		if got[topic] != n {
			t.Errorf("topic %s has %d partitions, want %d", topic, got[topic], n)
		}
	}
}

func TestProduceTombstone(t *testing.T) {
	cluster, err := kafka.StartEmbedded(1, "t")
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	recs := []Record{
		{Key: []byte("k"), Value: []byte("v"), Timestamp: time.UnixMilli(1)},
		{Key: []byte("k"), Timestamp: time.UnixMilli(2)},
	}
	if err := Produce("test", cluster.Brokers(), "t", recs); err != nil {
		t.Fatal(err)
	}
	got, err := ReadCommitted("test", cluster.Brokers(), "t", 2, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if string(got[0].Value) != "v" || got[1].Value != nil {
		t.Errorf("read values %q and %q, want v and null", got[0].Value, got[1].Value)
	}
}
