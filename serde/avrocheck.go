package serde

import (
	"errors"
	"fmt"
	"math"

	"github.com/hamba/avro/v2"
)

// Bounds of what one Avro record may make the decoder allocate, checked
// before the decoder runs (see checkAvro).
const (
	// DefaultAvroMaxItems is the default of [AvroConfig.MaxItems].
	DefaultAvroMaxItems = 1 << 20
	// avroMaxDepth bounds the nesting of records, arrays, maps and unions
	// in one record, so that a recursive schema cannot make the decoder
	// recurse as deep as the data is long.
	avroMaxDepth = 256
)

// errAvroShape is the cause of the FormatError of a record whose bytes
// cannot be what its writer schema says: a length or count that is
// negative or larger than the bytes left, a union or enum index out of
// range, nesting or items past the bounds.
var errAvroShape = errors.New("avro: malformed record")

// avroCheck walks the binary encoding of one record with its writer
// schema, without allocating, and refuses what hamba/avro would decode
// into memory corruption or an unbounded allocation. hamba v2.31.0 takes
// array and map block counts as they come: a count of math.MinInt64 stays
// negative when negated, and the decoder then grows a slice to a negative
// length (a nil error and len(v) < 0, or writes past the slice), and a
// count of 2^27 in a 11-byte record allocates gigabytes. Every count is
// checked here against the bytes left, so what the decoder allocates is
// bounded by the record's size (and MaxItems for items that take no
// bytes).
type avroCheck struct {
	b        []byte
	pos      int
	maxBytes int // a string or bytes value; < 0 for no bound
	maxItems int // array items and map entries of the record together
	items    int
	depth    int
}

// checkAvro checks body, a record written with writer, and returns the
// reason in weir's words when it is malformed.
func checkAvro(writer avro.Schema, body []byte, maxBytes, maxItems int) (string, error) {
	c := &avroCheck{b: body, maxBytes: maxBytes, maxItems: maxItems}
	if err := c.value(writer); err != nil {
		return err.Error(), fmt.Errorf("%w: %w", errAvroShape, err)
	}
	return "", nil
}

func (c *avroCheck) left() int { return len(c.b) - c.pos }

func (c *avroCheck) take(n int) error {
	if n > c.left() {
		return fmt.Errorf("the data ends at byte %d, %d bytes short of a value (truncated)", len(c.b), n-c.left())
	}
	c.pos += n
	return nil
}

// long reads a zig-zag varint of at most maxLen bytes.
func (c *avroCheck) long(maxLen int) (int64, error) {
	var u uint64
	for i := 0; i < maxLen; i++ {
		if c.pos >= len(c.b) {
			return 0, fmt.Errorf("the data ends at byte %d inside a number (truncated)", len(c.b))
		}
		b := c.b[c.pos]
		c.pos++
		u |= uint64(b&0x7f) << (7 * i)
		if b&0x80 == 0 {
			return int64(u>>1) ^ -int64(u&1), nil
		}
	}
	return 0, fmt.Errorf("a number at byte %d runs longer than %d bytes", c.pos-maxLen, maxLen)
}

func (c *avroCheck) value(s avro.Schema) error {
	switch s := s.(type) {
	case *avro.NullSchema:
		return nil
	case *avro.PrimitiveSchema:
		return c.primitive(s.Type())
	case *avro.RecordSchema:
		if err := c.enter(); err != nil {
			return err
		}
		for _, f := range s.Fields() {
			if err := c.value(f.Type()); err != nil {
				return err
			}
		}
		c.depth--
		return nil
	case *avro.EnumSchema:
		at := c.pos
		i, err := c.long(5)
		if err != nil {
			return err
		}
		if i < 0 || i >= int64(len(s.Symbols())) {
			return fmt.Errorf("enum index %d at byte %d is outside the %d symbols", i, at, len(s.Symbols()))
		}
		return nil
	case *avro.ArraySchema:
		return c.blocks(s.Items(), nil)
	case *avro.MapSchema:
		return c.blocks(s.Values(), avro.NewPrimitiveSchema(avro.String, nil))
	case *avro.UnionSchema:
		at := c.pos
		i, err := c.long(10)
		if err != nil {
			return err
		}
		types := s.Types()
		if i < 0 || i >= int64(len(types)) {
			return fmt.Errorf("union index %d at byte %d is outside the %d branches", i, at, len(types))
		}
		if err := c.enter(); err != nil {
			return err
		}
		err = c.value(types[i])
		c.depth--
		return err
	case *avro.FixedSchema:
		return c.take(s.Size())
	case *avro.RefSchema:
		return c.value(s.Schema())
	}
	return fmt.Errorf("a schema of type %s that weir does not know", s.Type())
}

func (c *avroCheck) enter() error {
	c.depth++
	if c.depth > avroMaxDepth {
		return fmt.Errorf("values nest deeper than %d at byte %d", avroMaxDepth, c.pos)
	}
	return nil
}

func (c *avroCheck) primitive(t avro.Type) error {
	switch t {
	case avro.Null:
		return nil
	case avro.Boolean:
		return c.take(1)
	case avro.Int:
		_, err := c.long(5)
		return err
	case avro.Long:
		_, err := c.long(10)
		return err
	case avro.Float:
		return c.take(4)
	case avro.Double:
		return c.take(8)
	case avro.String, avro.Bytes:
		at := c.pos
		n, err := c.long(10)
		switch {
		case err != nil:
			return err
		case n < 0:
			return fmt.Errorf("a length of %d at byte %d is negative", n, at)
		case c.maxBytes >= 0 && n > int64(c.maxBytes):
			return fmt.Errorf("a length of %d at byte %d is over the %d-byte bound", n, at, c.maxBytes)
		case n > int64(c.left()):
			return fmt.Errorf("a length of %d at byte %d is more than the %d bytes left", n, at, c.left())
		}
		return c.take(int(n))
	}
	return fmt.Errorf("a schema of type %s that weir does not know", t)
}

// blocks checks an array's (key nil) or a map's blocks of items.
func (c *avroCheck) blocks(item, key avro.Schema) error {
	if err := c.enter(); err != nil {
		return err
	}
	defer func() { c.depth-- }()
	least := minAvroSize(item, 0)
	if key != nil {
		least++ // a map key's length
	}
	for {
		at := c.pos
		n, err := c.long(10)
		if err != nil {
			return err
		}
		if n == 0 {
			return nil
		}
		if n < 0 {
			if n == math.MinInt64 {
				return fmt.Errorf("a block count of %d at byte %d has no positive counterpart", n, at)
			}
			n = -n
			size, err := c.long(10)
			if err != nil {
				return err
			}
			if size < 0 || size > int64(c.left()) {
				return fmt.Errorf("a block of %d bytes at byte %d does not fit the %d bytes left", size, at, c.left())
			}
		}
		if least > 0 && n > int64(c.left()/least) {
			return fmt.Errorf("a block of %d items at byte %d cannot fit the %d bytes left", n, at, c.left())
		}
		if n > int64(c.maxItems-c.items) {
			return fmt.Errorf("a block of %d items at byte %d passes the bound of %d items a record", n, at, c.maxItems)
		}
		c.items += int(n)
		for range n {
			if key != nil {
				if err := c.value(key); err != nil {
					return err
				}
			}
			if err := c.value(item); err != nil {
				return err
			}
		}
	}
}

// minAvroSize is the fewest bytes a value of s takes; depth guards
// against a record that holds itself without a union between.
func minAvroSize(s avro.Schema, depth int) int {
	if depth > avroMaxDepth {
		return 0
	}
	switch s := s.(type) {
	case *avro.NullSchema:
		return 0
	case *avro.PrimitiveSchema:
		switch s.Type() {
		case avro.Null:
			return 0
		case avro.Float:
			return 4
		case avro.Double:
			return 8
		}
		return 1
	case *avro.RecordSchema:
		n := 0
		for _, f := range s.Fields() {
			n += minAvroSize(f.Type(), depth+1)
		}
		return n
	case *avro.FixedSchema:
		return s.Size()
	case *avro.RefSchema:
		return minAvroSize(s.Schema(), depth+1)
	}
	return 1 // enum, array, map, union: at least a count or an index
}
