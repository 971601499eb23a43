package serde

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
)

// JSON returns the serde of T as JSON, by [encoding/json] with its rules
// (struct tags, Marshaler and Unmarshaler implementations); the bytes are
// those of Kafka Connect's JsonConverter without schemas and of most JSON
// producers.
//
// Nil data is [ErrNull] (a null JSON literal is not nil data: it decodes to
// T's zero value as encoding/json does). Data that is not JSON or does not
// fit T is a [*FormatError] whose reason gives the byte offset and the Go
// type involved; unlike encoding/json's own messages it never quotes the
// data (the JSON error stays reachable through errors.As). Unknown fields
// are ignored, as encoding/json does. Untrusted bytes are bounded by
// encoding/json itself: nesting deeper than 10,000 levels is a syntax
// error, and what it allocates is proportional to the record's size,
// which the topic's max.message.bytes bounds. A value that cannot be encoded (a NaN,
// a channel, a failing MarshalJSON) is a [*FormatError] too.
func JSON[T any]() Serde[T] { return jsonSerde[T]{} }

type jsonSerde[T any] struct{}

func (jsonSerde[T]) Serialize(_ string, v T) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		// json's UnsupportedValueError quotes the value ("unsupported
		// value: NaN"), a MarshalerError whatever the method said.
		return nil, &FormatError{Format: "json", SchemaID: NoSchemaID,
			Reason: fmt.Sprintf("a %s cannot be encoded as JSON", typeName[T]()), Err: err}
	}
	return b, nil
}

func (jsonSerde[T]) Deserialize(_ string, data []byte) (T, error) {
	var v T
	if data == nil {
		return v, ErrNull
	}
	if err := json.Unmarshal(data, &v); err != nil {
		var zero T
		return zero, &FormatError{Format: "json", SchemaID: NoSchemaID, Reason: jsonReason[T](err, len(data)), Err: err}
	}
	return v, nil
}

// jsonReason describes a decoding error in words of its own: json's
// messages quote the offending input (the first bad character of a syntax
// error, an overflowing number, the string a time.Time failed to parse).
func jsonReason[T any](err error, n int) string {
	var syntax *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syntax):
		return fmt.Sprintf("invalid JSON at byte offset %d of %d", syntax.Offset, n)
	case errors.As(err, &typ):
		// typ.Value is "number 4242..." for an overflow: keep its kind only.
		kind := typ.Value
		for i := range len(kind) {
			if kind[i] == ' ' {
				kind = kind[:i]
				break
			}
		}
		return fmt.Sprintf("a JSON %s at byte offset %d does not fit the Go type %s", kind, typ.Offset, typ.Type)
	default:
		return fmt.Sprintf("JSON does not decode into a %s", typeName[T]())
	}
}

func typeName[T any]() string { return reflect.TypeFor[T]().String() }
