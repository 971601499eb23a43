package kstream_test

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/weirstream/weir/kstream"
	"github.com/weirstream/weir/serde"
	"github.com/weirstream/weir/weirtest"
)

// windowedDriver runs b in memory with a registry of its own, closed
// when the test ends.
func windowedDriver(t *testing.T, b *kstream.Builder) (*weirtest.Driver, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	d, err := weirtest.New(b, weirtest.Config{Metrics: reg})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := d.Close(); err != nil {
			t.Error(err)
		}
	})
	return d, reg
}

// windowedOutput reads topic, written with WindowedSerde(String, size)
// keys and Int64 values, as "key[start,end)=value@timestamp" with times
// in ms.
func windowedOutput(t *testing.T, d *weirtest.Driver, topic string, size time.Duration) []string {
	t.Helper()
	recs, err := weirtest.Output(d, topic, kstream.WindowedSerde(serde.String(), size), serde.Int64()).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, r := range recs {
		out = append(out, fmt.Sprintf("%s[%d,%d)=%d@%d", r.Key.Key, r.Key.Start.UnixMilli(), r.Key.End.UnixMilli(), r.Value, r.Timestamp.UnixMilli()))
	}
	return out
}

// lateOutput reads the string records of topic as "key=value@timestamp".
func lateOutput(t *testing.T, d *weirtest.Driver, topic string) []string {
	t.Helper()
	recs, err := weirtest.Output(d, topic, serde.String(), serde.String()).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, r := range recs {
		out = append(out, fmt.Sprintf("%s=%s@%d", r.Key, r.Value, r.Timestamp.UnixMilli()))
	}
	return out
}

// metric returns the counter name, summed over its series.
func metric(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	n := 0.0
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				n += m.GetCounter().GetValue()
			}
		}
	}
	return n
}

// windowedCount counts the records of "in" per key in windows w into the
// store "counts", every update written to "out" and the late records to
// "late".
func windowedCount(w kstream.TimeWindows) *kstream.Builder {
	b := kstream.NewBuilder()
	b.Stream("in", "in", serde.String(), serde.String()).
		GroupByKey().
		WindowedBy(w).
		LateTo("late", serde.String()).
		Count("counts").
		ToStream(kstream.WindowedKey).
		To("out", kstream.WindowedSerde(serde.String(), w.Size()), serde.Int64())
	return b
}

// TestTumblingWindowedCount follows two keys through 10 ms tumbling
// windows with 5 ms of grace, record by record: records out of order
// within the grace period update their window; records for a window
// whose end + grace the stream time has reached are dropped, emit
// nothing, are counted as late and are written to the late topic,
// including one exactly at that boundary.
func TestTumblingWindowedCount(t *testing.T) {
	t.Parallel()
	w := kstream.Tumbling(10 * time.Millisecond).Grace(5 * time.Millisecond)
	d, reg := windowedDriver(t, windowedCount(w))
	in := weirtest.Input(d, "in", serde.String(), serde.String())
	steps := []struct {
		key  string
		ts   int64
		want []string // the updates the record emits
	}{
		{"A", 1, []string{"A[0,10)=1@1"}},    // stream time 1
		{"B", 3, []string{"B[0,10)=1@3"}},    // 3
		{"A", 12, []string{"A[10,20)=1@12"}}, // 12: [0,10) closes at 10+5
		{"A", 8, []string{"A[0,10)=2@8"}},    // out of order, within grace
		{"B", 16, []string{"B[10,20)=1@16"}}, // 16: [0,10) is closed
		{"A", 9, nil},                        // late: dropped, counted
		{"B", 15, []string{"B[10,20)=2@16"}}, // out of order, within grace; the window's largest time
		{"A", 24, []string{"A[20,30)=1@24"}}, // 24: [10,20) closes at 25
		{"B", 19, []string{"B[10,20)=3@19"}}, // 20+5 > 24: still open
		{"A", 25, []string{"A[20,30)=2@25"}}, // 25: [10,20) is closed
		{"B", 19, nil},                       // late, at the boundary: dropped, counted
		{"C", 29, []string{"C[20,30)=1@29"}}, // a new key
		{"A", 30, []string{"A[30,40)=1@30"}}, // start inclusive
		{"C", 21, []string{"C[20,30)=2@29"}}, // 30 - 5 < 30: open
		{"B", 5, nil},                        // far too late
		{"C", 40, []string{"C[40,50)=1@40"}}, // 40: [20,30) closes at 35
		{"A", 34, []string{"A[30,40)=2@34"}}, // open until 45
		{"C", 29, nil},                       // late
		{"A", 39, []string{"A[30,40)=3@39"}}, // end exclusive: 39 is in [30,40)
		{"A", 40, []string{"A[40,50)=1@40"}}, // ...and 40 is not
		{"B", 45, []string{"B[40,50)=1@45"}}, // 45: [30,40) is closed
		{"A", 35, nil},                       // late
		{"B", 44, []string{"B[40,50)=2@45"}}, // within grace of its own window
		{"A", 49, []string{"A[40,50)=2@49"}}, // the last ms of the window
		{"B", 50, []string{"B[50,60)=1@50"}}, // 50
		{"A", 41, []string{"A[40,50)=3@49"}}, // 50 + 5 > 50: open
		{"A", 55, []string{"A[50,60)=1@55"}}, // 55: [40,50) is closed
		{"A", 41, nil},                       // late
		{"B", 54, []string{"B[50,60)=2@54"}}, // open
		{"B", 49, nil},                       // late
		{"C", 59, []string{"C[50,60)=1@59"}}, // open
		{"C", 60, []string{"C[60,70)=1@60"}}, // 60
		{"C", 54, []string{"C[50,60)=2@59"}}, // open until 65
		{"C", 70, []string{"C[70,80)=1@70"}}, // 70
		{"C", 64, []string{"C[60,70)=2@64"}}, // 70 + 5 > 70: open
	}
	late := 0
	for i, s := range steps {
		if err := in.Pipe(s.key, fmt.Sprint(i), at(s.ts)); err != nil {
			t.Fatal(err)
		}
		var wantLate []string
		if s.want == nil {
			late++
			wantLate = []string{fmt.Sprintf("%s=%d@%d", s.key, i, s.ts)}
		}
		if got := windowedOutput(t, d, "out", w.Size()); !slices.Equal(got, s.want) {
			t.Errorf("record %d (%s@%d) emitted %q, want %q", i, s.key, s.ts, got, s.want)
		}
		if got := lateOutput(t, d, "late"); !slices.Equal(got, wantLate) {
			t.Errorf("record %d (%s@%d) wrote %q to the late topic, want %q", i, s.key, s.ts, got, wantLate)
		}
	}
	if n := metric(t, reg, "weir_records_late_total"); n != float64(late) || late != 7 {
		t.Errorf("weir_records_late_total = %v, want %d (7)", n, late)
	}
}

// TestHoppingWindowedCount follows two keys through 10 ms windows that
// start every 5 ms, with 2 ms of grace: a record updates each window that
// holds it (none starting before the epoch), and a record whose windows
// have partly closed updates only the open ones and is counted as late
// and written to the late topic once.
func TestHoppingWindowedCount(t *testing.T) {
	t.Parallel()
	w := kstream.Hopping(10*time.Millisecond, 5*time.Millisecond).Grace(2 * time.Millisecond)
	d, reg := windowedDriver(t, windowedCount(w))
	in := weirtest.Input(d, "in", serde.String(), serde.String())
	steps := []struct {
		key  string
		ts   int64
		want []string
		late bool
	}{
		{"A", 3, []string{"A[0,10)=1@3"}, false},                     // [-5,5) is not created
		{"A", 7, []string{"A[0,10)=2@7", "A[5,15)=1@7"}, false},      // two windows
		{"B", 12, []string{"B[5,15)=1@12", "B[10,20)=1@12"}, false},  // 12: [0,10) closes at 10+2
		{"A", 9, []string{"A[5,15)=2@9"}, true},                      // [0,10) closed, [5,15) open
		{"A", 4, nil, true},                                          // its one window is closed
		{"B", 17, []string{"B[10,20)=2@17", "B[15,25)=1@17"}, false}, // 17: [5,15) is closed
		{"A", 14, []string{"A[10,20)=1@14"}, true},                   // [5,15) closed, [10,20) open
		{"B", 13, []string{"B[10,20)=3@17"}, true},                   // the same for B
		{"A", 21, []string{"A[15,25)=1@21", "A[20,30)=1@21"}, false}, // 21: [10,20) closes at 22
		{"B", 19, []string{"B[10,20)=4@19", "B[15,25)=2@19"}, false}, // both open
		{"A", 22, []string{"A[15,25)=2@22", "A[20,30)=2@22"}, false}, // 22: [10,20) is closed
		{"B", 18, []string{"B[15,25)=3@19"}, true},                   // [10,20) closed
	}
	late := 0
	for i, s := range steps {
		if err := in.Pipe(s.key, fmt.Sprint(i), at(s.ts)); err != nil {
			t.Fatal(err)
		}
		var wantLate []string
		if s.late {
			late++
			wantLate = []string{fmt.Sprintf("%s=%d@%d", s.key, i, s.ts)}
		}
		if got := windowedOutput(t, d, "out", w.Size()); !slices.Equal(got, s.want) {
			t.Errorf("record %d (%s@%d) emitted %q, want %q", i, s.key, s.ts, got, s.want)
		}
		if got := lateOutput(t, d, "late"); !slices.Equal(got, wantLate) {
			t.Errorf("record %d (%s@%d) wrote %q to the late topic, want %q", i, s.key, s.ts, got, wantLate)
		}
	}
	if n := metric(t, reg, "weir_records_late_total"); n != float64(late) || late != 5 {
		t.Errorf("weir_records_late_total = %v, want %d (5)", n, late)
	}
}

// TestWindowedReduceAndAggregate: a windowed Reduce and Aggregate on
// one grouping, each with a mapper that keeps the plain key.
func TestWindowedReduceAndAggregate(t *testing.T) {
	t.Parallel()
	w := kstream.Tumbling(10 * time.Millisecond)
	b := kstream.NewBuilder()
	g := b.Stream("in", "in", serde.String(), serde.String()).GroupByKey().WindowedBy(w)
	plain := func(win kstream.Windowed[string], v string) string {
		return fmt.Sprintf("%s@%d", win.Key, win.Start.UnixMilli())
	}
	g.Reduce("longest", func(agg, v string) string {
		if len(v) > len(agg) {
			return v
		}
		return agg
	}, serde.String()).
		ToStream(plain).
		To("longest", serde.String(), serde.String())
	g.Aggregate("joined", func() string { return ">" }, func(k, v, agg string) string { return agg + v }, serde.String()).
		ToStream(plain, kstream.Named("joined-plain")).
		To("joined", serde.String(), serde.String())
	d, reg := windowedDriver(t, b)
	pipe(t, d, "in", kv[string, string]{"k", "ab", 1}, kv[string, string]{"k", "a", 2}, kv[string, string]{"j", "x", 3},
		kv[string, string]{"k", "abc", 12}, kv[string, string]{"k", "zz", 5}, kv[string, string]{"k", "y", 13})
	// No grace: k@5 is late once stream time reaches 12 ([0,10) closes at 10).
	expect(t, d, "longest", serde.String(), serde.String(),
		kv[string, string]{"k@0", "ab", 1}, kv[string, string]{"k@0", "ab", 2}, kv[string, string]{"j@0", "x", 3},
		kv[string, string]{"k@10", "abc", 12}, kv[string, string]{"k@10", "abc", 13})
	expect(t, d, "joined", serde.String(), serde.String(),
		kv[string, string]{"k@0", ">ab", 1}, kv[string, string]{"k@0", ">aba", 2}, kv[string, string]{"j@0", ">x", 3},
		kv[string, string]{"k@10", ">abc", 12}, kv[string, string]{"k@10", ">abcy", 13})
	// One late record, dropped by both aggregations: counted once by each.
	if n := metric(t, reg, "weir_records_late_total"); n != 2 {
		t.Errorf("weir_records_late_total = %v, want 2", n)
	}
}

// TestWindowedCountSkipsNullKeys: as the key-value aggregations, a
// windowed one skips a record with a null Kafka key and counts it in
// weir_records_dropped_total{reason="null_key"}; an empty key is a key.
func TestWindowedCountSkipsNullKeys(t *testing.T) {
	t.Parallel()
	w := kstream.Tumbling(10 * time.Millisecond)
	d, reg := windowedDriver(t, windowedCount(w))
	in := weirtest.Input(d, "in", serde.String(), serde.String())
	if err := in.PipeNullKey("n", at(1)); err != nil {
		t.Fatal(err)
	}
	if err := in.Pipe("", "e", at(2)); err != nil {
		t.Fatal(err)
	}
	if got, want := windowedOutput(t, d, "out", w.Size()), []string{"[0,10)=1@2"}; !slices.Equal(got, want) {
		t.Errorf("out = %q, want %q", got, want)
	}
	if n := droppedNullKeys(t, reg); n != 1 {
		t.Errorf("weir_records_dropped_total{reason=null_key} = %v, want 1", n)
	}
}

// TestWindowedSerdeFormat pins Kafka Streams' TimeWindowedSerializer
// format: the key's bytes, then the window start in ms as a big-endian
// int64; the end comes from the window size.
func TestWindowedSerdeFormat(t *testing.T) {
	t.Parallel()
	s := kstream.WindowedSerde(serde.String(), time.Minute)
	start := time.UnixMilli(0x0102030405).UTC()
	b, err := s.Serialize("t", kstream.Windowed[string]{Key: "ab", Start: start, End: start.Add(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	if want := []byte{'a', 'b', 0, 0, 0, 0x01, 0x02, 0x03, 0x04, 0x05}; !bytes.Equal(b, want) {
		t.Errorf("Serialize = % x, want % x", b, want)
	}
	w, err := s.Deserialize("t", b)
	if err != nil {
		t.Fatal(err)
	}
	if w.Key != "ab" || !w.Start.Equal(start) || !w.End.Equal(start.Add(time.Minute)) {
		t.Errorf("Deserialize = %+v", w)
	}
	if _, err := s.Deserialize("t", []byte{1, 2, 3}); err == nil {
		t.Error("Deserialize of 3 bytes succeeded")
	}
	if _, err := s.Deserialize("t", nil); err == nil {
		t.Error("Deserialize of nil succeeded")
	}
}

func TestTimeWindowsDefaults(t *testing.T) {
	t.Parallel()
	w := kstream.Tumbling(time.Minute)
	if w.Advance() != time.Minute || w.GracePeriod() != 0 || w.RetentionPeriod() != time.Minute {
		t.Errorf("Tumbling(1m): advance %v, grace %v, retention %v", w.Advance(), w.GracePeriod(), w.RetentionPeriod())
	}
	h := kstream.Hopping(time.Minute, 10*time.Second).Grace(5 * time.Second)
	if h.RetentionPeriod() != 65*time.Second {
		t.Errorf("retention %v, want size + grace", h.RetentionPeriod())
	}
	if r := h.Retention(time.Hour).RetentionPeriod(); r != time.Hour {
		t.Errorf("retention %v, want 1h", r)
	}
}

func TestBuildReportsWindowProblems(t *testing.T) {
	t.Parallel()
	b := kstream.NewBuilder()
	g := b.Stream("in", "in", serde.String(), serde.String()).GroupByKey()
	g.WindowedBy(kstream.Tumbling(time.Second)).Count("") // missing store name
	g.WindowedBy(kstream.Tumbling(0)).Count("zero")
	g.WindowedBy(kstream.Hopping(time.Second, 2*time.Second)).Count("wide-advance")
	g.WindowedBy(kstream.Tumbling(time.Second).Grace(-time.Second)).Count("negative-grace")
	g.WindowedBy(kstream.Tumbling(time.Second).Grace(time.Second).Retention(1500 * time.Millisecond)).Count("short-retention")
	g.WindowedBy(kstream.Tumbling(time.Second)).Reduce("no-serde", func(a, _ string) string { return a }, nil)
	_, err := b.Build()
	if err == nil {
		t.Fatal("Build succeeded")
	}
	for _, want := range []string{
		"processor has an empty name",
		"store has an empty name",
		"window size 0s is not a positive whole number of milliseconds",
		"advance 2s is not a whole number of milliseconds between 1ms and the size 1s",
		"grace -1s is not a whole number of milliseconds, 0 or more",
		"retention 1.5s is not a whole number of milliseconds of at least size + grace (2s)",
		`aggregation "no-serde" of "in": nil value serde`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Build error lacks %q:\n%v", want, err)
		}
	}
}

// TestSuppressUntilWindowCloses: the count of TestTumblingWindowedCount
// with its updates held back. Each window's final count is emitted once,
// at the first record that takes the stream time to its end + grace
// (whatever that record's key), with the timestamp of the window's last
// update; late records change nothing and emit nothing.
func TestSuppressUntilWindowCloses(t *testing.T) {
	t.Parallel()
	w := kstream.Tumbling(10 * time.Millisecond).Grace(5 * time.Millisecond)
	b := kstream.NewBuilder()
	b.Stream("in", "in", serde.String(), serde.String()).
		GroupByKey().
		WindowedBy(w).
		Count("counts").
		Suppress("final-counts", kstream.UntilWindowCloses()).
		ToStream(kstream.WindowedKey).
		To("final", kstream.WindowedSerde(serde.String(), w.Size()), serde.Int64())
	d, reg := windowedDriver(t, b)
	in := weirtest.Input(d, "in", serde.String(), serde.String())
	steps := []struct {
		key  string
		ts   int64
		want []string
	}{
		{"A", 1, nil},
		{"B", 3, nil},
		{"A", 12, nil}, // [0,10) closes at 15
		{"A", 8, nil},  // A[0,10) = 2, held back
		{"B", 16, []string{"A[0,10)=2@8", "B[0,10)=1@3"}}, // 16: [0,10) is closed
		{"A", 9, nil},  // late: nothing, and no second result
		{"B", 15, nil}, // B[10,20) = 2
		{"A", 24, nil}, // [10,20) closes at 25
		{"B", 19, nil}, // B[10,20) = 3
		{"C", 25, []string{"A[10,20)=1@12", "B[10,20)=3@19"}}, // closed by another key
		{"B", 19, nil}, // late
		{"A", 100, []string{"A[20,30)=1@24", "C[20,30)=1@25"}}, // a jump closes what is left
		{"A", 3, nil},   // late
		{"A", 101, nil}, // [100,110) stays open
	}
	for i, s := range steps {
		if err := in.Pipe(s.key, fmt.Sprint(i), at(s.ts)); err != nil {
			t.Fatal(err)
		}
		if got := windowedOutput(t, d, "final", w.Size()); !slices.Equal(got, s.want) {
			t.Errorf("record %d (%s@%d) emitted %q, want %q", i, s.key, s.ts, got, s.want)
		}
	}
	if n := metric(t, reg, "weir_records_late_total"); n != 3 {
		t.Errorf("weir_records_late_total = %v, want 3", n)
	}
	// What is held back is in the buffer's store: A[100,110) only.
	buf, err := weirtest.KeyValueStore(d, "final-counts", serde.Bytes(), serde.Bytes()).All()
	if err != nil {
		t.Fatal(err)
	}
	if len(buf) != 1 {
		t.Errorf("the buffer holds %d entries, want 1", len(buf))
	}
}

func TestBuildRejectsTheZeroSuppression(t *testing.T) {
	t.Parallel()
	b := kstream.NewBuilder()
	b.Stream("in", "in", serde.String(), serde.String()).
		GroupByKey().
		WindowedBy(kstream.Tumbling(time.Second)).
		Count("counts").
		Suppress("final", kstream.Suppression{})
	if _, err := b.Build(); err == nil || !strings.Contains(err.Error(), `Suppress "final" of "counts": the zero Suppression`) {
		t.Errorf("Build error = %v", err)
	}
}

// TestLateRecordIsLoggedWithItsCoordinates: a dropped late record is
// logged at debug level with its topic, partition and offset and the
// windows it missed, never with its key or value.
func TestLateRecordIsLoggedWithItsCoordinates(t *testing.T) {
	t.Parallel()
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	d, err := weirtest.New(windowedCount(kstream.Tumbling(10*time.Millisecond)), weirtest.Config{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	in := weirtest.Input(d, "in", serde.String(), serde.String())
	for _, r := range []kv[string, string]{{"key-1", "value-1", 25}, {"key-2", "secret-value", 3}} {
		if err := in.Pipe(r.k, r.v, at(r.ts)); err != nil {
			t.Fatal(err)
		}
	}
	var line string
	for l := range strings.Lines(logs.String()) {
		if strings.Contains(l, "late record dropped") {
			line = l
		}
	}
	for _, want := range []string{"level=DEBUG", "topic=in", "partition=0", "offset=1", "timestamp_ms=3", "stream_time_ms=25", "windows=1", "first_window_start_ms=0", "last_window_end_ms=10"} {
		if !strings.Contains(line, want) {
			t.Errorf("late record's log line lacks %q: %q", want, line)
		}
	}
	if strings.Contains(logs.String(), "secret") || strings.Contains(logs.String(), "key-2") {
		t.Errorf("a key or value was logged:\n%s", logs.String())
	}
}

// TestHoppingWindowsWhenAdvanceDoesNotDivideSize: 10 ms windows every
// 4 ms hold a timestamp in 3 or 2 of them, by where it falls.
func TestHoppingWindowsWhenAdvanceDoesNotDivideSize(t *testing.T) {
	t.Parallel()
	w := kstream.Hopping(10*time.Millisecond, 4*time.Millisecond).Grace(time.Second)
	d, _ := windowedDriver(t, windowedCount(w))
	pipe(t, d, "in", kv[string, string]{"A", "1", 13}, kv[string, string]{"A", "2", 11})
	want := []string{"A[4,14)=1@13", "A[8,18)=1@13", "A[12,22)=1@13", "A[4,14)=2@13", "A[8,18)=2@13"}
	if got := windowedOutput(t, d, "out", w.Size()); !slices.Equal(got, want) {
		t.Errorf("out = %q, want %q", got, want)
	}
}

// TestSuppressEmitsAnOutOfOrderWindowOnTime: a window opened out of order
// (within the grace period) ends before the windows already buffered; it
// is emitted as soon as stream time closes it, not when they close.
func TestSuppressEmitsAnOutOfOrderWindowOnTime(t *testing.T) {
	t.Parallel()
	w := kstream.Tumbling(10 * time.Millisecond).Grace(10 * time.Millisecond)
	b := kstream.NewBuilder()
	b.Stream("in", "in", serde.String(), serde.String()).
		GroupByKey().
		WindowedBy(w).
		Count("counts").
		Suppress("final", kstream.UntilWindowCloses()).
		ToStream(kstream.WindowedKey).
		To("final", kstream.WindowedSerde(serde.String(), w.Size()), serde.Int64())
	d, _ := windowedDriver(t, b)
	steps := []struct {
		ts   int64
		want []string
	}{
		{25, nil},                       // A[20,30) buffered
		{15, nil},                       // A[10,20): out of order, still open (20 + 10 > 25)
		{30, []string{"A[10,20)=1@15"}}, // 20 + 10 <= 30: closed, though A[20,30) is not
		{40, []string{"A[20,30)=1@25"}}, // 30 + 10 <= 40
	}
	in := weirtest.Input(d, "in", serde.String(), serde.String())
	for i, s := range steps {
		if err := in.Pipe("A", "", at(s.ts)); err != nil {
			t.Fatal(err)
		}
		if got := windowedOutput(t, d, "final", w.Size()); !slices.Equal(got, s.want) {
			t.Errorf("record %d (A@%d) emitted %q, want %q", i, s.ts, got, s.want)
		}
	}
}

// TestSuppressUntilWindowClosesWithALimit: a bounded final-results buffer
// fails the task when an update takes it past its limit, and frees room
// as windows close.
func TestSuppressUntilWindowClosesWithALimit(t *testing.T) {
	t.Parallel()
	w := kstream.Tumbling(10 * time.Millisecond).Grace(5 * time.Millisecond)
	build := func(s kstream.Suppression) *kstream.Builder {
		b := kstream.NewBuilder()
		b.Stream("in", "in", serde.String(), serde.String()).
			GroupByKey().
			WindowedBy(w).
			Count("counts").
			Suppress("final", s).
			ToStream(kstream.WindowedKey).
			To("final", kstream.WindowedSerde(serde.String(), w.Size()), serde.Int64())
		return b
	}
	d, _ := windowedDriver(t, build(kstream.UntilWindowCloses(kstream.BufferLimit{MaxRecords: 2})))
	in := weirtest.Input(d, "in", serde.String(), serde.String())
	for _, r := range []kv[string, string]{{"A", "", 1}, {"B", "", 2}, {"A", "", 3}, {"A", "", 21}, {"C", "", 22}} {
		// A[0,10) and B[0,10) fill the buffer; A@3 updates A; A@21
		// closes both windows (10 + 5 <= 21), making room for A[20,30)
		// and C[20,30).
		if err := in.Pipe(r.k, r.v, at(r.ts)); err != nil {
			t.Fatalf("%s@%d: %v", r.k, r.ts, err)
		}
	}
	if got := windowedOutput(t, d, "final", w.Size()); len(got) != 2 {
		t.Fatalf("final results %q, want A and B of [0,10)", got)
	}
	err := in.Pipe("D", "", at(23)) // a third open entry
	if !errors.Is(err, kstream.ErrSuppressionBufferFull) || !strings.Contains(err.Error(), "suppression final: 3 entries") {
		t.Fatalf("a third entry: %v, want ErrSuppressionBufferFull naming the suppression", err)
	}

	b := build(kstream.UntilWindowCloses(kstream.BufferLimit{MaxRecords: 1}, kstream.BufferLimit{MaxBytes: 1}))
	if _, err := b.Build(); err == nil || !strings.Contains(err.Error(), "one BufferLimit at most") {
		t.Errorf("two limits: Build = %v", err)
	}
}

// TestSuppressCloseWhenIdle: with CloseWhenIdle, a window whose task's
// stream time stopped (a quiet partition) is emitted once the wall clock
// has gone past its close as if the stream time had moved on with it; an
// update of it that arrives after is dropped and counted as late, never a
// second result; and the stream time, when it moves again, closes the
// next windows as usual.
func TestSuppressCloseWhenIdle(t *testing.T) {
	t.Parallel()
	w := kstream.Tumbling(time.Minute)
	b := kstream.NewBuilder()
	b.Stream("in", "in", serde.String(), serde.String()).
		GroupByKey().
		WindowedBy(w).
		Count("counts").
		Suppress("final-counts", kstream.UntilWindowCloses().CloseWhenIdle(10*time.Second)).
		ToStream(kstream.WindowedKey).
		To("final", kstream.WindowedSerde(serde.String(), w.Size()), serde.Int64())
	d, reg := windowedDriver(t, b)
	in := weirtest.Input(d, "in", serde.String(), serde.String())
	pipe := func(key string, ts int64) {
		t.Helper()
		if err := in.Pipe(key, "x", at(ts)); err != nil {
			t.Fatal(err)
		}
	}
	advance := func(d2 time.Duration, want ...string) {
		t.Helper()
		if err := d.AdvanceWallClock(d2); err != nil {
			t.Fatal(err)
		}
		if got := windowedOutput(t, d, "final", w.Size()); !slices.Equal(got, want) {
			t.Errorf("after %v more of wall clock: emitted %q, want %q", d2, got, want)
		}
	}
	pipe("A", 10_000)
	pipe("A", 20_000)                             // stream time 20 s, window [0,60 s) open
	advance(5 * time.Second)                      // the idle check starts watching
	advance(30 * time.Second)                     // idle 30 s: as if stream time were 50 s, still open
	advance(20*time.Second, "A[0,60000)=2@20000") // idle 50 s: 70 s, past the end
	pipe("A", 30_000)                             // an update of the emitted window: dropped
	if got := windowedOutput(t, d, "final", w.Size()); len(got) != 0 {
		t.Errorf("a second result %q for a window closed by the wall clock", got)
	}
	if n := metric(t, reg, "weir_records_late_total"); n != 1 {
		t.Errorf("%v late records counted, want the update of the closed window", n)
	}
	pipe("B", 70_000)  // [60 s,120 s) opens; stream time moves
	pipe("B", 130_000) // and closes it, by stream time
	if got := windowedOutput(t, d, "final", w.Size()); !slices.Equal(got, []string{"B[60000,120000)=1@70000"}) {
		t.Errorf("stream time emitted %q, want B[60000,120000)=1@70000", got)
	}
}

// TestWindowsCloseOnTheTimeTheStepObserved: a windowed count closes its
// windows, and a suppression emits them, by the stream time of the records
// that reached each of them, as Kafka Streams' processors do, not by the
// task's: a record a filter drops, or one with a null key, moves the
// task's stream time but closes nothing.
func TestWindowsCloseOnTheTimeTheStepObserved(t *testing.T) {
	w := kstream.Tumbling(10 * time.Second)
	for _, suppressed := range []bool{false, true} {
		t.Run(fmt.Sprintf("suppressed=%v", suppressed), func(t *testing.T) {
			b := kstream.NewBuilder()
			counts := b.Stream("in", "in", serde.String(), serde.String()).
				Filter(func(_, v string) bool { return v != "dropped" }).
				GroupByKey().WindowedBy(w).Count("counts")
			if suppressed {
				counts = counts.Suppress("final", kstream.UntilWindowCloses())
			}
			counts.ToStream(kstream.WindowedKey).To("out", kstream.WindowedSerde(serde.String(), w.Size()), serde.Int64())
			d, _ := windowedDriver(t, b)
			in := weirtest.Input(d, "in", serde.String(), serde.String())
			steps := []func() error{
				func() error { return in.Pipe("a", "x", time.UnixMilli(1000)) },
				func() error { return in.Pipe("a", "dropped", time.UnixMilli(50_000)) }, // filtered: closes nothing
				func() error { return in.PipeNullKey("x", time.UnixMilli(60_000)) },     // null key: closes nothing
				func() error { return in.Pipe("a", "x", time.UnixMilli(2000)) },         // so this one still counts
				func() error { return in.Pipe("b", "x", time.UnixMilli(10_000)) },       // this one closes [0, 10 s)
				func() error { return in.Pipe("a", "x", time.UnixMilli(3000)) },         // and this one is late
			}
			for i, step := range steps {
				if err := step(); err != nil {
					t.Fatalf("record %d: %v", i, err)
				}
			}
			want := []string{"a[0,10000)=1@1000", "a[0,10000)=2@2000", "b[10000,20000)=1@10000"}
			if suppressed {
				want = []string{"a[0,10000)=2@2000"}
			}
			if got := windowedOutput(t, d, "out", w.Size()); !slices.Equal(got, want) {
				t.Errorf("output %q, want %q", got, want)
			}
		})
	}
}
