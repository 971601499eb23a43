// Package embedded starts an in-process Kafka broker (franz-go's kfake) so
// that the examples run with no setup. It is for examples and fast tests:
// kfake speaks the Kafka protocol but is not Apache Kafka.
package embedded

import (
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
)

// Cluster is a running embedded broker.
type Cluster struct {
	c *kfake.Cluster
}

// Start starts a one-broker cluster on a free loopback port with the given
// topics created, each with partitions partitions. Close stops it.
func Start(partitions int32, topics ...string) (*Cluster, error) {
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
	return &Cluster{c: c}, nil
}

// Brokers returns the bootstrap addresses.
func (c *Cluster) Brokers() []string { return c.c.ListenAddrs() }

// Close stops the broker.
func (c *Cluster) Close() { c.c.Close() }
