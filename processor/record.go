package processor

import (
	"time"

	"github.com/weirstream/weir/internal/graph"
)

// Record is a key-value record flowing through a topology.
type Record[K, V any] struct {
	Key   K
	Value V
	// Timestamp is the record's event time: set by the source's timestamp
	// extractor, kept by Forward unless a processor changes it, and written
	// as the Kafka record timestamp by a sink.
	Timestamp time.Time
	// Headers travel with the record to sinks. A processor that changes
	// them should copy the slice first: forwarding shares it.
	Headers []Header
	// Tombstone marks a record without a value, Kafka's null value: a
	// sink writes it with a null value (deleting its key from a compacted
	// topic) and ignores Value, which should be the zero value. Sources
	// set it only when asked to ([WithTombstones]) and for repartition
	// topics; elsewhere a null value goes to the value serde as any
	// other. The DSL's tables forward their deletes as tombstones.
	Tombstone bool
}

// Header is a Kafka record header: Key string, Value []byte. It is the
// runtime's own type, so headers travel from source to sink unconverted.
type Header = graph.Header

// Metadata tells where the record being processed came from: its Topic,
// Partition and Offset. It is the runtime's own type.
type Metadata = graph.Metadata
