// Package serde turns the keys and values of weir's records into bytes and
// back.
//
// A [Serde] works on one Go type. Built-ins cover Kafka's common wire
// formats: [String] (UTF-8), [Bytes] (as is) and [Int64] (8-byte big-endian,
// the format of Kafka's LongSerializer). Avro with a schema registry is
// planned, on the same interface; until it lands, other formats (JSON,
// Avro, Protobuf) are serdes of your own.
//
// # Errors
//
// A serde reports bad input as an error and never panics; the runtime hands
// the error to the application's deserialization policy together with the
// record's topic, partition and offset.
//
// weir never writes a record's key or value into its own error text, logs
// or metric labels, but it passes a serde's error on as it is: the
// weir.RecordError that Run returns for a record that cannot be decoded
// ends with its text, and so does the log line of a record skipped under
// the Skip policy. The promise covers weir's own text only: a serde's
// error text may quote its input. The built-ins never do: their errors
// name the format and, for a wrong size, the lengths ([ErrNull],
// [*SizeError], invalid UTF-8). A serde of your own should not quote
// either, and wrapping a decoder's error can: encoding/json's errors
// quote the number that overflows a field ("cannot unmarshal number
// 4242..."), the first bad character of a syntax error, and, from a
// time.Time field, the whole string that failed to parse. Say what went
// wrong in words of your own instead, such as the field, the expected
// type and an [encoding/json.SyntaxError]'s Offset.
//
// # Null data
//
// Kafka records may carry no key or no value (a nil byte slice; a tombstone
// when it is the value). Each built-in documents what it does with nil.
package serde

import (
	"errors"
	"fmt"
)

// Serde serializes and deserializes values of type T.
//
// topic is the topic the bytes are written to or were read from; serdes that
// keep per-topic state (a schema registry subject) use it, others ignore it.
// Implementations must be safe for concurrent use: one Serde is shared by
// every thread and task of an application. Serialize may return a slice that
// the caller owns; Deserialize must not keep data after it returns, since the
// runtime may reuse the buffer. Errors should not quote data or v: weir
// reports them as they are (see "Errors" in the package documentation).
type Serde[T any] interface {
	Serialize(topic string, v T) ([]byte, error)
	Deserialize(topic string, data []byte) (T, error)
}

// ErrNull is returned by a serde that has no representation for nil data,
// such as [Int64] for a record without a value.
var ErrNull = errors.New("serde: null data")

// SizeError reports data of the wrong length for a fixed-size format.
type SizeError struct {
	Format string // the serde's format, such as "int64"
	Want   int    // bytes the format needs
	Got    int    // bytes received
}

func (e *SizeError) Error() string {
	return fmt.Sprintf("serde: %s needs %d bytes, got %d", e.Format, e.Want, e.Got)
}
