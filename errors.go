package weir

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/weirstream/weir/internal/statedir"
	"github.com/weirstream/weir/internal/stream"
	"github.com/weirstream/weir/internal/topics"
	"github.com/weirstream/weir/processor"
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

// The errors of a record or of the topology's wiring that Run returns.
// Each is defined in package processor, whose documentation says what
// each field holds; errors.As finds them under either name.
type (
	// RecordError is a record that stopped the application: it could not
	// be decoded, or a processor or sink failed on it.
	RecordError = processor.RecordError
	// TopologyError is a mistake in the topology's wiring that the
	// application ran into.
	TopologyError = processor.TopologyError
	// ProductionError is a record Kafka refuses; Config.ProductionErrors
	// decides whether it stops the application.
	ProductionError = processor.ProductionError
)

// ErrRecordTooLarge is the cause of a ProductionError for a record larger
// than its topic's max.message.bytes or the producer's limit, found before
// it was sent.
var ErrRecordTooLarge = processor.ErrRecordTooLarge

// ErrNullKeyOnCompactedTopic is the cause of a ProductionError for a
// record without key written to a compacted topic, which Kafka refuses.
var ErrNullKeyOnCompactedTopic = processor.ErrNullKeyOnCompactedTopic

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
	// Run returns a record's or the wiring's error itself, not the
	// runtime's wrapping of it.
	var te *TopologyError
	if errors.As(err, &te) {
		return te
	}
	var re *RecordError
	if errors.As(err, &re) {
		return re
	}
	var pe *ProductionError
	if errors.As(err, &pe) {
		return pe
	}
	return err
}
