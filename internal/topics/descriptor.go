package topics

import (
	"bytes"
	"errors"
	"fmt"
	"time"

	"github.com/IBM/sarama"
)

// DescriptorTopic returns the compacted topic that holds an application's
// topology descriptor: "<application id>-topology".
func DescriptorTopic(app string) string { return app + "-topology" }

// descriptorKey is the key of the descriptor record in the topology topic.
var descriptorKey = []byte("descriptor")

// descriptorReadTimeout bounds the read of a topology topic to its end.
const descriptorReadTimeout = 30 * time.Second

// ReadDescriptor returns the last descriptor record written to app's
// topology topic (DescriptorTopic), nil when the topic does not exist or
// holds none. weir.ParseDescriptor reads the bytes; weir's start and the
// weir command read it this way.
//
// Whether the topic exists is asked once, through admin: the client's
// metadata refresh of a missing topic retries (Metadata.Retry.Max times,
// Metadata.Retry.Backoff apart: 750 ms with sarama's defaults), which
// every first start of an application would wait for.
func ReadDescriptor(client sarama.Client, admin sarama.ClusterAdmin, app string) ([]byte, error) {
	topic := DescriptorTopic(app)
	md, err := admin.DescribeTopics([]string{topic})
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", topic, err)
	}
	if len(md) == 0 || errors.Is(md[0].Err, sarama.ErrUnknownTopicOrPartition) {
		return nil, nil
	}
	if err := client.RefreshMetadata(topic); errors.Is(err, sarama.ErrUnknownTopicOrPartition) {
		return nil, nil
	}
	ps, err := client.Partitions(topic)
	if errors.Is(err, sarama.ErrUnknownTopicOrPartition) || err == nil && len(ps) == 0 {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", topic, err)
	}
	end, err := client.GetOffset(topic, 0, sarama.OffsetNewest)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", topic, err)
	}
	start, err := client.GetOffset(topic, 0, sarama.OffsetOldest)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", topic, err)
	}
	if end <= start {
		return nil, nil
	}
	consumer, err := sarama.NewConsumerFromClient(client)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", topic, err)
	}
	defer consumer.Close()
	pc, err := consumer.ConsumePartition(topic, 0, start)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", topic, err)
	}
	defer pc.Close()
	var last []byte
	timeout := time.NewTimer(descriptorReadTimeout)
	defer timeout.Stop()
	for {
		select {
		case m := <-pc.Messages():
			if bytes.Equal(m.Key, descriptorKey) {
				last = m.Value
			}
			if m.Offset >= end-1 {
				return last, nil
			}
		case err := <-pc.Errors():
			return nil, fmt.Errorf("reading %s: %w", topic, err.Err)
		case <-timeout.C:
			return nil, fmt.Errorf("reading %s: not at its end (%d) within %s", topic, end, descriptorReadTimeout)
		}
	}
}

// WriteDescriptor writes a descriptor record to app's topology topic,
// creating the topic (compacted, one partition, replication factor rf; 0
// for the broker's default) when it is missing. base configures the
// producer it opens on brokers for the one record.
func WriteDescriptor(brokers []string, admin sarama.ClusterAdmin, base *sarama.Config, rf int16, app string, descriptor []byte) error {
	topic := DescriptorTopic(app)
	if rf == 0 {
		rf = -1 // the broker's default.replication.factor
	}
	compact := "compact"
	err := admin.CreateTopic(topic, &sarama.TopicDetail{NumPartitions: 1, ReplicationFactor: rf,
		ConfigEntries: map[string]*string{"cleanup.policy": &compact}}, false)
	if err != nil && !errors.Is(err, sarama.ErrTopicAlreadyExists) {
		return fmt.Errorf("creating %s: %w", topic, err)
	}
	cfg := *base
	cfg.Producer.Return.Successes = true
	cfg.Producer.RequiredAcks = sarama.WaitForAll
	cfg.Producer.Partitioner = sarama.NewManualPartitioner
	// A topic just created has no leader for a moment: ask again soon
	// and often (a first start waited 250 ms and more on sarama's
	// defaults), within about the same bound (2 s).
	cfg.Metadata.Retry.Max, cfg.Metadata.Retry.Backoff = 100, 20*time.Millisecond
	cfg.Producer.Retry.Max, cfg.Producer.Retry.Backoff = 100, 20*time.Millisecond
	p, err := sarama.NewSyncProducer(brokers, &cfg)
	if err != nil {
		return fmt.Errorf("writing %s: %w", topic, err)
	}
	defer p.Close()
	if _, _, err := p.SendMessage(&sarama.ProducerMessage{Topic: topic, Partition: 0, Key: sarama.ByteEncoder(descriptorKey), Value: sarama.ByteEncoder(descriptor)}); err != nil {
		return fmt.Errorf("writing %s: %w", topic, err)
	}
	return nil
}
