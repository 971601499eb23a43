package kstream_test

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/weirstream/weir/kstream"
	"github.com/weirstream/weir/processor"
	"github.com/weirstream/weir/serde"
	"github.com/weirstream/weir/weirtest"
)

// at is an event time in milliseconds.
func at(ms int64) time.Time { return time.UnixMilli(ms) }

// kv is an expected output record: key, value and event time in ms.
type kv[K, V any] struct {
	k  K
	v  V
	ts int64
}

// driver runs b in memory, closed when the test ends.
func driver(t *testing.T, b *kstream.Builder) *weirtest.Driver {
	t.Helper()
	d, err := weirtest.New(b, weirtest.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := d.Close(); err != nil {
			t.Error(err)
		}
	})
	return d
}

// pipe writes string records (key, value, ts) to topic.
func pipe(t *testing.T, d *weirtest.Driver, topic string, recs ...kv[string, string]) {
	t.Helper()
	in := weirtest.Input(d, topic, serde.String(), serde.String())
	for _, r := range recs {
		if err := in.Pipe(r.k, r.v, at(r.ts)); err != nil {
			t.Fatal(err)
		}
	}
}

// expect reads topic and compares its records (key, value, timestamp)
// with want, in order.
func expect[K, V comparable](t *testing.T, d *weirtest.Driver, topic string, keys serde.Serde[K], values serde.Serde[V], want ...kv[K, V]) {
	t.Helper()
	recs, err := weirtest.Output(d, topic, keys, values).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	got := make([]kv[K, V], len(recs))
	for i, r := range recs {
		got[i] = kv[K, V]{r.Key, r.Value, r.Timestamp.UnixMilli()}
	}
	if !slices.Equal(got, want) {
		t.Errorf("%s: got %v, want %v", topic, got, want)
	}
}

func TestFilterAndFilterNot(t *testing.T) {
	t.Parallel()
	b := kstream.NewBuilder()
	s := b.Stream("in", "in", serde.String(), serde.String())
	isA := func(_ string, v string) bool { return strings.HasPrefix(v, "a") }
	s.Filter(isA).To("as", serde.String(), serde.String())
	s.FilterNot(isA).To("others", serde.String(), serde.String())
	d := driver(t, b)
	pipe(t, d, "in", kv[string, string]{"k1", "apple", 1}, kv[string, string]{"k2", "pear", 2}, kv[string, string]{"k3", "avocado", 3})
	expect(t, d, "as", serde.String(), serde.String(), kv[string, string]{"k1", "apple", 1}, kv[string, string]{"k3", "avocado", 3})
	expect(t, d, "others", serde.String(), serde.String(), kv[string, string]{"k2", "pear", 2})
}

func TestMapMapValuesSelectKey(t *testing.T) {
	t.Parallel()
	b := kstream.NewBuilder()
	s := b.Stream("in", "in", serde.String(), serde.String())
	s.Map(func(k, v string) (string, int64) { return v, int64(len(k)) }).To("mapped", serde.String(), serde.Int64())
	s.MapValues(func(v string) int64 { return int64(len(v)) }).To("lengths", serde.String(), serde.Int64())
	s.SelectKey(func(k, v string) string { return k + "/" + v }).To("rekeyed", serde.String(), serde.String())
	d := driver(t, b)
	pipe(t, d, "in", kv[string, string]{"ab", "xyz", 10}, kv[string, string]{"c", "", 20})
	expect(t, d, "mapped", serde.String(), serde.Int64(), kv[string, int64]{"xyz", 2, 10}, kv[string, int64]{"", 1, 20})
	expect(t, d, "lengths", serde.String(), serde.Int64(), kv[string, int64]{"ab", 3, 10}, kv[string, int64]{"c", 0, 20})
	expect(t, d, "rekeyed", serde.String(), serde.String(), kv[string, string]{"ab/xyz", "xyz", 10}, kv[string, string]{"c/", "", 20})
}

func TestFlatMapAndFlatMapValues(t *testing.T) {
	t.Parallel()
	b := kstream.NewBuilder()
	s := b.Stream("in", "in", serde.String(), serde.String())
	s.FlatMapValues(strings.Fields).To("words", serde.String(), serde.String())
	s.FlatMap(func(k, v string) []kstream.Pair[string, int64] {
		var out []kstream.Pair[string, int64]
		for i, w := range strings.Fields(v) {
			out = append(out, kstream.Pair[string, int64]{Key: w, Value: int64(i)})
		}
		return out
	}).To("positions", serde.String(), serde.Int64())
	d := driver(t, b)
	pipe(t, d, "in", kv[string, string]{"l1", "to be or", 5}, kv[string, string]{"l2", "", 6}, kv[string, string]{"l3", "not", 7})
	expect(t, d, "words", serde.String(), serde.String(),
		kv[string, string]{"l1", "to", 5}, kv[string, string]{"l1", "be", 5}, kv[string, string]{"l1", "or", 5}, kv[string, string]{"l3", "not", 7})
	expect(t, d, "positions", serde.String(), serde.Int64(),
		kv[string, int64]{"to", 0, 5}, kv[string, int64]{"be", 1, 5}, kv[string, int64]{"or", 2, 5}, kv[string, int64]{"not", 0, 7})
}

func TestPeekAndForeach(t *testing.T) {
	t.Parallel()
	var peeked, each []string
	b := kstream.NewBuilder()
	s := b.Stream("in", "in", serde.String(), serde.String())
	s.Peek(func(k, v string) { peeked = append(peeked, k+"="+v) }).To("out", serde.String(), serde.String())
	s.Filter(func(k, _ string) bool { return k != "skip" }).Foreach(func(k, v string) { each = append(each, k+"="+v) })
	d := driver(t, b)
	pipe(t, d, "in", kv[string, string]{"a", "1", 1}, kv[string, string]{"skip", "2", 2}, kv[string, string]{"b", "3", 3})
	if want := []string{"a=1", "skip=2", "b=3"}; !slices.Equal(peeked, want) {
		t.Errorf("peeked %v, want %v", peeked, want)
	}
	if want := []string{"a=1", "b=3"}; !slices.Equal(each, want) {
		t.Errorf("foreach saw %v, want %v", each, want)
	}
	expect(t, d, "out", serde.String(), serde.String(), kv[string, string]{"a", "1", 1}, kv[string, string]{"skip", "2", 2}, kv[string, string]{"b", "3", 3})
}

func TestHeadersAndTimestampsTravel(t *testing.T) {
	t.Parallel()
	b := kstream.NewBuilder()
	b.Stream("in", "in", serde.String(), serde.String()).
		MapValues(strings.ToUpper).
		SelectKey(func(_, v string) string { return v }).
		To("out", serde.String(), serde.String())
	d := driver(t, b)
	h := processor.Header{Key: "trace", Value: []byte("t-1")}
	if err := weirtest.Input(d, "in", serde.String(), serde.String()).Pipe("k", "v", at(42), h); err != nil {
		t.Fatal(err)
	}
	recs, err := weirtest.Output(d, "out", serde.String(), serde.String()).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 1 || recs[0].Key != "V" || recs[0].Value != "V" || recs[0].Timestamp.UnixMilli() != 42 ||
		len(recs[0].Headers) != 1 || recs[0].Headers[0].Key != "trace" || string(recs[0].Headers[0].Value) != "t-1" {
		t.Fatalf("got %+v, want one record V=V at 42 with header trace=t-1", recs)
	}
}

func TestMerge(t *testing.T) {
	t.Parallel()
	b := kstream.NewBuilder()
	left := b.Stream("left", "left", serde.String(), serde.String())
	right := b.Stream("right", "right", serde.String(), serde.String()).MapValues(strings.ToUpper)
	left.Merge(right).To("out", serde.String(), serde.String())
	d := driver(t, b)
	pipe(t, d, "left", kv[string, string]{"a", "x", 1})
	pipe(t, d, "right", kv[string, string]{"b", "y", 2})
	pipe(t, d, "left", kv[string, string]{"c", "z", 3})
	expect(t, d, "out", serde.String(), serde.String(), kv[string, string]{"a", "x", 1}, kv[string, string]{"b", "Y", 2}, kv[string, string]{"c", "z", 3})
}

func TestRepartitionThenGroupByKey(t *testing.T) {
	t.Parallel()
	b := kstream.NewBuilder()
	b.Stream("in", "in", serde.String(), serde.String()).
		SelectKey(func(_, v string) string { return v }).
		Repartition("by-value", serde.String(), serde.String()).
		GroupByKey().
		Count("per-value").
		ToStream().
		To("out", serde.String(), serde.Int64())
	top, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	if desc := top.Describe(); !strings.Contains(desc, "by-value") {
		t.Errorf("topology has no repartition by-value:\n%s", desc)
	}
	d := driver(t, b)
	pipe(t, d, "in", kv[string, string]{"1", "x", 1}, kv[string, string]{"2", "y", 2}, kv[string, string]{"3", "x", 3})
	expect(t, d, "out", serde.String(), serde.Int64(), kv[string, int64]{"x", 1, 1}, kv[string, int64]{"y", 1, 2}, kv[string, int64]{"x", 2, 3})
	// The repartition topic is internal: it is not an output.
	expect[string, string](t, d, "weirtest-by-value-repartition", serde.String(), serde.String())
}

// dedup forwards the first record of each key only, remembering keys in
// a store.
type dedup struct {
	spec *processor.KeyValueSpec[string, string]
	seen processor.KeyValueStore[string, string]
}

func (p *dedup) Init(ctx processor.Context[string, int64]) (err error) {
	p.seen, err = p.spec.Open(ctx)
	return err
}

func (p *dedup) Process(ctx processor.Context[string, int64], rec processor.Record[string, string]) error {
	if _, found, err := p.seen.Get(rec.Key); err != nil || found {
		return err
	}
	if err := p.seen.Put(rec.Key, rec.Value); err != nil {
		return err
	}
	return ctx.Forward(processor.Record[string, int64]{Key: rec.Key, Value: int64(len(rec.Value)), Timestamp: rec.Timestamp})
}

func (p *dedup) Close() error { return nil }

func TestProcessWithAStore(t *testing.T) {
	t.Parallel()
	seen := processor.KeyValue("seen", serde.String(), serde.String())
	b := kstream.NewBuilder()
	b.Stream("in", "in", serde.String(), serde.String()).
		Process("dedup", func() processor.Processor[string, string, string, int64] { return &dedup{spec: seen} }, seen).
		To("out", serde.String(), serde.Int64())
	d := driver(t, b)
	pipe(t, d, "in", kv[string, string]{"a", "one", 1}, kv[string, string]{"a", "again", 2}, kv[string, string]{"b", "three", 3})
	expect(t, d, "out", serde.String(), serde.Int64(), kv[string, int64]{"a", 3, 1}, kv[string, int64]{"b", 5, 3})
	v, found, err := weirtest.KeyValueStore(d, "seen", serde.String(), serde.String()).Get("a")
	if err != nil || !found || v != "one" {
		t.Errorf("store seen[a] = %q, %v, %v; want one, true", v, found, err)
	}
}

// ticker forwards the wall-clock time of each punctuation.
type ticker struct {
	ctx processor.Context[string, int64]
}

func (p *ticker) Init(ctx processor.Context[string, int64]) error {
	p.ctx = ctx
	_, err := ctx.Schedule(10*time.Second, processor.WallClockTime, func(now time.Time) error {
		return ctx.Forward(processor.Record[string, int64]{Key: "tick", Value: now.Unix(), Timestamp: now})
	})
	return err
}

func (p *ticker) Process(processor.Context[string, int64], processor.Record[string, string]) error {
	return nil
}

func (p *ticker) Close() error { return nil }

func TestWallClockPunctuation(t *testing.T) {
	t.Parallel()
	b := kstream.NewBuilder()
	b.Stream("in", "in", serde.String(), serde.String()).
		Process("ticker", func() processor.Processor[string, string, string, int64] { return &ticker{} }).
		To("ticks", serde.String(), serde.Int64())
	d, err := weirtest.New(b, weirtest.Config{WallClock: time.Unix(1000, 0)})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	for _, step := range []time.Duration{5 * time.Second, 4 * time.Second, time.Second, 10 * time.Second} {
		if err := d.AdvanceWallClock(step); err != nil {
			t.Fatal(err)
		}
	}
	expect(t, d, "ticks", serde.String(), serde.Int64(), kv[string, int64]{"tick", 1010, 1010_000}, kv[string, int64]{"tick", 1020, 1020_000})
	if err := d.AdvanceWallClock(-time.Second); err == nil {
		t.Error("AdvanceWallClock accepted a negative step")
	}
}

func TestBuildReportsEveryNamingProblem(t *testing.T) {
	t.Parallel()
	b := kstream.NewBuilder()
	s := b.Stream("in", "in", serde.String(), serde.String())
	s.GroupByKey().Count("")      // missing name
	s.GroupByKey().Count("twice") // duplicate name...
	s.GroupByKey().Count("twice") // ...here
	s.Filter(func(string, string) bool { return true }).To("a", serde.String(), serde.String())
	s.Filter(func(string, string) bool { return false }).To("b", serde.String(), serde.String()) // in-filter twice
	s.GroupByKey().Reduce("no-serde", func(a, _ string) string { return a }, nil)
	s.SelectKey(func(_, v string) string { return v }).
		MapValues(strings.ToUpper).
		GroupByKey(). // re-keyed by in-selectkey
		Count("after-rekey")
	_, err := b.Build()
	if err == nil {
		t.Fatal("Build succeeded")
	}
	for _, want := range []string{
		"processor has an empty name",
		"store has an empty name",
		`duplicate node name "twice"`,
		`duplicate store name "twice"`,
		`duplicate node name "in-filter"`,
		`GroupByKey of "in-selectkey-mapvalues": the key was changed by "in-selectkey"`,
		`aggregation "no-serde" of "in": nil value serde`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Build error lacks %q:\n%v", want, err)
		}
	}
	if _, err := weirtest.New(b, weirtest.Config{}); err == nil {
		t.Error("weirtest.New accepted the builder")
	}
}

func TestNamedSettlesADerivedNameClash(t *testing.T) {
	t.Parallel()
	b := kstream.NewBuilder()
	s := b.Stream("in", "in", serde.String(), serde.String())
	s.Filter(func(string, string) bool { return true }).To("a", serde.String(), serde.String())
	s.Filter(func(string, string) bool { return false }, kstream.Named("none")).To("b", serde.String(), serde.String(), kstream.Named("to-b"))
	top, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	desc := top.Describe()
	for _, n := range []string{"in-filter", "in-filter-to-a", "none", "to-b"} {
		if !strings.Contains(desc, n) {
			t.Errorf("no node %q in\n%s", n, desc)
		}
	}
}

func TestProcessorErrorStopsTheDriver(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	b := kstream.NewBuilder()
	b.Stream("in", "in", serde.String(), serde.String()).
		Process("fail", processor.Func(func(processor.Context[string, string], processor.Record[string, string]) error { return boom })).
		To("out", serde.String(), serde.String())
	d := driver(t, b)
	in := weirtest.Input(d, "in", serde.String(), serde.String())
	if err := in.Pipe("k", "v", at(1)); !errors.Is(err, boom) {
		t.Fatalf("Pipe: %v, want boom", err)
	}
	if err := in.Pipe("k", "v", at(2)); !errors.Is(err, boom) {
		t.Fatalf("Pipe after a failure: %v, want boom again", err)
	}
}

func TestPipeToAnUnreadTopicFails(t *testing.T) {
	t.Parallel()
	b := kstream.NewBuilder()
	b.Stream("in", "in", serde.String(), serde.String()).To("out", serde.String(), serde.String())
	d := driver(t, b)
	for _, topic := range []string{"nope", "out"} {
		if err := weirtest.Input(d, topic, serde.String(), serde.String()).Pipe("k", "v", at(1)); err == nil || !strings.Contains(err.Error(), "no source reads topic") {
			t.Errorf("Pipe to %s: %v, want no source reads topic", topic, err)
		}
	}
}

// DropTombstones drops the records read with a null value, which Filter
// passes without asking its predicate.
func TestDropTombstones(t *testing.T) {
	t.Parallel()
	b := kstream.NewBuilder()
	s := b.Stream("in", "in", serde.String(), serde.String())
	s.Filter(func(_, v string) bool { return v != "x" }).To("filtered", serde.String(), serde.String())
	s.DropTombstones().Filter(func(_, v string) bool { return v != "x" }).To("valued", serde.String(), serde.String())
	d := driver(t, b)
	run(t, d,
		step{topic: "in", key: "a", value: "1", ts: 1},
		step{topic: "in", key: "b", del: true, ts: 2},
		step{topic: "in", key: "c", value: "x", ts: 3},
	)
	expectRows(t, d, "filtered", serde.String(), "a=1@1", "b=<deleted>@2")
	expectRows(t, d, "valued", serde.String(), "a=1@1")
}
