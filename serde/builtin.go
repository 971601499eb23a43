package serde

import (
	"encoding/binary"
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

var errInvalidUTF8 = &formatError{format: "string", msg: "invalid UTF-8"}

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

// formatError reports data that is not in a serde's format.
type formatError struct {
	format, msg string
}

func (e *formatError) Error() string { return "serde: " + e.format + ": " + e.msg }
