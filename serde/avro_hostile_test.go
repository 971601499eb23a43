package serde

import (
	"encoding/binary"
	"errors"
	"math"
	"runtime"
	"testing"
)

// The shapes the hostile-input tests and fuzzers decode: arrays, maps,
// unions, nested records, enums, fixed and a recursive list.
const (
	xsSchema    = `{"type":"record","name":"Xs","fields":[{"name":"xs","type":{"type":"array","items":"long"}}]}`
	shapeSchema = `{"type":"record","name":"Shape","namespace":"weir.test","fields":[
		{"name":"tags","type":{"type":"map","values":"string"}},
		{"name":"pts","type":{"type":"array","items":{"type":"record","name":"Pt","fields":[{"name":"x","type":"double"},{"name":"y","type":"int"}]}}},
		{"name":"opt","type":["null","string","long"]},
		{"name":"kind","type":{"type":"enum","name":"Kind","symbols":["A","B","C"]}},
		{"name":"id","type":{"type":"fixed","name":"Id","size":4}},
		{"name":"nils","type":{"type":"array","items":"null"}},
		{"name":"next","type":["null","Shape"]}]}`
)

type xs struct {
	Xs []int64 `avro:"xs"`
}

type pt struct {
	X float64 `avro:"x"`
	Y int32   `avro:"y"`
}

type shape struct {
	Tags map[string]string `avro:"tags"`
	Pts  []pt              `avro:"pts"`
	Opt  any               `avro:"opt"`
	Kind string            `avro:"kind"`
	ID   [4]byte           `avro:"id"`
	Nils []any             `avro:"nils"`
	Next *shape            `avro:"next"`
}

// zigzag appends n as an Avro long.
func zigzag(b []byte, n int64) []byte {
	return binary.AppendUvarint(b, uint64(n<<1)^uint64(n>>63))
}

// frame wraps body in the Confluent wire format with schema id id.
func frame(id int, body []byte) []byte {
	return append([]byte{0, 0, 0, 0, byte(id)}, body...)
}

// The records a security review crafted against hamba/avro v2.31.0, which
// decoded the first with a nil error and a slice of negative length, wrote
// the second's longs through that slice, and allocated 1 GiB for the third
// and panicked on the fourth: each is a FormatError now, and nothing panics.
//
// Not parallel: it measures what the decoder allocates, which other tests
// running beside it would add to.
func TestCraftedAvroBlockCounts(t *testing.T) {
	reg := newFakeRegistry()
	s := newAvro[xs](t, reg, xsSchema)
	id, _ := s.Register(t.Context(), "t")
	minCount := zigzag(nil, math.MinInt64)
	cases := []struct {
		name string
		body []byte
	}{
		{"MinInt64 count, then the end", append(append(append([]byte{}, minCount...), 0), 0)},
		{"MinInt64 count, then four longs", append(append(append([]byte{}, minCount...), 8), 2, 4, 6, 8, 0)},
		{"2^27 items in 11 bytes", append(zigzag(nil, 1<<27), 2, 2, 2, 2, 2, 0)[:11]},
		{"2^46 items", append(zigzag(nil, 1<<46), 2, 0)},
		{"negative count with a huge block size", append(zigzag(zigzag(nil, -3), math.MaxInt64), 2, 2, 2, 0)},
		{"negative count of a block of negative size", append(zigzag(zigzag(nil, -1), -5), 2, 0)},
		{"a count longer than ten bytes", append(bytesOf(0xff, 11), 0)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			v, err := s.Deserialize("t", frame(id, c.body))
			runtime.ReadMemStats(&after)
			var fe *FormatError
			if !errors.As(err, &fe) {
				t.Fatalf("Deserialize = len %d, %v; want a FormatError", len(v.Xs), err)
			}
			if n := after.TotalAlloc - before.TotalAlloc; n > 1<<20 {
				t.Errorf("decoding %d bytes allocated %d bytes", len(c.body), n)
			}
		})
	}
}

func bytesOf(b byte, n int) []byte {
	out := make([]byte, n)
	for i := range out {
		out[i] = b
	}
	return out
}

// A record nested deeper than the bound, through a recursive schema, is
// refused before the decoder recurses into it; a union or enum index out
// of range is refused too.
func TestAvroNestingAndIndexesAreChecked(t *testing.T) {
	t.Parallel()
	reg := newFakeRegistry()
	s := newAvro[shape](t, reg, shapeSchema)
	id, _ := s.Register(t.Context(), "t")
	// tags {}, pts [], opt null, kind A, id 4 bytes, nils [], next ...
	level := []byte{0, 0, 0, 0, 1, 2, 3, 4, 0}
	var deep []byte
	for range avroMaxDepth {
		deep = append(deep, level...)
		deep = append(deep, 2) // next: the Shape branch
	}
	deep = append(deep, level...)
	deep = append(deep, 0) // next: null
	if _, err := s.Deserialize("t", frame(id, deep)); !errors.Is(err, errAvroShape) {
		t.Errorf("a list %d deep = %v; want it refused as malformed", avroMaxDepth+1, err)
	}
	ok := append(append(append([]byte{}, level...), 2), append(level, 0)...)
	v, err := s.Deserialize("t", frame(id, ok))
	if err != nil || v.Next == nil || v.Next.Next != nil {
		t.Fatalf("a list of two = %+v, %v", v, err)
	}
	for name, body := range map[string][]byte{
		"union index 3": {0, 0, 6},
		"enum index 3":  {0, 0, 0, 6},
		"nulls past MaxItems": append([]byte{0, 0, 0, 0, 1, 2, 3, 4},
			zigzag(nil, DefaultAvroMaxItems+1)...),
	} {
		if _, err := s.Deserialize("t", frame(id, body)); !errors.Is(err, errAvroShape) {
			t.Errorf("%s = %v; want it refused as malformed", name, err)
		}
	}
}

// A panic inside a decoder becomes a FormatError that the error policies
// handle, never a crash.
func TestAvroDecoderPanicIsAFormatError(t *testing.T) {
	t.Parallel()
	reg := newFakeRegistry()
	s := newAvro[xs](t, reg, xsSchema)
	// A resolution without a schema makes hamba's decoder dereference
	// nil: a stand-in for whatever input it might still panic on.
	var v xs
	reason, err := s.decodeUnchecked(resolution{}, []byte{2, 2, 0}, &v)
	if !errors.Is(err, ErrDecoderPanic) || reason == "" {
		t.Fatalf("a decoder that panics = %q, %v; want the panic as an error", reason, err)
	}
	// The serde still works afterwards.
	good, _ := s.Serialize("t", xs{Xs: []int64{1, 2}})
	if back, err := s.Deserialize("t", good); err != nil || len(back.Xs) != 2 {
		t.Fatalf("after a panic: %+v, %v", back, err)
	}
}

// FuzzAvroShapes decodes arbitrary bodies under a schema with arrays,
// maps, unions, nested and recursive records, enums and fixed: never a
// panic, never a negative length, never an allocation out of proportion
// to the input, and a FormatError for whatever does not decode.
func FuzzAvroShapes(f *testing.F) {
	reg := newFakeRegistry()
	s := newAvro[shape](f, reg, shapeSchema)
	x := newAvro[xs](f, reg, xsSchema)
	sid, _ := s.Register(f.Context(), "t")
	xid, _ := x.Register(f.Context(), "u")
	good, _ := s.Serialize("t", shape{Tags: map[string]string{"a": "b"}, Pts: []pt{{1, 2}}, Opt: "s", Kind: "B", Nils: []any{nil, nil},
		Next: &shape{Kind: "C", Opt: int64(3)}})
	f.Add(good[5:], true)
	minCount := zigzag(nil, math.MinInt64)
	f.Add(append(append(append([]byte{}, minCount...), 8), 2, 4, 6, 8, 0), false)
	f.Add(append(zigzag(nil, 1<<27), 2, 2, 2, 2, 2, 0), false)
	f.Add(append(zigzag(nil, 1<<46), 2, 0), false)
	f.Add(append(zigzag(zigzag(nil, -3), math.MaxInt64), 2, 2, 2, 0), false)
	f.Add([]byte{0, 0, 0, 0, 1, 2, 3, 4, 2, 0, 0, 0, 0, 1, 2, 3, 4, 0}, true)
	f.Fuzz(func(t *testing.T, body []byte, isShape bool) {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		var err error
		if isShape {
			var v shape
			v, err = s.Deserialize("t", frame(sid, body))
			for p := &v; err == nil && p != nil; p = p.Next {
				if len(p.Pts) < 0 || len(p.Nils) < 0 || len(p.Tags) < 0 {
					t.Fatalf("negative length decoded: %+v", p)
				}
			}
		} else {
			var v xs
			v, err = x.Deserialize("u", frame(xid, body))
			if err == nil && len(v.Xs) < 0 {
				t.Fatalf("negative length decoded: %d", len(v.Xs))
			}
		}
		runtime.ReadMemStats(&after)
		var fe *FormatError
		if err != nil && !errors.As(err, &fe) {
			t.Fatalf("error %T %v is not a FormatError", err, err)
		}
		// Items that take no bytes (nulls) are bounded by MaxItems, each a
		// 16-byte interface; everything else by the input's size.
		if n := after.TotalAlloc - before.TotalAlloc; n > uint64(64*len(body))+32<<20 {
			t.Fatalf("decoding %d bytes allocated %d bytes", len(body), n)
		}
	})
}
