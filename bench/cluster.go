package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"
)

// adminTimeout bounds each administrative step: creating a topic and
// waiting for its leaders, listing offsets, the cleanup.
const adminTimeout = 30 * time.Second

// cluster is the bench's administrative connection to the brokers and the
// record of everything it created there, to remove at the end.
type cluster struct {
	brokers []string
	client  sarama.Client
	admin   sarama.ClusterAdmin

	mu        sync.Mutex
	topics    []string
	groups    []string
	stateDirs []string
}

// saramaConfig is the configuration every sarama client of the bench
// starts from: Kafka 4's protocol, as weir uses.
func saramaConfig(clientID string) *sarama.Config {
	sc := sarama.NewConfig()
	sc.Version = sarama.V4_0_0_0
	sc.ClientID = clientID
	sc.Metadata.AllowAutoTopicCreation = false
	return sc
}

func connect(brokers []string) (*cluster, error) {
	client, err := sarama.NewClient(brokers, saramaConfig("weir-bench-admin"))
	if err != nil {
		return nil, fmt.Errorf("connecting to %v (is the broker up? run `make kafka-up`): %w", brokers, err)
	}
	admin, err := sarama.NewClusterAdminFromClient(client)
	if err != nil {
		client.Close()
		return nil, fmt.Errorf("admin client: %w", err)
	}
	return &cluster{brokers: brokers, client: client, admin: admin}, nil
}

// createTopic creates topic and waits until every partition has a leader.
func (c *cluster) createTopic(ctx context.Context, topic string, partitions int32) error {
	return c.createTopicConfig(ctx, topic, partitions, nil)
}

// createTopicConfig creates topic with the given topic configs (nil for
// the broker's defaults) and waits until every partition has a leader.
func (c *cluster) createTopicConfig(ctx context.Context, topic string, partitions int32, configs map[string]*string) error {
	err := c.admin.CreateTopic(topic, &sarama.TopicDetail{NumPartitions: partitions, ReplicationFactor: -1, ConfigEntries: configs}, false)
	if err != nil {
		return fmt.Errorf("creating topic %s: %w", topic, err)
	}
	c.mu.Lock()
	c.topics = append(c.topics, topic)
	c.mu.Unlock()

	deadline := time.Now().Add(adminTimeout)
	for {
		err := c.client.RefreshMetadata(topic)
		if err == nil {
			var ps []int32
			if ps, err = c.client.Partitions(topic); err == nil && int32(len(ps)) == partitions {
				for _, p := range ps {
					if _, lerr := c.client.Leader(topic, p); lerr != nil {
						err = lerr
						break
					}
				}
				if err == nil {
					return nil
				}
			} else if err == nil {
				err = fmt.Errorf("%d of %d partitions visible", len(ps), partitions)
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("topic %s has no leader for every partition after %v: %w", topic, adminTimeout, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for topic %s: %w", topic, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// addTopic records a topic someone else creates (such as a weir store's
// changelog) to delete at the end; one that does not exist is skipped.
func (c *cluster) addTopic(t string) {
	c.mu.Lock()
	c.topics = append(c.topics, t)
	c.mu.Unlock()
}

// addGroup records a consumer group (or weir application id) to delete.
func (c *cluster) addGroup(g string) {
	c.mu.Lock()
	c.groups = append(c.groups, g)
	c.mu.Unlock()
}

// stateDir makes a temporary state directory for a weir application.
func (c *cluster) stateDir() (string, error) {
	dir, err := os.MkdirTemp("", "weir-bench-state-")
	if err != nil {
		return "", fmt.Errorf("state directory: %w", err)
	}
	c.mu.Lock()
	c.stateDirs = append(c.stateDirs, dir)
	c.mu.Unlock()
	return dir, nil
}

// offsets returns the end offset of every partition of topic: the high
// watermark, or under ReadCommitted the last stable offset.
func (c *cluster) offsets(topic string, partitions int32, isolation sarama.IsolationLevel) ([]int64, error) {
	query := map[int32]int64{}
	for p := range partitions {
		query[p] = sarama.OffsetNewest
	}
	res, err := c.admin.ListOffsets(map[string]map[int32]int64{topic: query}, &sarama.ListOffsetsOptions{IsolationLevel: isolation})
	if err != nil {
		return nil, fmt.Errorf("listing offsets of %s: %w", topic, err)
	}
	out := make([]int64, partitions)
	for p := range partitions {
		r := res[topic][p]
		if r == nil {
			return nil, fmt.Errorf("listing offsets of %s: no answer for partition %d", topic, p)
		}
		if r.Err != nil && !errors.Is(r.Err, sarama.ErrNoError) {
			return nil, fmt.Errorf("listing offsets of %s/%d: %w", topic, p, r.Err)
		}
		out[p] = r.Offset
	}
	return out, nil
}

// countRecords reads topic from its start with read_committed isolation
// and counts its records: in each partition up to ends[p] (exclusive), and
// overall up to stopAt when stopAt > 0. It returns what it counted when
// the deadline passes; only a failure to read is an error.
func (c *cluster) countRecords(ctx context.Context, topic string, ends []int64, stopAt int64, deadline time.Time) (int64, error) {
	sc := saramaConfig("weir-bench-verify")
	sc.Consumer.IsolationLevel = sarama.ReadCommitted
	sc.Consumer.MaxWaitTime = 50 * time.Millisecond
	consumer, err := sarama.NewConsumer(c.brokers, sc)
	if err != nil {
		return 0, fmt.Errorf("verifying %s: consumer: %w", topic, err)
	}
	defer consumer.Close()

	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	var total atomic.Int64
	var wg sync.WaitGroup
	errc := make(chan error, len(ends))
	for p, end := range ends {
		if end <= 0 {
			continue
		}
		pc, err := consumer.ConsumePartition(topic, int32(p), sarama.OffsetOldest)
		if err != nil {
			cancel()
			wg.Wait()
			return 0, fmt.Errorf("verifying %s/%d: %w", topic, p, err)
		}
		wg.Go(func() {
			defer pc.AsyncClose()
			for {
				select {
				case m, ok := <-pc.Messages():
					if !ok {
						return
					}
					if n := total.Add(1); stopAt > 0 && n >= stopAt {
						cancel()
						return
					}
					if m.Offset >= end-1 {
						return
					}
				case perr, ok := <-pc.Errors():
					if ok {
						errc <- fmt.Errorf("verifying %s/%d: %w", topic, p, perr.Err)
						cancel()
					}
					return
				case <-ctx.Done():
					return
				}
			}
		})
	}
	wg.Wait()
	select {
	case err := <-errc:
		return total.Load(), err
	default:
	}
	return total.Load(), nil
}

// cleanup deletes every topic and consumer group the bench created and
// its state directories. A topic it cannot delete is an error; a group
// that is still there (it may be empty and gone already) is only logged.
func (c *cluster) cleanup() error {
	c.mu.Lock()
	topics, groups, dirs := c.topics, c.groups, c.stateDirs
	c.mu.Unlock()
	var errs []error
	for _, t := range topics {
		if err := c.admin.DeleteTopic(t); err != nil && !errors.Is(err, sarama.ErrUnknownTopicOrPartition) {
			errs = append(errs, fmt.Errorf("deleting topic %s: %w", t, err))
		}
	}
	for _, g := range groups {
		if err := c.admin.DeleteConsumerGroup(g); err != nil && !errors.Is(err, sarama.ErrGroupIDNotFound) {
			fmt.Fprintf(os.Stderr, "bench: warning: deleting consumer group %s: %v\n", g, err)
		}
	}
	for _, d := range dirs {
		if err := os.RemoveAll(d); err != nil {
			errs = append(errs, fmt.Errorf("removing %s: %w", d, err))
		}
	}
	if err := c.admin.Close(); err != nil {
		errs = append(errs, fmt.Errorf("closing admin client: %w", err))
	}
	if len(topics) > 0 && len(errs) == 0 {
		fmt.Fprintf(os.Stderr, "bench: deleted %d topics and %d consumer groups\n", len(topics), len(groups))
	}
	return errors.Join(errs...)
}
