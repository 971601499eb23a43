package main

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/IBM/sarama"

	"github.com/weirstream/weir/weirtest/kafka"
)

// saramaConfig is the base of every client the example makes; txn's
// Configure functions add what the producer and the consumer group need.
func saramaConfig(clientID string) *sarama.Config {
	c := sarama.NewConfig()
	c.Version = sarama.V4_0_0_0
	c.ClientID = clientID
	c.Consumer.MaxWaitTime = 50 * time.Millisecond
	c.Producer.Partitioner = sarama.NewMurmur2Partitioner
	c.Metadata.AllowAutoTopicCreation = false
	return c
}

// startEmbedded starts a broker with the example's topics.
func startEmbedded(input, output string) (*kafka.EmbeddedBroker, error) {
	return kafka.StartEmbedded(4, input, output)
}

// ensureTopics creates the topics when they are missing, with 4 partitions
// and the broker's default replication.
func ensureTopics(brokers []string, topics ...string) error {
	admin, err := sarama.NewClusterAdmin(brokers, saramaConfig("relay-admin"))
	if err != nil {
		return fmt.Errorf("connecting to %v: %w", brokers, err)
	}
	defer admin.Close()
	for _, t := range topics {
		err := admin.CreateTopic(t, &sarama.TopicDetail{NumPartitions: 4, ReplicationFactor: -1}, false)
		if err != nil && !errors.Is(err, sarama.ErrTopicAlreadyExists) {
			return fmt.Errorf("creating topic %s: %w", t, err)
		}
	}
	return nil
}

// inputKey and inputValue are the i-th input record's.
func inputKey(i int) string   { return fmt.Sprintf("key-%06d", i) }
func inputValue(i int) string { return fmt.Sprintf("record %d of the relay example", i) }

// produceRecords writes input records from to to-1 to topic with an
// idempotent producer.
func produceRecords(brokers []string, topic string, from, to int) error {
	cfg := saramaConfig("relay-input")
	cfg.Producer.Return.Successes = true
	cfg.Producer.RequiredAcks = sarama.WaitForAll
	cfg.Producer.Idempotent = true
	cfg.Net.MaxOpenRequests = 1
	p, err := sarama.NewSyncProducer(brokers, cfg)
	if err != nil {
		return fmt.Errorf("producer: %w", err)
	}
	defer p.Close()
	msgs := make([]*sarama.ProducerMessage, 0, to-from)
	for i := from; i < to; i++ {
		msgs = append(msgs, &sarama.ProducerMessage{Topic: topic, Key: sarama.StringEncoder(inputKey(i)), Value: sarama.StringEncoder(inputValue(i))})
	}
	if err := p.SendMessages(msgs); err != nil {
		return fmt.Errorf("producing %d records to %s: %w", len(msgs), topic, err)
	}
	return nil
}

// readOutput reads topic (read_committed) from the start until it has
// seen n records, for at most 30 s. Reading by count, not up to the end
// offsets: a transactional log ends with a commit marker that no consumer
// ever delivers.
func readOutput(brokers []string, topic string, n int) ([]*sarama.ConsumerMessage, error) {
	cfg := saramaConfig("relay-check")
	cfg.Consumer.IsolationLevel = sarama.ReadCommitted
	consumer, err := sarama.NewConsumer(brokers, cfg)
	if err != nil {
		return nil, err
	}
	defer consumer.Close()
	parts, err := consumer.Partitions(topic)
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
	var got []*sarama.ConsumerMessage
	timeout := time.After(30 * time.Second)
	for len(got) < n {
		select {
		case m := <-msgs:
			got = append(got, m)
		case <-timeout:
			return got, fmt.Errorf("read %d of %d records of %s in 30 s", len(got), n, topic)
		}
	}
	return got, nil
}

// checkOutput checks that got holds each of the n input records once,
// transformed.
func checkOutput(got []*sarama.ConsumerMessage, n int) error {
	seen := make(map[int]bool, n)
	for _, m := range got {
		i, err := strconv.Atoi(strings.TrimPrefix(string(m.Key), "key-"))
		if err != nil || i < 0 || i >= n || string(m.Key) != inputKey(i) {
			return fmt.Errorf("output record with key %q at %s/%d@%d is not from the input", m.Key, m.Topic, m.Partition, m.Offset)
		}
		if seen[i] {
			return fmt.Errorf("input record %s relayed twice (again at %s/%d@%d)", m.Key, m.Topic, m.Partition, m.Offset)
		}
		seen[i] = true
		if want := strings.ToUpper(inputValue(i)); string(m.Value) != want {
			return fmt.Errorf("record %s has value %q, want %q", m.Key, m.Value, want)
		}
	}
	if len(seen) != n {
		return fmt.Errorf("%d of %d input records relayed", len(seen), n)
	}
	return nil
}
