package kafka

import (
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
)

// EmbeddedBroker is a running in-process fake broker (franz-go's kfake);
// see the package documentation for what it is not.
type EmbeddedBroker struct {
	c *kfake.Cluster
}

// StartEmbedded starts a one-broker fake cluster on a free loopback port
// with the given topics created, each with partitions partitions, for
// programs (such as weir's examples) that run without a test. Close stops
// it.
func StartEmbedded(partitions int32, topics ...string) (*EmbeddedBroker, error) {
	c, err := kfake.NewCluster(
		kfake.NumBrokers(1),
		kfake.SeedTopics(partitions, topics...),
		kfake.GroupMinSessionTimeout(time.Second),
		// Compact changelog topics now and then, as a real broker does.
		kfake.BrokerConfigs(map[string]string{"log.cleaner.backoff.ms": "1000"}),
	)
	if err != nil {
		return nil, fmt.Errorf("embedded broker: %w", err)
	}
	return &EmbeddedBroker{c: c}, nil
}

// Brokers returns the bootstrap addresses.
func (b *EmbeddedBroker) Brokers() []string { return b.c.ListenAddrs() }

// Close stops the broker.
func (b *EmbeddedBroker) Close() { b.c.Close() }

// Embedded starts a fake broker for t with the given topics (each with
// partitions partitions; more can be made with [Env.CreateTopic]) and
// returns it as an Env with no registry (RegistryURL empty). It stops when
// the test ends. Nothing about Kafka's behaviour may be concluded from a
// test on it; see the package documentation.
func Embedded(t testing.TB, partitions int32, topics ...string) *Env {
	t.Helper()
	b, err := StartEmbedded(partitions, topics...)
	if err != nil {
		t.Fatalf("weirtest/kafka: %v", err)
	}
	t.Cleanup(b.Close)
	return &Env{Brokers: b.Brokers(), KafkaVersion: "kfake (a fake)", Source: SourceEmbedded}
}
