package weir

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/weirstream/weir/internal/statedir"
	"github.com/weirstream/weir/internal/stream"
	"github.com/weirstream/weir/internal/task"
	"github.com/weirstream/weir/internal/topics"
	"github.com/weirstream/weir/schema"
)

// ErrStateDirLocked is returned by Run when another instance holds the
// application's state directory.
var ErrStateDirLocked = statedir.ErrLocked

// ErrStateDirUnsafe is wrapped by the error Run returns when the
// application's state directory is owned by another user, or its group or
// others may write it: its files decide what the instance restores and
// which transactional ids it uses. Run creates the directory 0700.
var ErrStateDirUnsafe = statedir.ErrUnsafe

// ErrInstanceFenced is returned by Run when another instance took this
// instance's transactional ids: one with the same process id, which lives
// in the state directory. It runs on; this one stops. (A producer fenced
// once, after its transaction outlived Config.TransactionTimeout, is
// rebuilt and the instance goes on: docs/operations.md, "ErrInstanceFenced".)
// txn.ErrFenced is the producer-level condition it is concluded from.
var ErrInstanceFenced = stream.ErrFenced

// ErrFenced is ErrInstanceFenced.
//
// Deprecated: use ErrInstanceFenced; txn.ErrFenced is the producer's
// condition, this the instance's.
var ErrFenced = ErrInstanceFenced

// ErrClosed is returned by Run on an App that was closed or already ran.
var ErrClosed = errors.New("weir: app closed")

// ErrKeySchemaChanged is the Err of a [*SchemaError] for a key schema that
// differs from the latest one registered under its subject.
var ErrKeySchemaChanged = errors.New("weir: key schema changed")

// SchemaError is a schema that the start-time check refused (see
// Config.Registry): a store's or a sink's value schema that the
// subject's compatibility level does not accept, or a key schema that
// differs from the latest registered one. Run returns it before it creates
// a topic, commits an offset or touches local state. Every schema is
// checked before any is registered, so a refusal registers none of the
// topology's schemas (only the stores' value subjects may have been set
// to BACKWARD_TRANSITIVE); a schema that passed its check and is refused
// at registration, because another instance registered one in between,
// is reported the same way. Fix the schema (a new field needs a default; a
// field's type cannot change) or, for an intended break, use a new store
// name or a new application id.
type SchemaError struct {
	// Store is the state store whose serde has the schema; empty for a
	// sink's.
	Store string
	// Topic is the topic a sink writes with the schema; empty for a store.
	Topic string
	// Part says whether the key or the value schema was refused.
	Part schema.Part
	// Subject is the registry subject that refused it:
	// "<application id>-<store>-key|value" for a store, the serde's
	// subject of Topic for a sink.
	Subject string
	// Reason says why: the registry's reason, or weir's Avro check of the
	// schema against the version that refuses it when the registry gives
	// none. It names fields and types, never data.
	Reason string
	// Err is the cause: a *schema.IncompatibleError for a value schema,
	// [ErrKeySchemaChanged] for a key schema.
	Err error
}

// Error names the store or the topic, the part, the subject and the
// reason: "weir: store counts: value schema refused by subject
// app-counts-value: <reason>".
func (e *SchemaError) Error() string {
	what := "store " + e.Store
	if e.Store == "" {
		what = "sink topic " + e.Topic
	}
	return fmt.Sprintf("weir: %s: %s schema refused by subject %s: %s", what, e.Part, e.Subject, e.Reason)
}

// Unwrap returns the cause.
func (e *SchemaError) Unwrap() error { return e.Err }

// RecordError is a record that stopped the application: it could not be
// decoded, or a processor or sink failed on it. weir_node_failures_total
// counts it under Node.
//
// weir's own text names the record, never its contents. The text of Err
// is the cause's: a serde's error or a processor's, which may quote what
// they were given (see package serde, "Errors"); weir's built-in serdes
// never do.
type RecordError struct {
	Task string // task id, "<sub-topology>_<partition>"
	// Node is the node that failed: the source that could not decode the
	// record (Err is then "cannot decode key|value|timestamp: <cause>"),
	// or the processor or sink that returned Err. Empty only for an error
	// no node reported.
	Node      string
	Topic     string
	Partition int32
	Offset    int64
	Err       error
}

// Error names the task, the record's coordinates and the node, then the
// cause: "weir: task 0_3, record orders/3@1234, node parse: <cause>"
// (without ", node ..." when Node is empty).
func (e *RecordError) Error() string { return (*task.RecordError)(e).Error() }

// Unwrap returns the cause.
func (e *RecordError) Unwrap() error { return e.Err }

// TopologyError is a mistake in the topology's wiring that an application
// ran into, such as a processor forwarding to a child handle of another
// node or opening a store that is not attached to it. It is the
// topology's fault, not a record's: fix the topology and deploy; skipping
// the record being processed would not help. Mistakes the topology shows
// on its own (a child name that does not exist, a duplicate name) fail New
// instead.
type TopologyError struct {
	Task string // task id, "<sub-topology>_<partition>"
	Node string // node whose wiring is wrong
	Err  error  // what is wrong
}

// Error names the task and the node and says what is wrong.
func (e *TopologyError) Error() string { return (*task.TopologyError)(e).Error() }

// Unwrap returns the cause.
func (e *TopologyError) Unwrap() error { return e.Err }

// ProductionError is a record Kafka refuses, so that it can never be
// written as it is: larger than the topic's max.message.bytes or the
// producer's limit, without a key on a compacted topic, or otherwise
// refused as invalid. It names the input record whose processing produced
// it (or the punctuator), the topic it was for and its size, never its
// contents. Config.ProductionErrors decides whether it stops the
// application; a changelog record always does, since state cannot skip.
type ProductionError struct {
	Task string // task id, "<sub-topology>_<partition>"
	// The input record being processed; Offset is -1 when a punctuator
	// produced the record, and Punctuator names its node.
	Topic      string
	Partition  int32
	Offset     int64
	Punctuator string
	// Sink is the topic the record was for; Store is set when it was the
	// store's changelog record.
	Sink  string
	Store string
	Size  int // bytes as the producer counts them: key, value, headers and record overhead
	Limit int // the limit it exceeds, in the same bytes; 0 when not a size limit
	Err   error
}

// Error names the record's origin, its destination, its size and the limit.
func (e *ProductionError) Error() string { return (*task.ProductionError)(e).Error() }

// Unwrap returns the cause.
func (e *ProductionError) Unwrap() error { return e.Err }

// ErrRecordTooLarge is the cause of a ProductionError for a record larger
// than its topic's max.message.bytes or the producer's limit, found before
// it was sent.
var ErrRecordTooLarge = task.ErrRecordTooLarge

// ErrNullKeyOnCompactedTopic is the cause of a ProductionError for a
// record without key written to a compacted topic, which Kafka refuses.
var ErrNullKeyOnCompactedTopic = task.ErrNullKeyOnCompactedTopic

// CopartitionError reports the source topics of a sub-topology with
// different partition counts: their records could not meet in one task.
type CopartitionError struct {
	Subtopology int
	Partitions  map[string]int32 // topic -> partition count
}

// Error lists the topics with their partition counts.
func (e *CopartitionError) Error() string {
	return fmt.Sprintf("weir: sub-topology %d reads topics that are not co-partitioned: %s", e.Subtopology, formatCounts(e.Partitions))
}

// MissingTopicError reports topics the topology reads or writes that do not
// exist: source and sink topics. Run returns it before it creates any
// internal topic.
type MissingTopicError struct {
	Topics []string
}

// Error lists the missing topics.
func (e *MissingTopicError) Error() string {
	return fmt.Sprintf("weir: topics the topology reads or writes do not exist: %v", e.Topics)
}

func formatCounts(m map[string]int32) string {
	topics := make([]string, 0, len(m))
	for t := range m {
		topics = append(topics, t)
	}
	slices.Sort(topics)
	parts := make([]string, len(topics))
	for i, t := range topics {
		parts[i] = fmt.Sprintf("%s has %d", t, m[t])
	}
	return strings.Join(parts, ", ")
}

// publicError gives an error from the runtime's internal packages the
// public type that Run documents, so callers can errors.As it.
func publicError(err error) error {
	var me *topics.MissingError
	if errors.As(err, &me) {
		return &MissingTopicError{Topics: me.Topics}
	}
	var ce *topics.CopartitionError
	if errors.As(err, &ce) {
		return &CopartitionError{Subtopology: ce.Subtopology, Partitions: ce.Partitions}
	}
	// The runtime's error types have the public ones' fields: a
	// conversion keeps every field.
	var te *task.TopologyError
	if errors.As(err, &te) {
		return (*TopologyError)(te)
	}
	var re *task.RecordError
	if errors.As(err, &re) {
		return (*RecordError)(re)
	}
	var pe *task.ProductionError
	if errors.As(err, &pe) {
		return (*ProductionError)(pe)
	}
	return err
}
