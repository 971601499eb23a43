package serde

import (
	"encoding/binary"
	"math"
	"unicode/utf8"
)

// String returns the serde of UTF-8 text, compatible with Kafka's
// StringSerializer. Nil data deserializes to "", invalid UTF-8 is an error
// on both sides, so text written by weir is always valid UTF-8.
func String() Serde[string] { return stringSerde{} }

type stringSerde struct{}

func (stringSerde) Serialize(_ string, v string) ([]byte, error) {
	if !utf8.ValidString(v) {
		return nil, errInvalidUTF8
	}
	return []byte(v), nil
}

func (stringSerde) Deserialize(_ string, data []byte) (string, error) {
	if !utf8.Valid(data) {
		return "", errInvalidUTF8
	}
	return string(data), nil
}

var errInvalidUTF8 = &FormatError{Format: "string", SchemaID: NoSchemaID, Reason: "invalid UTF-8"}

// Bytes returns the serde that passes bytes through, compatible with Kafka's
// ByteArraySerializer. Deserialize copies the data, so the result outlives
// the runtime's buffer; nil stays nil.
func Bytes() Serde[[]byte] { return bytesSerde{} }

type bytesSerde struct{}

func (bytesSerde) Serialize(_ string, v []byte) ([]byte, error) { return v, nil }

func (bytesSerde) Deserialize(_ string, data []byte) ([]byte, error) {
	if data == nil {
		return nil, nil
	}
	return append([]byte(nil), data...), nil
}

// Int64 returns the serde of 8-byte big-endian signed integers, compatible
// with Kafka's LongSerializer. Nil data is [ErrNull]; any length other than 8
// is a [*SizeError].
func Int64() Serde[int64] { return int64Serde{} }

type int64Serde struct{}

func (int64Serde) Serialize(_ string, v int64) ([]byte, error) {
	return binary.BigEndian.AppendUint64(make([]byte, 0, 8), uint64(v)), nil
}

func (int64Serde) Deserialize(_ string, data []byte) (int64, error) {
	if data == nil {
		return 0, ErrNull
	}
	if len(data) != 8 {
		return 0, &SizeError{Format: "int64", Want: 8, Got: len(data)}
	}
	return int64(binary.BigEndian.Uint64(data)), nil
}

// Int32 returns the serde of 4-byte big-endian signed integers, compatible
// with Kafka's IntegerSerializer. Nil data is [ErrNull]; any length other
// than 4 is a [*SizeError].
func Int32() Serde[int32] { return int32Serde{} }

type int32Serde struct{}

func (int32Serde) Serialize(_ string, v int32) ([]byte, error) {
	return binary.BigEndian.AppendUint32(make([]byte, 0, 4), uint32(v)), nil
}

func (int32Serde) Deserialize(_ string, data []byte) (int32, error) {
	if data == nil {
		return 0, ErrNull
	}
	if len(data) != 4 {
		return 0, &SizeError{Format: "int32", Want: 4, Got: len(data)}
	}
	return int32(binary.BigEndian.Uint32(data)), nil
}

// Float64 returns the serde of IEEE 754 doubles in 8 big-endian bytes,
// compatible with Kafka's DoubleSerializer. Like Java's
// Double.doubleToLongBits, which that serializer uses, Serialize writes every
// NaN as the canonical NaN 0x7ff8000000000000, so equal values have equal
// bytes (keys are compared as bytes); Deserialize keeps the bits it reads.
// Nil data is [ErrNull]; any length other than 8 is a [*SizeError].
func Float64() Serde[float64] { return float64Serde{} }

type float64Serde struct{}

const canonicalNaN = 0x7ff8000000000000

func (float64Serde) Serialize(_ string, v float64) ([]byte, error) {
	bits := math.Float64bits(v)
	if v != v { // NaN
		bits = canonicalNaN
	}
	return binary.BigEndian.AppendUint64(make([]byte, 0, 8), bits), nil
}

func (float64Serde) Deserialize(_ string, data []byte) (float64, error) {
	if data == nil {
		return 0, ErrNull
	}
	if len(data) != 8 {
		return 0, &SizeError{Format: "float64", Want: 8, Got: len(data)}
	}
	return math.Float64frombits(binary.BigEndian.Uint64(data)), nil
}
