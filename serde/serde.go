// Package serde turns the keys and values of weir's records into bytes and
// back.
//
// A [Serde] works on one Go type. Built-ins write the bytes of Kafka's own
// serializers, so weir's records agree with Java clients and Kafka Streams:
// [String] (UTF-8), [Bytes] (as is), [Int32] and [Int64] (big-endian),
// [Float64] (IEEE 754, big-endian) and [UUID] (its 36-character text).
// [JSON] encodes any Go type with encoding/json.
//
// # Avro and the schema registry
//
// [Avro] writes Avro binary in the Confluent wire format (a zero magic
// byte, the writer schema's 4-byte registry id, the Avro body) for Go
// structs with `avro` tags or for generic records (map[string]any). It
// registers its schema under a subject (the topic's, by Confluent's
// TopicNameStrategy, or a state store's) through a [Registry], normally a
// [github.com/weirstream/weir/schema.Client], and reads records written
// under any compatible schema by Avro schema resolution: records and state
// written by an older version of an application migrate as they are read.
// An [*AvroSerde] exposes its schema and subjects and registers them
// explicitly ([AvroSerde.Register]), so an application can check every
// schema against the registry before it touches any state.
//
// Other formats (Protobuf, JSON Schema) are serdes of your own.
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
// error text may quote its input. The serdes of this package never do:
// their errors name the format and, for a wrong size, the lengths
// ([ErrNull], [*SizeError], [*FormatError]); a decoder's own message,
// which may quote, is kept out of the text and reachable with errors.As. A serde of your own should not quote
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

// ErrDecoderPanic is wrapped by the [*FormatError] that [Decode] returns
// for data on which a deserializer panicked.
var ErrDecoderPanic = errors.New("serde: the deserializer panicked")

// Decode returns s.Deserialize(topic, data), with a panic inside it turned
// into a [*FormatError] wrapping [ErrDecoderPanic]: a serde that fails on
// bytes it did not expect (its own bug, or a library's) then reaches the
// error policies (skip, dead-letter, fail with the record's coordinates)
// instead of crashing the process in a loop. weir decodes every record,
// state entry and query answer through it. The panic's value stays out of
// the error's text (it may quote data) and is reachable by errors.As.
func Decode[T any](s Serde[T], topic string, data []byte) (v T, err error) {
	defer func() {
		if p := recover(); p != nil {
			var zero T
			v, err = zero, &FormatError{Format: fmt.Sprintf("%T", s), SchemaID: NoSchemaID,
				Reason: "the deserializer panicked", Err: fmt.Errorf("%w: %v", ErrDecoderPanic, p)}
		}
	}()
	return s.Deserialize(topic, data)
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

// NoSchemaID is the [FormatError.SchemaID] of an error raised before a
// schema id was read, or by a format without schema ids.
const NoSchemaID = -1

// ErrUnknownSchema is wrapped by the [*FormatError] of a record whose schema
// id the registry does not know (HTTP 404): the record cannot be read by
// anyone, so it is bad data, unlike a registry that cannot be reached, which
// is reported as the registry's error and is worth retrying.
var ErrUnknownSchema = errors.New("serde: unknown schema id")

// FormatError reports data that is not in a serde's format, or a value that
// the format cannot represent. Its text names the format, the schema id when
// known and the reason in weir's own words; it never quotes the data or the
// value. Err, when set, is the decoder's own error: it is reachable through
// [errors.Unwrap] and [errors.As] for programs that want it, but it is left
// out of the text, since decoders' messages may quote their input (see
// "Errors" in the package documentation).
type FormatError struct {
	Format   string // the serde's format, such as "avro", "json" or "string"
	SchemaID int    // the writer schema id of the frame, or NoSchemaID
	Reason   string // what is wrong, never the data
	Err      error  // the cause, if any; not part of Error()
}

func (e *FormatError) Error() string {
	if e.SchemaID != NoSchemaID {
		return fmt.Sprintf("serde: %s: schema id %d: %s", e.Format, e.SchemaID, e.Reason)
	}
	return "serde: " + e.Format + ": " + e.Reason
}

// Unwrap returns the cause.
func (e *FormatError) Unwrap() error { return e.Err }
