package kstream_test

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/weirstream/weir/kstream"
	"github.com/weirstream/weir/serde"
	"github.com/weirstream/weir/weirtest"
)

// streamJoins joins "left" and "right" three ways within w, writing
// "[left,right]" ("null" for a side without a record) to "inner",
// "leftjoin" and "outer".
func streamJoins(w kstream.JoinWindows) *kstream.Builder {
	show := func(v string, ok bool) string {
		if !ok {
			return "null"
		}
		return v
	}
	b := kstream.NewBuilder()
	left := b.Stream("left", "left", serde.String(), serde.String())
	right := b.Stream("right", "right", serde.String(), serde.String())
	left.JoinStream("inner-join", right, w, func(_ string, l, r string) string { return "[" + l + "," + r + "]" }, serde.String(), serde.String()).
		To("inner", serde.String(), serde.String())
	left.LeftJoinStream("left-join", right, w, func(_ string, l, r string, ok bool) string { return "[" + l + "," + show(r, ok) + "]" }, serde.String(), serde.String()).
		To("leftjoin", serde.String(), serde.String())
	left.OuterJoinStream("outer-join", right, w, func(_ string, l string, lok bool, r string, rok bool) string {
		return "[" + show(l, lok) + "," + show(r, rok) + "]"
	}, serde.String(), serde.String()).To("outer", serde.String(), serde.String())
	return b
}

// TestStreamStreamJoinSemantics is the stream-stream join table of Kafka
// Streams' developer guide: every record within one window of the others,
// so no window closes and left and outer joins emit no unmatched record
// (Kafka Streams' results since its fix for spurious left/outer results).
// The guide's null-value rows produce nothing and are left out.
func TestStreamStreamJoinSemantics(t *testing.T) {
	t.Parallel()
	d := driver(t, streamJoins(kstream.JoinWithin(time.Second, time.Second)))
	run(t, d,
		step{topic: "left", key: "k", value: "A", ts: 3},
		step{topic: "right", key: "k", value: "a", ts: 4},
		step{topic: "left", key: "k", value: "B", ts: 5},
		step{topic: "right", key: "k", value: "b", ts: 6},
		step{topic: "left", key: "k", value: "C", ts: 9},
		step{topic: "right", key: "k", value: "c", ts: 10},
		step{topic: "right", key: "k", value: "d", ts: 14},
		step{topic: "left", key: "k", value: "D", ts: 15},
	)
	want := []string{"k=[A,a]@4", "k=[B,a]@5", "k=[A,b]@6", "k=[B,b]@6", "k=[C,a]@9", "k=[C,b]@9",
		"k=[A,c]@10", "k=[B,c]@10", "k=[C,c]@10", "k=[A,d]@14", "k=[B,d]@14", "k=[C,d]@14",
		"k=[D,a]@15", "k=[D,b]@15", "k=[D,c]@15", "k=[D,d]@15"}
	for _, topic := range []string{"inner", "leftjoin", "outer"} {
		expectRows(t, d, topic, serde.String(), want...)
	}
}

// TestStreamStreamJoinEmitsUnmatchedWhenTheWindowCloses: a left or outer
// join emits a record without a match only once stream time has closed
// its window (its time plus the window's far end plus grace), never
// early; a record that finds its match before then produces no unmatched
// result; a record that arrives after its window closed is joined with
// what the stores hold and, unmatched, emitted at once.
func TestStreamStreamJoinEmitsUnmatchedWhenTheWindowCloses(t *testing.T) {
	t.Parallel()
	d := driver(t, streamJoins(kstream.JoinWithin(10*time.Millisecond, 10*time.Millisecond)))
	run(t, d,
		step{topic: "left", key: "k", value: "A", ts: 0},
		step{topic: "right", key: "k", value: "x", ts: 100}, // closes A's window: [A,null]
		step{topic: "left", key: "k", value: "B", ts: 105},  // joins x: x no longer waits
		step{topic: "left", key: "k", value: "C", ts: 200},  // waits
	)
	expectRows(t, d, "inner", serde.String(), "k=[B,x]@105")
	expectRows(t, d, "leftjoin", serde.String(), "k=[A,null]@0", "k=[B,x]@105")
	expectRows(t, d, "outer", serde.String(), "k=[A,null]@0", "k=[B,x]@105")
	run(t, d,
		step{topic: "right", key: "k", value: "y", ts: 250}, // closes C's window; y waits
		step{topic: "right", key: "k", value: "z", ts: 400}, // closes y's window
		step{topic: "left", key: "k", value: "L", ts: 5},    // late: no match, emitted at once
	)
	expectRows(t, d, "inner", serde.String())
	expectRows(t, d, "leftjoin", serde.String(), "k=[C,null]@200", "k=[L,null]@5")
	expectRows(t, d, "outer", serde.String(), "k=[C,null]@200", "k=[null,y]@250", "k=[L,null]@5")
}

// The grace period keeps a window open past its end: an unmatched record
// waits for it, and a match that arrives within it counts.
func TestStreamStreamJoinGrace(t *testing.T) {
	t.Parallel()
	d := driver(t, streamJoins(kstream.JoinWithin(10*time.Millisecond, 10*time.Millisecond).Grace(50*time.Millisecond)))
	run(t, d,
		step{topic: "left", key: "k", value: "A", ts: 0},
		step{topic: "left", key: "j", value: "J", ts: 40},  // stream time 40: A's window ended at 10, in grace
		step{topic: "right", key: "k", value: "a", ts: 5},  // out of order, within grace: joins A
		step{topic: "left", key: "j", value: "K", ts: 100}, // J's window is open until 40+10+50
		step{topic: "left", key: "j", value: "M", ts: 200}, // closes J's and K's
	)
	expectRows(t, d, "inner", serde.String(), "k=[A,a]@5")
	expectRows(t, d, "leftjoin", serde.String(), "k=[A,a]@5", "j=[J,null]@40", "j=[K,null]@100")
	expectRows(t, d, "outer", serde.String(), "k=[A,a]@5", "j=[J,null]@40", "j=[K,null]@100")
}

// Build checks a stream join's windows and that both streams are
// partitioned by their key.
func TestStreamJoinBuildChecks(t *testing.T) {
	t.Parallel()
	b := kstream.NewBuilder()
	left := b.Stream("l", "l", serde.String(), serde.String()).SelectKey(func(k, v string) string { return v })
	right := b.Stream("r", "r", serde.String(), serde.String())
	left.JoinStream("j", right, kstream.JoinWithin(-time.Millisecond, time.Microsecond), func(_ string, l, r string) string { return l + r }, serde.String(), serde.String()).
		To("out", serde.String(), serde.String())
	_, err := b.Build()
	if err == nil {
		t.Fatal("Build accepted a join of a re-keyed stream with bad windows")
	}
	for _, want := range []string{`the key of "l-selectkey"`, "join window before -1ms", "join window after 1µs"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Build error %q does not say %q", err, want)
		}
	}
}

// TestStreamStreamJoinTimes: each side's store expires by the newest time
// put into it, so records on one side do not expire the other's; a store
// keeps what is later than its time minus its retention (2 s either way
// here, no grace: 4 s), not the boundary itself; and a record with a null
// key moves neither time, joins nothing, and is counted as dropped. Kafka
// Streams gives the same (conformance/pinned_test.go).
func TestStreamStreamJoinTimes(t *testing.T) {
	t.Parallel()
	b := kstream.NewBuilder()
	left := b.Stream("left", "left", serde.Bytes(), serde.String())
	right := b.Stream("right", "right", serde.Bytes(), serde.String())
	left.JoinStream("j", right, kstream.JoinWithin(2*time.Second, 2*time.Second),
		func(_ []byte, l, r string) string { return l + "|" + r }, serde.String(), serde.String()).
		To("out", serde.Bytes(), serde.String())
	reg := prometheus.NewRegistry()
	d, err := weirtest.New(b, weirtest.Config{Metrics: reg})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	l := weirtest.Input(d, "left", serde.Bytes(), serde.String())
	r := weirtest.Input(d, "right", serde.Bytes(), serde.String())
	for i, step := range []func() error{
		func() error { return l.Pipe([]byte("k"), "A", at(1000)) },
		func() error { return r.Pipe([]byte("x"), "far", at(20_000)) }, // right's time only
		func() error { return r.Pipe([]byte("k"), "a", at(2000)) },     // still finds A
		func() error { return l.PipeNullKey("N", at(60_000)) },         // moves no time
		func() error { return r.Pipe([]byte("k"), "b", at(3000)) },     // still finds A
		func() error { return l.Pipe([]byte("y"), "Y", at(5000)) },     // left's time 5 s: A at 1 s is at the boundary
		func() error { return r.Pipe([]byte("k"), "c", at(2500)) },     // finds nothing
	} {
		if err := step(); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
	}
	expect(t, d, "out", serde.String(), serde.String(), kv[string, string]{"k", "A|a", 2000}, kv[string, string]{"k", "A|b", 3000})
	if n := droppedNullKeys(t, reg); n != 1 {
		t.Errorf("weir_records_dropped_total{reason=null_key} = %v, want 1", n)
	}
}
