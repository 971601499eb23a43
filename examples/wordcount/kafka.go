package main

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/IBM/sarama"

	"github.com/weirstream/weir/examples/internal/embedded"
)

func saramaConfig() *sarama.Config {
	c := sarama.NewConfig()
	c.Version = sarama.V4_0_0_0
	c.ClientID = "wordcount"
	c.Producer.Return.Successes = true
	c.Producer.RequiredAcks = sarama.WaitForAll
	c.Producer.Partitioner = sarama.NewMurmur2Partitioner
	c.Consumer.IsolationLevel = sarama.ReadCommitted
	return c
}

// startEmbedded starts a broker with the example's topics.
func startEmbedded(input, output string) (*embedded.Cluster, error) {
	return embedded.Start(4, input, output)
}

// ensureTopics creates the input and output topics when they are missing,
// with 4 partitions and the broker's default replication.
func ensureTopics(brokers []string, topics ...string) error {
	admin, err := sarama.NewClusterAdmin(brokers, saramaConfig())
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

// produceLines writes each line as a record with no key.
func produceLines(brokers []string, topic string, lines []string) error {
	p, err := sarama.NewSyncProducer(brokers, saramaConfig())
	if err != nil {
		return fmt.Errorf("producer: %w", err)
	}
	defer p.Close()
	msgs := make([]*sarama.ProducerMessage, len(lines))
	for i, l := range lines {
		msgs[i] = &sarama.ProducerMessage{Topic: topic, Value: sarama.StringEncoder(l)}
	}
	if err := p.SendMessages(msgs); err != nil {
		return fmt.Errorf("producing sample text: %w", err)
	}
	return nil
}

// readCounts reads the output topic to its end and returns the last count
// of each word.
func readCounts(brokers []string, topic string) (map[string]int64, error) {
	client, err := sarama.NewClient(brokers, saramaConfig())
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
	counts := map[string]int64{}
	for _, p := range parts {
		end, err := client.GetOffset(topic, p, sarama.OffsetNewest)
		if err != nil {
			return nil, err
		}
		if end == 0 {
			continue
		}
		pc, err := consumer.ConsumePartition(topic, p, sarama.OffsetOldest)
		if err != nil {
			return nil, err
		}
		timeout := time.After(30 * time.Second)
	read:
		for {
			select {
			case m := <-pc.Messages():
				if len(m.Value) == 8 {
					counts[string(m.Key)] = int64(binary.BigEndian.Uint64(m.Value))
				}
				if m.Offset >= end-1 {
					break read
				}
			case <-timeout:
				pc.Close()
				return nil, fmt.Errorf("reading %s/%d timed out", topic, p)
			}
		}
		pc.Close()
	}
	return counts, nil
}

// printTop prints the n most frequent words, ties in alphabetical order.
func printTop(w io.Writer, counts map[string]int64, n int) {
	words := make([]string, 0, len(counts))
	for word := range counts {
		words = append(words, word)
	}
	slices.SortFunc(words, func(a, b string) int {
		if counts[a] != counts[b] {
			return int(counts[b] - counts[a])
		}
		return strings.Compare(a, b)
	})
	fmt.Fprintf(w, "%d distinct words; the %d most frequent:\n", len(words), min(n, len(words)))
	for _, word := range words[:min(n, len(words))] {
		fmt.Fprintf(w, "%8d  %s\n", counts[word], word)
	}
}
