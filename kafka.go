package weir

import (
	"context"
	"errors"
	"fmt"
	"strconv"
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
// producer. Under exactly once the producer is transactional with id
// "<application id>-<process id>-<thread>": stable across restarts, so a
// restarted instance fences its earlier incarnation at once.
func threadSaramaConfig(c *Config, processID string, thread int, strategy *assign.Strategy) *sarama.Config {
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
	if c.Guarantee == ExactlyOnce {
		sc.Producer.Transaction.ID = transactionalID(c.ApplicationID, processID, thread)
		sc.Producer.Transaction.Timeout = c.TransactionTimeout
	}
	return sc
}

// transactionalID is the transactional id of a thread's producer.
func transactionalID(app, processID string, thread int) string {
	return app + "-" + processID + "-" + strconv.Itoa(thread)
}

// origin travels with every record weir produces (as its Metadata): where
// it came from, so that a record Kafka refuses is reported with the input
// record that caused it, and whether a sink chose its partition.
type origin struct {
	explicit bool   // the partition was chosen by a sink or is the task's
	task     string // task id
	// The input record being processed; offset -1 in a punctuator.
	topic     string
	partition int32
	offset    int64
	node      string // the punctuator's node, when offset is -1
	store     string // the store, for a changelog record
}

// partitioner routes by murmur2 of the key, as Java producers and Kafka
// Streams do, unless a sink chose the partition.
type partitioner struct{ hash sarama.Partitioner }

func newPartitioner(topic string) sarama.Partitioner {
	return partitioner{hash: sarama.NewMurmur2Partitioner(topic)}
}

func (p partitioner) Partition(m *sarama.ProducerMessage, n int32) (int32, error) {
	if o, ok := m.Metadata.(*origin); ok && o.explicit {
		return m.Partition, nil
	}
	return p.hash.Partition(m, n)
}

func (partitioner) RequiresConsistency() bool { return true }

// commitOffsets commits offsets (topic -> partition -> next offset) for the
// group member of the given generation, retrying a moving coordinator until
// ctx ends. A stale generation or unknown member means the partitions may
// have moved: the error wraps errTasksMigrated.
func commitOffsets(ctx context.Context, client sarama.Client, group string, generation int32, member, instance string, offsets map[string]map[int32]int64) error {
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
			select {
			case <-ctx.Done():
				return fmt.Errorf("weir: committing offsets: %w (last error: %w)", ctx.Err(), lastErr)
			case <-time.After(time.Duration(attempt) * 100 * time.Millisecond):
			}
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
