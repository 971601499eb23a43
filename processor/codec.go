package processor

import (
	"fmt"
	"iter"

	"github.com/weirstream/weir/serde"
)

// codec is what every typed store shares: its name, its serdes (which see
// the store's name as their topic) and the first error an iteration met,
// kept for Err because an iter.Seq2 cannot return one.
type codec[K, V any] struct {
	name   string
	keys   serde.Serde[K]
	values serde.Serde[V]
	err    error
}

func (c *codec[K, V]) key(k K) ([]byte, error) {
	b, err := c.keys.Serialize(c.name, k)
	if err != nil {
		return nil, fmt.Errorf("store %s: serialize key: %w", c.name, err)
	}
	return b, nil
}

func (c *codec[K, V]) value(v V) ([]byte, error) {
	b, err := c.values.Serialize(c.name, v)
	if err != nil {
		return nil, fmt.Errorf("store %s: serialize value: %w", c.name, err)
	}
	return b, nil
}

// entry serializes a key and its value.
func (c *codec[K, V]) entry(k K, v V) (kb, vb []byte, err error) {
	if kb, err = c.key(k); err != nil {
		return nil, nil, err
	}
	vb, err = c.value(v)
	return kb, vb, err
}

func (c *codec[K, V]) decodeKey(b []byte) (K, error) {
	k, err := serde.Decode(c.keys, c.name, b)
	if err != nil {
		return k, fmt.Errorf("store %s: deserialize key: %w", c.name, err)
	}
	return k, nil
}

func (c *codec[K, V]) decodeValue(b []byte) (V, error) {
	v, err := serde.Decode(c.values, c.name, b)
	if err != nil {
		return v, fmt.Errorf("store %s: deserialize value: %w", c.name, err)
	}
	return v, nil
}

// decodeEach yields the decoded entries of seq until yield stops or an
// entry does not decode (kept for Err), then keeps errOf's error: the
// byte store's iteration error, when the loop ran to its end.
func (c *codec[K, V]) decodeEach(seq iter.Seq2[[]byte, []byte], errOf func() error, yield func(K, V) bool) {
	for kb, vb := range seq {
		k, err := c.decodeKey(kb)
		if err != nil {
			c.fail(err)
			return
		}
		v, err := c.decodeValue(vb)
		if err != nil {
			c.fail(err)
			return
		}
		if !yield(k, v) {
			return
		}
	}
	if err := errOf(); err != nil {
		c.fail(err)
	}
}

// fail keeps the first iteration error.
func (c *codec[K, V]) fail(err error) {
	if c.err == nil {
		c.err = err
	}
}

// Err returns the first error an iteration met and clears it.
func (c *codec[K, V]) Err() error {
	err := c.err
	c.err = nil
	return err
}
