package task

import (
	"context"
	"errors"
	"time"

	"github.com/IBM/sarama"

	"github.com/weirstream/weir/internal/assign"
	"github.com/weirstream/weir/internal/graph"
	"github.com/weirstream/weir/internal/local"
	"github.com/weirstream/weir/internal/metrics"
	"github.com/weirstream/weir/internal/statelog"
	"github.com/weirstream/weir/internal/topics"
	"github.com/weirstream/weir/processor"
)

// The runtime's names for the error policies and the errors it reports:
// each is defined once, in package processor, which weir re-exports.
type (
	// Policy is processor.ErrorPolicy.
	Policy = processor.ErrorPolicy
	// Policies is processor.ErrorPolicies.
	Policies = processor.ErrorPolicies
	// RecordError is processor.RecordError.
	RecordError = processor.RecordError
	// TopologyError is processor.TopologyError.
	TopologyError = processor.TopologyError
	// ProductionError is processor.ProductionError.
	ProductionError = processor.ProductionError
)

// The error policies (processor.Fail, Skip and DeadLetter).
const (
	Fail = processor.Fail
	Skip = processor.Skip
)

// DeadLetter is processor.DeadLetter.
func DeadLetter(topic string) Policy { return processor.DeadLetter(topic) }

// The causes of a ProductionError (processor's).
var (
	ErrRecordTooLarge          = processor.ErrRecordTooLarge
	ErrNullKeyOnCompactedTopic = processor.ErrNullKeyOnCompactedTopic
)

// PoliciesFor returns the error policies of the records read from or
// written to topic.
func (c *Config) PoliciesFor(topic string) Policies {
	p := Policies{Deserialization: c.DeserializationErrors, Timestamp: c.TimestampErrors, Processing: c.ProcessingErrors, Production: c.ProductionErrors}
	o, ok := c.TopicErrors[topic]
	if !ok {
		return p
	}
	for _, f := range []struct{ dst, src *Policy }{
		{&p.Deserialization, &o.Deserialization}, {&p.Timestamp, &o.Timestamp},
		{&p.Processing, &o.Processing}, {&p.Production, &o.Production},
	} {
		if *f.src != "" {
			*f.dst = *f.src
		}
	}
	return p
}

// Config is what a task needs of the application's configuration.
type Config struct {
	ApplicationID         string
	MaxTaskIdle           time.Duration
	DeserializationErrors Policy
	TimestampErrors       Policy
	ProcessingErrors      Policy
	ProductionErrors      Policy
	// TopicErrors overrides the policies above for the records of single
	// topics (real names): read from a source topic, or written to a sink
	// topic (ProductionErrors).
	TopicErrors map[string]Policies
	// ExactlyOnce: a record a processor fails on under ProcessingErrors
	// Skip or DeadLetter is passed over in a replay of the aborted
	// transaction (see ErrReplayWithout), not where it failed.
	ExactlyOnce bool
	// CleanupDelay is Stores.CleanupDelay, which dates a checkpoint
	// written without a time (see checkpointSince).
	CleanupDelay time.Duration
	// BulkRestoreMin is Stores.BulkRestoreMinRecords: the smallest full
	// restore of an active task's store partition, in changelog offsets,
	// that goes through the database's bulk path; zero or less: never.
	BulkRestoreMin  int64
	RestoreListener RestoreListener // nil: none
	// Clock is the wall clock of wall-clock punctuators; nil is the
	// system clock. weirtest sets it to its controlled time.
	Clock func() time.Time
	// ResetEpoch is the application's reset epoch (the topology
	// descriptor's), which table updates carry (graph.EpochHeader).
	ResetEpoch int64
}

// Shared is what the tasks of an instance share. It is set up once,
// before the first task, and read-only after.
type Shared struct {
	Config
	Graph   *graph.Graph
	Layout  *topics.Layout
	Metrics *metrics.Metrics
	DB      *statelog.DB
	Local   *local.State
	// RestoreClient reads changelogs (read_committed); RestoreSlots bounds
	// the restores running at once.
	RestoreClient sarama.Client
	RestoreSlots  chan struct{}
	// Cache bounds the record caches of the instance's tasks; nil turns
	// caching off.
	Cache *graph.CacheBudget
	// Globals holds the bytes of each global store (Graph.Globals), which
	// the instance keeps current and every task reads.
	Globals map[string]statelog.Bytes
	// CommittedOffset reads the group's committed offset of an input
	// partition (found false for none), where the restore of a store
	// whose changelog is its input topic ends.
	CommittedOffset func(topic string, partition int32) (offset int64, found bool, err error)
	// YieldStandby, when set, stops the instance's standby of a task and
	// waits for its last write; a task calls it before its restore.
	YieldStandby func(ctx context.Context, id assign.TaskID)
}

// Host is the stream thread that runs a task: the task's only way out.
type Host interface {
	// Send hands a record to the thread's producer; an error means the
	// record was not sent (see the thread's failure authority).
	Send(m *sarama.ProducerMessage) error
	// Keep reports whether the task keeps a record it just processed (of
	// size bytes) for a replay after an aborted transaction.
	Keep(size int) bool
	// Wake tells the thread's loop to look at its tasks: a restore ended.
	Wake()
	// ReplayFailure returns the error an input record failed with in a
	// transaction that was aborted for it (see ReplayWithoutError): its
	// replay passes over it. nil means process the record.
	ReplayFailure(topic string, partition int32, offset int64) error
	// PartitionCount returns the partition count of a topic.
	PartitionCount(topic string) (int32, error)
}

// ReplayWithoutError asks the thread to abort its transaction and replay
// its tasks from their last commit without Record, on which a processor
// failed: under exactly once and ProcessingErrors Skip or DeadLetter, the
// failed record then leaves no trace but its dead-letter record.
type ReplayWithoutError struct{ Record *RecordError }

func (e *ReplayWithoutError) Error() string {
	return "replaying without the failed record: " + e.Record.Error()
}

func (e *ReplayWithoutError) Unwrap() error { return e.Record }

// topologyError returns err as a *TopologyError of the task when a node
// reported one, else nil.
func (t *Task) topologyError(err error) *TopologyError {
	var te *TopologyError
	if !errors.As(err, &te) {
		return nil
	}
	return &TopologyError{Task: t.name, Node: te.Node, Err: te.Err}
}
