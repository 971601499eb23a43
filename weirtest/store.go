package weirtest

import (
	"fmt"

	"github.com/weirstream/weir/internal/statelog"
	"github.com/weirstream/weir/serde"
)

// KeyValueView reads a key-value store of the topology (one declared with
// processor.KeyValue, or the store of a kstream aggregation) as its
// processors see it. Take one with [KeyValueStore].
type KeyValueView[K, V any] struct {
	d      *Driver
	name   string
	keys   serde.Serde[K]
	values serde.Serde[V]
}

// Entry is an entry of a key-value store: a key and its value.
type Entry[K, V any] struct {
	Key   K
	Value V
}

// KeyValue is Entry. In weir, KeyValue names the kind of store
// (processor.KeyValue, ktable.KeyValue, [KeyValueStore]), never a pair.
//
// Deprecated: use Entry.
type KeyValue[K, V any] = Entry[K, V]

// KeyValueStore returns a reader of the key-value store name with the
// store's serdes.
func KeyValueStore[K, V any](d *Driver, name string, keys serde.Serde[K], values serde.Serde[V]) *KeyValueView[K, V] {
	return &KeyValueView[K, V]{d: d, name: name, keys: keys, values: values}
}

func (s *KeyValueView[K, V]) bytes() (statelog.Bytes, error) {
	for _, tk := range s.d.tasks {
		if b, ok := tk.StoreBytes(s.name); ok {
			return b, nil
		}
	}
	return nil, fmt.Errorf("weirtest: no store %q", s.name)
}

// Get returns the value of key and whether the store has it.
func (s *KeyValueView[K, V]) Get(key K) (value V, found bool, err error) {
	b, err := s.bytes()
	if err != nil {
		return value, false, err
	}
	kb, err := s.keys.Serialize(s.name, key)
	if err != nil {
		return value, false, fmt.Errorf("weirtest: store %s: key: %w", s.name, err)
	}
	vb, err := b.Get(kb)
	if err != nil || vb == nil {
		return value, false, err
	}
	if value, err = serde.Decode(s.values, s.name, vb); err != nil {
		return value, false, fmt.Errorf("weirtest: store %s: value: %w", s.name, err)
	}
	return value, true, nil
}

// All returns every entry of the store, in the order of the serialized
// keys.
func (s *KeyValueView[K, V]) All() ([]Entry[K, V], error) {
	b, err := s.bytes()
	if err != nil {
		return nil, err
	}
	var out []Entry[K, V]
	for kb, vb := range b.Range(nil, nil) {
		k, err := serde.Decode(s.keys, s.name, kb)
		if err != nil {
			return nil, fmt.Errorf("weirtest: store %s: key: %w", s.name, err)
		}
		v, err := serde.Decode(s.values, s.name, vb)
		if err != nil {
			return nil, fmt.Errorf("weirtest: store %s: value: %w", s.name, err)
		}
		out = append(out, Entry[K, V]{Key: k, Value: v})
	}
	return out, b.Err()
}
