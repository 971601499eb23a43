package kstream_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/weirstream/weir/kstream"
	"github.com/weirstream/weir/serde"
	"github.com/weirstream/weir/weirtest"
)

// timeLimitCount counts "in" per key in 10 ms tumbling windows that stay
// open for 100 ms, suppressed by s into "limited".
func timeLimitCount(s kstream.Suppression) (*kstream.Builder, time.Duration) {
	w := kstream.Tumbling(10 * time.Millisecond).Grace(100 * time.Millisecond)
	b := kstream.NewBuilder()
	b.Stream("in", "in", serde.String(), serde.String()).
		GroupByKey().
		WindowedBy(w).
		Count("counts").
		Suppress("limited", s).
		ToStream(kstream.WindowedKey).
		To("limited", kstream.WindowedSerde(serde.String(), w.Size()), serde.Int64())
	return b, w.Size()
}

// TestSuppressUntilTimeLimit follows a 5 ms limit with a buffer of two
// entries emitted early when full, record by record: an entry keeps the
// time of its first update and emits its latest one; an update already
// past its limit is emitted at once; a third entry pushes out the oldest.
func TestSuppressUntilTimeLimit(t *testing.T) {
	t.Parallel()
	b, size := timeLimitCount(kstream.UntilTimeLimit(5*time.Millisecond, kstream.BufferLimit{MaxRecords: 2}, kstream.EmitEarlyWhenFull))
	d, _ := windowedDriver(t, b)
	in := weirtest.Input(d, "in", serde.String(), serde.String())
	steps := []struct {
		key  string
		ts   int64
		want []string
	}{
		{"A", 1, nil},                                     // A[0,10) buffered at 1
		{"A", 3, nil},                                     // A = 2, still buffered at 1
		{"B", 4, nil},                                     // B buffered at 4: two entries
		{"A", 6, []string{"A[0,10)=3@6"}},                 // 6 - 5 reaches A's 1
		{"C", 7, nil},                                     // B and C
		{"D", 8, []string{"B[0,10)=1@4"}},                 // a third entry: the oldest goes early
		{"A", 2, []string{"A[0,10)=4@6"}},                 // the window's time, 6: a third entry, the oldest
		{"E", 20, []string{"C[0,10)=1@7", "D[0,10)=1@8"}}, // 20 - 5 passes C and D
		{"E", 24, nil},                                    // E[20,30) = 2, buffered at 20
		{"F", 25, []string{"E[20,30)=2@24"}},              // 25 - 5 reaches E's 20
	}
	for i, s := range steps {
		if err := in.Pipe(s.key, fmt.Sprint(i), at(s.ts)); err != nil {
			t.Fatal(err)
		}
		if got := windowedOutput(t, d, "limited", size); !slices.Equal(got, s.want) {
			t.Errorf("record %d (%s@%d) emitted %q, want %q", i, s.key, s.ts, got, s.want)
		}
	}
	buf, err := weirtest.KeyValueStore(d, "limited", serde.Bytes(), serde.Bytes()).All()
	if err != nil {
		t.Fatal(err)
	}
	if len(buf) != 1 {
		t.Errorf("the buffer holds %d entries, want 1 (F)", len(buf))
	}
}

func TestSuppressUntilTimeLimitBoundedByBytes(t *testing.T) {
	t.Parallel()
	// An entry takes 8 + 16 + 1 bytes of key ("A") and 9 + 8 of value:
	// 42. With room for one, the second key pushes the first out.
	b, size := timeLimitCount(kstream.UntilTimeLimit(time.Hour, kstream.BufferLimit{MaxBytes: 50}, kstream.EmitEarlyWhenFull))
	d, _ := windowedDriver(t, b)
	pipe(t, d, "in", kv[string, string]{"A", "", 1}, kv[string, string]{"A", "", 2})
	if got := windowedOutput(t, d, "limited", size); got != nil {
		t.Errorf("one key emitted %q, want nothing", got)
	}
	pipe(t, d, "in", kv[string, string]{"B", "", 3})
	if got, want := windowedOutput(t, d, "limited", size), []string{"A[0,10)=2@2"}; !slices.Equal(got, want) {
		t.Errorf("a second key emitted %q, want %q", got, want)
	}
}

func TestSuppressUntilTimeLimitFailsWhenFull(t *testing.T) {
	t.Parallel()
	b, size := timeLimitCount(kstream.UntilTimeLimit(time.Hour, kstream.BufferLimit{MaxRecords: 1}, kstream.FailWhenFull))
	d, _ := windowedDriver(t, b)
	in := weirtest.Input(d, "in", serde.String(), serde.String())
	if err := in.Pipe("A", "", at(1)); err != nil {
		t.Fatal(err)
	}
	err := in.Pipe("B", "", at(2))
	if !errors.Is(err, kstream.ErrSuppressionBufferFull) || !strings.Contains(err.Error(), "suppression limited: 2 entries") {
		t.Fatalf("a second entry: %v, want ErrSuppressionBufferFull naming the suppression", err)
	}
	if got := windowedOutput(t, d, "limited", size); got != nil {
		t.Errorf("a full buffer emitted %q", got)
	}
}

func TestBuildReportsSuppressionProblems(t *testing.T) {
	t.Parallel()
	b := kstream.NewBuilder()
	counts := b.Stream("in", "in", serde.String(), serde.String()).
		GroupByKey().
		WindowedBy(kstream.Tumbling(time.Second)).
		Count("counts")
	counts.Suppress("unbounded", kstream.UntilTimeLimit(time.Second, kstream.BufferLimit{}, kstream.EmitEarlyWhenFull))
	counts.Suppress("fraction", kstream.UntilTimeLimit(time.Microsecond, kstream.BufferLimit{MaxRecords: 1}, kstream.FailWhenFull))
	counts.Suppress("odd", kstream.UntilTimeLimit(time.Second, kstream.BufferLimit{MaxBytes: -1, MaxRecords: 1}, kstream.WhenFull(7)))
	_, err := b.Build()
	if err == nil {
		t.Fatal("Build succeeded")
	}
	for _, want := range []string{
		`Suppress "unbounded" of "counts": buffer limit {MaxRecords:0 MaxBytes:0}: set MaxRecords or MaxBytes`,
		`Suppress "fraction" of "counts": time limit 1µs is not a whole number of milliseconds`,
		`Suppress "odd" of "counts": buffer limit {MaxRecords:1 MaxBytes:-1}`,
		`Suppress "odd" of "counts": unknown WhenFull 7`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Build error lacks %q:\n%v", want, err)
		}
	}
}

// TestTableSuppressUntilTimeLimit: a table without windows is
// rate-limited the same way, key by key: each key's entry keeps the time
// of its first held update and emits its latest one.
func TestTableSuppressUntilTimeLimit(t *testing.T) {
	t.Parallel()
	b := kstream.NewBuilder()
	b.Stream("in", "in", serde.String(), serde.String()).
		GroupByKey().
		Count("counts").
		Suppress("limited", kstream.UntilTimeLimit(5*time.Millisecond, kstream.BufferLimit{MaxRecords: 2}, kstream.EmitEarlyWhenFull)).
		ToStream().
		To("limited", serde.String(), serde.Int64())
	d := driver(t, b)
	in := weirtest.Input(d, "in", serde.String(), serde.String())
	out := weirtest.Output(d, "limited", serde.String(), serde.Int64())
	steps := []struct {
		key  string
		ts   int64
		want []string
	}{
		{"A", 1, nil},
		{"A", 3, nil},
		{"B", 4, nil},
		{"A", 6, []string{"A=3@6"}},           // 6 - 5 reaches A's 1
		{"C", 7, nil},                         // B and C held
		{"D", 8, []string{"B=1@4"}},           // a third entry: the oldest goes early
		{"A", 2, []string{"A=4@6"}},           // the key's time, 6: a third entry, the oldest
		{"E", 20, []string{"C=1@7", "D=1@8"}}, // 20 - 5 passes C and D
	}
	for i, s := range steps {
		if err := in.Pipe(s.key, fmt.Sprint(i), at(s.ts)); err != nil {
			t.Fatal(err)
		}
		recs, err := out.ReadAll()
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, r := range recs {
			got = append(got, fmt.Sprintf("%s=%d@%d", r.Key, r.Value, r.Timestamp.UnixMilli()))
		}
		if !slices.Equal(got, s.want) {
			t.Errorf("record %d (%s@%d) emitted %q, want %q", i, s.key, s.ts, got, s.want)
		}
	}
}

func TestTableSuppressUntilWindowClosesIsRefused(t *testing.T) {
	t.Parallel()
	b := kstream.NewBuilder()
	b.Stream("in", "in", serde.String(), serde.String()).
		GroupByKey().
		Count("counts").
		Suppress("final", kstream.UntilWindowCloses()).
		ToStream().
		To("out", serde.String(), serde.Int64())
	if _, err := b.Build(); err == nil || !strings.Contains(err.Error(), "needs a windowed table") {
		t.Fatalf("Build = %v, want an error saying UntilWindowCloses needs a windowed table", err)
	}
}
