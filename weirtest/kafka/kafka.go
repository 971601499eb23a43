package kafka

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
)

const (
	// maxNameLen bounds names from Name. Kafka allows 249 characters for a
	// topic; weir derives longer names from an application id (for example
	// "<app id>-<store>-changelog"), so ids leave room for that.
	maxNameLen = 200
	// topicReadyTimeout bounds CreateTopic's wait for partition leaders.
	topicReadyTimeout = 30 * time.Second
	// pollInterval is the kit's own polling interval.
	pollInterval = 50 * time.Millisecond
)

// Name returns a name for a topic, consumer group, application id,
// transactional id or registry subject that no other test and no other run
// uses: prefix, then t.Name(), then a random suffix, joined by '-'. Every
// character outside [A-Za-z0-9-] becomes '-' (Kafka would accept '.' and
// '_', but warns when two topic names differ only in them), runs of '-' are
// collapsed, and the result is at most 200 characters (the test name is
// shortened, never the suffix). Each call returns a new name.
func (c *Env) Name(t testing.TB, prefix string) string {
	t.Helper()
	suffix := fmt.Sprintf("%010x", rand.Uint64()&(1<<40-1))
	base := sanitize(prefix + "-" + t.Name())
	if maxBase := maxNameLen - 1 - len(suffix); len(base) > maxBase {
		base = strings.TrimRight(base[:maxBase], "-")
	}
	if base == "" {
		return suffix
	}
	return base + "-" + suffix
}

// sanitize maps s onto [A-Za-z0-9-] with no leading, trailing or repeated
// '-'.
func sanitize(s string) string {
	var b strings.Builder
	dash := true // no leading '-'
	for _, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
			b.WriteRune(r)
			dash = false
		case !dash:
			b.WriteByte('-')
			dash = true
		}
	}
	return strings.TrimRight(b.String(), "-")
}

// SaramaConfig returns a new sarama configuration for this cluster; callers
// may change it freely. It sets:
//
//   - Version V4_0_0_0 (Kafka 4 dropped the old protocol versions, and
//     below 2.5 sarama commits transactional offsets without the group
//     generation, so KIP-447 fencing would silently not happen). sarama
//     still negotiates each request down to what the broker advertises.
//   - ClientID "weir-it".
//   - Consumer.MaxWaitTime 50 ms, so fetches and rebalances do not idle for
//     sarama's default 500 ms.
//   - Producer.Partitioner sarama.NewMurmur2Partitioner: Kafka's Java
//     default partitioner, the one weir uses. (NewReferenceHashPartitioner
//     is FNV-1a, not murmur2, despite its name.)
//   - Producer.Return.Successes true, which sarama's SyncProducer requires.
//   - Metadata.AllowAutoTopicCreation false: tests create their topics with
//     [Env.CreateTopic].
func (c *Env) SaramaConfig() *sarama.Config {
	cfg := sarama.NewConfig()
	cfg.Version = sarama.V4_0_0_0
	cfg.ClientID = "weir-it"
	cfg.Consumer.MaxWaitTime = 50 * time.Millisecond
	cfg.Producer.Partitioner = sarama.NewMurmur2Partitioner
	cfg.Producer.Return.Successes = true
	cfg.Metadata.AllowAutoTopicCreation = false
	return cfg
}

// Admin returns a cluster admin client on [Env.SaramaConfig], closed
// when the test and its subtests end. Failing to connect fails the test.
func (c *Env) Admin(t testing.TB) sarama.ClusterAdmin {
	t.Helper()
	admin, err := sarama.NewClusterAdmin(c.Brokers, c.SaramaConfig())
	if err != nil {
		t.Fatalf("weirtest/kafka: admin client for %v: %v", c.Brokers, err)
		return nil
	}
	t.Cleanup(func() { _ = admin.Close() })
	return admin
}

// CreateTopic creates topic name with the given number of partitions, the
// broker's default replication factor (default.replication.factor: 1 on
// the single broker of `make kafka-up`, 3 on its replicated cluster) and
// the given topic configs (nil for the broker's defaults), then waits, for
// at most 30 s, until the metadata shows every partition with a leader and
// that leader answers a request for the partition's end offset. (A broker
// publishes a new topic in its metadata a moment before it acts as the
// partitions' leader; a client that reads or writes in that moment gets
// NOT_LEADER_OR_FOLLOWER.) When the test ends the topic is deleted, after
// the clients the test opened later have been closed (cleanups run last in,
// first out); errors on delete are ignored. A test that failed keeps its
// topics, and logs their names, so that what they hold can be inspected.
// Any failure fails the test.
func (c *Env) CreateTopic(t testing.TB, name string, partitions int32, configs map[string]string) {
	t.Helper()
	admin := c.Admin(t)
	entries := make(map[string]*string, len(configs))
	for k, v := range configs {
		entries[k] = &v
	}
	detail := &sarama.TopicDetail{NumPartitions: partitions, ReplicationFactor: -1, ConfigEntries: entries}
	if err := admin.CreateTopic(name, detail, false); err != nil {
		t.Fatalf("weirtest/kafka: create topic %q (%d partitions, configs %v): %v", name, partitions, configs, err)
		return
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("weirtest/kafka: the test failed: topic %q is kept for inspection", name)
			return
		}
		_ = admin.DeleteTopic(name)
	})
	Eventually(t, topicReadyTimeout, pollInterval, func() (bool, string) {
		md, err := admin.DescribeTopics([]string{name})
		if err != nil {
			return false, fmt.Sprintf("describe topic %q: %v", name, err)
		}
		if len(md) != 1 || md[0].Err != sarama.ErrNoError {
			return false, fmt.Sprintf("topic %q not in metadata yet: %+v", name, md)
		}
		if got := len(md[0].Partitions); got != int(partitions) {
			return false, fmt.Sprintf("topic %q: metadata shows %d of %d partitions", name, got, partitions)
		}
		for _, p := range md[0].Partitions {
			if p.Err != sarama.ErrNoError || p.Leader < 0 {
				return false, fmt.Sprintf("topic %q partition %d: leader %d, error %v", name, p.ID, p.Leader, p.Err)
			}
		}
		return leadersServe(c, name, partitions)
	})
}

// leadersServe reports whether the leader of every partition of topic
// answers a ListOffsets request, and if not, why.
func leadersServe(c *Env, topic string, partitions int32) (bool, string) {
	client, err := sarama.NewClient(c.Brokers, c.SaramaConfig())
	if err != nil {
		return false, fmt.Sprintf("client for %v: %v", c.Brokers, err)
	}
	defer func() { _ = client.Close() }()
	for p := range partitions {
		if _, err := client.GetOffset(topic, p, sarama.OffsetNewest); err != nil {
			return false, fmt.Sprintf("topic %q partition %d: the leader does not serve its end offset yet: %v", topic, p, err)
		}
	}
	return true, ""
}

// Produce writes msgs with a non-transactional, idempotent sync producer on
// [Env.SaramaConfig] (acks from all in-sync replicas) and returns once
// every record is acknowledged; a message's Topic must be set. The producer
// is closed before Produce returns. Any failure fails the test.
func Produce(t testing.TB, c *Env, msgs ...*sarama.ProducerMessage) {
	t.Helper()
	cfg := c.SaramaConfig()
	cfg.Producer.Idempotent = true
	cfg.Producer.RequiredAcks = sarama.WaitForAll
	cfg.Net.MaxOpenRequests = 1
	p, err := sarama.NewSyncProducer(c.Brokers, cfg)
	if err != nil {
		t.Fatalf("weirtest/kafka: producer for %v: %v", c.Brokers, err)
		return
	}
	defer func() { _ = p.Close() }()
	if err := p.SendMessages(msgs); err != nil {
		t.Fatalf("weirtest/kafka: produce %d records: %v", len(msgs), err)
	}
}

// EndOffsets returns the high watermark (the offset the next record will
// get) of every partition of topic. It counts transaction markers and
// aborted records: it is where a read_uncommitted reader ends. Any failure
// fails the test.
func EndOffsets(t testing.TB, c *Env, topic string) map[int32]int64 {
	t.Helper()
	client, err := sarama.NewClient(c.Brokers, c.SaramaConfig())
	if err != nil {
		t.Fatalf("weirtest/kafka: client for %v: %v", c.Brokers, err)
		return nil
	}
	defer func() { _ = client.Close() }()
	parts, err := client.Partitions(topic)
	if err != nil {
		t.Fatalf("weirtest/kafka: partitions of %q: %v", topic, err)
		return nil
	}
	ends := make(map[int32]int64, len(parts))
	for _, p := range parts {
		off, err := client.GetOffset(topic, p, sarama.OffsetNewest)
		if err != nil {
			t.Fatalf("weirtest/kafka: end offset of %s/%d: %v", topic, p, err)
			return nil
		}
		ends[p] = off
	}
	return ends
}
