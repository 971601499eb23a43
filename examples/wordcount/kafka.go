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

	"github.com/weirstream/weir/examples/internal/kafkaio"
	"github.com/weirstream/weir/weirtest/kafka"
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
func startEmbedded(input, output string) (*kafka.EmbeddedBroker, error) {
	return kafka.StartEmbedded(4, input, output)
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

// readCounts reads the output topic (read_committed) until it has seen
// records records, and returns the last count of each word. Reading by
// count rather than up to the end offsets: under exactly once the log ends
// with a transaction marker that no consumer ever delivers.
func readCounts(brokers []string, topic string, records int) (map[string]int64, error) {
	recs, err := kafkaio.ReadCommitted("wordcount", brokers, topic, records, 30*time.Second)
	if err != nil {
		return nil, err
	}
	counts := map[string]int64{}
	for _, r := range recs {
		if len(r.Value) == 8 {
			// Partitions interleave, but one word's counts are in one
			// partition, in order: the last one read is the highest.
			counts[string(r.Key)] = int64(binary.BigEndian.Uint64(r.Value))
		}
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
