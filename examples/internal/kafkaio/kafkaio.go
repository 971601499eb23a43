// Package kafkaio is what the examples need of a Kafka client besides
// weir: create their topics, produce sample input and read their output
// back. It uses sarama with murmur2 partitioning, as weir and Java
// producers partition keyed records.
package kafkaio

import (
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/IBM/sarama"

	"github.com/weirstream/weir"
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
	return ensure(clientID, brokers, []Topic{{Name: input}, {Name: output}}, 1)
}

// Topic is a topic for [EnsureCopartitioned] to create when it is
// missing.
type Topic struct {
	Name string
	// Compact creates the topic with cleanup.policy=compact, for a topic
	// read as a table: compaction keeps the latest record of every key.
	// A topic that exists is left as it is.
	Compact bool
}

// EnsureCopartitioned creates those of topics that are missing, each with
// as many partitions as the first of topics that exists has, or
// DefaultPartitions when none exists, and the broker's default
// replication; so topics that a join reads side by side get the same
// partition count, which weir checks at start. Topics that exist are not
// changed, nor their partition counts compared. A topic that another
// client creates meanwhile is not an error. It returns the topics it
// created, as [EnsureTopics] does.
func EnsureCopartitioned(clientID string, brokers []string, topics ...Topic) (created []string, err error) {
	return ensure(clientID, brokers, topics, len(topics))
}

// ensure creates the missing topics among topics, each with as many
// partitions as the first of topics[:from] that exists has, or
// DefaultPartitions when none of them exists.
func ensure(clientID string, brokers []string, topics []Topic, from int) (created []string, err error) {
	admin, err := sarama.NewClusterAdmin(brokers, config(clientID))
	if err != nil {
		return nil, fmt.Errorf("connecting to %v: %w", brokers, err)
	}
	defer admin.Close()
	partitions := int32(0)
	exists := make([]bool, len(topics))
	for i, t := range topics {
		md, err := admin.DescribeTopics([]string{t.Name})
		if err != nil {
			return nil, fmt.Errorf("describing topic %s: %w", t.Name, err)
		}
		exists[i] = len(md) == 1 && md[0].Err == sarama.ErrNoError
		if exists[i] && i < from && partitions == 0 {
			partitions = int32(len(md[0].Partitions))
		}
	}
	if partitions == 0 {
		partitions = DefaultPartitions
	}
	for i, t := range topics {
		if exists[i] {
			continue
		}
		detail := &sarama.TopicDetail{NumPartitions: partitions, ReplicationFactor: -1}
		if t.Compact {
			compact := "compact"
			detail.ConfigEntries = map[string]*string{"cleanup.policy": &compact}
		}
		err = admin.CreateTopic(t.Name, detail, false)
		if err != nil && !errors.Is(err, sarama.ErrTopicAlreadyExists) {
			return created, fmt.Errorf("creating topic %s: %w", t.Name, err)
		}
		if err == nil {
			created = append(created, fmt.Sprintf("%s (%d partitions)", t.Name, partitions))
		}
	}
	return created, nil
}

// Record is a record to produce. A nil Key is a null key, a nil Value a
// null value (a tombstone).
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
		msgs[i] = &sarama.ProducerMessage{Topic: topic, Timestamp: r.Timestamp}
		if r.Value != nil {
			msgs[i].Value = sarama.ByteEncoder(r.Value)
		}
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

// DescribeFlag is the usage of the examples' -describe flag.
const DescribeFlag = "print the topology descriptor as JSON (what weir writes to <app-id>-topology and `weir check-upgrade` compares) and exit; nothing is contacted"

// Describe writes the topology descriptor of top under cfg to w, as the
// -describe flag of every example does. No broker is contacted.
func Describe(w io.Writer, top weir.Topology, cfg weir.Config) error {
	if len(cfg.Brokers) == 0 {
		cfg.Brokers = []string{"localhost:9092"} // required by New, never dialled
	}
	app, err := weir.New(top, cfg)
	if err != nil {
		return err
	}
	defer app.Close()
	_, err = fmt.Fprintln(w, app.Describe())
	return err
}
