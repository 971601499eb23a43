package main

import (
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

func TestParseFlagsAborts(t *testing.T) {
	t.Parallel()
	o, err := parseFlags(nil, "", io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(o.workloads, wlAborts) {
		t.Error("the aborts workload runs by default")
	}
	if o.aborts != 5 || o.abortsWindow != 0 || o.abortsPartitions() != abortsDefaultPartitions {
		t.Errorf("aborts defaults: %d aborts, window %v, %d partitions", o.aborts, o.abortsWindow, o.abortsPartitions())
	}
	o, err = parseFlags([]string{"-workloads", "aborts", "-aborts", "3", "-aborts-window", "1m", "-partitions", "9"}, "", io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(o.workloads, []string{wlAborts}) || o.aborts != 3 || o.abortsWindow != time.Minute || o.abortsPartitions() != 9 {
		t.Errorf("aborts: workloads %v, %d aborts, window %v, %d partitions", o.workloads, o.aborts, o.abortsWindow, o.abortsPartitions())
	}
	// -aborts 0 is the baseline without injection.
	if _, err := parseFlags([]string{"-workloads", "aborts", "-aborts", "0"}, "", io.Discard); err != nil {
		t.Errorf("-aborts 0: %v", err)
	}
	// -partitions 4, given, is used even though it equals the general default.
	if o, err = parseFlags([]string{"-workloads", "aborts", "-partitions", "4"}, "", io.Discard); err != nil || o.abortsPartitions() != 4 {
		t.Errorf("-partitions 4: %v, %v", o, err)
	}
	_, err = parseFlags([]string{"-workloads", "aborts", "-aborts", "-1", "-aborts-window", "-1s", "-partitions", "2", "-records", "9"}, "", io.Discard)
	for _, want := range []string{"-aborts:", "-aborts-window", "-partitions", "-records"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v does not name %s", err, want)
		}
	}
	// The same flags are not checked when the workload does not run.
	if _, err := parseFlags([]string{"-aborts", "-1", "-records", "9"}, "", io.Discard); err != nil {
		t.Errorf("without the aborts workload: %v", err)
	}
}

func TestAbortsBadRecordsAreSpreadAfterTheWarmup(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		records  int64
		injected int
	}{{200_000, 5}, {1_000_000, 1}, {10, 8}, {100, 89}} {
		warmup := abortsWarmup(c.records)
		bad := abortsBad(c.records, warmup, c.injected)
		if len(bad) != c.injected {
			t.Fatalf("%+v: %d bad records", c, len(bad))
		}
		if !slices.IsSorted(bad) || len(slices.Compact(slices.Clone(bad))) != len(bad) {
			t.Errorf("%+v: bad records %v not distinct and ordered", c, bad)
		}
		if bad[0] <= warmup || bad[len(bad)-1] >= c.records {
			t.Errorf("%+v: bad records %v not in (%d, %d)", c, bad, warmup, c.records)
		}
		// Evenly spread: the gaps differ by at most one record.
		gap := (c.records - warmup) / int64(c.injected+1)
		for i := 1; i < len(bad); i++ {
			if d := bad[i] - bad[i-1]; d < gap || d > gap+1 {
				t.Errorf("%+v: gap %d between bad records %d and %d, want %d or %d", c, d, i-1, i, gap, gap+1)
			}
		}
	}
	if bad := abortsBad(1000, 100, 0); len(bad) != 0 {
		t.Errorf("no injection: bad records %v", bad)
	}
	if w := abortsWarmup(200_000); w != 10_000 {
		t.Errorf("warm-up of 200,000 = %d", w)
	}
	if w := abortsWarmup(50_000); w != 5_000 {
		t.Errorf("warm-up of 50,000 = %d", w)
	}
}

func TestGatherAbortsCountsSumsInstancesAndLabels(t *testing.T) {
	t.Parallel()
	instance := func(aborted, inPlace, rejoin, assignments float64) *recordingRegisterer {
		reg := &recordingRegisterer{Registry: prometheus.NewRegistry()}
		labels := prometheus.Labels{"application": "a"}
		txns := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "weir_transactions_total", ConstLabels: labels}, []string{"thread", "result"})
		rewinds := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "weir_rewinds_total", ConstLabels: labels}, []string{"thread", "mode"})
		rebalances := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "weir_rebalances_total", ConstLabels: labels}, []string{"thread"})
		skipped := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "weir_records_skipped_total", ConstLabels: labels}, []string{"thread", "task", "reason"})
		reg.MustRegister(txns, rewinds, rebalances, skipped)
		txns.WithLabelValues("0", "committed").Add(10)
		txns.WithLabelValues("1", "aborted").Add(aborted)
		rewinds.WithLabelValues("0", "in_place").Add(inPlace)
		rewinds.WithLabelValues("1", "rejoin").Add(rejoin)
		rebalances.WithLabelValues("0").Add(assignments)
		rebalances.WithLabelValues("1").Add(1)
		skipped.WithLabelValues("0", "0_1", "production").Add(1)
		skipped.WithLabelValues("0", "0_1", "deserialization").Add(7)
		return reg
	}
	got, err := gatherAbortsCounts([]*recordingRegisterer{instance(2, 2, 0, 3), instance(1, 0, 1, 5)})
	if err != nil {
		t.Fatal(err)
	}
	want := abortsCounts{committed: 20, aborted: 3, inPlace: 2, rejoin: 1, skipped: 2, assignments: 10}
	if got != want {
		t.Errorf("counts = %+v, want %+v", got, want)
	}
	if d := got.minus(abortsCounts{committed: 5, assignments: 4}); d.committed != 15 || d.assignments != 6 || d.aborted != 3 {
		t.Errorf("minus = %+v", d)
	}
}
