package main

import (
	"bytes"
	"encoding/binary"
	"io"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/weirstream/weir/kstream"
)

func TestJoinStreamKeysAreSeededAndUniform(t *testing.T) {
	t.Parallel()
	const records, keys = 200_000, 100
	a := joinStreamKeys(records, keys, joinKeySeed)
	if b := joinStreamKeys(records, keys, joinKeySeed); !slices.Equal(a, b) {
		t.Fatal("the same seed drew different keys")
	}
	if c := joinStreamKeys(records, keys, joinKeySeed+1); slices.Equal(a, c) {
		t.Fatal("another seed drew the same keys")
	}
	hist := make([]int, keys)
	for _, k := range a {
		if k < 0 || k >= keys {
			t.Fatalf("key index %d out of [0, %d)", k, keys)
		}
		hist[k]++
	}
	// 2,000 expected per key, standard deviation about 44.7: every key
	// within 6 of them.
	for k, n := range hist {
		if math.Abs(float64(n)-records/keys) > 6*math.Sqrt(records/keys) {
			t.Errorf("key %d drawn %d times, want about %d", k, n, records/keys)
		}
	}
}

func TestJoinValues(t *testing.T) {
	t.Parallel()
	if r := joinRow(99_999); len(r) != joinRowSize || string(r) != "row-0000000000099999" {
		t.Errorf("joinRow = %q (%d bytes)", r, len(r))
	}
	if joinValueSize(100) != 100 || joinValueSize(3) != 8 {
		t.Errorf("joinValueSize(100, 3) = %d, %d", joinValueSize(100), joinValueSize(3))
	}
	v := joinStreamValue(123_456_789, 100)
	if len(v) != 100 {
		t.Fatalf("value of %d bytes", len(v))
	}
	if i, ok := joinStreamIndex(v); !ok || i != 123_456_789 {
		t.Errorf("index = %d, %v", i, ok)
	}
	if _, ok := joinStreamIndex(v[:7]); ok {
		t.Error("an index from 7 bytes")
	}
	out := joinValues("k", v, string(joinRow(5)))
	if !bytes.HasPrefix(out, v) || !bytes.HasSuffix(out, joinRow(5)) || len(out) != 100+joinRowSize {
		t.Errorf("joined %q", out)
	}
	if i, _ := joinStreamIndex(out); i != 123_456_789 {
		t.Errorf("index of the join result = %d", i)
	}
}

func TestJoinTopologiesBuild(t *testing.T) {
	t.Parallel()
	for name, top := range map[string]any{
		"join":  joinTopology("table", "stream", "out", func() {}),
		"count": joinCountTopology("stream", "out", func() {}),
	} {
		b, ok := top.(*kstream.Builder)
		if !ok {
			t.Fatalf("%s: %T is not a *kstream.Builder", name, top)
		}
		if _, err := b.Build(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// joinOutput returns the join results of the stream records keys
// describe, as the join writes them.
func joinOutput(keys []int32) (ks, vs [][]byte) {
	for i, k := range keys {
		ks = append(ks, recordKey(int64(k)))
		vs = append(vs, joinValues("", joinStreamValue(int64(i), 100), string(joinRow(int64(k)))))
	}
	return ks, vs
}

func TestJoinCheck(t *testing.T) {
	t.Parallel()
	keys := []int32{3, 1, 3, 0}
	ks, vs := joinOutput(keys)
	run := func(order []int, mutate func(i int, k, v []byte) ([]byte, []byte)) (string, error) {
		c := newJoinCheck(keys)
		for _, i := range order {
			k, v := ks[i], vs[i]
			if mutate != nil {
				k, v = mutate(i, bytes.Clone(k), bytes.Clone(v))
			}
			c.add(k, v)
		}
		return c.result()
	}
	if s, err := run([]int{2, 0, 3, 1}, nil); err != nil || !strings.Contains(s, "each of 4 stream records once") {
		t.Errorf("complete output: %q, %v", s, err)
	}
	for name, c := range map[string]struct {
		order  []int
		mutate func(i int, k, v []byte) ([]byte, []byte)
		want   string
	}{
		"missing":   {order: []int{0, 1, 2}, want: "1 missing, 0 duplicates, 0 wrong"},
		"duplicate": {order: []int{0, 1, 2, 3, 3}, want: "0 missing, 1 duplicates"},
		"wrong row": {order: []int{0, 1, 2, 3}, want: "1 wrong", mutate: func(i int, k, v []byte) ([]byte, []byte) {
			if i == 1 {
				copy(v[len(v)-joinRowSize:], joinRow(2))
			}
			return k, v
		}},
		"wrong key": {order: []int{0, 1, 2, 3}, want: "with key", mutate: func(i int, k, v []byte) ([]byte, []byte) {
			if i == 0 {
				k = recordKey(1)
			}
			return k, v
		}},
		"unknown record": {order: []int{0, 1, 2, 3}, want: "of no stream record", mutate: func(i int, k, v []byte) ([]byte, []byte) {
			if i == 3 {
				binary.BigEndian.PutUint64(v, 4)
			}
			return k, v
		}},
	} {
		if _, err := run(c.order, c.mutate); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one with %q", name, err, c.want)
		}
	}
}

func TestCountCheck(t *testing.T) {
	t.Parallel()
	want := map[string]int64{"a": 2, "b": 1}
	count := func(n int64) []byte { return binary.BigEndian.AppendUint64(nil, uint64(n)) }
	c := newCountCheck(want)
	c.add([]byte("a"), count(1))
	c.add([]byte("b"), count(1))
	c.add([]byte("a"), count(2))
	if s, err := c.result(); err != nil || s != "final counts of 2 keys right, sum 3" {
		t.Errorf("right counts: %q, %v", s, err)
	}
	c = newCountCheck(want)
	c.add([]byte("a"), count(1))
	c.add([]byte("b"), count(1))
	if _, err := c.result(); err == nil || !strings.Contains(err.Error(), "sum to 2, want 3: 1 of 2 keys wrong") {
		t.Errorf("a lost count: %v", err)
	}
	c = newCountCheck(want)
	for _, k := range []string{"a", "a", "b", "c"} {
		c.add([]byte(k), count(want[k]))
	}
	c.add([]byte("b"), []byte{1})
	if _, err := c.result(); err == nil || !strings.Contains(err.Error(), "1 keys not in the stream, 1 values not 8 bytes") {
		t.Errorf("an extra key: %v", err)
	}
}

func TestTableLoaded(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		committed, ends []int64
		want            bool
	}{
		{[]int64{5, 7}, []int64{5, 7}, true},
		{[]int64{5, 6}, []int64{5, 7}, false},
		{[]int64{-1, 7}, []int64{5, 7}, false},
		{[]int64{5}, []int64{5, 7}, false},
	} {
		if got := tableLoaded(c.committed, c.ends); got != c.want {
			t.Errorf("tableLoaded(%v, %v) = %v", c.committed, c.ends, got)
		}
	}
}

func TestJoinRatiosPerRoundAndMedian(t *testing.T) {
	t.Parallel()
	res := []*joinResult{
		{App: "join", Round: 1, SteadyRate: 30, Rate: 20, CPUPerMillion: 6},
		{App: "count", Round: 1, SteadyRate: 60, Rate: 40, CPUPerMillion: 12},
		{App: "join", Round: 2, SteadyRate: 40, Rate: 30, CPUPerMillion: 7},
		{App: "count", Round: 2, SteadyRate: 50, Rate: 30, CPUPerMillion: 10},
		{App: "join", Round: 3, SteadyRate: 45, Rate: 27, CPUPerMillion: 6},
		{App: "count", Round: 3, SteadyRate: 50, Rate: 30, CPUPerMillion: 15},
		{App: "join", Round: 4, SteadyRate: 45, Rate: 27}, // no count: left out
	}
	got := joinRatios(res)
	want := []joinRatio{{1, 0.5, 0.5, 0.5}, {2, 0.8, 1, 0.7}, {3, 0.9, 0.9, 0.4}, {0, 0.8, 0.9, 0.5}}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for i := range want {
		if got[i].Round != want[i].Round || math.Abs(got[i].Steady-want[i].Steady) > 1e-12 || math.Abs(got[i].EndToEnd-want[i].EndToEnd) > 1e-12 || math.Abs(got[i].CPU-want[i].CPU) > 1e-12 {
			t.Errorf("ratio %d = %+v, want %+v", i, got[i], want[i])
		}
	}
	if joinRatios(nil) != nil {
		t.Error("ratios without results")
	}
}

func TestParseFlagsJoin(t *testing.T) {
	t.Parallel()
	o, err := parseFlags(nil, "", io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.joinTableKeys != 100_000 || slices.Contains(o.workloads, wlJoin) {
		t.Errorf("join-table-keys %d, workloads %v", o.joinTableKeys, o.workloads)
	}
	o, err = parseFlags([]string{"-workloads", "join,count", "-join-table-keys", "1000"}, "", io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(o.workloads, []string{wlCount, wlJoin}) || o.joinTableKeys != 1000 {
		t.Errorf("workloads %v, join-table-keys %d", o.workloads, o.joinTableKeys)
	}
	if _, err := parseFlags([]string{"-join-table-keys", "0"}, "", io.Discard); err == nil || !strings.Contains(err.Error(), "-join-table-keys") {
		t.Errorf("-join-table-keys 0: %v", err)
	}
}
