package txn

import (
	"errors"
	"fmt"

	"github.com/IBM/sarama"
)

// minVersion is the lowest sarama Config.Version a transactional Producer
// accepts. Below it sarama commits transactional offsets without the
// consumer group's generation (TxnOffsetCommit v0–v2), so a stale member's
// commit silently succeeds and zombies are not fenced (KIP-447); it is
// also the first version whose offset fetch waits for pending
// transactional commits (OffsetFetch RequireStable).
var minVersion = sarama.V2_5_0_0

// ConfigureProducer sets on cfg what a Producer needs, leaving the rest
// (addresses, TLS, SASL, timeouts, partitioner) as it is:
//
//   - Producer.Transaction.ID = transactionalID. An empty id makes an
//     at-least-once producer (Commit flushes); otherwise the id must be
//     unique to this instance and the same across its restarts.
//   - Producer.Idempotent, Producer.RequiredAcks = WaitForAll and
//     Net.MaxOpenRequests = 1: no duplicates from retries, per-partition
//     order (sarama requires all three for transactions).
//   - Producer.Return.Successes and Return.Errors: a Producer counts the
//     records in flight from both channels.
//   - Version raised to sarama.V2_5_0_0 when it is lower, never lowered.
//
// Call it before creating the producer's client (sarama.NewClient), with a
// configuration that no other client shares.
func ConfigureProducer(cfg *sarama.Config, transactionalID string) {
	cfg.Producer.Transaction.ID = transactionalID
	cfg.Producer.Idempotent = true
	cfg.Producer.RequiredAcks = sarama.WaitForAll
	cfg.Net.MaxOpenRequests = 1
	cfg.Producer.Return.Successes = true
	cfg.Producer.Return.Errors = true
	if !cfg.Version.IsAtLeast(minVersion) {
		cfg.Version = minVersion
	}
}

// ConfigureConsumer sets on cfg what the consumer group whose offsets a
// Producer commits needs: Consumer.IsolationLevel = ReadCommitted (input
// from aborted transactions is never read), Consumer.Offsets.AutoCommit
// off (offsets are committed only in transactions, so a stray MarkOffset
// commits nothing), and Version raised to sarama.V2_5_0_0 when it is lower
// (so that a new session's offset fetch waits for a commit still in
// progress). The rest, such as Consumer.Offsets.Initial, stays as it is.
//
// Call it before creating the group's client, which must not be the
// producer's.
func ConfigureConsumer(cfg *sarama.Config) {
	cfg.Consumer.IsolationLevel = sarama.ReadCommitted
	cfg.Consumer.Offsets.AutoCommit.Enable = false
	if !cfg.Version.IsAtLeast(minVersion) {
		cfg.Version = minVersion
	}
}

// checkConfig reports every setting of cfg that a Producer cannot work
// with, naming the field. sarama's own validation already requires
// idempotence, WaitForAll and one open request of a transactional
// producer; it does not know that a Producer waits for acknowledgements
// or that fencing needs Version 2.5.
func checkConfig(cfg *sarama.Config) error {
	var errs []error
	if !cfg.Producer.Return.Successes {
		errs = append(errs, errors.New("Producer.Return.Successes is false: the producer could never tell that a record was delivered"))
	}
	if !cfg.Producer.Return.Errors {
		errs = append(errs, errors.New("Producer.Return.Errors is false: the producer could never tell that a record failed"))
	}
	if cfg.Producer.Transaction.ID != "" && !cfg.Version.IsAtLeast(minVersion) {
		errs = append(errs, fmt.Errorf("Version %s is below %s: sarama would commit offsets without the group's generation, and a zombie member would not be fenced (KIP-447)", cfg.Version, minVersion))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("txn: the client's configuration (see ConfigureProducer): %w", err)
	}
	return nil
}

// Group identifies the consumer group member whose offsets a transaction
// commits: group id, generation, member id and, with static membership,
// group instance id. The coordinator rejects a commit from a generation the
// group has left, which is what fences a zombie member (KIP-447).
type Group = sarama.ConsumerGroupMetadata

// SessionGroup returns the Group of a consumer group session: groupID as
// given to sarama.NewConsumerGroup, the session's generation and member id,
// and instanceID, the group's Consumer.Group.InstanceId ("" without static
// membership). Call it for each commit with the session in which the
// committed records were consumed; a Group of an earlier session makes the
// commit fail with ErrAborted.
func SessionGroup(session sarama.ConsumerGroupSession, groupID, instanceID string) *Group {
	var instance *string
	if instanceID != "" {
		instance = &instanceID
	}
	return sarama.NewConsumerGroupMetadataFromSession(session, groupID, instance)
}
