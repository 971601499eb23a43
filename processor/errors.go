package processor

import (
	"errors"
	"fmt"
)

// RecordError is a record that stopped the application: it could not be
// decoded, or a processor or sink failed on it. weir.App's Run returns it
// (as weir.RecordError, the same type), and weir_node_failures_total
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
func (e *RecordError) Error() string {
	where := fmt.Sprintf("task %s, record %s/%d@%d", e.Task, e.Topic, e.Partition, e.Offset)
	if e.Node != "" {
		where += ", node " + e.Node
	}
	return fmt.Sprintf("weir: %s: %v", where, e.Err)
}

// Unwrap returns the cause.
func (e *RecordError) Unwrap() error { return e.Err }

// TopologyError is a mistake in the topology's wiring that an application
// ran into, such as a processor forwarding to a child handle of another
// node or opening a store that is not attached to it. It is the
// topology's fault, not a record's: fix the topology and deploy; skipping
// the record being processed would not help, so the runtime never reports
// it as a RecordError. Mistakes the topology shows on its own (a child
// name that does not exist, a duplicate name) fail weir.New instead.
// weir.App's Run returns it as weir.TopologyError, the same type.
type TopologyError struct {
	Task string // task id, "<sub-topology>_<partition>"; set by the runtime
	Node string // node whose wiring is wrong
	Err  error  // what is wrong
}

// Error names the task and the node and says what is wrong.
func (e *TopologyError) Error() string {
	return fmt.Sprintf("weir: task %s, node %s: topology error: %v", e.Task, e.Node, e.Err)
}

// Unwrap returns the cause.
func (e *TopologyError) Unwrap() error { return e.Err }

// ProductionError is a record Kafka refuses, so that it can never be
// written as it is: larger than the topic's max.message.bytes or the
// producer's limit, without a key on a compacted topic, or otherwise
// refused as invalid. It names the input record whose processing produced
// it (or the punctuator), the topic it was for and its size, never its
// contents. weir.Config.ProductionErrors decides whether it stops the
// application (as weir.ProductionError, the same type); a changelog
// record always does, since state cannot skip.
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

// Unwrap returns the cause.
func (e *ProductionError) Unwrap() error { return e.Err }

var (
	// ErrRecordTooLarge is the cause of a ProductionError for a record
	// larger than its topic's max.message.bytes or the producer's limit,
	// found before it was sent.
	ErrRecordTooLarge = errors.New("record too large")
	// ErrNullKeyOnCompactedTopic is the cause of a ProductionError for a
	// record without key written to a compacted topic, which Kafka
	// refuses.
	ErrNullKeyOnCompactedTopic = errors.New("record without key for a compacted topic")
)
