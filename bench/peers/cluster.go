package main

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"slices"
	"time"

	"github.com/IBM/sarama"
)

// cluster is the driver's own connection to the broker: topics, the input
// and the output readers. It deletes the topics it created when closed.
type cluster struct {
	brokers []string
	admin   sarama.ClusterAdmin
	topics  []string
}

func saramaConfig() *sarama.Config {
	cfg := sarama.NewConfig()
	cfg.Version = sarama.V3_6_0_0
	cfg.ClientID = "weir-peers"
	return cfg
}

func newCluster(brokers []string) (*cluster, error) {
	admin, err := sarama.NewClusterAdmin(brokers, saramaConfig())
	if err != nil {
		return nil, fmt.Errorf("connecting to %v: %w", brokers, err)
	}
	return &cluster{brokers: brokers, admin: admin}, nil
}

func (c *cluster) createTopic(name string, partitions int32, configs ...string) error {
	entries := map[string]*string{}
	for i := 0; i+1 < len(configs); i += 2 {
		entries[configs[i]] = &configs[i+1]
	}
	err := c.admin.CreateTopic(name, &sarama.TopicDetail{NumPartitions: partitions, ReplicationFactor: -1, ConfigEntries: entries}, false)
	if err != nil && !errors.Is(err, sarama.ErrTopicAlreadyExists) {
		return fmt.Errorf("creating %s: %w", name, err)
	}
	c.topics = append(c.topics, name)
	// Wait until every partition has a leader: a reader or producer
	// started before would be told it is not the leader.
	deadline := time.Now().Add(30 * time.Second)
	for {
		md, err := c.admin.DescribeTopics([]string{name})
		if err == nil && len(md) == 1 && md[0].Err == sarama.ErrNoError && len(md[0].Partitions) == int(partitions) {
			ready := true
			for _, p := range md[0].Partitions {
				ready = ready && p.Err == sarama.ErrNoError && p.Leader >= 0
			}
			if ready {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s has no leader for every partition 30 s after its creation (%v)", name, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitStable returns when group is first Stable with members, polling; the
// zero time if ctx ends first.
func (c *cluster) waitStable(ctx context.Context, group string) time.Time {
	for ctx.Err() == nil {
		gs, err := c.admin.DescribeConsumerGroups([]string{group})
		if err == nil && len(gs) == 1 && gs[0].State == "Stable" && len(gs[0].Members) > 0 {
			return time.Now()
		}
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
	return time.Time{}
}

// waitEmpty waits until group has no members, up to timeout.
func (c *cluster) waitEmpty(ctx context.Context, group string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		gs, err := c.admin.DescribeConsumerGroups([]string{group})
		if err == nil && len(gs) == 1 && len(gs[0].Members) == 0 {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("group %s still has members %v after its instance stopped (%v)", group, timeout, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// warmTransactions commits one transaction to topic, so that the broker
// has created its transaction state before the first exactly-once peer
// runs, which would otherwise pay for it.
func (c *cluster) warmTransactions(topic string) error {
	cfg := saramaConfig()
	cfg.Producer.Idempotent = true
	cfg.Producer.RequiredAcks = sarama.WaitForAll
	cfg.Net.MaxOpenRequests = 1
	cfg.Producer.Return.Successes = true
	cfg.Producer.Transaction.ID = topic + "-warm-up"
	p, err := sarama.NewSyncProducer(c.brokers, cfg)
	if err != nil {
		return fmt.Errorf("transactional producer: %w", err)
	}
	defer p.Close()
	if err := p.BeginTxn(); err != nil {
		return err
	}
	if _, _, err := p.SendMessage(&sarama.ProducerMessage{Topic: topic, Value: sarama.StringEncoder("warm-up")}); err != nil {
		return err
	}
	return p.CommitTxn()
}

// produce writes the records msgs yields, idempotently, and waits for
// every acknowledgement.
func (c *cluster) produce(msgs iter.Seq[*sarama.ProducerMessage]) error {
	return c.produceWith(msgs, nil)
}

// produceTo is produce to the partitions msgs name.
func (c *cluster) produceTo(msgs []*sarama.ProducerMessage) error {
	return c.produceWith(slices.Values(msgs), sarama.NewManualPartitioner)
}

func (c *cluster) produceWith(msgs iter.Seq[*sarama.ProducerMessage], partitioner sarama.PartitionerConstructor) error {
	cfg := saramaConfig()
	if partitioner != nil {
		cfg.Producer.Partitioner = partitioner
	}
	cfg.Producer.Idempotent = true
	cfg.Producer.RequiredAcks = sarama.WaitForAll
	cfg.Net.MaxOpenRequests = 1
	cfg.Producer.Return.Successes = true
	cfg.Producer.Flush.Bytes = 1 << 20
	cfg.Producer.Flush.Frequency = 10 * time.Millisecond
	cfg.Producer.Compression = sarama.CompressionLZ4
	p, err := sarama.NewAsyncProducer(c.brokers, cfg)
	if err != nil {
		return err
	}
	// Read the acknowledgements as they come (the producer blocks
	// otherwise) until there is one per record sent, a count known only
	// once msgs is done; then close, with nothing left to flush or retry.
	errc, sentc := make(chan error, 1), make(chan int, 1)
	go func() {
		var first error
		acked, sent, count := 0, -1, sentc
		for sent < 0 || acked < sent {
			select {
			case <-p.Successes():
				acked++
			case err := <-p.Errors():
				acked++
				if first == nil {
					first = err
				}
			case sent = <-count:
				count = nil
			}
		}
		errc <- first
	}()
	sent := 0
	for m := range msgs {
		p.Input() <- m
		sent++
	}
	sentc <- sent
	err = <-errc
	return errors.Join(err, p.Close())
}

// reader reads a topic from its start, read_committed, every partition.
type reader struct {
	client   sarama.Client
	consumer sarama.Consumer
	parts    []sarama.PartitionConsumer
	msgs     chan *sarama.ConsumerMessage
	errs     chan error
	lastErr  error // the last error a partition consumer reported
}

func (c *cluster) newReader(topic string, partitions int32) (*reader, error) {
	cfg := saramaConfig()
	cfg.Consumer.IsolationLevel = sarama.ReadCommitted
	cfg.Consumer.Return.Errors = true
	client, err := sarama.NewClient(c.brokers, cfg)
	if err != nil {
		return nil, err
	}
	consumer, err := sarama.NewConsumerFromClient(client)
	if err != nil {
		client.Close()
		return nil, err
	}
	r := &reader{client: client, consumer: consumer, msgs: make(chan *sarama.ConsumerMessage, 4096), errs: make(chan error, 1)}
	for p := range partitions {
		// A topic just created may not be in every broker's metadata yet.
		pc, err := consumer.ConsumePartition(topic, p, sarama.OffsetOldest)
		for try := 0; err != nil && try < 50; try++ {
			time.Sleep(100 * time.Millisecond)
			_ = client.RefreshMetadata(topic)
			pc, err = consumer.ConsumePartition(topic, p, sarama.OffsetOldest)
		}
		if err != nil {
			r.close()
			return nil, fmt.Errorf("reading %s/%d: %w", topic, p, err)
		}
		r.parts = append(r.parts, pc)
		go func() {
			for m := range pc.Messages() {
				r.msgs <- m
			}
		}()
		go func() {
			for err := range pc.Errors() {
				select {
				case r.errs <- err:
				default:
				}
			}
		}()
	}
	return r, nil
}

// poll returns what arrived within wait (at least one record, unless none
// came).
func (r *reader) poll(wait time.Duration) ([]*sarama.ConsumerMessage, error) {
	var out []*sarama.ConsumerMessage
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case m := <-r.msgs:
		out = append(out, m)
	case err := <-r.errs:
		// sarama retries on its own (a stale leader, say): note it, go on.
		r.lastErr = err
		return nil, nil
	case <-timer.C:
		return nil, nil
	}
	for {
		select {
		case m := <-r.msgs:
			out = append(out, m)
		default:
			return out, nil
		}
	}
}

func (r *reader) close() {
	for _, pc := range r.parts {
		pc.AsyncClose()
	}
	_ = r.consumer.Close()
	_ = r.client.Close()
}

// close deletes the topics the run created and closes the admin client.
// Internal topics of the peers (changelogs, repartition topics) are left
// to the broker's retention: their names depend on the peer.
func (c *cluster) close() {
	for _, t := range c.topics {
		_ = c.admin.DeleteTopic(t)
	}
	_ = c.admin.Close()
}
