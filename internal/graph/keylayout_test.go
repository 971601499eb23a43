package graph

import (
	"encoding/binary"
	"testing"
)

func TestKeyLayoutText(t *testing.T) {
	for _, l := range []KeyLayout{{}, {Skip: 16, Shared: []byte{0x7f, 0xff}}, {Skip: 9}, {LengthPrefixed: true}, {Skip: 3, LengthPrefixed: true}} {
		got, err := ParseKeyLayout(l.String())
		if err != nil || got.String() != l.String() || got.IsZero() != l.IsZero() {
			t.Errorf("ParseKeyLayout(%q) = %q, %v", l.String(), got.String(), err)
		}
	}
	for _, bad := range []string{"skip:-1", "skip:x", "shared:zz", "sideways", "skip:100000"} {
		if _, err := ParseKeyLayout(bad); err == nil {
			t.Errorf("ParseKeyLayout(%q) accepted it", bad)
		}
	}
}

func TestKeyLayoutRefusesShortKeys(t *testing.T) {
	if _, err := (KeyLayout{Skip: 16}).PartitionKey(make([]byte, 15)); err == nil {
		t.Error("a 15-byte key under skip:16 gave a partition key")
	}
	long := binary.AppendUvarint(nil, 10)
	if _, err := (KeyLayout{LengthPrefixed: true}).PartitionKey(append(long, "short"...)); err == nil {
		t.Error("a length prefix longer than the key gave a partition key")
	}
	if k, err := (KeyLayout{}).PartitionKey([]byte("whole")); err != nil || string(k) != "whole" {
		t.Errorf("the zero layout gave %q, %v; want the whole key", k, err)
	}
}
