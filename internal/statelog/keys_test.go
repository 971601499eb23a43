package statelog_test

import (
	"bytes"
	"cmp"
	"encoding/hex"
	"errors"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/weirstream/weir/changelog"
	"github.com/weirstream/weir/internal/statelog"
)

func ms(n int64) time.Time { return time.UnixMilli(n) }

func TestAppendTime(t *testing.T) {
	t.Parallel()
	tests := []struct {
		t    time.Time
		want string
	}{
		{ms(0), "8000000000000000"},
		{ms(1), "8000000000000001"},
		{ms(-1), "7fffffffffffffff"},
		{ms(math.MinInt64), "0000000000000000"},
		{ms(math.MaxInt64), "ffffffffffffffff"},
		{ms(256), "8000000000000100"},
		{time.Unix(0, 1_999_999), "8000000000000001"},    // rounded down to 1ms
		{time.Unix(-1, 999_999_999), "7fffffffffffffff"}, // -1ns: down to -1ms, not to 0
	}
	for _, tt := range tests {
		got := statelog.AppendTime([]byte{0xaa}, tt.t)
		if hex.EncodeToString(got) != "aa"+tt.want {
			t.Errorf("AppendTime(0xaa, %v) = %x, want aa%s", tt.t, got, tt.want)
		}
		back, err := statelog.DecodeTime(got[1:])
		if err != nil {
			t.Fatalf("DecodeTime(%x): %v", got[1:], err)
		}
		if back.UnixMilli() != tt.t.UnixMilli() || back.Location() != time.UTC {
			t.Errorf("DecodeTime(%x) = %v, want %v in UTC", got[1:], back, tt.t.UnixMilli())
		}
	}
}

func TestTimesSortAsEncoded(t *testing.T) {
	t.Parallel()
	times := []int64{math.MinInt64, -1 << 40, -86_400_000, -2, -1, 0, 1, 2, 86_400_000, 1 << 40, math.MaxInt64}
	for i := 1; i < len(times); i++ {
		a, b := statelog.AppendTime(nil, ms(times[i-1])), statelog.AppendTime(nil, ms(times[i]))
		if bytes.Compare(a, b) >= 0 {
			t.Errorf("encoding of %dms (%x) does not sort before that of %dms (%x)", times[i-1], a, times[i], b)
		}
	}
}

func TestAppendKey(t *testing.T) {
	t.Parallel()
	tests := []struct {
		key  string
		want string
	}{
		{"", "0001"},
		{"a", "610001"},
		{"\x00", "00ff0001"},
		{"a\x00b", "6100ff620001"},
		{"\xff", "ff0001"},
		{"\x00\x00", "00ff00ff0001"},
		{"\x01", "010001"},
	}
	for _, tt := range tests {
		got := statelog.AppendKey(nil, []byte(tt.key))
		if hex.EncodeToString(got) != tt.want {
			t.Errorf("AppendKey(%q) = %x, want %s", tt.key, got, tt.want)
		}
		key, rest, err := statelog.DecodeKey(append(got, "tail"...))
		if err != nil || string(key) != tt.key || string(rest) != "tail" || key == nil {
			t.Errorf("DecodeKey(%x + tail) = %q, %q, %v; want %q, \"tail\", nil", got, key, rest, err, tt.key)
		}
	}
	if got := statelog.AppendKey(nil, nil); !bytes.Equal(got, statelog.AppendKey(nil, []byte{})) {
		t.Errorf("AppendKey(nil) = %x, want the encoding of the empty key", got)
	}
}

func TestDecodeMalformed(t *testing.T) {
	t.Parallel()
	valid := statelog.EncodeKeyTime([]byte("k"), ms(5))
	tests := []struct {
		name string
		in   string
	}{
		{"empty", ""},
		{"no terminator", "abc"},
		{"escape at end", "ab\x00"},
		{"bad escape", "a\x00\x02" + "\x00\x01"},
		{"escape of 0x00", "a\x00\x00\x00\x01"},
		{"zero without terminator", "\x00\xff"},
		{"no time", "k\x00\x01"},
		{"short time", string(valid[:len(valid)-1])},
		{"long time", string(valid) + "\x00"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			key, tm, err := statelog.DecodeKeyTime([]byte(tt.in))
			if !errors.Is(err, changelog.ErrMalformedKey) {
				t.Errorf("DecodeKeyTime(%x) = %q, %v, %v; want an error wrapping ErrMalformedKey", tt.in, key, tm, err)
			}
		})
	}
	for _, n := range []int{0, 7, 9} {
		if _, err := statelog.DecodeTime(make([]byte, n)); !errors.Is(err, changelog.ErrMalformedKey) {
			t.Errorf("DecodeTime of %d bytes: err = %v, want ErrMalformedKey", n, err)
		}
	}
}

// TestKeyTimeOrderPrefixKeys checks the case the escape exists for: keys
// that are prefixes of one another, at times that would reverse their order
// if the key's end were not marked.
func TestKeyTimeOrderPrefixKeys(t *testing.T) {
	t.Parallel()
	type pair struct {
		key string
		t   int64
	}
	want := []pair{ // sorted by key, then time
		{"", math.MinInt64}, {"", -1}, {"", math.MaxInt64},
		{"\x00", 0},
		{"a", math.MinInt64}, {"a", -5}, {"a", 0}, {"a", 7}, {"a", math.MaxInt64},
		{"a\x00", math.MinInt64}, {"a\x00", 3},
		{"a\x00\x00", 0},
		{"a\x00\x01", 0},
		{"a\x00\xff", 0},
		{"a\x01", -1},
		{"ab", math.MinInt64},
		{"a\xff", 0},
		{"a\xff\xff", 0},
		{"b", -1},
		{"\xff", 0},
	}
	enc := make([][]byte, len(want))
	for i, p := range want {
		enc[i] = statelog.EncodeKeyTime([]byte(p.key), ms(p.t))
	}
	shuffled := slices.Clone(enc)
	slices.Reverse(shuffled)
	slices.SortFunc(shuffled, bytes.Compare)
	for i := range enc {
		if !bytes.Equal(enc[i], shuffled[i]) {
			k, tm, _ := statelog.DecodeKeyTime(shuffled[i])
			t.Errorf("position %d: sorted encodings hold (%q, %dms), want (%q, %dms)", i, k, tm.UnixMilli(), want[i].key, want[i].t)
		}
	}
}

func FuzzKeyTimeRoundTrip(f *testing.F) {
	f.Add([]byte(""), int64(0))
	f.Add([]byte("a\x00\x01b"), int64(-1))
	f.Add([]byte("\x00\xff\x00"), int64(math.MinInt64))
	f.Add([]byte("\xff"), int64(math.MaxInt64))
	f.Fuzz(func(t *testing.T, key []byte, n int64) {
		enc := statelog.EncodeKeyTime(key, ms(n))
		k, tm, err := statelog.DecodeKeyTime(enc)
		if err != nil {
			t.Fatalf("DecodeKeyTime(EncodeKeyTime(%q, %dms)): %v", key, n, err)
		}
		if !bytes.Equal(k, key) || tm.UnixMilli() != n {
			t.Fatalf("round trip of (%q, %dms) gave (%q, %dms)", key, n, k, tm.UnixMilli())
		}
	})
}

func FuzzKeyTimeOrder(f *testing.F) {
	f.Add([]byte("a"), int64(5), []byte("a\x00"), int64(-5))
	f.Add([]byte("a"), int64(math.MaxInt64), []byte("ab"), int64(math.MinInt64))
	f.Add([]byte(""), int64(1), []byte("\x00"), int64(0))
	f.Add([]byte("\x00"), int64(-1), []byte("\x00"), int64(0))
	f.Add([]byte("a\x00"), int64(0), []byte("a\x01"), int64(0))
	f.Fuzz(func(t *testing.T, k1 []byte, t1 int64, k2 []byte, t2 int64) {
		got := bytes.Compare(statelog.EncodeKeyTime(k1, ms(t1)), statelog.EncodeKeyTime(k2, ms(t2)))
		want := cmp.Or(bytes.Compare(k1, k2), cmp.Compare(t1, t2))
		if got != want {
			t.Fatalf("encodings of (%q, %dms) and (%q, %dms) compare %d, want %d", k1, t1, k2, t2, got, want)
		}
	})
}

// FuzzSessionOrder checks the composition the session store uses, key then
// two times, and that a key's encoding bounds its own entries only.
func FuzzSessionOrder(f *testing.F) {
	f.Add([]byte("a"), int64(5), int64(1), []byte("a\x00"), int64(-5), int64(0))
	f.Add([]byte("a"), int64(5), int64(1), []byte("a"), int64(5), int64(2))
	f.Fuzz(func(t *testing.T, k1 []byte, e1, s1 int64, k2 []byte, e2, s2 int64) {
		enc := func(k []byte, e, s int64) []byte {
			return statelog.AppendTime(statelog.AppendTime(statelog.AppendKey(nil, k), ms(e)), ms(s))
		}
		a, b := enc(k1, e1, s1), enc(k2, e2, s2)
		want := cmp.Or(bytes.Compare(k1, k2), cmp.Compare(e1, e2), cmp.Compare(s1, s2))
		if got := bytes.Compare(a, b); got != want {
			t.Fatalf("(%q, %d, %d) vs (%q, %d, %d): encodings compare %d, want %d", k1, e1, s1, k2, e2, s2, got, want)
		}
		p := statelog.AppendKey(nil, k1)
		inScan := bytes.Compare(b, p) >= 0 && bytes.Compare(b, statelog.PrefixEnd(p)) < 0
		if inScan != bytes.Equal(k1, k2) {
			t.Fatalf("a prefix scan for key %q includes an entry of key %q: %v, want %v", k1, k2, inScan, !inScan)
		}
	})
}

// FuzzDecodeKeyTime feeds arbitrary bytes to the decoders: they must not
// panic, must fail with ErrMalformedKey, and what they accept must be the
// one encoding of what they return.
func FuzzDecodeKeyTime(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte("\x00"))
	f.Add([]byte("\x00\x01\x80\x00\x00\x00\x00\x00\x00\x00"))
	f.Add([]byte("a\x00\xffb\x00\x01\x7f\xff\xff\xff\xff\xff\xff\xff"))
	f.Add([]byte("a\x00\x05"))
	f.Fuzz(func(t *testing.T, b []byte) {
		key, tm, err := statelog.DecodeKeyTime(b)
		if err != nil {
			if !errors.Is(err, changelog.ErrMalformedKey) {
				t.Fatalf("DecodeKeyTime(%x): error %v does not wrap ErrMalformedKey", b, err)
			}
		} else if re := statelog.EncodeKeyTime(key, tm); !bytes.Equal(re, b) {
			t.Fatalf("DecodeKeyTime(%x) = (%q, %v), which encodes as %x", b, key, tm, re)
		}
		k, rest, err := statelog.DecodeKey(b)
		if err == nil {
			if re := statelog.AppendKey(nil, k); !bytes.Equal(append(re, rest...), b) {
				t.Fatalf("DecodeKey(%x) = %q, %x; re-encoded %x", b, k, rest, re)
			}
		}
	})
}
