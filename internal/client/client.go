// Package client configures the sarama clients weir creates, partitions
// what it produces like Kafka's Java producer, and commits offsets at least
// once.
package client

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/IBM/sarama"

	"github.com/weirstream/weir/internal/statedir"
)

// Version is the protocol version weir speaks. Kafka 4 dropped the old
// protocol versions, and below 2.5 sarama commits transactional offsets
// without the group generation, which disables zombie fencing (KIP-447).
var Version = sarama.V4_0_0_0

// Options are the parts of weir.Config that shape its clients.
type Options struct {
	ApplicationID string
	// ClientID starts the client ids of the threads' clients; "" means
	// ApplicationID.
	ClientID string
	TLS      *tls.Config
	// SASLUser and SASLPassword authenticate with SASLMechanism: "PLAIN",
	// "SCRAM-SHA-256" or "SCRAM-SHA-512" (checked by weir's Config).
	SASLMechanism, SASLUser, SASLPassword string
	DialTimeout                           time.Duration
	// RequestTimeout, when above 0, bounds each request's round trip.
	RequestTimeout time.Duration

	FetchMaxWait, SessionTimeout, HeartbeatInterval, RebalanceTimeout time.Duration
	// StaticMemberID, when set, turns on static membership: thread i
	// joins as "<StaticMemberID>-<i>". StaticFromProcess does the same
	// with the process id when StaticMemberID is empty.
	StaticMemberID    string
	StaticFromProcess bool
	// TransactionTimeout > 0 makes thread producers transactional.
	TransactionTimeout time.Duration
}

// Base is the client configuration every weir client shares.
func Base(o *Options, clientID string) *sarama.Config {
	sc := sarama.NewConfig()
	sc.Version = Version
	sc.ClientID = clientID
	sc.Net.DialTimeout = o.DialTimeout
	if o.RequestTimeout > 0 {
		sc.Net.ReadTimeout, sc.Net.WriteTimeout = o.RequestTimeout, o.RequestTimeout
	}
	if o.TLS != nil {
		sc.Net.TLS.Enable = true
		sc.Net.TLS.Config = o.TLS
	}
	if o.SASLMechanism != "" {
		sc.Net.SASL.Enable = true
		sc.Net.SASL.Handshake = true
		sc.Net.SASL.Mechanism = sarama.SASLMechanism(o.SASLMechanism)
		sc.Net.SASL.User = o.SASLUser
		sc.Net.SASL.Password = o.SASLPassword
		if gen, err := newSCRAM(o.SASLMechanism); err == nil {
			sc.Net.SASL.SCRAMClientGeneratorFunc = gen
		}
	}
	sc.Metadata.AllowAutoTopicCreation = false
	return sc
}

// RebalanceRetryBackoff is how long a group member waits before it joins
// again after a JoinGroup or SyncGroup failed with a retriable error.
const RebalanceRetryBackoff = 200 * time.Millisecond

// Thread configures one stream thread's group member and producer. Under exactly once the producer is transactional with id
// "<application id>-<process id>-<thread>": stable across restarts, so a
// restarted instance fences its earlier incarnation at once.
func Thread(o *Options, processID string, thread int, strategy sarama.BalanceStrategy) *sarama.Config {
	prefix := o.ClientID
	if prefix == "" {
		prefix = o.ApplicationID
	}
	sc := Base(o, prefix+"-"+strconv.Itoa(thread))
	sc.Consumer.Return.Errors = true
	sc.Consumer.Offsets.AutoCommit.Enable = false
	sc.Consumer.Offsets.Initial = sarama.OffsetOldest
	sc.Consumer.IsolationLevel = sarama.ReadCommitted
	sc.Consumer.MaxWaitTime = o.FetchMaxWait
	sc.Consumer.Group.Session.Timeout = o.SessionTimeout
	sc.Consumer.Group.Heartbeat.Interval = o.HeartbeatInterval
	sc.Consumer.Group.Rebalance.Timeout = o.RebalanceTimeout
	sc.Consumer.Group.Rebalance.GroupStrategies = []sarama.BalanceStrategy{strategy}
	// A SyncGroup that meets the next rebalance (a member joined while
	// the leader was planning) is retried after the backoff, and no
	// member commits meanwhile: sarama's 2 s default stalls the group for
	// that long. As many retries over the same 8 s keep sarama's
	// tolerance of a coordinator moving.
	sc.Consumer.Group.Rebalance.Retry.Backoff = RebalanceRetryBackoff
	sc.Consumer.Group.Rebalance.Retry.Max = int(8 * time.Second / RebalanceRetryBackoff)
	if id := o.StaticMemberID; id != "" || o.StaticFromProcess {
		if id == "" {
			id = processID
		}
		sc.Consumer.Group.InstanceId = id + "-" + strconv.Itoa(thread)
	}
	// Per-key order and no duplicates from retries: the idempotent
	// producer with one request in flight per broker.
	sc.Producer.Idempotent = true
	sc.Producer.RequiredAcks = sarama.WaitForAll
	sc.Net.MaxOpenRequests = 1
	sc.Producer.Retry.Max = 10
	sc.Producer.Return.Successes = true
	sc.Producer.Return.Errors = true
	sc.Producer.Partitioner = NewPartitioner
	sc.Producer.Flush.Frequency = 5 * time.Millisecond
	if o.TransactionTimeout > 0 {
		sc.Producer.Transaction.ID = TransactionalID(o.ApplicationID, processID, thread)
		sc.Producer.Transaction.Timeout = o.TransactionTimeout
	}
	return sc
}

// TransactionalID is the transactional id of a thread's producer.
func TransactionalID(app, processID string, thread int) string {
	return app + "-" + processID + "-" + strconv.Itoa(thread)
}

// ParseTransactionalID reports whether id is the transactional id of a
// thread of application app (TransactionalID, with a process id of the
// form the state directory creates), and of which process. The form is
// checked whole: application "orders" does not claim the ids of
// application "orders-v2".
func ParseTransactionalID(app, id string) (processID string, thread int, ok bool) {
	rest, found := strings.CutPrefix(id, app+"-")
	if !found {
		return "", 0, false
	}
	processID, num, found := strings.Cut(rest, "-")
	if !found || !statedir.ValidProcessID(processID) {
		return "", 0, false
	}
	thread, err := strconv.Atoi(num)
	if err != nil || thread < 0 || strconv.Itoa(thread) != num {
		return "", 0, false
	}
	return processID, thread, true
}

// Origin travels with every record weir produces (as its Metadata): where
// it came from, so that a record Kafka refuses is reported with the input
// record that caused it, and whether a sink chose its partition.
type Origin struct {
	Explicit bool   // the partition was chosen by a sink or is the task's
	Task     string // task id
	// The input record being processed; Offset -1 in a punctuator.
	Topic     string
	Partition int32
	Offset    int64
	Node      string // the punctuator's node, when Offset is -1
	Store     string // the store, for a changelog record
	// Input is the input record itself (nil in a punctuator), for a
	// dead-letter record of a refused output record. It shares the
	// consumed record's bytes: nothing is copied.
	Input *sarama.ConsumerMessage
	// DeadLetter marks a dead-letter record: its refusal cannot be
	// dead-lettered again.
	DeadLetter bool
}

// partitioner routes by murmur2 of the key, as Java producers and Kafka
// Streams do, unless a sink chose the partition.
type partitioner struct{ hash sarama.Partitioner }

// NewPartitioner is weir's sarama.PartitionerConstructor.
func NewPartitioner(topic string) sarama.Partitioner {
	return partitioner{hash: sarama.NewMurmur2Partitioner(topic)}
}

// Partition returns the sink's partition or murmur2 of the key.
func (p partitioner) Partition(m *sarama.ProducerMessage, n int32) (int32, error) {
	if o, ok := m.Metadata.(*Origin); ok && o.Explicit {
		return m.Partition, nil
	}
	return p.hash.Partition(m, n)
}

// RequiresConsistency is true: a key always goes to the same partition.
func (partitioner) RequiresConsistency() bool { return true }

// CommitOffsets commits offsets (topic -> partition -> next offset) for the
// group member of the given generation, retrying a moving coordinator until
// ctx ends. A stale generation or unknown member means the partitions may
// have moved: the error wraps ErrTasksMigrated.
func CommitOffsets(ctx context.Context, client sarama.Client, group string, generation int32, member, instance string, offsets map[string]map[int32]int64, metadata map[string]map[int32]string) error {
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
			req.AddBlock(topic, p, off, 0, metadata[topic][p])
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
					return fmt.Errorf("%w: committing %s/%d: %w", ErrTasksMigrated, topic, p, kerr)
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

// ErrTasksMigrated means the commit was refused because the member is not
// (or no longer) in the group's current generation.
var ErrTasksMigrated = errors.New("weir: tasks migrated to another member")
