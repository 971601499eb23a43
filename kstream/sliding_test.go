package kstream_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/weirstream/weir/kstream"
	"github.com/weirstream/weir/serde"
	"github.com/weirstream/weir/weirtest"
)

// slidingConcat aggregates "in" per key over sliding windows of 10 ms
// with 50 ms of grace, as the string "0+v1+v2...", into "out".
func slidingConcat() *kstream.Builder {
	w := kstream.Sliding(10 * time.Millisecond).Grace(50 * time.Millisecond)
	b := kstream.NewBuilder()
	b.Stream("in", "in", serde.String(), serde.String()).
		GroupByKey().
		SlidingWindowedBy(w).
		Aggregate("concat", func() string { return "0" }, func(_ string, v, agg string) string { return agg + "+" + v }, serde.String()).
		ToStream(kstream.WindowedKey).
		To("out", kstream.WindowedSerde(serde.String(), w.Difference()), serde.String())
	return b
}

// TestSlidingWindowAggregation follows Kafka Streams' sliding-window
// aggregation record by record (its KStreamSlidingWindowAggregate, in
// order and out of order): every record updates the windows that hold
// it, creates the window ending at it, the window starting right after
// the record before it, and the window starting right after it when
// later records exist. Windows [start, end] include both ends; each
// update is stamped with the largest timestamp in its window.
func TestSlidingWindowAggregation(t *testing.T) {
	t.Parallel()
	d, reg := windowedDriver(t, slidingConcat())
	in := weirtest.Input(d, "in", serde.String(), serde.String())
	out := weirtest.Output(d, "out", kstream.WindowedSerde(serde.String(), 10*time.Millisecond), serde.String())
	steps := []struct {
		value string
		ts    int64
		want  []string
	}{
		{"1", 10, []string{"A[0,10]=0+1@10"}},
		{"2", 15, []string{"A[11,21]=0+2@15", "A[5,15]=0+1+2@15"}},
		{"3", 20, []string{"A[11,21]=0+2+3@20", "A[16,26]=0+3@20", "A[10,20]=0+1+2+3@20"}},
		{"4", 22, []string{"A[16,26]=0+3+4@22", "A[21,31]=0+4@22", "A[12,22]=0+2+3+4@22"}},
		{"5", 30, []string{"A[21,31]=0+4+5@30", "A[23,33]=0+5@30", "A[20,30]=0+3+4+5@30"}},
		// Out of order, within the grace period: the windows holding 18
		// are updated, the latest first (as Kafka Streams' driver does:
		// conformance/pinned_test.go), its own left window [8,18] is
		// created from the window ending at 15, and its right window
		// [19,29] holds 20 and 22.
		{"6", 18, []string{"A[16,26]=0+3+4+6@22", "A[12,22]=0+2+3+4+6@22", "A[11,21]=0+2+3+6@20",
			"A[10,20]=0+1+2+3+6@20", "A[8,18]=0+1+2+6@18", "A[19,29]=0+3+4@22"}},
		// Stream time 100: windows ending at or before 50 are closed.
		{"7", 100, []string{"A[90,100]=0+7@100"}},
		{"8", 35, nil}, // its windows end by 46: dropped, counted late
	}
	for i, s := range steps {
		if err := in.Pipe("A", s.value, at(s.ts)); err != nil {
			t.Fatal(err)
		}
		recs, err := out.ReadAll()
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, r := range recs {
			got = append(got, fmt.Sprintf("%s[%d,%d]=%s@%d", r.Key.Key, r.Key.Start.UnixMilli(), r.Key.End.UnixMilli(), r.Value, r.Timestamp.UnixMilli()))
		}
		if !slices.Equal(got, s.want) {
			t.Errorf("record %d (%s@%d):\n got %q\nwant %q", i, s.value, s.ts, got, s.want)
		}
	}
	if n := metric(t, reg, "weir_records_late_total"); n != 1 {
		t.Errorf("weir_records_late_total = %v, want 1", n)
	}
}

// TestSlidingWindowCountAndReduce: Count and Reduce over the same windows
// agree with the aggregation above, window by window.
func TestSlidingWindowCountAndReduce(t *testing.T) {
	t.Parallel()
	w := kstream.Sliding(10 * time.Millisecond).Grace(50 * time.Millisecond)
	b := kstream.NewBuilder()
	g := b.Stream("in", "in", serde.String(), serde.Int64()).GroupByKey()
	g.SlidingWindowedBy(w).Count("counts").
		ToStream(kstream.WindowedKey).To("counts", kstream.WindowedSerde(serde.String(), w.Difference()), serde.Int64())
	g.SlidingWindowedBy(w).Reduce("sums", func(a, v int64) int64 { return a + v }, serde.Int64()).
		ToStream(kstream.WindowedKey, kstream.Named("sums-tostream")).To("sums", kstream.WindowedSerde(serde.String(), w.Difference()), serde.Int64())
	d, _ := windowedDriver(t, b)
	in := weirtest.Input(d, "in", serde.String(), serde.Int64())
	for _, ts := range []int64{10, 15, 20, 22, 30, 18} {
		if err := in.Pipe("A", ts, at(ts)); err != nil {
			t.Fatal(err)
		}
	}
	last := func(topic string) map[string]int64 {
		recs, err := weirtest.Output(d, topic, kstream.WindowedSerde(serde.String(), w.Difference()), serde.Int64()).ReadAll()
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]int64{}
		for _, r := range recs {
			m[fmt.Sprintf("[%d,%d]", r.Key.Start.UnixMilli(), r.Key.End.UnixMilli())] = r.Value
		}
		return m
	}
	// The records in each window, from TestSlidingWindowAggregation.
	windows := map[string][]int64{
		"[0,10]": {10}, "[5,15]": {10, 15}, "[8,18]": {10, 15, 18}, "[10,20]": {10, 15, 18, 20},
		"[11,21]": {15, 18, 20}, "[12,22]": {15, 18, 20, 22}, "[16,26]": {18, 20, 22}, "[19,29]": {20, 22},
		"[20,30]": {20, 22, 30}, "[21,31]": {22, 30}, "[23,33]": {30},
	}
	counts, sums := last("counts"), last("sums")
	if len(counts) != len(windows) || len(sums) != len(windows) {
		t.Fatalf("%d windows counted and %d summed, want %d: %v %v", len(counts), len(sums), len(windows), counts, sums)
	}
	for w, recs := range windows {
		var sum int64
		for _, v := range recs {
			sum += v
		}
		if counts[w] != int64(len(recs)) || sums[w] != sum {
			t.Errorf("window %s: count %d, sum %d; want %d and %d", w, counts[w], sums[w], len(recs), sum)
		}
	}
}

// TestSlidingWindowFinalResults: Suppress(UntilWindowCloses) on a sliding
// count emits each window once, when stream time passes its end plus the
// grace period.
func TestSlidingWindowFinalResults(t *testing.T) {
	t.Parallel()
	w := kstream.Sliding(10 * time.Millisecond).Grace(5 * time.Millisecond)
	b := kstream.NewBuilder()
	b.Stream("in", "in", serde.String(), serde.String()).
		GroupByKey().
		SlidingWindowedBy(w).
		Count("counts").
		Suppress("final", kstream.UntilWindowCloses()).
		ToStream(kstream.WindowedKey).
		To("final", kstream.WindowedSerde(serde.String(), w.Difference()), serde.Int64())
	d, _ := windowedDriver(t, b)
	pipe(t, d, "in", kv[string, string]{"A", "", 10}, kv[string, string]{"A", "", 15}, kv[string, string]{"A", "", 24})
	// Stream time 24: windows ending by 19 are final: [0,10] and [5,15].
	recs, err := weirtest.Output(d, "final", kstream.WindowedSerde(serde.String(), w.Difference()), serde.Int64()).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range recs {
		got = append(got, fmt.Sprintf("[%d,%d]=%d", r.Key.Start.UnixMilli(), r.Key.End.UnixMilli(), r.Value))
	}
	if want := []string{"[0,10]=1", "[5,15]=2"}; !slices.Equal(got, want) {
		t.Errorf("final results %q, want %q", got, want)
	}
}

func TestSlidingWindowsAreChecked(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		w    kstream.SlidingWindows
		want []string
	}{
		{kstream.Sliding(0).Grace(-time.Millisecond), []string{"time difference 0s", "grace -1ms"}},
		{kstream.Sliding(10 * time.Millisecond).Retention(15 * time.Millisecond), []string{"retention 15ms", "at least 2 * difference + grace (20ms)"}},
	} {
		b := kstream.NewBuilder()
		b.Stream("in", "in", serde.String(), serde.String()).GroupByKey().SlidingWindowedBy(c.w).Count("counts")
		_, err := b.Build()
		for _, want := range c.want {
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("Build = %v, want it to say %q", err, want)
			}
		}
	}
}
