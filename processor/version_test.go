package processor

import (
	"slices"
	"testing"
)

func TestStampVersion(t *testing.T) {
	t.Parallel()
	in := []Header{{Key: "trace", Value: []byte("t")}, {Key: VersionHeader, Value: []byte("5")}}
	orig := slices.Clone(in)
	out := StampVersion(in, 1_764_500_000_000_123)
	if !slices.EqualFunc(in, orig, func(a, b Header) bool { return a.Key == b.Key && string(a.Value) == string(b.Value) }) {
		t.Fatalf("StampVersion changed its input: %v", in)
	}
	if len(out) != 2 || out[0].Key != "trace" || out[1].Key != VersionHeader || string(out[1].Value) != "1764500000000123" {
		t.Fatalf("StampVersion = %v", out)
	}
	if v, ok := RecordVersion(out); !ok || v != 1_764_500_000_000_123 {
		t.Fatalf("RecordVersion = %d, %v", v, ok)
	}
	for _, hs := range [][]Header{nil, {{Key: "trace"}}, {{Key: VersionHeader, Value: []byte("x")}}, {{Key: VersionHeader, Value: []byte("-1")}}} {
		if v, ok := RecordVersion(hs); ok {
			t.Errorf("RecordVersion(%v) = %d, true", hs, v)
		}
	}
}
