package kstream_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/weirstream/weir/kstream"
	"github.com/weirstream/weir/serde"
	"github.com/weirstream/weir/weirtest"
)

// store reads the whole key-value store name.
func store[K, V any](t *testing.T, d *weirtest.Driver, name string, keys serde.Serde[K], values serde.Serde[V]) []weirtest.Entry[K, V] {
	t.Helper()
	all, err := weirtest.KeyValueStore(d, name, keys, values).All()
	if err != nil {
		t.Fatal(err)
	}
	return all
}

func TestCountEmitsEveryUpdate(t *testing.T) {
	t.Parallel()
	b := kstream.NewBuilder()
	b.Stream("clicks", "clicks", serde.String(), serde.String()).
		GroupByKey().
		Count("clicks-per-user").
		ToStream().
		To("counts", serde.String(), serde.Int64())
	d := driver(t, b)
	pipe(t, d, "clicks", kv[string, string]{"alice", "p1", 1}, kv[string, string]{"bob", "p1", 2}, kv[string, string]{"alice", "p2", 3}, kv[string, string]{"alice", "p3", 4})
	expect(t, d, "counts", serde.String(), serde.Int64(),
		kv[string, int64]{"alice", 1, 1}, kv[string, int64]{"bob", 1, 2}, kv[string, int64]{"alice", 2, 3}, kv[string, int64]{"alice", 3, 4})
	got := store(t, d, "clicks-per-user", serde.String(), serde.Int64())
	if want := []weirtest.Entry[string, int64]{{Key: "alice", Value: 3}, {Key: "bob", Value: 1}}; !slices.Equal(got, want) {
		t.Errorf("store = %v, want %v", got, want)
	}
}

func TestReduce(t *testing.T) {
	t.Parallel()
	b := kstream.NewBuilder()
	b.Stream("in", "in", serde.String(), serde.String()).
		GroupByKey().
		Reduce("longest", func(agg, v string) string {
			if len(v) > len(agg) {
				return v
			}
			return agg
		}, serde.String()).
		ToStream().
		To("out", serde.String(), serde.String())
	d := driver(t, b)
	pipe(t, d, "in", kv[string, string]{"k", "ab", 1}, kv[string, string]{"k", "a", 2}, kv[string, string]{"j", "x", 3}, kv[string, string]{"k", "abc", 4})
	// The first value of a key is the aggregate as it is.
	expect(t, d, "out", serde.String(), serde.String(),
		kv[string, string]{"k", "ab", 1}, kv[string, string]{"k", "ab", 2}, kv[string, string]{"j", "x", 3}, kv[string, string]{"k", "abc", 4})
}

func TestAggregate(t *testing.T) {
	t.Parallel()
	b := kstream.NewBuilder()
	b.Stream("in", "in", serde.String(), serde.String()).
		MapValues(func(v string) int64 { return int64(len(v)) }).
		GroupByKey().
		Aggregate("total-length", func() int64 { return 100 }, func(k string, v, agg int64) int64 { return agg + v }, serde.Int64()).
		ToStream().
		MapValues(func(n int64) string { return strings.Repeat("#", int(n-100)) }).
		To("out", serde.String(), serde.String())
	d := driver(t, b)
	pipe(t, d, "in", kv[string, string]{"k", "ab", 1}, kv[string, string]{"j", "x", 2}, kv[string, string]{"k", "xyz", 3})
	// init() starts each key's aggregate: 100 + lengths.
	expect(t, d, "out", serde.String(), serde.String(), kv[string, string]{"k", "##", 1}, kv[string, string]{"j", "#", 2}, kv[string, string]{"k", "#####", 3})
	got := store(t, d, "total-length", serde.String(), serde.Int64())
	if want := []weirtest.Entry[string, int64]{{Key: "j", Value: 101}, {Key: "k", Value: 105}}; !slices.Equal(got, want) {
		t.Errorf("store = %v, want %v", got, want)
	}
}

func TestGroupByRepartitionsByTheSelectedKey(t *testing.T) {
	t.Parallel()
	b := kstream.NewBuilder()
	b.Stream("lines", "lines", serde.Bytes(), serde.String()).
		FlatMapValues(strings.Fields).
		GroupBy("by-word", func(_ []byte, w string) string { return w }, serde.String(), serde.String()).
		Count("counts").
		ToStream().
		To("word-counts", serde.String(), serde.Int64())
	top, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	desc := top.Describe()
	if !strings.Contains(desc, "by-word-sink") || !strings.Contains(desc, "by-word-source") {
		t.Errorf("no repartition by-word in\n%s", desc)
	}
	d := driver(t, b)
	in := weirtest.Input(d, "lines", serde.Bytes(), serde.String())
	// A line with a null key is counted: GroupBy gives each word a key.
	if err := in.PipeNullKey("to be or not", at(1)); err != nil {
		t.Fatal(err)
	}
	if err := in.Pipe([]byte("l2"), "to be", at(2)); err != nil {
		t.Fatal(err)
	}
	expect(t, d, "word-counts", serde.String(), serde.Int64(),
		kv[string, int64]{"to", 1, 1}, kv[string, int64]{"be", 1, 1}, kv[string, int64]{"or", 1, 1}, kv[string, int64]{"not", 1, 1},
		kv[string, int64]{"to", 2, 2}, kv[string, int64]{"be", 2, 2})
}

// TestAggregationsSkipNullKeys: Kafka Streams' aggregations skip records
// with a null key; weir's too, counting them in
// weir_records_dropped_total{reason="null_key"}. A key that is present
// but empty is a key like any other.
func TestAggregationsSkipNullKeys(t *testing.T) {
	t.Parallel()
	b := kstream.NewBuilder()
	grouped := b.Stream("in", "in", serde.Bytes(), serde.String()).GroupByKey()
	grouped.Count("count").ToStream().To("counts", serde.Bytes(), serde.Int64())
	grouped.Reduce("last", func(_, v string) string { return v }, serde.String()).ToStream().To("lasts", serde.Bytes(), serde.String())
	reg := prometheus.NewRegistry()
	d, err := weirtest.New(b, weirtest.Config{Metrics: reg})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	in := weirtest.Input(d, "in", serde.Bytes(), serde.String())
	for _, step := range []func() error{
		func() error { return in.PipeNullKey("n1", at(1)) },
		func() error { return in.Pipe([]byte("a"), "a1", at(2)) },
		func() error { return in.Pipe([]byte{}, "e1", at(3)) },
		func() error { return in.PipeNullKey("n2", at(4)) },
		func() error { return in.Pipe([]byte{}, "e2", at(5)) },
	} {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
	counts, err := weirtest.Output(d, "counts", serde.String(), serde.Int64()).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range counts {
		got = append(got, r.Key+"="+strings.Repeat("|", int(r.Value)))
	}
	if want := []string{"a=|", "=|", "=||"}; !slices.Equal(got, want) {
		t.Errorf("counts %q, want %q (null keys skipped, the empty key counted)", got, want)
	}
	expect(t, d, "lasts", serde.String(), serde.String(), kv[string, string]{"a", "a1", 2}, kv[string, string]{"", "e1", 3}, kv[string, string]{"", "e2", 5})
	if n := droppedNullKeys(t, reg); n != 2 {
		t.Errorf("weir_records_dropped_total{reason=null_key} = %v, want 2 (once per record)", n)
	}
}

// droppedNullKeys returns weir_records_dropped_total{reason="null_key"},
// summed over tasks.
func droppedNullKeys(t *testing.T, reg *prometheus.Registry) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	n := 0.0
	for _, mf := range mfs {
		if mf.GetName() != "weir_records_dropped_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "reason" && l.GetValue() == "null_key" {
					n += m.GetCounter().GetValue()
				}
			}
		}
	}
	return n
}
