package kstream

// The encodings of a stream-stream join's stores.

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/weirstream/weir/serde"
)

// pendingKey keys a join's outer store: a waiting record's time, side and
// key, in that order (ts big-endian, then 0 for left and 1 for right, then
// the key's bytes), so that the store is ordered by time.
type pendingKey[K any] struct {
	ts    int64
	right bool
	key   K
}

type pendingKeySerde[K any] struct{ keys serde.Serde[K] }

func (s pendingKeySerde[K]) Serialize(topic string, k pendingKey[K]) ([]byte, error) {
	kb, err := s.keys.Serialize(topic, k.key)
	if err != nil {
		return nil, err
	}
	out := binary.BigEndian.AppendUint64(make([]byte, 0, 9+len(kb)), uint64(k.ts)^(1<<63))
	side := byte(0)
	if k.right {
		side = 1
	}
	return append(append(out, side), kb...), nil
}

func (s pendingKeySerde[K]) Deserialize(topic string, data []byte) (pendingKey[K], error) {
	var k pendingKey[K]
	if len(data) < 9 || data[8] > 1 {
		return k, fmt.Errorf("kstream: a join's waiting-record key needs 9 bytes of time and side, got %d", len(data))
	}
	k.ts = int64(binary.BigEndian.Uint64(data) ^ (1 << 63))
	k.right = data[8] == 1
	var err error
	k.key, err = s.keys.Deserialize(topic, data[9:])
	return k, err
}

// pending are the unmatched records of one side waiting under one key and
// time: lefts or rights.
type pending[L, R any] struct {
	left   bool
	lefts  []L
	rights []R
}

type pendingSerde[L, R any] struct {
	lvals serde.Serde[L]
	rvals serde.Serde[R]
}

func (s pendingSerde[L, R]) Serialize(topic string, p pending[L, R]) ([]byte, error) {
	if p.left {
		b, err := listSerde[L]{s.lvals}.Serialize(topic, p.lefts)
		return append([]byte{0}, b...), err
	}
	b, err := listSerde[R]{s.rvals}.Serialize(topic, p.rights)
	return append([]byte{1}, b...), err
}

func (s pendingSerde[L, R]) Deserialize(topic string, data []byte) (pending[L, R], error) {
	var p pending[L, R]
	if len(data) < 1 || data[0] > 1 {
		return p, errors.New("kstream: a join's waiting records need a side byte")
	}
	var err error
	if data[0] == 0 {
		p.left = true
		p.lefts, err = listSerde[L]{s.lvals}.Deserialize(topic, data[1:])
	} else {
		p.rights, err = listSerde[R]{s.rvals}.Deserialize(topic, data[1:])
	}
	return p, err
}

// listSerde writes a list of values: each value's length as a uvarint,
// then its bytes.
type listSerde[V any] struct{ values serde.Serde[V] }

func (s listSerde[V]) Serialize(topic string, vs []V) ([]byte, error) {
	var out []byte
	for _, v := range vs {
		b, err := s.values.Serialize(topic, v)
		if err != nil {
			return nil, err
		}
		out = binary.AppendUvarint(out, uint64(len(b)))
		out = append(out, b...)
	}
	if out == nil {
		out = []byte{} // an empty list is not a tombstone
	}
	return out, nil
}

func (s listSerde[V]) Deserialize(topic string, data []byte) ([]V, error) {
	var out []V
	for len(data) > 0 {
		n, w := binary.Uvarint(data)
		if w <= 0 || n > uint64(len(data)-w) {
			return nil, errors.New("kstream: a list of join values is cut short")
		}
		v, err := s.values.Deserialize(topic, data[w:w+int(n)])
		if err != nil {
			return nil, err
		}
		out = append(out, v)
		data = data[w+int(n):]
	}
	return out, nil
}
