package serde

import "encoding/hex"

// UUID returns the serde of UUIDs as Kafka's UUIDSerializer writes them: the
// 36-character text form (8-4-4-4-12 hexadecimal digits, lower case, as
// Java's UUID.toString), in UTF-8. The Go value is the UUID's 16 bytes in
// network order, the layout of RFC 9562 and of most Go UUID packages
// (a github.com/google/uuid UUID converts with a plain conversion).
//
// Deserialize accepts exactly the 36-character form, in either case; nil
// data is [ErrNull], another length a [*SizeError], anything else a
// [*FormatError]. (Java's UUID.fromString also takes shortened groups such
// as "1-2-3-4-5"; Kafka's serializer never writes them.)
func UUID() Serde[[16]byte] { return uuidSerde{} }

type uuidSerde struct{}

const uuidLen = 36

func (uuidSerde) Serialize(_ string, v [16]byte) ([]byte, error) {
	b := make([]byte, uuidLen)
	hex.Encode(b[0:8], v[0:4])
	b[8] = '-'
	hex.Encode(b[9:13], v[4:6])
	b[13] = '-'
	hex.Encode(b[14:18], v[6:8])
	b[18] = '-'
	hex.Encode(b[19:23], v[8:10])
	b[23] = '-'
	hex.Encode(b[24:36], v[10:16])
	return b, nil
}

var errUUIDForm = &FormatError{Format: "uuid", SchemaID: NoSchemaID, Reason: "not a UUID in 8-4-4-4-12 hexadecimal form"}

func (uuidSerde) Deserialize(_ string, data []byte) ([16]byte, error) {
	var u [16]byte
	if data == nil {
		return u, ErrNull
	}
	if len(data) != uuidLen {
		return u, &SizeError{Format: "uuid", Want: uuidLen, Got: len(data)}
	}
	if data[8] != '-' || data[13] != '-' || data[18] != '-' || data[23] != '-' {
		return u, errUUIDForm
	}
	// hex.Decode's errors quote the bad byte: replace them with ours.
	for _, g := range [...]struct{ from, to, at int }{{0, 8, 0}, {9, 13, 4}, {14, 18, 6}, {19, 23, 8}, {24, 36, 10}} {
		if _, err := hex.Decode(u[g.at:], data[g.from:g.to]); err != nil {
			return [16]byte{}, errUUIDForm
		}
	}
	return u, nil
}
