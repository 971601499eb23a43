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

func toHeaders(hs []graph.Header) []Header {
	if len(hs) == 0 {
		return nil
	}
	out := make([]Header, len(hs))
	for i, h := range hs {
		out[i] = Header(h)
	}
	return out
}

func fromHeaders(hs []Header) []graph.Header {
	if len(hs) == 0 {
		return nil
	}
	out := make([]graph.Header, len(hs))
	for i, h := range hs {
		out[i] = graph.Header(h)
	}
	return out
}
