package serde

import (
	"bytes"
	"errors"
	"math"
	"testing"
)

func TestInt64MatchesKafkaLongSerializer(t *testing.T) {
	t.Parallel()
	// Kafka's LongSerializer writes the value big-endian, most significant
	// byte first; these are its bytes for a few values.
	cases := []struct {
		v    int64
		wire []byte
	}{
		{0, []byte{0, 0, 0, 0, 0, 0, 0, 0}},
		{1, []byte{0, 0, 0, 0, 0, 0, 0, 1}},
		{-1, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}},
		{258, []byte{0, 0, 0, 0, 0, 0, 1, 2}},
		{math.MinInt64, []byte{0x80, 0, 0, 0, 0, 0, 0, 0}},
	}
	s := Int64()
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
}

func TestInt64RejectsBadInput(t *testing.T) {
	t.Parallel()
	s := Int64()
	if _, err := s.Deserialize("t", nil); !errors.Is(err, ErrNull) {
		t.Errorf("nil: got %v, want ErrNull", err)
	}
	_, err := s.Deserialize("t", []byte{1, 2, 3})
	var size *SizeError
	if !errors.As(err, &size) || size.Got != 3 || size.Want != 8 {
		t.Errorf("3 bytes: got %v, want SizeError{Want: 8, Got: 3}", err)
	}
}

func TestStringRoundTripAndUTF8(t *testing.T) {
	t.Parallel()
	s := String()
	for _, v := range []string{"", "word", "Grüße", "日本語"} {
		b, err := s.Serialize("t", v)
		if err != nil {
			t.Fatalf("Serialize(%q): %v", v, err)
		}
		back, err := s.Deserialize("t", b)
		if err != nil || back != v {
			t.Errorf("round trip of %q = %q, %v", v, back, err)
		}
	}
	if got, err := s.Deserialize("t", nil); err != nil || got != "" {
		t.Errorf("nil = %q, %v; want empty string", got, err)
	}
	if _, err := s.Deserialize("t", []byte{0xff, 0xfe}); err == nil {
		t.Error("invalid UTF-8 deserialized without error")
	}
	if _, err := s.Serialize("t", string([]byte{0xc3})); err == nil {
		t.Error("invalid UTF-8 serialized without error")
	}
}

func TestBytesCopiesOnDeserialize(t *testing.T) {
	t.Parallel()
	s := Bytes()
	buf := []byte("abc")
	got, err := s.Deserialize("t", buf)
	if err != nil {
		t.Fatal(err)
	}
	buf[0] = 'x' // the runtime reuses its buffers
	if string(got) != "abc" {
		t.Errorf("result changed with the input buffer: %q", got)
	}
	if got, _ := s.Deserialize("t", nil); got != nil {
		t.Errorf("nil deserialized to %v, want nil", got)
	}
}

func FuzzInt64(f *testing.F) {
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 1})
	f.Add([]byte{1})
	f.Fuzz(func(t *testing.T, data []byte) {
		s := Int64()
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
		if !bytes.Equal(back, data) {
			t.Fatalf("round trip %x -> %d -> %x", data, v, back)
		}
	})
}

func FuzzString(f *testing.F) {
	f.Add([]byte("hello"))
	f.Add([]byte{0xff})
	f.Fuzz(func(t *testing.T, data []byte) {
		s := String()
		v, err := s.Deserialize("t", data)
		if err != nil {
			return
		}
		back, err := s.Serialize("t", v)
		if err != nil || !bytes.Equal(back, data) && len(data) > 0 {
			t.Fatalf("round trip %x -> %q -> %x, %v", data, v, back, err)
		}
	})
}
