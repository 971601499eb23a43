package processor

import (
	"time"
	"unsafe"

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

// Header is a Kafka record header.
type Header struct {
	Key   string
	Value []byte
}

// Metadata tells where the record being processed came from.
type Metadata struct {
	Topic     string
	Partition int32
	Offset    int64
}

// The runtime carries headers as graph.Header, a struct of the same
// fields as Header: a slice of one is a slice of the other in memory, so
// headers cross between the runtime and a node without a copy (the test
// of this file checks the layouts agree).

// fromRuntime returns the runtime's headers as Headers, sharing memory.
func fromRuntime(hs []graph.Header) []Header {
	if len(hs) == 0 {
		return nil
	}
	return unsafe.Slice((*Header)(unsafe.Pointer(unsafe.SliceData(hs))), len(hs))
}

// toRuntime returns Headers as the runtime's headers, sharing memory.
func toRuntime(hs []Header) []graph.Header {
	if len(hs) == 0 {
		return nil
	}
	return unsafe.Slice((*graph.Header)(unsafe.Pointer(unsafe.SliceData(hs))), len(hs))
}
