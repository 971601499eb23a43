package main

import (
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
)

// The workloads' expected counts are what their records hold.
func TestWorkloadsCountTheirInput(t *testing.T) {
	base := time.UnixMilli(1_700_000_000_000)
	wc := wordCount("in", 500, 10_000, base)
	var words int64
	for _, n := range wc.want {
		words += n
	}
	if wc.inputs != 500 || words != 5000 || wc.updates != 5000 {
		t.Fatalf("wordcount: %d records, %d words counted, %d updates; want 500, 5000, 5000", wc.inputs, words, wc.updates)
	}
	for _, w := range []*workload{countPerKey("in", 2000, base), windowedCount("in", 2000, base)} {
		var total int64
		for _, n := range w.want {
			total += n
		}
		if w.inputs != 2000 || total != 2000 || w.updates != 2000 {
			t.Errorf("%s: %d records, %d counted, %d updates; want 2000", w.name, w.inputs, total, w.updates)
		}
	}
	for key := range windowedCount("in", 100, base).want {
		if !strings.Contains(key, "@") {
			t.Errorf("windowed key %q has no window start", key)
		}
	}
}

func TestPeerArgsRoundTrip(t *testing.T) {
	for _, cache := range []int64{0, 10 << 20} {
		a := peerArgs{"count", "h:1", "app", "in", "out", "exactly_once", "/tmp/x", 100 * time.Millisecond, cache}
		got, err := parsePeerArgs(a.list())
		if err != nil || got != a {
			t.Fatalf("parsePeerArgs(list) = %+v, %v; want %+v", got, err, a)
		}
	}
}

// The peers' command lines are parsed strictly: the count of arguments,
// and the commit interval and cache as decimal digits, nothing else.
func TestPeerArgsStrict(t *testing.T) {
	good := []string{"count", "h:1", "app", "in", "out", "exactly_once", "/tmp/x", "100", "10485760"}
	_, err := parsePeerArgs(good[:8])
	if want := "want 9 arguments (workload brokers app-id input output guarantee state-dir commit-ms cache-bytes), got 8"; err == nil || err.Error() != want {
		t.Errorf("8 arguments: %v; want %q", err, want)
	}
	for _, c := range []struct {
		i       int
		v, name string
	}{
		{8, "-1", "cache-bytes"}, {8, "+5", "cache-bytes"}, {8, "10MiB", "cache-bytes"}, {8, "", "cache-bytes"},
		{8, "99999999999999999999", "cache-bytes"}, {7, "1e3", "commit-ms"}, {7, " 100", "commit-ms"},
	} {
		args := slices.Clone(good)
		args[c.i] = c.v
		_, err := parsePeerArgs(args)
		if want := c.name + " " + strconv.Quote(c.v) + ": not a non-negative integer"; err == nil || err.Error() != want {
			t.Errorf("%s %q: %v; want %q", c.name, c.v, err, want)
		}
	}
}

// The Kafka Streams peer names its arguments as the Go peers do.
func TestKafkaStreamsPeerUsage(t *testing.T) {
	src, err := os.ReadFile("kstreams/src/main/java/weir/peers/Main.java")
	if err != nil {
		t.Fatal(err)
	}
	if want := strconv.Quote("usage: Main " + peerUsage); !strings.Contains(string(src), want) {
		t.Errorf("Main.java does not print %s", want)
	}
	if want := fmt.Sprintf("args.length != %d", len(strings.Fields(peerUsage))); !strings.Contains(string(src), want) {
		t.Errorf("Main.java does not check %s", want)
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
		return result{workload: "wordcount", keys: 10_000, guarantee: "exactly_once", cache: 10 << 20, peer: peer, round: round, inputs: 1000, steady: steady, cpu: cpu, peakRSS: 1 << 20}
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
	if len(got) != 2 || got[0].name != "weir" || got[1].name != "kstreams" {
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
	if got[0].seconds != 2 || got[1].seconds != 2 {
		t.Errorf("median seconds = %v, %v; want 2, 2", got[0].seconds, got[1].seconds)
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

func TestFlagsDefaultToOnePoint(t *testing.T) {
	o, err := parseFlags(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(o.caches, []int64{10 << 20}) || !slices.Equal(o.wordcountWords, []int{10_000}) || !slices.Equal(o.restoreRecords, []int{5_000_000}) {
		t.Errorf("defaults: -caches %v, -wordcount-words %v, -restore-records %v; want [10485760], [10000], [5000000]", o.caches, o.wordcountWords, o.restoreRecords)
	}
}

func TestFlagsTakeLists(t *testing.T) {
	o, err := parseFlags([]string{"-caches", "10485760, 0,1024", "-wordcount-words", "10000,100000,1000000,", "-restore-records", "1000000,20000000"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(o.caches, []int64{10 << 20, 0, 1024}) {
		t.Errorf("-caches = %v", o.caches)
	}
	if !slices.Equal(o.wordcountWords, []int{10_000, 100_000, 1_000_000}) {
		t.Errorf("-wordcount-words = %v", o.wordcountWords)
	}
	if !slices.Equal(o.restoreRecords, []int{1_000_000, 20_000_000}) {
		t.Errorf("-restore-records = %v", o.restoreRecords)
	}
}

func TestFlagsRefuseBadLists(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-caches", "-1"}, `-caches: "-1" is not an integer of at least 0`},
		{[]string{"-caches", "10MiB"}, `-caches: "10MiB" is not an integer of at least 0`},
		{[]string{"-caches", "+5"}, `-caches: "+5" is not an integer of at least 0`},
		{[]string{"-caches", "0,0"}, `-caches: 0 given twice`},
		{[]string{"-caches", ","}, `-caches: no value`},
		{[]string{"-wordcount-words", "0"}, `-wordcount-words: "0" is not an integer of at least 1`},
		{[]string{"-wordcount-words", "1e6"}, `-wordcount-words: "1e6" is not an integer of at least 1`},
		{[]string{"-restore-records", ""}, `-restore-records: no value`},
		{[]string{"-restore-records", "5000000,x"}, `-restore-records: "x" is not an integer of at least 1`},
	} {
		_, err := parseFlags(c.args, io.Discard)
		if err == nil || err.Error() != c.want {
			t.Errorf("%v: %v; want %q", c.args, err, c.want)
		}
	}
	// Every bad list is reported at once.
	_, err := parseFlags([]string{"-caches", "x", "-wordcount-words", "0", "-restore-records", "y"}, io.Discard)
	for _, name := range []string{"-caches", "-wordcount-words", "-restore-records"} {
		if err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("three bad lists: %v; want %s named", err, name)
		}
	}
}

// The workloads run at their points: the word count at every vocabulary,
// the restore at every size, the others at their fixed key count.
func TestPoints(t *testing.T) {
	o := &options{wordcountWords: []int{10_000, 1_000_000}, restoreRecords: []int{1_000_000, 5_000_000}}
	for _, c := range []struct {
		workload string
		want     []int
	}{
		{"wordcount", o.wordcountWords}, {"restore", o.restoreRecords},
		{"count", []int{10_000}}, {"windowed", []int{1_000}}, {"join", []int{10_000}},
	} {
		if got := points(o, c.workload); !slices.Equal(got, c.want) {
			t.Errorf("points(%s) = %v, want %v", c.workload, got, c.want)
		}
	}
}

// goka runs once per workload and guarantee, not per cache size (it has
// none); restore runs once, at the first guarantee and cache size.
func TestRunsPerCache(t *testing.T) {
	for _, c := range []struct {
		workload, peer, guarantee string
		cacheIndex                int
		want                      bool
	}{
		{"wordcount", "weir", "exactly_once", 1, true},
		{"wordcount", "kstreams", "at_least_once", 1, true},
		{"wordcount", "goka", "at_least_once", 0, true},
		{"wordcount", "goka", "at_least_once", 1, false},
		{"count", "goka", "at_least_once", 0, true},
		{"wordcount", "goka", "exactly_once", 0, false},
		{"windowed", "goka", "at_least_once", 0, false},
		{"join", "goka", "at_least_once", 0, false},
		{"restore", "goka", "exactly_once", 0, false},
		{"restore", "weir", "exactly_once", 0, true},
		{"restore", "kstreams", "exactly_once", 1, false},
		{"restore", "weir", "at_least_once", 0, false},
	} {
		if got := runs(c.workload, c.peer, c.guarantee, c.cacheIndex, "exactly_once"); got != c.want {
			t.Errorf("runs(%s, %s, %s, cache #%d) = %v, want %v", c.workload, c.peer, c.guarantee, c.cacheIndex, got, c.want)
		}
	}
}

func TestWordCountVocabulary(t *testing.T) {
	base := time.UnixMilli(1_700_000_000_000)
	small, large := wordCount("in", 2000, 100, base), wordCount("in", 2000, 1_000_000, base)
	if len(small.want) != 100 || small.keys != 100 {
		t.Errorf("100-word vocabulary: %d distinct words drawn, keys %d; want 100", len(small.want), small.keys)
	}
	// 20,000 draws from a million words: nearly all distinct.
	if len(large.want) < 19_000 || large.keys != 1_000_000 {
		t.Errorf("1M-word vocabulary: %d distinct words in 20,000 draws, keys %d", len(large.want), large.keys)
	}
	for w := range small.want {
		if n, err := strconv.Atoi(strings.TrimPrefix(w, "w")); err != nil || n >= 100 {
			t.Errorf("word %q is not of the vocabulary", w)
		}
	}
	if !strings.Contains(large.about, "drawn from 1000000 distinct") {
		t.Errorf("about = %q", large.about)
	}
}

// The restore's input is made as it is produced: n records, the same ones
// every time it is ranged over, whose keys restoreIndex maps back.
func TestRestoreInput(t *testing.T) {
	w := restoreInput("in", 1000, time.UnixMilli(1_700_000_000_000))
	for range 2 {
		i := 0
		for m := range w.input {
			key := string(m.Key.(sarama.StringEncoder))
			if got, ok := restoreIndex(key, 1000); !ok || got != i {
				t.Fatalf("record %d: key %q maps to %d, %v", i, key, got, ok)
			}
			i++
		}
		if i != 1000 || w.inputs != 1000 || w.keys != 1000 {
			t.Fatalf("%d records, inputs %d, keys %d; want 1000", i, w.inputs, w.keys)
		}
	}
	for _, key := range []string{"r1000", "r01", "r", "r-1", "k1", "restore-marker-weir-0"} {
		if i, ok := restoreIndex(key, 1000); ok {
			t.Errorf("restoreIndex(%q) = %d, a key of the store", key, i)
		}
	}
}

// With a cache the output holds each key's final count; without one it
// holds every update, and under exactly once each key's in order, once.
func TestOutputCheck(t *testing.T) {
	w := &workload{want: map[string]int64{"a": 3, "b": 1}, updates: 4, rank: count}
	feed := func(guarantee string, cache int64, outputs ...string) error {
		c := newOutputCheck(w, guarantee, cache)
		done := false
		for _, o := range outputs {
			key, v, _ := strings.Cut(o, "=")
			n, _ := strconv.ParseInt(v, 10, 64)
			var err error
			if done, err = c.add(key, binary.BigEndian.AppendUint64(nil, uint64(n))); err != nil {
				return err
			}
		}
		if !done {
			return fmt.Errorf("not done")
		}
		return c.err()
	}
	for _, c := range []struct {
		guarantee string
		cache     int64
		outputs   []string
		fails     string // "" passes
	}{
		{"exactly_once", 10 << 20, []string{"a=3", "b=1"}, ""},
		{"exactly_once", 10 << 20, []string{"a=2", "b=1", "a=3"}, ""},
		{"exactly_once", 0, []string{"a=1", "b=1", "a=2", "a=3"}, ""},
		{"exactly_once", 0, []string{"a=1", "b=1", "a=3"}, "3 output records for 4 updates"},
		{"exactly_once", 0, []string{"a=2", "a=1", "b=1", "a=3"}, "out of order"},
		{"exactly_once", 0, []string{"a=1", "a=2", "a=2", "b=1", "a=3"}, "a: 2 after 2"},
		{"exactly_once", 10 << 20, []string{"a=4", "b=1", "a=3"}, "counted twice"},
		{"at_least_once", 10 << 20, []string{"a=4", "b=1", "a=3"}, ""},
		{"at_least_once", 0, []string{"a=1", "a=2", "a=1", "a=2", "b=1", "a=3"}, ""},
		{"at_least_once", 0, []string{"a=1", "b=1", "a=3"}, "3 output records for 4 updates"},
		{"at_least_once", noCache, []string{"a=3", "b=1"}, ""},
		{"exactly_once", 0, []string{"a=1", "c=1"}, `key "c"`},
	} {
		err := feed(c.guarantee, c.cache, c.outputs...)
		if c.fails == "" && err != nil || c.fails != "" && (err == nil || !strings.Contains(err.Error(), c.fails)) {
			t.Errorf("%s, cache %d, %v: %v; want %q", c.guarantee, c.cache, c.outputs, err, c.fails)
		}
	}
}

func TestLabels(t *testing.T) {
	for n, want := range map[int]string{10_000: "10k", 100_000: "100k", 1_000_000: "1M", 20_000_000: "20M", 1_500_000: "1500k", 1234: "1234", 0: "0"} {
		if got := shortCount(n); got != want {
			t.Errorf("shortCount(%d) = %q, want %q", n, got, want)
		}
	}
	for bytes, want := range map[int64]string{10 << 20: "10 MiB", 0: "0", noCache: "none", 512 << 10: "512 KiB", 1000: "1000 B"} {
		if got := cacheLabel(bytes); got != want {
			t.Errorf("cacheLabel(%d) = %q, want %q", bytes, got, want)
		}
	}
	if cacheName(noCache) != "none" || cacheName(10<<20) != "10485760" {
		t.Errorf("cacheName = %q, %q", cacheName(noCache), cacheName(10<<20))
	}
}

// testRun is one measured run for the report's tests: inputs units in
// steady, using cpu.
func testRun(workload string, keys int, guarantee string, cache int64, peer string, steady, cpu time.Duration) result {
	return result{workload: workload, keys: keys, guarantee: guarantee, cache: cache, peer: peer, unit: "lines", round: 1,
		inputs: 1000, steady: steady, total: steady, cpu: cpu, peakRSS: 100 << 20, commits: -1}
}

// weir and Kafka Streams are compared at the same cache size; goka, which
// has none, against weir at every size, and labelled so.
func TestReportPairsAtTheSameCache(t *testing.T) {
	s := time.Second
	rs := []result{
		testRun("wordcount", 10_000, "at_least_once", 10<<20, "weir", 1*s, 1*s),
		testRun("wordcount", 10_000, "at_least_once", 10<<20, "kstreams", 2*s, 2*s),
		testRun("wordcount", 10_000, "at_least_once", noCache, "goka", 4*s, 4*s),
		testRun("wordcount", 10_000, "at_least_once", 0, "weir", 2*s, 2*s),
		testRun("wordcount", 10_000, "at_least_once", 0, "kstreams", 8*s, 8*s),
	}
	var got []string
	for _, p := range pairs(medians(rs)) {
		got = append(got, fmt.Sprintf("%s@%s-%s@%s %.2f", p.weir.name, cacheLabel(p.weir.cache), p.peer.name, cacheLabel(p.peer.cache), p.weir.rate/p.peer.rate))
	}
	want := []string{"weir@10 MiB-kstreams@10 MiB 2.00", "weir@10 MiB-goka@none 4.00", "weir@0-goka@none 2.00", "weir@0-kstreams@0 4.00"}
	if !slices.Equal(got, want) {
		t.Errorf("pairs = %q, want %q", got, want)
	}
	table := report(&options{brokers: []string{"h:1"}, partitions: 6, rounds: 1}, rs, []string{"a word count"}, time.Unix(0, 0))
	for _, row := range []string{
		"| wordcount | 10k | at_least_once | 10 MiB | kstreams | 2.00 | 0.50 | 1.00 |",
		"| wordcount | 10k | at_least_once | 10 MiB / none | goka | 4.00 | 0.25 | 1.00 |",
		"| wordcount | 10k | at_least_once | 0 | kstreams | 4.00 | 0.25 | 1.00 |",
		"| wordcount | 10k | at_least_once | 0 / none | goka | 2.00 | 0.50 | 1.00 |",
		"| wordcount | 10k | at_least_once | none | goka | 1 | 250 lines/s |",
		"- a word count",
	} {
		if !strings.Contains(table, row) {
			t.Errorf("the report has no row %q:\n%s", row, table)
		}
	}
	if strings.Contains(table, "Word count over its key space") {
		t.Errorf("a word count at one point has a key-space curve:\n%s", table)
	}
}

// The word count's curve gives each point's CPU per line over the same
// peer's at the smallest vocabulary, per guarantee and cache.
func TestReportKeySpaceCurve(t *testing.T) {
	s, ms := time.Second, time.Millisecond
	rs := []result{
		testRun("wordcount", 10_000, "exactly_once", 10<<20, "weir", s, 10*ms),
		testRun("wordcount", 10_000, "exactly_once", 10<<20, "kstreams", s, 20*ms),
		testRun("wordcount", 1_000_000, "exactly_once", 10<<20, "weir", s, 15*ms),
		testRun("wordcount", 1_000_000, "exactly_once", 10<<20, "kstreams", s, 60*ms),
		testRun("wordcount", 10_000, "exactly_once", 0, "weir", s, 30*ms),
		testRun("wordcount", 100_000, "exactly_once", 10<<20, "weir", s, 12*ms),
	}
	rows := keySpace(medians(rs))
	var got []string
	for _, r := range rows {
		got = append(got, fmt.Sprintf("%s %s %.1f %.2f %.1f %.2f", cacheLabel(r.cache), shortCount(r.keys), r.weir.perUnit*1e6, r.weir.relative, r.kstreams.perUnit*1e6, r.kstreams.relative))
	}
	want := []string{
		"10 MiB 10k 10.0 1.00 20.0 1.00",
		"10 MiB 1M 15.0 1.50 60.0 3.00",
		"10 MiB 100k 12.0 1.20 -1000000.0 -1.00", // no Kafka Streams run at 100k
		"0 10k 30.0 1.00 -1000000.0 -1.00",
	}
	if !slices.Equal(got, want) {
		t.Errorf("key space rows:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	table := report(&options{brokers: []string{"h:1"}, partitions: 6, rounds: 1}, rs, nil, time.Unix(0, 0))
	for _, row := range []string{
		"| exactly_once | 10 MiB | 1M | 15.0 | 1.50 | 60.0 | 3.00 |",
		"| exactly_once | 10 MiB | 100k | 12.0 | 1.20 | - | - |",
	} {
		if !strings.Contains(table, row) {
			t.Errorf("the report has no row %q:\n%s", row, table)
		}
	}
}

// The restore's curve gives each store's restore time per million
// records over the same peer's at the smallest store.
func TestReportRestoreCurve(t *testing.T) {
	restore := func(peer string, keys int, steady time.Duration) result {
		r := testRun("restore", keys, "exactly_once", 10<<20, peer, steady, steady)
		r.inputs, r.unit = keys, "records"
		return r
	}
	rs := []result{
		restore("weir", 1_000_000, 2*time.Second),
		restore("kstreams", 1_000_000, 1*time.Second),
		restore("weir", 5_000_000, 10*time.Second),
		restore("weir", 20_000_000, 50*time.Second),
		restore("kstreams", 20_000_000, 20*time.Second),
	}
	table := report(&options{brokers: []string{"h:1"}, partitions: 6, rounds: 1}, rs, nil, time.Unix(0, 0))
	for _, row := range []string{
		"| weir | exactly_once | 10 MiB | 1M | 2.0 | 2.00 | 1.00 |",
		// Marginal: 8 s for 4M more records, then 40 s for 15M more.
		"| weir | exactly_once | 10 MiB | 5M | 10.0 | 2.00 | 1.00 | 100 | - | - | 2.00 | 1.00 |",
		"| weir | exactly_once | 10 MiB | 20M | 50.0 | 2.50 | 1.25 | 100 | - | - | 2.67 | 1.33 |",
		"| kstreams | exactly_once | 10 MiB | 1M | 1.0 | 1.00 | 1.00 | 100 | - | - | - | - |",
		"| kstreams | exactly_once | 10 MiB | 20M | 20.0 | 1.00 | 1.00 | 100 | - | - | 1.00 | 1.00 |",
		"| restore | 20M | exactly_once | 10 MiB | kstreams | 0.40 |",
	} {
		if !strings.Contains(table, row) {
			t.Errorf("the report has no row %q:\n%s", row, table)
		}
	}
	if i, j := strings.Index(table, "| weir | exactly_once | 10 MiB | 20M"), strings.Index(table, "| kstreams | exactly_once | 10 MiB | 1M"); i > j {
		t.Errorf("the restore curve is not grouped by peer:\n%s", table)
	}
}

// The restore curve gives the median peak RSS during each restore, the
// median RSS idle on the restored state, and the one over the other.
func TestReportRestoreRSS(t *testing.T) {
	s := time.Second
	restore := func(keys int, peer string, took time.Duration, peak, idle int64) result {
		r := testRun("restore", keys, "exactly_once", 10<<20, peer, took, took)
		r.inputs, r.peakRSS, r.idleRSS = keys, peak<<20, idle<<20
		return r
	}
	rs := []result{
		restore(1_000_000, "weir", 2*s, 300, 50),
		restore(1_000_000, "kstreams", 3*s, 400, 0),
		restore(5_000_000, "weir", 11*s, 600, 80),
		restore(5_000_000, "weir", 9*s, 500, 60),
		restore(5_000_000, "weir", 10*s, 700, 70),
	}
	table := report(&options{brokers: []string{"h:1"}, partitions: 6, rounds: 3}, rs, nil, time.Unix(0, 0))
	for _, row := range []string{
		"| weir | exactly_once | 10 MiB | 1M | 2.0 | 2.00 | 1.00 | 300 | 50 | 250 | - | - |",
		"| weir | exactly_once | 10 MiB | 5M | 10.0 | 2.00 | 1.00 | 600 | 70 | 530 | 2.00 | 1.00 |",
		"| kstreams | exactly_once | 10 MiB | 1M | 3.0 | 3.00 | 1.00 | 400 | - | - |",
	} {
		if !strings.Contains(table, row) {
			t.Errorf("the report has no row %q:\n%s", row, table)
		}
	}
}

// statusBytes reads a process's sizes from /proc: its RSS now is at most
// its peak.
func TestStatusBytesReadsThisProcess(t *testing.T) {
	rss, err := statusBytes(os.Getpid(), "VmRSS")
	if err != nil || rss <= 0 {
		t.Fatalf("VmRSS = %d, %v", rss, err)
	}
	if peak, err := statusBytes(os.Getpid(), "VmHWM"); err != nil || peak < rss {
		t.Errorf("VmHWM = %d, %v; want at least VmRSS %d", peak, err, rss)
	}
	if _, err := statusBytes(os.Getpid(), "VmNothing"); err == nil {
		t.Error("a field /proc does not have was read")
	}
}
