package kstream

import (
	"bytes"
	"math"
	"testing"

	"github.com/weirstream/weir/internal/graph"
	"github.com/weirstream/weir/serde"
)

// Each internal key serde's declared layout finds the partitioning key in
// what the serde writes, and survives the descriptor's text form: a
// rescale places the entries of these stores by it.
func TestKeyLayoutsFindThePartitionKey(t *testing.T) {
	keys := serde.String()
	const key, fk = "customer-42", "region-7"
	cases := []struct {
		name   string
		layout graph.KeyLayout
		stored func() ([]byte, error)
		want   string
	}{
		{"suppression buffer", bufferKeySerde[string]{keys}.KeyLayout(), func() ([]byte, error) {
			return bufferKeySerde[string]{keys}.Serialize("t", bufferKey[string]{end: 120_000, start: 60_000, key: key})
		}, key},
		{"time-limit buffer", timedKeySerde[string]{bufferKeySerde[string]{keys}}.KeyLayout(), func() ([]byte, error) {
			return timedKeySerde[string]{bufferKeySerde[string]{keys}}.Serialize("t", timedKey[string]{time: 99, w: bufferKey[string]{end: 5, start: 1, key: key}})
		}, key},
		{"join's waiting records", pendingKeySerde[string]{keys}.KeyLayout(), func() ([]byte, error) {
			return pendingKeySerde[string]{keys}.Serialize("t", pendingKey[string]{ts: -5, right: true, key: key})
		}, key},
		{"foreign-key subscriptions", subKeySerde[string, string]{keys, keys}.KeyLayout(), func() ([]byte, error) {
			return subKeySerde[string, string]{keys, keys}.Serialize("t", subKey[string, string]{fk: fk, key: key, hasKey: true})
		}, fk},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			stored, err := tc.stored()
			if err != nil {
				t.Fatal(err)
			}
			parsed, err := graph.ParseKeyLayout(tc.layout.String())
			if err != nil {
				t.Fatalf("ParseKeyLayout(%q): %v", tc.layout.String(), err)
			}
			shared := parsed.IsShared(stored)
			got, err := parsed.PartitionKey(stored)
			if err != nil || shared || string(got) != tc.want {
				t.Fatalf("PartitionKey(%x) with layout %q = %q, shared %v, %v; want %q", stored, tc.layout, got, shared, err, tc.want)
			}
		})
	}
}

// The suppression's wall-clock close point is an entry of the task, not
// of a key: its stored key has the layout's shared prefix; a window's
// entry does not, even at the largest end.
func TestSuppressionCloseMarkIsShared(t *testing.T) {
	s := bufferKeySerde[string]{serde.String()}
	l := s.KeyLayout()
	mark, err := s.Serialize("t", (&suppressor[string, int64]{}).closedKey())
	if err != nil {
		t.Fatal(err)
	}
	if !l.IsShared(mark) {
		t.Fatalf("closedKey %x is not shared under %q", mark, l)
	}
	window, err := s.Serialize("t", bufferKey[string]{end: math.MaxInt64, start: 0, key: "k"})
	if err != nil {
		t.Fatal(err)
	}
	if l.IsShared(window) || bytes.Equal(window[:16], mark[:16]) {
		t.Fatalf("a window's entry %x is taken for the task's", window)
	}
}

// A record cache knows a key of the built-in string serde by the string
// itself, and any other key by its serialized bytes; both say which keys
// are the same.
func TestCacheIDIsTheSerializedKey(t *testing.T) {
	t.Parallel()
	id := cacheID(serde.String(), "counts")
	if got, err := id("wörd"); err != nil || got != "wörd" {
		t.Errorf("string key wörd: id %q, %v", got, err)
	}
	ids := cacheID(serde.Int64(), "counts")
	a, errA := ids(7)
	b, errB := ids(7)
	c, errC := ids(8)
	want, _ := serde.Int64().Serialize("counts", 7)
	if errA != nil || errB != nil || errC != nil || a != b || a == c || a != string(want) {
		t.Errorf("int64 keys 7, 7, 8: ids %q, %q, %q (%v, %v, %v), want 7's serialized %q", a, b, c, errA, errB, errC, want)
	}
}
