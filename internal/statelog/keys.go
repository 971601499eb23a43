package statelog

// Order-preserving key encodings for the window and session stores.
//
// A store key is built from parts, each encoded so that comparing the
// encodings with bytes.Compare compares the parts in order:
//
//   - a time is its int64 Unix milliseconds, big-endian, with the sign bit
//     flipped: two's complement puts negative numbers after positive ones,
//     the flip puts them first, so times before 1970 sort before times after;
//   - a user key is escaped, 0x00 becoming 0x00 0xff, and terminated by
//     0x00 0x01. The terminator sorts below every byte that can follow it in
//     a longer key (an escaped 0x00 is 0x00 0xff, any other byte is > 0x00),
//     so a key sorts before the keys it is a prefix of, as bytes.Compare
//     has it, and no encoded key is a prefix of another: a scan over
//     AppendKey(nil, k) never meets the entries of a key other than k.

import (
	"encoding/binary"
	"fmt"
	"github.com/weirstream/weir/changelog"
	"time"
)

// TimeLen is the length of an encoded time, in bytes.
const TimeLen = 8

const (
	escByte  = 0x00 // starts an escape sequence in an encoded key
	escZero  = 0xff // escByte, escZero: a 0x00 of the user key
	escTerm  = 0x01 // escByte, escTerm: the end of the user key
	signFlip = uint64(1) << 63
)

// AppendTime appends the 8-byte order-preserving encoding of t to dst and
// returns the extended slice. t is kept to the millisecond, rounded down
// (toward the past, also before 1970), as Kafka record timestamps are; a
// time whose Unix milliseconds do not fit an int64 (more than 292 million
// years from 1970) has no meaningful encoding.
func AppendTime(dst []byte, t time.Time) []byte {
	return appendMillis(dst, t.UnixMilli())
}

func appendMillis(dst []byte, ms int64) []byte {
	return binary.BigEndian.AppendUint64(dst, uint64(ms)^signFlip)
}

// DecodeTime decodes a time encoded by AppendTime; b must be exactly
// TimeLen bytes. The time is in UTC.
func DecodeTime(b []byte) (time.Time, error) {
	ms, err := decodeMillis(b)
	if err != nil {
		return time.Time{}, err
	}
	return millisTime(ms), nil
}

func decodeMillis(b []byte) (int64, error) {
	if len(b) != TimeLen {
		return 0, malformed("a time is %d bytes, not %d", b, len(b), TimeLen)
	}
	return int64(binary.BigEndian.Uint64(b) ^ signFlip), nil
}

func millisTime(ms int64) time.Time { return time.UnixMilli(ms).UTC() }

// AppendKey appends the escaped, terminated encoding of the user key key to
// dst and returns the extended slice. key may be empty or nil (both encode
// as the empty key) and may hold any byte. The encoding is
// len(key) + 2 + (number of 0x00 bytes in key) bytes long.
func AppendKey(dst, key []byte) []byte {
	for _, c := range key {
		if c == escByte {
			dst = append(dst, escByte, escZero)
		} else {
			dst = append(dst, c)
		}
	}
	return append(dst, escByte, escTerm)
}

// DecodeKey decodes the user key at the start of b, encoded by AppendKey,
// and returns it with the rest of b that follows its terminator. key is a
// new slice (never nil, empty for the empty key); rest aliases b.
func DecodeKey(b []byte) (key, rest []byte, err error) {
	key = make([]byte, 0, len(b))
	for i := 0; i < len(b); i++ {
		c := b[i]
		if c != escByte {
			key = append(key, c)
			continue
		}
		if i+1 == len(b) {
			return nil, nil, malformed("key ends inside an escape sequence", b)
		}
		switch b[i+1] {
		case escZero:
			key = append(key, 0x00)
			i++
		case escTerm:
			return key, b[i+2:], nil
		default:
			return nil, nil, malformed("invalid escape 0x00 0x%02x at offset %d", b, b[i+1], i)
		}
	}
	return nil, nil, malformed("key has no terminator", b)
}

// EncodeKeyTime returns the encoding of (key, t): AppendKey then
// AppendTime, in a new slice. Encodings compare as their pairs do: by key
// (bytes.Compare), then by time.
func EncodeKeyTime(key []byte, t time.Time) []byte {
	return AppendTime(AppendKey(make([]byte, 0, len(key)+2+TimeLen), key), t)
}

// DecodeKeyTime decodes an encoding made by EncodeKeyTime; b must hold
// exactly one. key is a new slice; the time is in UTC.
func DecodeKeyTime(b []byte) (key []byte, t time.Time, err error) {
	key, rest, err := DecodeKey(b)
	if err != nil {
		return nil, time.Time{}, err
	}
	if t, err = DecodeTime(rest); err != nil {
		return nil, time.Time{}, err
	}
	return key, t, nil
}

// malformed returns an error wrapping changelog.ErrMalformedKey that names the
// length of the offending bytes, never the bytes: they hold a record's
// key, which weir keeps out of its errors and logs (a store's errors reach
// Run's error and the log, a restore's too). args are the format's
// arguments after the bytes.
func malformed(format string, b []byte, args ...any) error {
	return fmt.Errorf("%w: "+format+" (%d bytes)", append(append([]any{changelog.ErrMalformedKey}, args...), len(b))...)
}
