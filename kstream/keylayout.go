package kstream

import (
	"encoding/binary"

	"github.com/weirstream/weir/internal/graph"
)

// The stores of the DSL's own whose keys embed the partitioning key say
// where it sits (graph.KeyLayout), so that `weir rescale` can move each
// entry to the partition of its key. processor.AddStore reads the layout
// from the store's key serde.

// KeyLayout: a suppression buffer's key is the window end and start (8
// bytes each), then the key; the entry that keeps the wall-clock close
// point (closedKey: end and start math.MaxInt64) belongs to the task, and
// a rescale gives every new partition the latest one.
func (bufferKeySerde[K]) KeyLayout() graph.KeyLayout {
	closed := make([]byte, 16) // closedKey's end and start, as bufferKeySerde writes them
	binary.BigEndian.PutUint64(closed, uint64(closedMark))
	binary.BigEndian.PutUint64(closed[8:], uint64(closedMark))
	return graph.KeyLayout{Skip: 16, Shared: closed}
}

// KeyLayout: a time-limit buffer's key is the buffer time (8 bytes), then
// a suppression buffer's key, which has no task entry here.
func (timedKeySerde[K]) KeyLayout() graph.KeyLayout { return graph.KeyLayout{Skip: 24} }

// KeyLayout: a waiting join record's key is its time (8 bytes) and side
// (1 byte), then the key.
func (pendingKeySerde[K]) KeyLayout() graph.KeyLayout { return graph.KeyLayout{Skip: 9} }

// KeyLayout: a subscription's key is the foreign key, length-prefixed,
// then the subscribing row's key; its sub-topology is partitioned by the
// foreign key.
func (subKeySerde[KO, K]) KeyLayout() graph.KeyLayout { return graph.KeyLayout{LengthPrefixed: true} }
