package weir

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/IBM/sarama"

	"github.com/weirstream/weir/internal/assign"
)

// kafkaVersion is the protocol version weir speaks. Kafka 4 dropped the old
// protocol versions, and below 2.5 sarama commits transactional offsets
// without the group generation, which disables zombie fencing (KIP-447).
var kafkaVersion = sarama.V4_0_0_0

// baseSaramaConfig is the client configuration every weir client shares.
func baseSaramaConfig(c *Config, clientID string) *sarama.Config {
	sc := sarama.NewConfig()
	sc.Version = kafkaVersion
	sc.ClientID = clientID
	sc.Net.DialTimeout = c.Net.DialTimeout
	if c.Net.TLS != nil {
		sc.Net.TLS.Enable = true
		sc.Net.TLS.Config = c.Net.TLS
	}
	if c.Net.SASL.Mechanism != "" {
		sc.Net.SASL.Enable = true
		sc.Net.SASL.Mechanism = sarama.SASLTypePlaintext
		sc.Net.SASL.User = c.Net.SASL.User
		sc.Net.SASL.Password = c.Net.SASL.Password
	}
	sc.Metadata.AllowAutoTopicCreation = false
	return sc
}

// threadSaramaConfig configures one stream thread's group member and
// producer.
func threadSaramaConfig(c *Config, thread int, strategy *assign.Strategy) *sarama.Config {
	sc := baseSaramaConfig(c, c.ApplicationID+"-"+strconv.Itoa(thread))
	sc.Consumer.Return.Errors = true
	sc.Consumer.Offsets.AutoCommit.Enable = false
	sc.Consumer.Offsets.Initial = sarama.OffsetOldest
	sc.Consumer.IsolationLevel = sarama.ReadCommitted
	sc.Consumer.MaxWaitTime = c.Consumer.FetchMaxWait
	sc.Consumer.Group.Session.Timeout = c.Consumer.SessionTimeout
	sc.Consumer.Group.Heartbeat.Interval = c.Consumer.HeartbeatInterval
	sc.Consumer.Group.Rebalance.Timeout = c.Consumer.RebalanceTimeout
	sc.Consumer.Group.Rebalance.GroupStrategies = []sarama.BalanceStrategy{strategy}
	if c.StaticMemberID != "" {
		sc.Consumer.Group.InstanceId = c.StaticMemberID + "-" + strconv.Itoa(thread)
	}
	// Per-key order and no duplicates from retries: the idempotent
	// producer with one request in flight per broker.
	sc.Producer.Idempotent = true
	sc.Producer.RequiredAcks = sarama.WaitForAll
	sc.Net.MaxOpenRequests = 1
	sc.Producer.Retry.Max = 10
	sc.Producer.Return.Successes = true
	sc.Producer.Return.Errors = true
	sc.Producer.Partitioner = newPartitioner
	sc.Producer.Flush.Frequency = 5 * time.Millisecond
	return sc
}

// explicitPartition marks a message whose partition a sink's partitioner
// chose; every other message is partitioned by key.
type explicitPartition struct{}

// partitioner routes by murmur2 of the key, as Java producers and Kafka
// Streams do, unless a sink chose the partition.
type partitioner struct{ hash sarama.Partitioner }

func newPartitioner(topic string) sarama.Partitioner {
	return partitioner{hash: sarama.NewMurmur2Partitioner(topic)}
}

func (p partitioner) Partition(m *sarama.ProducerMessage, n int32) (int32, error) {
	if _, ok := m.Metadata.(explicitPartition); ok {
		return m.Partition, nil
	}
	return p.hash.Partition(m, n)
}

func (partitioner) RequiresConsistency() bool { return true }

// producer wraps a sarama AsyncProducer with flush: the commit step waits
// until every record sent so far is acknowledged.
type producer struct {
	ap sarama.AsyncProducer

	mu       sync.Mutex
	inflight int
	idle     chan struct{} // closed while inflight == 0
	err      error         // first failure since the last flush
	done     chan struct{}
}

func newProducer(client sarama.Client) (*producer, error) {
	ap, err := sarama.NewAsyncProducerFromClient(client)
	if err != nil {
		return nil, fmt.Errorf("weir: producer: %w", err)
	}
	p := &producer{ap: ap, idle: make(chan struct{}), done: make(chan struct{})}
	close(p.idle)
	go p.drain()
	return p, nil
}

func (p *producer) drain() {
	defer close(p.done)
	succ, errs := p.ap.Successes(), p.ap.Errors()
	for succ != nil || errs != nil {
		select {
		case _, ok := <-succ:
			if !ok {
				succ = nil
				continue
			}
			p.ack(nil)
		case e, ok := <-errs:
			if !ok {
				errs = nil
				continue
			}
			p.ack(fmt.Errorf("weir: producing to %s: %w", e.Msg.Topic, e.Err))
		}
	}
}

func (p *producer) ack(err error) {
	p.mu.Lock()
	if err != nil && p.err == nil {
		p.err = err
	}
	p.inflight--
	if p.inflight == 0 {
		close(p.idle)
	}
	p.mu.Unlock()
}

// send hands m to the producer; it blocks while sarama's input buffer is
// full. It does not give up on cancellation: a record being processed when
// the application stops is finished, and sarama fails a message it cannot
// deliver after its retries, so the wait is bounded.
func (p *producer) send(m *sarama.ProducerMessage) error {
	p.mu.Lock()
	if p.err != nil {
		err := p.err
		p.mu.Unlock()
		return err
	}
	if p.inflight == 0 {
		p.idle = make(chan struct{})
	}
	p.inflight++
	p.mu.Unlock()
	p.ap.Input() <- m
	return nil
}

// flush waits for every sent record and returns the first failure.
func (p *producer) flush(ctx context.Context) error {
	p.mu.Lock()
	idle := p.idle
	p.mu.Unlock()
	select {
	case <-idle:
	case <-ctx.Done():
		return fmt.Errorf("weir: flushing producer: %w", ctx.Err())
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	err := p.err
	return err
}

// close closes the producer once; sarama panics on a second Close.
func (p *producer) close() error {
	err := p.ap.Close()
	<-p.done
	return err
}

// commitOffsets commits offsets (topic -> partition -> next offset) for the
// group member of the given generation. A stale generation or unknown
// member means the partitions may have moved: the error wraps
// errTasksMigrated.
func commitOffsets(client sarama.Client, c *Config, group string, generation int32, member, instance string, offsets map[string]map[int32]int64) error {
	if len(offsets) == 0 {
		return nil
	}
	req := sarama.NewOffsetCommitRequest(client.Config(), group)
	req.ConsumerGroupGeneration = generation
	req.ConsumerID = member
	if instance != "" {
		req.GroupInstanceId = &instance
	}
	for topic, parts := range offsets {
		for p, off := range parts {
			req.AddBlock(topic, p, off, 0, "")
		}
	}
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		if attempt > 0 {
			time.Sleep(time.Duration(attempt) * 100 * time.Millisecond)
			_ = client.RefreshCoordinator(group)
		}
		coord, err := client.Coordinator(group)
		if err != nil {
			lastErr = err
			continue
		}
		resp, err := coord.CommitOffset(req)
		if err != nil {
			lastErr = err
			continue
		}
		var retry bool
		lastErr = nil
		for topic, parts := range resp.Errors {
			for p, kerr := range parts {
				switch {
				case kerr == sarama.ErrNoError:
				case errors.Is(kerr, sarama.ErrIllegalGeneration), errors.Is(kerr, sarama.ErrUnknownMemberId),
					errors.Is(kerr, sarama.ErrRebalanceInProgress):
					return fmt.Errorf("%w: committing %s/%d: %w", errTasksMigrated, topic, p, kerr)
				case errors.Is(kerr, sarama.ErrNotCoordinatorForConsumer), errors.Is(kerr, sarama.ErrConsumerCoordinatorNotAvailable),
					errors.Is(kerr, sarama.ErrOffsetsLoadInProgress), errors.Is(kerr, sarama.ErrRequestTimedOut):
					retry = true
					lastErr = kerr
				default:
					return fmt.Errorf("weir: committing offsets of %s/%d: %w", topic, p, kerr)
				}
			}
		}
		if !retry {
			return nil
		}
	}
	return fmt.Errorf("weir: committing offsets: %w", lastErr)
}

// errTasksMigrated means the commit was refused because the member is not
// (or no longer) in the group's current generation.
var errTasksMigrated = errors.New("weir: tasks migrated to another member")
