package faultproxy

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// MaxFrameBytes bounds the payload of one request or response frame. A
// larger frame cuts its connection, with the reason in [Proxy.Log]: no Kafka
// client here sends one (the broker's own default limit,
// socket.request.max.bytes, is 100 MiB too), so one is a framing error.
const MaxFrameBytes = 100 << 20

// frameSizeError reports a frame whose size is negative or above
// MaxFrameBytes.
type frameSizeError struct{ size int32 }

func (e *frameSizeError) Error() string {
	return fmt.Sprintf("faultproxy: frame of %d bytes (limit %d)", e.size, MaxFrameBytes)
}

var errMalformed = errors.New("faultproxy: malformed request header")

// readFrame reads one size-prefixed frame and returns it whole, the size
// included, so that it can be forwarded unchanged.
func readFrame(r io.Reader) ([]byte, error) {
	var size [4]byte
	if _, err := io.ReadFull(r, size[:]); err != nil {
		return nil, err
	}
	n := int32(binary.BigEndian.Uint32(size[:]))
	if n < 0 || n > MaxFrameBytes {
		return nil, &frameSizeError{n}
	}
	frame := make([]byte, 4+int(n))
	copy(frame, size[:])
	if _, err := io.ReadFull(r, frame[4:]); err != nil {
		return nil, err
	}
	return frame, nil
}

// header is what the proxy reads of a request.
type header struct {
	api      APIKey
	version  int16
	corrID   int32
	clientID string
	// expectsResponse is false only for a Produce whose acks is 0.
	expectsResponse bool
	// txnEnd is what an EndTxn request asks for: CommitTxnEnd or
	// AbortTxnEnd; AnyTxnEnd for other requests and for an EndTxn whose
	// body does not parse.
	txnEnd TxnEnd
}

// parseRequest reads the request header at the start of a frame's payload:
// api_key int16, api_version int16, correlation_id int32 and client_id, a
// nullable string with an int16 length (not compact, even in the flexible
// header v2).
func parseRequest(p []byte) (header, error) {
	if len(p) < 10 {
		return header{}, errMalformed
	}
	h := header{
		api:             APIKey(binary.BigEndian.Uint16(p)),
		version:         int16(binary.BigEndian.Uint16(p[2:])),
		corrID:          int32(binary.BigEndian.Uint32(p[4:])),
		expectsResponse: true,
	}
	n := int(int16(binary.BigEndian.Uint16(p[8:])))
	rest := p[10:]
	switch {
	case n < -1 || n > len(rest):
		return header{}, errMalformed
	case n > 0:
		h.clientID = string(rest[:n])
		rest = rest[n:]
	}
	switch h.api {
	case Produce:
		if acks, ok := produceAcks(h.version, rest); ok && acks == 0 {
			h.expectsResponse = false
		}
	case EndTxn:
		if committed, ok := endTxnCommitted(h.version, rest); ok {
			h.txnEnd = AbortTxnEnd
			if committed {
				h.txnEnd = CommitTxnEnd
			}
		}
	}
	return h, nil
}

// produceAcks reads acks from what follows the client id of a Produce
// request: in flexible versions (v9+) the header's tagged fields, then from
// v3 on the transactional id (compact in v9+), then acks int16. ok is false
// when the bytes do not parse; the caller then expects a response, the safe
// side (a missing response only holds later ones, an unexpected one would be
// taken for the next request's).
func produceAcks(version int16, b []byte) (acks int16, ok bool) {
	flexible := version >= 9
	if flexible {
		if b, ok = skipTaggedFields(b); !ok {
			return 0, false
		}
	}
	if version >= 3 {
		if b, ok = skipString(b, flexible); !ok {
			return 0, false
		}
	}
	if len(b) < 2 {
		return 0, false
	}
	return int16(binary.BigEndian.Uint16(b)), true
}

// endTxnCommitted reads the committed flag from what follows the client id
// of an EndTxn request: in flexible versions (v3+) the header's tagged
// fields, then the transactional id (compact in v3+), producer_id int64,
// producer_epoch int16 and committed, a boolean byte. ok is false when the
// bytes do not parse.
func endTxnCommitted(version int16, b []byte) (committed, ok bool) {
	flexible := version >= 3
	if flexible {
		if b, ok = skipTaggedFields(b); !ok {
			return false, false
		}
	}
	if b, ok = skipString(b, flexible); !ok || len(b) < 8+2+1 {
		return false, false
	}
	return b[10] != 0, true
}

// skipTaggedFields skips a flexible header's tagged fields: a count, then
// per field a tag and a size, both unsigned varints, and the data.
func skipTaggedFields(b []byte) ([]byte, bool) {
	count, n := binary.Uvarint(b)
	if n <= 0 {
		return nil, false
	}
	b = b[n:]
	for range count {
		if _, n = binary.Uvarint(b); n <= 0 {
			return nil, false
		}
		b = b[n:]
		size, n := binary.Uvarint(b)
		if n <= 0 || size > uint64(len(b)-n) {
			return nil, false
		}
		b = b[n+int(size):]
	}
	return b, true
}

// skipString skips a nullable string: compact (an unsigned varint of its
// length plus one, 0 for null) in flexible versions, otherwise an int16
// length (-1 for null).
func skipString(b []byte, compact bool) ([]byte, bool) {
	var skip int
	if compact {
		l, n := binary.Uvarint(b)
		if n <= 0 || l > uint64(len(b)) {
			return nil, false
		}
		skip = n + max(int(l)-1, 0)
	} else {
		if len(b) < 2 {
			return nil, false
		}
		skip = 2 + max(int(int16(binary.BigEndian.Uint16(b))), 0)
	}
	if skip > len(b) {
		return nil, false
	}
	return b[skip:], true
}
