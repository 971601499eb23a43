// Package kafkaio is what the examples need of a Kafka client besides
// weir: create their topics, produce sample input and read their output
// back. It uses sarama with murmur2 partitioning, as weir and Java
// producers partition keyed records.
package kafkaio

import (
	"errors"
	"fmt"
	"time"

	"github.com/IBM/sarama"
)

// DefaultPartitions is the partition count of an input topic created
// because it was missing.
const DefaultPartitions = 4

func config(clientID string) *sarama.Config {
	c := sarama.NewConfig()
	c.Version = sarama.V4_0_0_0
	c.ClientID = clientID
	c.Producer.Return.Successes = true
	c.Producer.RequiredAcks = sarama.WaitForAll
	c.Producer.Partitioner = sarama.NewMurmur2Partitioner
	c.Consumer.IsolationLevel = sarama.ReadCommitted
	return c
}

// EnsureTopics creates input, when it is missing, with DefaultPartitions
// partitions, then output, when it is missing, with as many partitions as
// input has; both with the broker's default replication. weir requires
// its sink topics to exist at start and does not create them. A topic
// that another client creates meanwhile is not an error. It returns the
// topics it created, each with its partition count: "name (n partitions)".
func EnsureTopics(clientID string, brokers []string, input, output string) (created []string, err error) {
	admin, err := sarama.NewClusterAdmin(brokers, config(clientID))
	if err != nil {
		return nil, fmt.Errorf("connecting to %v: %w", brokers, err)
	}
	defer admin.Close()
	partitions := int32(DefaultPartitions)
	for _, topic := range []string{input, output} {
		md, err := admin.DescribeTopics([]string{topic})
		if err != nil {
			return created, fmt.Errorf("describing topic %s: %w", topic, err)
		}
		if len(md) == 1 && md[0].Err == sarama.ErrNoError {
			if topic == input {
				partitions = int32(len(md[0].Partitions))
			}
			continue
		}
		err = admin.CreateTopic(topic, &sarama.TopicDetail{NumPartitions: partitions, ReplicationFactor: -1}, false)
		if err != nil && !errors.Is(err, sarama.ErrTopicAlreadyExists) {
			return created, fmt.Errorf("creating topic %s: %w", topic, err)
		}
		if err == nil {
			created = append(created, fmt.Sprintf("%s (%d partitions)", topic, partitions))
		}
	}
	return created, nil
}

// Record is a record to produce. A nil Key is a null key.
type Record struct {
	Key, Value []byte
	Timestamp  time.Time
}

// Produce writes records to topic in order, partitioned by murmur2 of
// the key, and waits until the broker has them all.
func Produce(clientID string, brokers []string, topic string, records []Record) error {
	p, err := sarama.NewSyncProducer(brokers, config(clientID))
	if err != nil {
		return fmt.Errorf("producer: %w", err)
	}
	defer p.Close()
	msgs := make([]*sarama.ProducerMessage, len(records))
	for i, r := range records {
		msgs[i] = &sarama.ProducerMessage{Topic: topic, Value: sarama.ByteEncoder(r.Value), Timestamp: r.Timestamp}
		if r.Key != nil {
			msgs[i].Key = sarama.ByteEncoder(r.Key)
		}
	}
	if err := p.SendMessages(msgs); err != nil {
		return fmt.Errorf("producing to %s: %w", topic, err)
	}
	return nil
}

// ReadCommitted reads topic from the start (read_committed) until it has
// seen n records, and returns them in the order read: each partition's in
// offset order, partitions interleaved. It reads by count rather than up
// to the end offsets: under exactly once a log ends with a transaction
// marker that no consumer ever delivers. It fails after timeout.
func ReadCommitted(clientID string, brokers []string, topic string, n int, timeout time.Duration) ([]Record, error) {
	client, err := sarama.NewClient(brokers, config(clientID))
	if err != nil {
		return nil, err
	}
	defer client.Close()
	consumer, err := sarama.NewConsumerFromClient(client)
	if err != nil {
		return nil, err
	}
	defer consumer.Close()
	parts, err := client.Partitions(topic)
	if err != nil {
		return nil, err
	}
	msgs := make(chan *sarama.ConsumerMessage)
	done := make(chan struct{})
	defer close(done)
	for _, p := range parts {
		pc, err := consumer.ConsumePartition(topic, p, sarama.OffsetOldest)
		if err != nil {
			return nil, err
		}
		defer pc.Close()
		go func() {
			for m := range pc.Messages() {
				select {
				case msgs <- m:
				case <-done:
					return
				}
			}
		}()
	}
	out := make([]Record, 0, n)
	deadline := time.After(timeout)
	for len(out) < n {
		select {
		case m := <-msgs:
			out = append(out, Record{Key: m.Key, Value: m.Value, Timestamp: m.Timestamp})
		case <-deadline:
			return nil, fmt.Errorf("read %d of %d records of %s in %v", len(out), n, topic, timeout)
		}
	}
	return out, nil
}
