package statelog

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/dgraph-io/badger/v4"
	"github.com/dgraph-io/badger/v4/pb"
	"github.com/dgraph-io/ristretto/v2/z"
)

// putKV writes what badger.KVToBuffer writes for the same record, byte
// for byte, at the lengths where a varint grows.
func TestPutKVMatchesKVToBuffer(t *testing.T) {
	t.Parallel()
	var cases []streamKV
	for _, n := range []int{0, 1, 127, 128, 300, 16383, 16384, 70000} {
		b := bytes.Repeat([]byte{'x'}, n)
		for _, meta := range []byte{0, 1, 0x80} {
			for _, stream := range []uint32{1, 127, 128, 1 << 20} {
				for _, version := range []uint64{1, versionFloor, 1<<63 + 5} {
					cases = append(cases, streamKV{key: []byte("k"), value: b, meta: meta, version: version, stream: stream})
					if n > 0 {
						cases = append(cases, streamKV{key: b, meta: meta, version: version, stream: stream})
					}
				}
			}
		}
	}
	cases = append(cases, streamKV{stream: 1, done: true}, streamKV{stream: 300, done: true})
	for _, kv := range cases {
		want, got := z.NewBuffer(1<<10, "test"), z.NewBuffer(1<<10, "test")
		ref := &pb.KV{Key: kv.key, Value: kv.value, Version: kv.version, StreamId: kv.stream, StreamDone: kv.done}
		if kv.meta != 0 {
			ref.UserMeta = []byte{kv.meta}
		}
		badger.KVToBuffer(ref, want)
		putKV(got, kv)
		name := fmt.Sprintf("key %d bytes, value %d, meta %#x, stream %d, done %v", len(kv.key), len(kv.value), kv.meta, kv.stream, kv.done)
		if !bytes.Equal(got.Bytes(), want.Bytes()) {
			t.Errorf("%s: putKV wrote %d bytes unlike KVToBuffer's %d", name, got.LenNoPadding(), want.LenNoPadding())
		}
		_ = want.Release()
		_ = got.Release()
	}
}
