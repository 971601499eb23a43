package kstream

import (
	"encoding/binary"
	"fmt"

	"github.com/weirstream/weir/serde"
)

// change is one update of a table, as its nodes pass it on: the key's new
// value and the value it replaces, each possibly absent (a deletion has no
// new value, a first insert no old one). Kafka Streams' Change. Table
// nodes always carry the old value: a grouping subtracts it from the
// group it leaves, and a filter turns an update that stops matching into
// a deletion.
type change[V any] struct {
	new, old       V
	hasNew, hasOld bool
}

// changeSerde writes a change to a repartition topic (a table's GroupBy):
// a flags byte (1: new present, 2: old present), the new value's length as
// a 4-byte big-endian integer and its bytes, then the old value's bytes.
type changeSerde[V any] struct{ values serde.Serde[V] }

func (s changeSerde[V]) Serialize(topic string, c change[V]) ([]byte, error) {
	var flags byte
	var nb, ob []byte
	var err error
	if c.hasNew {
		flags |= 1
		if nb, err = s.values.Serialize(topic, c.new); err != nil {
			return nil, err
		}
	}
	if c.hasOld {
		flags |= 2
		if ob, err = s.values.Serialize(topic, c.old); err != nil {
			return nil, err
		}
	}
	out := make([]byte, 0, 5+len(nb)+len(ob))
	out = append(out, flags)
	out = binary.BigEndian.AppendUint32(out, uint32(len(nb)))
	out = append(out, nb...)
	return append(out, ob...), nil
}

func (s changeSerde[V]) Deserialize(topic string, data []byte) (change[V], error) {
	var c change[V]
	if len(data) < 5 || data[0]&^3 != 0 {
		return c, fmt.Errorf("kstream: a table change needs a flags byte (0-3) and a 4-byte length, got %d bytes", len(data))
	}
	n := binary.BigEndian.Uint32(data[1:5])
	if uint64(n) > uint64(len(data)-5) {
		return c, fmt.Errorf("kstream: a table change's new value of %d bytes does not fit in %d", n, len(data)-5)
	}
	var err error
	if data[0]&1 != 0 {
		if c.new, err = s.values.Deserialize(topic, data[5:5+n]); err != nil {
			return c, err
		}
		c.hasNew = true
	}
	if data[0]&2 != 0 {
		if c.old, err = s.values.Deserialize(topic, data[5+n:]); err != nil {
			return c, err
		}
		c.hasOld = true
	}
	return c, nil
}
