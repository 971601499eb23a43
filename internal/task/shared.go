package task

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/IBM/sarama"

	"github.com/weirstream/weir/internal/assign"
	"github.com/weirstream/weir/internal/graph"
	"github.com/weirstream/weir/internal/local"
	"github.com/weirstream/weir/internal/metrics"
	"github.com/weirstream/weir/internal/statelog"
	"github.com/weirstream/weir/internal/topics"
)

// Policy is what happens to a record that cannot be processed as it is:
// Fail, Skip or DeadLetter(topic). weir.ErrorPolicy converts to it and
// uses the same strings.
type Policy string

const (
	// Fail stops with the record's coordinates.
	Fail Policy = "fail"
	// Skip logs and counts the record and goes on.
	Skip Policy = "skip"
	// deadLetterPrefix starts a DeadLetter policy; the topic follows.
	deadLetterPrefix = "dead-letter:"
)

// DeadLetter writes the record to topic and goes on.
func DeadLetter(topic string) Policy { return Policy(deadLetterPrefix + topic) }

// DeadLetterTopic returns the topic of a DeadLetter policy, "" for any
// other.
func (p Policy) DeadLetterTopic() string {
	topic, ok := strings.CutPrefix(string(p), deadLetterPrefix)
	if !ok {
		return ""
	}
	return topic
}

// Fails reports whether p stops at a failed record: Fail, and the zero
// value, which means the default.
func (p Policy) Fails() bool { return p == Fail || p == "" }

// Valid reports whether p is Fail, Skip, DeadLetter with a topic, or the
// zero value.
func (p Policy) Valid() bool {
	return p.Fails() || p == Skip || p.DeadLetterTopic() != ""
}

// Policies are the error policies of one topic; an empty one means the
// application's.
type Policies struct {
	Deserialization, Timestamp, Processing, Production Policy
}

// PoliciesFor returns the error policies of the records read from or
// written to topic.
func (c *Config) PoliciesFor(topic string) Policies {
	p := Policies{c.DeserializationErrors, c.TimestampErrors, c.ProcessingErrors, c.ProductionErrors}
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
	CleanupDelay    time.Duration
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

// RecordError is a record that stopped the task: it could not be decoded
// or a processor failed on it. weir.RecordError has the same fields, in
// the same order, and converts from it: keep them in step.
type RecordError struct {
	Task      string
	Node      string
	Topic     string
	Partition int32
	Offset    int64
	Err       error
}

func (e *RecordError) Error() string {
	where := fmt.Sprintf("task %s, record %s/%d@%d", e.Task, e.Topic, e.Partition, e.Offset)
	if e.Node != "" {
		where += ", node " + e.Node
	}
	return fmt.Sprintf("weir: %s: %v", where, e.Err)
}

func (e *RecordError) Unwrap() error { return e.Err }

// ReplayWithoutError asks the thread to abort its transaction and replay
// its tasks from their last commit without Record, on which a processor
// failed: under exactly once and ProcessingErrors Skip or DeadLetter, the
// failed record then leaves no trace but its dead-letter record.
type ReplayWithoutError struct{ Record *RecordError }

func (e *ReplayWithoutError) Error() string {
	return "replaying without the failed record: " + e.Record.Error()
}

func (e *ReplayWithoutError) Unwrap() error { return e.Record }

// TopologyError is a mistake in the topology's wiring that a task ran
// into: the topology's fault, never the record's, so it is not a
// RecordError. weir.TopologyError has the same fields, in the same order,
// and converts from it: keep them in step.
type TopologyError struct {
	Task string
	Node string
	Err  error
}

func (e *TopologyError) Error() string {
	return fmt.Sprintf("weir: task %s, node %s: topology error: %v", e.Task, e.Node, e.Err)
}

func (e *TopologyError) Unwrap() error { return e.Err }

// topologyError returns err as a *TopologyError of the task when a node
// reported a *graph.TopologyError, else nil.
func (t *Task) topologyError(err error) *TopologyError {
	var ge *graph.TopologyError
	if !errors.As(err, &ge) {
		return nil
	}
	return &TopologyError{Task: t.name, Node: ge.Node, Err: ge.Err}
}

// ProductionError is a record Kafka refuses. weir.ProductionError, whose
// documentation says what each field holds, has the same fields in the
// same order and converts from it: keep them in step.
type ProductionError struct {
	Task       string
	Topic      string
	Partition  int32
	Offset     int64
	Punctuator string
	Sink       string
	Store      string
	Size       int
	Limit      int
	Err        error
}

func (e *ProductionError) Error() string {
	from := fmt.Sprintf("record %s/%d@%d", e.Topic, e.Partition, e.Offset)
	if e.Offset < 0 {
		from = "punctuator of " + e.Punctuator
	}
	to := "topic " + e.Sink
	if e.Store != "" {
		to = fmt.Sprintf("changelog %s of store %s", e.Sink, e.Store)
	}
	limit := ""
	if e.Limit > 0 {
		limit = fmt.Sprintf(" (limit %d)", e.Limit)
	}
	return fmt.Sprintf("weir: task %s, %s: output to %s refused: %d bytes%s: %v", e.Task, from, to, e.Size, limit, e.Err)
}

func (e *ProductionError) Unwrap() error { return e.Err }

var (
	// ErrRecordTooLarge is weir.ErrRecordTooLarge.
	ErrRecordTooLarge = errors.New("record too large")
	// ErrNullKeyOnCompactedTopic is weir.ErrNullKeyOnCompactedTopic.
	ErrNullKeyOnCompactedTopic = errors.New("record without key for a compacted topic")
)
