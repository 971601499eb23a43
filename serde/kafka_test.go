package serde

import (
	"bytes"
	"errors"
	"math"
	"testing"
)

func TestInt32MatchesKafkaIntegerSerializer(t *testing.T) {
	t.Parallel()
	// Kafka's IntegerSerializer writes 4 bytes, most significant first.
	cases := []struct {
		v    int32
		wire []byte
	}{
		{0, []byte{0, 0, 0, 0}},
		{1, []byte{0, 0, 0, 1}},
		{-1, []byte{0xff, 0xff, 0xff, 0xff}},
		{258, []byte{0, 0, 1, 2}},
		{math.MinInt32, []byte{0x80, 0, 0, 0}},
	}
	s := Int32()
	for _, c := range cases {
		got, err := s.Serialize("t", c.v)
		if err != nil || !bytes.Equal(got, c.wire) {
			t.Errorf("Serialize(%d) = %x, %v; want %x", c.v, got, err, c.wire)
		}
		back, err := s.Deserialize("t", c.wire)
		if err != nil || back != c.v {
			t.Errorf("Deserialize(%x) = %d, %v; want %d", c.wire, back, err, c.v)
		}
	}
	if _, err := s.Deserialize("t", nil); !errors.Is(err, ErrNull) {
		t.Errorf("nil: got %v, want ErrNull", err)
	}
	var size *SizeError
	if _, err := s.Deserialize("t", make([]byte, 8)); !errors.As(err, &size) || size.Want != 4 || size.Got != 8 {
		t.Errorf("8 bytes: got %v, want SizeError{Want: 4, Got: 8}", err)
	}
}

func TestFloat64MatchesKafkaDoubleSerializer(t *testing.T) {
	t.Parallel()
	// Kafka's DoubleSerializer writes Double.doubleToLongBits big-endian;
	// that method maps every NaN to 0x7ff8000000000000.
	cases := []struct {
		v    float64
		wire []byte
	}{
		{0, []byte{0, 0, 0, 0, 0, 0, 0, 0}},
		{1, []byte{0x3f, 0xf0, 0, 0, 0, 0, 0, 0}},
		{-2.5, []byte{0xc0, 0x04, 0, 0, 0, 0, 0, 0}},
		{math.Inf(1), []byte{0x7f, 0xf0, 0, 0, 0, 0, 0, 0}},
		{math.Copysign(0, -1), []byte{0x80, 0, 0, 0, 0, 0, 0, 0}},
	}
	s := Float64()
	for _, c := range cases {
		got, err := s.Serialize("t", c.v)
		if err != nil || !bytes.Equal(got, c.wire) {
			t.Errorf("Serialize(%v) = %x, %v; want %x", c.v, got, err, c.wire)
		}
		back, err := s.Deserialize("t", c.wire)
		if err != nil || math.Float64bits(back) != math.Float64bits(c.v) {
			t.Errorf("Deserialize(%x) = %v, %v; want %v", c.wire, back, err, c.v)
		}
	}
	oddNaN := math.Float64frombits(0x7ff0000000000001)
	got, _ := s.Serialize("t", oddNaN)
	if want := []byte{0x7f, 0xf8, 0, 0, 0, 0, 0, 0}; !bytes.Equal(got, want) {
		t.Errorf("Serialize(NaN with payload) = %x, want the canonical NaN %x", got, want)
	}
	if _, err := s.Deserialize("t", nil); !errors.Is(err, ErrNull) {
		t.Errorf("nil: got %v, want ErrNull", err)
	}
	if _, err := s.Deserialize("t", []byte{1, 2, 3, 4}); err == nil {
		t.Error("4 bytes accepted")
	}
}

func TestUUIDMatchesKafkaUUIDSerializer(t *testing.T) {
	t.Parallel()
	// Kafka's UUIDSerializer writes UUID.toString() in UTF-8: lower-case
	// 8-4-4-4-12 hex digits.
	u := [16]byte{0x12, 0x3e, 0x45, 0x67, 0xe8, 0x9b, 0x12, 0xd3, 0xa4, 0x56, 0x42, 0x66, 0x14, 0x17, 0x40, 0x00}
	const text = "123e4567-e89b-12d3-a456-426614174000"
	s := UUID()
	got, err := s.Serialize("t", u)
	if err != nil || string(got) != text {
		t.Errorf("Serialize = %q, %v; want %q", got, err, text)
	}
	for _, in := range []string{text, "123E4567-E89B-12D3-A456-426614174000"} {
		back, err := s.Deserialize("t", []byte(in))
		if err != nil || back != u {
			t.Errorf("Deserialize(%q) = %x, %v; want %x", in, back, err, u)
		}
	}
	var format *FormatError
	for _, bad := range []string{
		"123e4567-e89b-12d3-a456x426614174000", // separator
		"123e4567-e89b-12d3-a456-42661417400g", // digit
		"123e4567e89b-12d3-a456-426614174000-", // separator position
	} {
		if _, err := s.Deserialize("t", []byte(bad)); !errors.As(err, &format) {
			t.Errorf("Deserialize(%q) = %v, want a FormatError", bad, err)
		}
	}
	var size *SizeError
	if _, err := s.Deserialize("t", []byte("1-2-3-4-5")); !errors.As(err, &size) || size.Want != 36 {
		t.Errorf("short form: got %v, want SizeError{Want: 36}", err)
	}
	if _, err := s.Deserialize("t", nil); !errors.Is(err, ErrNull) {
		t.Errorf("nil: got %v, want ErrNull", err)
	}
}

func FuzzInt32(f *testing.F) {
	f.Add([]byte{0, 0, 0, 1})
	f.Add([]byte{1})
	f.Fuzz(func(t *testing.T, data []byte) {
		s := Int32()
		v, err := s.Deserialize("t", data)
		if len(data) != 4 {
			if err == nil {
				t.Fatalf("%d bytes accepted", len(data))
			}
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		if back, _ := s.Serialize("t", v); !bytes.Equal(back, data) {
			t.Fatalf("round trip %x -> %d -> %x", data, v, back)
		}
	})
}

func FuzzFloat64(f *testing.F) {
	f.Add([]byte{0x3f, 0xf0, 0, 0, 0, 0, 0, 0})
	f.Add([]byte{0x7f, 0xf0, 0, 0, 0, 0, 0, 1})
	f.Add([]byte{1, 2})
	f.Fuzz(func(t *testing.T, data []byte) {
		s := Float64()
		v, err := s.Deserialize("t", data)
		if len(data) != 8 {
			if err == nil {
				t.Fatalf("%d bytes accepted", len(data))
			}
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		back, _ := s.Serialize("t", v)
		if v == v && !bytes.Equal(back, data) { // NaNs are canonicalised
			t.Fatalf("round trip %x -> %v -> %x", data, v, back)
		}
		if again, _ := s.Deserialize("t", back); math.Float64bits(again) != math.Float64bits(v) && v == v {
			t.Fatalf("second round trip of %v gave %v", v, again)
		}
	})
}

func FuzzUUID(f *testing.F) {
	f.Add([]byte("123e4567-e89b-12d3-a456-426614174000"))
	f.Add([]byte("123e4567-e89b-12d3-a456-42661417400Z"))
	f.Add([]byte("1-2-3-4-5"))
	f.Fuzz(func(t *testing.T, data []byte) {
		s := UUID()
		v, err := s.Deserialize("t", data)
		if err != nil {
			return
		}
		back, _ := s.Serialize("t", v)
		if !bytes.EqualFold(back, data) {
			t.Fatalf("round trip %q -> %x -> %q", data, v, back)
		}
	})
}
