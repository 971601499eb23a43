package task

import (
	"slices"

	"github.com/weirstream/weir/internal/graph"
	"github.com/weirstream/weir/internal/statelog"
)

// Records with a null Kafka key in stateful operations.
//
// Such a record reaches processors with the key serde's decoding of nil
// (serde.String gives ""), so a processor that keeps state per key would
// keep one entry for all of them, and a repartition would send them all to
// one partition under an empty key. Kafka Streams drops null-key records
// before stateful operations and repartitions. weir's Processor API runs
// the processor, and the task drops what the record writes under the empty
// key: store writes (nullKeyBytes, and the window and session stores of
// package processor through graph.NullKeyGuard) and repartition records
// (task.Send). The rule is tied to the input record being processed
// (task.process calls nullKeys.begin), so a processor that re-keys such a
// record, a record whose key is present but empty, and a punctuator are
// unaffected.

// nullKeys is the state of the rule for the input record being processed.
type nullKeys struct {
	active  bool           // the record's Kafka key is null
	counted bool           // a drop of the record has been counted
	logged  []nullKeyWhere // where drops of the record have been logged
}

// nullKeyWhere is where a dropped write was going: a log attribute
// ("store" or "repartition_topic") and its value.
type nullKeyWhere struct{ attr, name string }

// begin starts the rule for an input record; active is whether its Kafka
// key is null (sarama decodes a present but empty key as an empty,
// non-nil slice).
func (n *nullKeys) begin(active bool) {
	n.active, n.counted, n.logged = active, false, n.logged[:0]
}

// dropNullKey reports whether a write of key to where (a store or
// repartition topic) is dropped by the rule, and counts and logs it when
// it is: the input record once in weir_records_dropped_total, and one warn
// line per record and destination. The log names the record's coordinates
// and the destination, never its key or value.
func (t *Task) dropNullKey(key []byte, attr, name string) bool {
	if !t.nulls.active || len(key) > 0 {
		return false
	}
	if !t.nulls.counted {
		t.nulls.counted = true
		t.dropped.Inc()
	}
	w := nullKeyWhere{attr, name}
	if !slices.Contains(t.nulls.logged, w) {
		t.nulls.logged = append(t.nulls.logged, w)
		t.log.Warn("dropping a write of a record with a null key",
			"topic", t.meta.Topic, "partition", t.meta.Partition, "offset", t.meta.Offset, attr, name)
	}
	return true
}

// nullKeyBytes is a store partition as its processors see it: the store's
// write buffer, with the null-key rule applied to the keys it is given.
// Those are the user's keys for a key-value store. A window or session
// store gives it composite keys, a prefix byte before the user key, which
// are never empty, so Put and Delete here never drop one of theirs; they
// ask NullKey and DropNullKey about the user key first instead, and their
// expiry, which deletes windows the record never named, is left alone.
//
// A read of the empty key is a miss rather than what a record with a
// present but empty key stored there: the null-key record's writes are
// dropped, so it sees the state they would have left, none, and whatever
// it computes from it goes nowhere under that key.
type nullKeyBytes struct {
	statelog.Bytes
	t     *Task
	store string
}

var (
	_ statelog.Bytes     = (*nullKeyBytes)(nil)
	_ graph.NullKeyGuard = (*nullKeyBytes)(nil)
)

// NullKey implements graph.NullKeyGuard.
func (b *nullKeyBytes) NullKey(key []byte) bool { return b.t.nulls.active && len(key) == 0 }

// DropNullKey implements graph.NullKeyGuard.
func (b *nullKeyBytes) DropNullKey(key []byte) bool { return b.t.dropNullKey(key, "store", b.store) }

// Get implements statelog.Bytes.
func (b *nullKeyBytes) Get(key []byte) ([]byte, error) {
	if b.NullKey(key) {
		return nil, nil
	}
	return b.Bytes.Get(key)
}

// GetStamped implements statelog.Bytes.
func (b *nullKeyBytes) GetStamped(key []byte) ([]byte, int64, bool, error) {
	if b.NullKey(key) {
		return nil, 0, false, nil
	}
	return b.Bytes.GetStamped(key)
}

// PutStamped implements statelog.Bytes.
func (b *nullKeyBytes) PutStamped(key, value []byte, ts int64) error {
	if b.DropNullKey(key) {
		return nil
	}
	return b.Bytes.PutStamped(key, value, ts)
}

// Put implements statelog.Bytes.
func (b *nullKeyBytes) Put(key, value []byte) error {
	if b.DropNullKey(key) {
		return nil
	}
	return b.Bytes.Put(key, value)
}

// Delete implements statelog.Bytes.
func (b *nullKeyBytes) Delete(key []byte) error {
	if b.DropNullKey(key) {
		return nil
	}
	return b.Bytes.Delete(key)
}
