package main

import (
	"strings"
	"testing"
	"time"
)

// The workloads' expected counts are what their records hold.
func TestWorkloadsCountTheirInput(t *testing.T) {
	base := time.UnixMilli(1_700_000_000_000)
	wc := wordCount("in", 500, base)
	var words int64
	for _, n := range wc.want {
		words += n
	}
	if len(wc.records) != 500 || words != 5000 {
		t.Fatalf("wordcount: %d records, %d words counted; want 500 and 5000", len(wc.records), words)
	}
	for _, w := range []*workload{countPerKey("in", 2000, base), windowedCount("in", 2000, base)} {
		var total int64
		for _, n := range w.want {
			total += n
		}
		if len(w.records) != 2000 || total != 2000 {
			t.Errorf("%s: %d records, %d counted; want 2000", w.name, len(w.records), total)
		}
	}
	for key := range windowedCount("in", 100, base).want {
		if !strings.Contains(key, "@") {
			t.Errorf("windowed key %q has no window start", key)
		}
	}
}

func TestPeerArgsRoundTrip(t *testing.T) {
	a := peerArgs{"count", "h:1", "app", "in", "out", "exactly_once", "/tmp/x", 100 * time.Millisecond}
	got, err := parsePeerArgs(a.list())
	if err != nil || got != a {
		t.Fatalf("parsePeerArgs(list) = %+v, %v; want %+v", got, err, a)
	}
	if _, err := parsePeerArgs([]string{"count"}); err == nil {
		t.Error("parsePeerArgs accepted one argument")
	}
}

func TestDecodeCount(t *testing.T) {
	if n, ok := decodeCount([]byte{0, 0, 0, 0, 0, 0, 1, 2}); !ok || n != 258 {
		t.Errorf("decodeCount = %d, %v; want 258", n, ok)
	}
	if _, ok := decodeCount([]byte{1}); ok {
		t.Error("decodeCount accepted 1 byte")
	}
}

func TestFlagsRefuseUnknownNames(t *testing.T) {
	var errs strings.Builder
	if _, err := parseFlags([]string{"-peers", "weir,flink"}, &errs); err == nil || !strings.Contains(err.Error(), "flink") {
		t.Errorf("parseFlags = %v, want an error naming flink", err)
	}
}
