package processor

import (
	"fmt"
	"iter"
	"time"

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

// each yields the entries of seq, their keys decoded by keyOf and their
// values by the value serde, until yield stops or an entry does not
// decode (kept for Err). It reports whether it ran to the end of seq.
func (c *codec[K, V]) each[BK, UK any](seq iter.Seq2[BK, []byte], keyOf func(BK) (UK, error), yield func(UK, V) bool) bool {
	for bk, vb := range seq {
		k, err := keyOf(bk)
		if err != nil {
			c.fail(err)
			return false
		}
		v, err := c.decodeValue(vb)
		if err != nil {
			c.fail(err)
			return false
		}
		if !yield(k, v) {
			return false
		}
	}
	return true
}

// found decodes the value a point read returned with err, the read's
// error: a nil value is a miss.
func (c *codec[K, V]) found(vb []byte, err error) (V, bool, error) {
	var zero V
	if err != nil || vb == nil {
		return zero, false, err
	}
	v, err := c.decodeValue(vb)
	if err != nil {
		return zero, false, err
	}
	return v, true, nil
}

// foundStamped is found for a read that returns the value's timestamp.
func (c *codec[K, V]) foundStamped(vb []byte, ms int64, stamped bool, err error) (V, time.Time, bool, error) {
	v, ok, err := c.found(vb, err)
	if !ok {
		return v, time.Time{}, false, err
	}
	return v, stampTime(ms, stamped), true, nil
}

// stampTime is a stored timestamp as a time: the zero time for none.
func stampTime(ms int64, stamped bool) time.Time {
	if !stamped {
		return time.Time{}
	}
	return time.UnixMilli(ms)
}

// wrap names the store in an error of its byte layout; nil stays nil.
func (c *codec[K, V]) wrap(err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("store %s: %w", c.name, err)
}

// fail keeps the first iteration error; a nil err is none.
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
