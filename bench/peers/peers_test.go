package main

import (
	"slices"
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

func TestMediansAndSlowestRun(t *testing.T) {
	run := func(peer string, round int, steady time.Duration, cpu time.Duration) result {
		return result{workload: "wordcount", guarantee: "exactly_once", peer: peer, round: round, inputs: 1000, steady: steady, cpu: cpu, peakRSS: 1 << 20}
	}
	rs := []result{
		run("weir", 1, 1*time.Second, 2*time.Second),
		run("kstreams", 1, 2*time.Second, 4*time.Second),
		run("kstreams", 2, 4*time.Second, 4*time.Second),
		run("weir", 2, 2*time.Second, 4*time.Second),
		run("weir", 3, 4*time.Second, 6*time.Second),
		run("kstreams", 3, 2*time.Second, 8*time.Second),
	}
	got := medians(rs)
	if len(got) != 2 || got[0].peer != "weir" || got[1].peer != "kstreams" {
		t.Fatalf("medians = %+v, want weir then kstreams", got)
	}
	// weir's rates: 1000, 500, 250 per second; kstreams': 500, 250, 500.
	if got[0].rate != 500 || got[1].rate != 500 {
		t.Errorf("median rates = %v, %v; want 500, 500", got[0].rate, got[1].rate)
	}
	if got[0].slowest != 0.5 || got[1].slowest != 0.5 {
		t.Errorf("slowest / median = %v, %v; want 0.5, 0.5", got[0].slowest, got[1].slowest)
	}
	if got[0].cpuPerUnit != 0.004 || got[1].cpuPerUnit != 0.004 {
		t.Errorf("median CPU per unit = %v, %v; want 0.004, 0.004", got[0].cpuPerUnit, got[1].cpuPerUnit)
	}
	if m := median(rs[:2], func(r result) float64 { return r.rate() }); m != 750 {
		t.Errorf("median of two = %v, want their mean 750", m)
	}
}

func TestRoundOrderAlternates(t *testing.T) {
	peers := []string{"weir", "kstreams", "goka"}
	if got := roundOrder(peers, 0); !slices.Equal(got, peers) {
		t.Errorf("round 0 = %v", got)
	}
	if got := roundOrder(peers, 1); !slices.Equal(got, []string{"goka", "kstreams", "weir"}) {
		t.Errorf("round 1 = %v", got)
	}
	if peers[0] != "weir" {
		t.Errorf("roundOrder changed its argument: %v", peers)
	}
}
