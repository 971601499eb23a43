package main

import (
	"io"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/weirstream/weir"
)

func TestParseFlagsDefaults(t *testing.T) {
	t.Parallel()
	o, err := parseFlags(nil, "", io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(o.brokers, []string{"127.0.0.1:19092"}) {
		t.Errorf("brokers = %v", o.brokers)
	}
	if o.records != 1_000_000 || o.valueSize != 100 || o.partitions != 4 || o.threads != 1 || o.rounds != 1 {
		t.Errorf("defaults = %+v", o)
	}
	if o.guarantee != weir.AtLeastOnce {
		t.Errorf("guarantee = %v, want at_least_once", o.guarantee)
	}
	if o.commitInterval != 100*time.Millisecond {
		t.Errorf("commit interval = %v", o.commitInterval)
	}
	if !slices.Equal(o.workloads, allWorkloads) {
		t.Errorf("workloads = %v", o.workloads)
	}
}

func TestParseFlagsBrokersFromEnvironment(t *testing.T) {
	t.Parallel()
	o, err := parseFlags(nil, "a:1, b:2", io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(o.brokers, []string{"a:1", "b:2"}) {
		t.Errorf("brokers = %v", o.brokers)
	}
}

func TestParseFlagsReportsEveryProblem(t *testing.T) {
	t.Parallel()
	_, err := parseFlags([]string{"-records", "0", "-threads", "0", "-guarantee", "twice", "-workloads", "x"}, "", io.Discard)
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{"-records", "-threads", "-guarantee", "-workloads"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %s", err, want)
		}
	}
}

func TestParseWorkloadsKeepsCanonicalOrder(t *testing.T) {
	t.Parallel()
	got, err := parseWorkloads("weir-passthrough, load,sarama")
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{wlSarama, wlPassthrough}; !slices.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
}

func TestResultRates(t *testing.T) {
	t.Parallel()
	r := &result{Records: 1001, Bytes: 1001 * 116, FirstSeconds: 1, EndSeconds: 2, CPUSeconds: 0.5}
	r.finish()
	check := func(name string, got, want float64) {
		if math.Abs(got-want) > 1e-9*math.Max(1, want) {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	check("Rate", r.Rate, 500.5)
	check("MBRate", r.MBRate, 1001*116/2/1e6)
	check("SteadyRate", r.SteadyRate, 1000)
	check("SteadyMBRate", r.SteadyMBRate, 1000*116/1e6)
	check("CPUPerMillion", r.CPUPerMillion, 0.5/1001*1e6)
}

func TestMedian(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		in   []float64
		want float64
	}{
		{nil, 0},
		{[]float64{3}, 3},
		{[]float64{5, 1, 3}, 3},
		{[]float64{4, 1, 3, 2}, 2.5},
	} {
		if got := median(c.in); got != c.want {
			t.Errorf("median(%v) = %v, want %v", c.in, got, c.want)
		}
	}
}

func TestRecordKeysAreDistinctAndSized(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for i := range int64(10_000) {
		k := recordKey(i)
		if len(k) != keySize {
			t.Fatalf("key %d has %d bytes", i, len(k))
		}
		if seen[string(k)] {
			t.Fatalf("key %d repeats", i)
		}
		seen[string(k)] = true
	}
}

func TestRatiosUseMedians(t *testing.T) {
	t.Parallel()
	r := &report{Results: []*result{
		{Workload: wlSarama, SteadyRate: 100, Rate: 50},
		{Workload: wlSarama, SteadyRate: 300, Rate: 70},
		{Workload: wlSarama, SteadyRate: 200, Rate: 60},
		{Workload: wlSource, SteadyRate: 100, Rate: 30},
	}}
	r.computeRatios()
	if len(r.Ratios) != 1 {
		t.Fatalf("ratios = %+v", r.Ratios)
	}
	if q := r.Ratios[0]; q.Steady != 0.5 || q.EndToEnd != 0.5 {
		t.Errorf("ratio = %+v, want 0.5 and 0.5", q)
	}
}

func TestParseFlagsRestore(t *testing.T) {
	t.Parallel()
	o, err := parseFlags(nil, "", io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(o.restoreRecords, []int64{1_000_000, 5_000_000}) || !slices.Equal(o.restoreConcurrency, []int{2, 4}) {
		t.Errorf("restore defaults: records %v, concurrency %v", o.restoreRecords, o.restoreConcurrency)
	}
	if slices.Contains(o.workloads, wlRestore) {
		t.Error("the restore workload runs by default")
	}
	o, err = parseFlags([]string{"-workloads", "restore,sarama", "-restore-records", "10, 20", "-restore-concurrency", "3"}, "", io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(o.workloads, []string{wlSarama, wlRestore}) || !slices.Equal(o.readWorkloads(), []string{wlSarama}) {
		t.Errorf("workloads = %v, read workloads = %v", o.workloads, o.readWorkloads())
	}
	if !slices.Equal(o.restoreRecords, []int64{10, 20}) || !slices.Equal(o.restoreConcurrency, []int{3}) {
		t.Errorf("restore: records %v, concurrency %v", o.restoreRecords, o.restoreConcurrency)
	}
	_, err = parseFlags([]string{"-restore-records", "0", "-restore-concurrency", "x"}, "", io.Discard)
	for _, want := range []string{"-restore-records", "-restore-concurrency"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v does not name %s", err, want)
		}
	}
}

func TestParseFlagsRescale(t *testing.T) {
	t.Parallel()
	o, err := parseFlags([]string{"-workloads", "rescale", "-partitions", "3"}, "", io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(o.rescaleRecords, []int64{5_000_000}) || o.rescaleTo() != 6 || o.weirCLI != "" {
		t.Errorf("rescale defaults: records %v, to %d partitions, cli %q", o.rescaleRecords, o.rescaleTo(), o.weirCLI)
	}
	o, err = parseFlags([]string{"-workloads", "rescale", "-rescale-records", "10,20", "-rescale-partitions", "12", "-weir-cli", "/bin/weir"}, "", io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(o.rescaleRecords, []int64{10, 20}) || o.rescaleTo() != 12 || o.weirCLI != "/bin/weir" {
		t.Errorf("rescale: records %v, to %d partitions, cli %q", o.rescaleRecords, o.rescaleTo(), o.weirCLI)
	}
	_, err = parseFlags([]string{"-rescale-records", "-1", "-rescale-partitions", "4"}, "", io.Discard)
	for _, want := range []string{"-rescale-records", "-rescale-partitions"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v does not name %s", err, want)
		}
	}
}

func TestDoneInLine(t *testing.T) {
	t.Parallel()
	out := "copied store kv: 5000000 entries\ndone in 41.25s: every store verified (keys, checksum and partition of every key); start a2 on the 8 partitions\n"
	m := doneIn.FindStringSubmatch(out)
	if m == nil || m[1] != "41.25s" {
		t.Fatalf("matched %q", m)
	}
}

func TestRestoreRatiosUseMediansOfFullRestores(t *testing.T) {
	t.Parallel()
	r := &report{Restores: []*restoreResult{
		{Changelog: 5, Run: restoreSarama, Rate: 100},
		{Changelog: 5, Run: restoreFull, Concurrency: 2, Rate: 40},
		{Changelog: 5, Run: restoreRestart, Concurrency: 2, Rate: 1}, // not a full restore
		{Changelog: 5, Run: restoreDeleted, Concurrency: 2, Rate: 60},
		{Changelog: 5, Run: restoreFull, Concurrency: 4, Rate: 80},
		{Changelog: 1, Run: restoreSarama, Rate: 10},
		{Changelog: 1, Run: restoreFull, Concurrency: 2, Rate: 5},
	}}
	r.computeRestoreRatios()
	want := []restoreRatio{
		{Changelog: 1, Concurrency: 2, Weir: 5, Sarama: 10, Ratio: 0.5},
		{Changelog: 5, Concurrency: 2, Weir: 50, Sarama: 100, Ratio: 0.5},
		{Changelog: 5, Concurrency: 4, Weir: 80, Sarama: 100, Ratio: 0.8},
	}
	if !slices.Equal(r.RestoreRatios, want) {
		t.Errorf("ratios = %+v\nwant %+v", r.RestoreRatios, want)
	}
}

func TestParseFlagsSaramaTxn(t *testing.T) {
	t.Parallel()
	o, err := parseFlags([]string{"-workloads", "weir-passthrough,sarama-txn-passthrough,sarama-passthrough,count", "-commit-interval", "0"}, "", io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{wlSaramaPassthrough, wlSaramaTxn, wlPassthrough}
	if !slices.Equal(o.readWorkloads(), want) {
		t.Errorf("read workloads = %v, want %v", o.readWorkloads(), want)
	}
	if slices.Contains(allWorkloads, wlSaramaTxn) {
		t.Error("the sarama transactional passthrough runs by default")
	}
	if got := txnCommitInterval(o); got != 100*time.Millisecond {
		t.Errorf("commit interval for -commit-interval 0 = %v, want weir's exactly-once default 100ms", got)
	}
}

func TestRatiosAgainstSaramaTxn(t *testing.T) {
	t.Parallel()
	r := &report{Results: []*result{
		{Workload: wlSaramaTxn, SteadyRate: 200, Rate: 100},
		{Workload: wlPassthrough, SteadyRate: 100, Rate: 80},
	}}
	r.computeRatios()
	if len(r.Ratios) != 1 || r.Ratios[0].Name != "weir passthrough / sarama transactional passthrough" || r.Ratios[0].Steady != 0.5 || r.Ratios[0].EndToEnd != 0.8 {
		t.Errorf("ratios = %+v", r.Ratios)
	}
}
