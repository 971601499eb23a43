package kstream_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/weirstream/weir/kstream"
	"github.com/weirstream/weir/processor"
	"github.com/weirstream/weir/serde"
	"github.com/weirstream/weir/weirtest"
)

// step is one input record of a semantics table: a record of topic, or a
// tombstone of key when del is set.
type step struct {
	topic string
	key   string
	value string
	del   bool
	ts    int64
}

func run(t *testing.T, d *weirtest.Driver, steps ...step) {
	t.Helper()
	for _, s := range steps {
		in := weirtest.Input(d, s.topic, serde.String(), serde.String())
		var err error
		if s.del {
			err = in.PipeTombstone(s.key, at(s.ts))
		} else {
			err = in.Pipe(s.key, s.value, at(s.ts))
		}
		if err != nil {
			t.Fatalf("%+v: %v", s, err)
		}
	}
}

// rows reads topic as "key=value@ts" strings, "key=<deleted>@ts" for a
// tombstone.
func rows[V any](t *testing.T, d *weirtest.Driver, topic string, values serde.Serde[V]) []string {
	t.Helper()
	recs, err := weirtest.Output(d, topic, serde.String(), values).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	out := []string{}
	for _, r := range recs {
		if r.Tombstone {
			out = append(out, fmt.Sprintf("%s=<deleted>@%d", r.Key, r.Timestamp.UnixMilli()))
			continue
		}
		out = append(out, fmt.Sprintf("%s=%v@%d", r.Key, r.Value, r.Timestamp.UnixMilli()))
	}
	return out
}

func expectRows[V any](t *testing.T, d *weirtest.Driver, topic string, values serde.Serde[V], want ...string) {
	t.Helper()
	if want == nil {
		want = []string{}
	}
	if got := rows(t, d, topic, values); !slices.Equal(got, want) {
		t.Errorf("%s:\n got  %v\n want %v", topic, got, want)
	}
}

// TestStreamTableJoinSemantics is the stream-table join table of Kafka
// Streams' developer guide (one key, the stream on "left", the table on
// "right"), record by record, for Join and LeftJoin. The guide's rows
// with a null stream value produce nothing and are left out (a typed
// stream has no null values); its table tombstones are kept, including
// those of a key the table does not hold.
func TestStreamTableJoinSemantics(t *testing.T) {
	t.Parallel()
	b := kstream.NewBuilder()
	right := b.Table("right", "right", serde.String(), serde.String())
	left := b.Stream("left", "left", serde.String(), serde.String())
	left.Join(right, func(_ string, v, row string) string { return "[" + v + "," + row + "]" }).
		To("inner", serde.String(), serde.String())
	left.LeftJoin(right, func(_ string, v, row string, found bool) string {
		if !found {
			row = "null"
		}
		return "[" + v + "," + row + "]"
	}).To("leftjoin", serde.String(), serde.String())
	d := driver(t, b)
	run(t, d,
		step{topic: "right", key: "k", del: true, ts: 2},
		step{topic: "left", key: "k", value: "A", ts: 3},
		step{topic: "right", key: "k", value: "a", ts: 4},
		step{topic: "left", key: "k", value: "B", ts: 5},
		step{topic: "right", key: "k", value: "b", ts: 6},
		step{topic: "right", key: "k", del: true, ts: 8},
		step{topic: "left", key: "k", value: "C", ts: 9},
		step{topic: "right", key: "k", value: "c", ts: 10},
		step{topic: "right", key: "k", del: true, ts: 11},
		step{topic: "right", key: "k", del: true, ts: 13},
		step{topic: "right", key: "k", value: "d", ts: 14},
		step{topic: "left", key: "k", value: "D", ts: 15},
	)
	expectRows(t, d, "inner", serde.String(), "k=[B,a]@5", "k=[D,d]@15")
	expectRows(t, d, "leftjoin", serde.String(), "k=[A,null]@3", "k=[B,a]@5", "k=[C,null]@9", "k=[D,d]@15")
}

// A join looks the table up through the filters and mappings between it
// and its store: a row the filter drops is no row, and a mapped row is
// mapped again on every lookup.
func TestJoinThroughFilteredAndMappedTable(t *testing.T) {
	t.Parallel()
	b := kstream.NewBuilder()
	customers := b.Table("customers", "customers", serde.String(), serde.String()).
		Filter(func(_ string, tier string) bool { return tier != "banned" }).
		MapValues(func(_ string, tier string) string { return strings.ToUpper(tier) })
	b.Stream("orders", "orders", serde.String(), serde.String()).
		LeftJoin(customers, func(_ string, order, tier string, found bool) string {
			if !found {
				return order + ":unknown"
			}
			return order + ":" + tier
		}).To("enriched", serde.String(), serde.String())
	d := driver(t, b)
	run(t, d,
		step{topic: "customers", key: "ann", value: "gold", ts: 1},
		step{topic: "customers", key: "bob", value: "banned", ts: 2},
		step{topic: "orders", key: "ann", value: "o1", ts: 3},
		step{topic: "orders", key: "bob", value: "o2", ts: 4},
		step{topic: "orders", key: "cid", value: "o3", ts: 5},
		step{topic: "customers", key: "ann", value: "banned", ts: 6},
		step{topic: "orders", key: "ann", value: "o4", ts: 7},
	)
	expectRows(t, d, "enriched", serde.String(), "ann=o1:GOLD@3", "bob=o2:unknown@4", "cid=o3:unknown@5", "ann=o4:unknown@7")
}

// A table from a topic is materialized and passes its updates on:
// tombstones delete (and reach a sink as tombstones, also for a key the
// table never held, as in Kafka Streams), a filter deletes a row whose
// new value stops matching and passes nothing for a row that never
// matched.
func TestTableUpdatesAndDeletes(t *testing.T) {
	t.Parallel()
	b := kstream.NewBuilder()
	prices := b.Table("prices", "prices", serde.String(), serde.Int64())
	prices.ToStream().To("all", serde.String(), serde.Int64())
	prices.Filter(func(_ string, p int64) bool { return p >= 100 }).ToStream().To("expensive", serde.String(), serde.Int64())
	d := driver(t, b)
	in := weirtest.Input(d, "prices", serde.String(), serde.Int64())
	for _, r := range []struct {
		k   string
		v   int64
		del bool
		ts  int64
	}{
		{"tv", 500, false, 1},
		{"pen", 2, false, 2},
		{"tv", 90, false, 3},  // leaves the filter: a deletion there
		{"pen", 3, false, 4},  // never matched: nothing there
		{"tv", 0, true, 5},    // deleted
		{"cup", 0, true, 6},   // a key never held: passed on, not through the filter
		{"tv", 120, false, 7}, // back
	} {
		var err error
		if r.del {
			err = in.PipeTombstone(r.k, at(r.ts))
		} else {
			err = in.Pipe(r.k, r.v, at(r.ts))
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	expectRows(t, d, "all", serde.Int64(), "tv=500@1", "pen=2@2", "tv=90@3", "pen=3@4", "tv=<deleted>@5", "cup=<deleted>@6", "tv=120@7")
	expectRows(t, d, "expensive", serde.Int64(), "tv=500@1", "tv=<deleted>@3", "tv=120@7")
	got := store(t, d, "prices", serde.String(), serde.Int64())
	if want := []weirtest.Entry[string, int64]{{Key: "pen", Value: 3}, {Key: "tv", Value: 120}}; !slices.Equal(got, want) {
		t.Errorf("store = %v, want %v", got, want)
	}
}

// TestTableGroupBySubtracts: a row that moves to another group is taken
// out of the old one (the subtractor) and added to the new one (the
// adder); a deleted row is taken out; a row that changes within its group
// is subtracted and added in one update.
func TestTableGroupBySubtracts(t *testing.T) {
	t.Parallel()
	b := kstream.NewBuilder()
	users := b.Table("users", "users", serde.String(), serde.String()) // user → region
	byRegion := users.GroupBy("by-region", func(user, region string) (string, string) { return region, user }, serde.String(), serde.String())
	byRegion.Count("users-per-region", kstream.WithoutCache()).ToStream().To("counts", serde.String(), serde.Int64())
	byRegion.Aggregate("members", func() string { return "" },
		func(_ string, user, agg string) string { return agg + "+" + user },
		func(_ string, user, agg string) string { return agg + "-" + user },
		serde.String(), kstream.WithoutCache()).ToStream().To("members", serde.String(), serde.String())
	d := driver(t, b)
	run(t, d,
		step{topic: "users", key: "ann", value: "eu", ts: 1},
		step{topic: "users", key: "bob", value: "eu", ts: 2},
		step{topic: "users", key: "ann", value: "us", ts: 3}, // moves
		step{topic: "users", key: "bob", value: "eu", ts: 4}, // same group
		step{topic: "users", key: "bob", del: true, ts: 5},   // leaves
	)
	expectRows(t, d, "counts", serde.Int64(),
		"eu=1@1", "eu=2@2", "eu=1@3", "us=1@3", "eu=1@4", "eu=0@5")
	expectRows(t, d, "members", serde.String(),
		"eu=+ann@1", "eu=+ann+bob@2", "eu=+ann+bob-ann@3", "us=+ann@3", "eu=+ann+bob-ann-bob+bob@4", "eu=+ann+bob-ann-bob+bob-bob@5")
	got := store(t, d, "users-per-region", serde.String(), serde.Int64())
	if want := []weirtest.Entry[string, int64]{{Key: "eu", Value: 0}, {Key: "us", Value: 1}}; !slices.Equal(got, want) {
		t.Errorf("store = %v, want %v", got, want)
	}
}

// Reduce on a grouped table: the subtractor takes a leaving row out.
func TestTableReduce(t *testing.T) {
	t.Parallel()
	b := kstream.NewBuilder()
	// account → balance, grouped by the account's bank (its first letter).
	b.Table("balances", "balances", serde.String(), serde.Int64()).
		GroupBy("by-bank", func(account string, bal int64) (string, int64) { return account[:1], bal }, serde.String(), serde.Int64()).
		Reduce("bank-totals", func(agg, v int64) int64 { return agg + v }, func(agg, v int64) int64 { return agg - v }, serde.Int64(), kstream.WithoutCache()).
		ToStream().To("totals", serde.String(), serde.Int64())
	d := driver(t, b)
	in := weirtest.Input(d, "balances", serde.String(), serde.Int64())
	for i, r := range []struct {
		k string
		v int64
	}{{"a1", 10}, {"a2", 5}, {"a1", 7}, {"b1", 1}} {
		if err := in.Pipe(r.k, r.v, at(int64(i+1))); err != nil {
			t.Fatal(err)
		}
	}
	expectRows(t, d, "totals", serde.Int64(), "a=10@1", "a=15@2", "a=12@3", "b=1@4")
}

// Build refuses a join of a re-keyed stream and a Suppress of a table
// whose value serde is unknown.
func TestTableBuildChecks(t *testing.T) {
	t.Parallel()
	b := kstream.NewBuilder()
	tbl := b.Table("t", "t", serde.String(), serde.String())
	b.Stream("s", "s", serde.String(), serde.String()).
		SelectKey(func(k, v string) string { return v }).
		Join(tbl, func(_ string, v, row string) string { return v + row }).
		To("out", serde.String(), serde.String())
	tbl.MapValues(func(_ string, v string) int { return len(v) }).Suppress("quiet", kstream.UntilTimeLimit(1, kstream.BufferLimit{}, kstream.EmitEarlyWhenFull))
	_, err := b.Build()
	if err == nil {
		t.Fatal("Build accepted a join of a re-keyed stream")
	}
	for _, want := range []string{`the key was changed by "s-selectkey"`, `Suppress "quiet"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Build error %q does not say %q", err, want)
		}
	}
}

// tableJoins joins the tables "left" and "right" three ways, writing
// "[left,right]" ("null" for a side without a row) to "inner", "leftjoin"
// and "outer", and returns the builder and the left table.
func tableJoins() (*kstream.Builder, *kstream.Table[string, string]) {
	show := func(v string, ok bool) string {
		if !ok {
			return "null"
		}
		return v
	}
	b := kstream.NewBuilder()
	left := b.Table("left", "left", serde.String(), serde.String())
	right := b.Table("right", "right", serde.String(), serde.String())
	left.Join(right, func(_ string, l, r string) string { return "[" + l + "," + r + "]" }).
		ToStream().To("inner", serde.String(), serde.String())
	left.LeftJoin(right, func(_ string, l, r string, rok bool) string { return "[" + l + "," + show(r, rok) + "]" }).
		ToStream().To("leftjoin", serde.String(), serde.String())
	left.OuterJoin(right, func(_ string, l string, lok bool, r string, rok bool) string {
		return "[" + show(l, lok) + "," + show(r, rok) + "]"
	}).ToStream().To("outer", serde.String(), serde.String())
	return b, left
}

// TestTableTableJoinSemantics is the table-table join table of Kafka
// Streams' developer guide (one key, "left" and "right" tables), record by
// record, for Join, LeftJoin and OuterJoin. A result "<deleted>" is the
// guide's null: the key leaves the result table.
func TestTableTableJoinSemantics(t *testing.T) {
	t.Parallel()
	b, _ := tableJoins()
	d := driver(t, b)
	run(t, d,
		step{topic: "left", key: "k", del: true, ts: 1},
		step{topic: "right", key: "k", del: true, ts: 2},
		step{topic: "left", key: "k", value: "A", ts: 3},
		step{topic: "right", key: "k", value: "a", ts: 4},
		step{topic: "left", key: "k", value: "B", ts: 5},
		step{topic: "right", key: "k", value: "b", ts: 6},
		step{topic: "left", key: "k", del: true, ts: 7},
		step{topic: "right", key: "k", del: true, ts: 8},
		step{topic: "left", key: "k", value: "C", ts: 9},
		step{topic: "right", key: "k", value: "c", ts: 10},
		step{topic: "right", key: "k", del: true, ts: 11},
		step{topic: "left", key: "k", del: true, ts: 12},
		step{topic: "right", key: "k", del: true, ts: 13},
		step{topic: "right", key: "k", value: "d", ts: 14},
		step{topic: "left", key: "k", value: "D", ts: 15},
	)
	expectRows(t, d, "inner", serde.String(),
		"k=[A,a]@4", "k=[B,a]@5", "k=[B,b]@6", "k=<deleted>@7", "k=[C,c]@10", "k=<deleted>@11", "k=[D,d]@15")
	expectRows(t, d, "leftjoin", serde.String(),
		"k=[A,null]@3", "k=[A,a]@4", "k=[B,a]@5", "k=[B,b]@6", "k=<deleted>@7", "k=[C,null]@9", "k=[C,c]@10",
		"k=[C,null]@11", "k=<deleted>@12", "k=[D,d]@15")
	expectRows(t, d, "outer", serde.String(),
		"k=[A,null]@3", "k=[A,a]@4", "k=[B,a]@5", "k=[B,b]@6", "k=[null,b]@7", "k=<deleted>@8", "k=[C,null]@9",
		"k=[C,c]@10", "k=[C,null]@11", "k=<deleted>@12", "k=[null,d]@14", "k=[D,d]@15")
}

// A tombstone for a key one table does not hold is passed on, as Kafka
// Streams passes it: where the other table holds the key, an inner join
// deletes the result again, the side of a left or outer join that keeps
// its rows repeats the row, and the other side deletes; a versioned table
// passes it on too; a tombstone with a null key is dropped, one with a
// present but empty key is not.
func TestTombstoneForAKeyNotHeld(t *testing.T) {
	t.Parallel()
	b, left := tableJoins()
	left.ToStream().To("left-stream", serde.String(), serde.String())
	b.VersionedTable("versioned", "versioned", serde.String(), serde.String(), time.Hour).
		ToStream().To("versioned-stream", serde.String(), serde.String())
	d := driver(t, b)
	run(t, d,
		step{topic: "left", key: "k", value: "A", ts: 1},
		step{topic: "right", key: "j", value: "x", ts: 2},
		step{topic: "right", key: "k", del: true, ts: 3}, // right does not hold k; left does
		step{topic: "left", key: "j", del: true, ts: 4},  // left does not hold j; right does
		step{topic: "left", key: "z", del: true, ts: 5},  // neither holds z
		step{topic: "left", key: "", del: true, ts: 6},   // a present but empty key
		step{topic: "versioned", key: "v", del: true, ts: 7},
	)
	for _, topic := range []string{"left", "versioned"} {
		if err := weirtest.Input(d, topic, serde.Bytes(), serde.Bytes()).PipeTombstone(nil, at(8)); err != nil {
			t.Fatal(err) // a null key: dropped
		}
	}
	expectRows(t, d, "inner", serde.String(), "k=<deleted>@3", "j=<deleted>@4")
	expectRows(t, d, "leftjoin", serde.String(), "k=[A,null]@1", "k=[A,null]@3", "j=<deleted>@4")
	expectRows(t, d, "outer", serde.String(), "k=[A,null]@1", "j=[null,x]@2", "k=[A,null]@3", "j=[null,x]@4")
	expectRows(t, d, "left-stream", serde.String(), "k=A@1", "j=<deleted>@4", "z=<deleted>@5", "=<deleted>@6")
	expectRows(t, d, "versioned-stream", serde.String(), "v=<deleted>@7")
}

// A stream joins the result of a table-table join, looked up through both
// tables' stores.
func TestStreamJoinsATableJoin(t *testing.T) {
	t.Parallel()
	b := kstream.NewBuilder()
	names := b.Table("names", "names", serde.String(), serde.String())
	cities := b.Table("cities", "cities", serde.String(), serde.String())
	people := names.Join(cities, func(_ string, n, c string) string { return n + "@" + c })
	b.Stream("visits", "visits", serde.String(), serde.String()).
		Join(people, func(_ string, page, who string) string { return who + ":" + page }).
		To("out", serde.String(), serde.String())
	d := driver(t, b)
	run(t, d,
		step{topic: "names", key: "1", value: "ann", ts: 1},
		step{topic: "visits", key: "1", value: "p1", ts: 2},
		step{topic: "cities", key: "1", value: "oslo", ts: 3},
		step{topic: "visits", key: "1", value: "p2", ts: 4},
	)
	expectRows(t, d, "out", serde.String(), "1=ann@oslo:p2@4")
}

// A table's updates carry their version: increasing per key (and per
// task), replacing a version the input record carried, keeping its other
// headers. The same holds for a windowed table's updates.
func TestTableUpdatesCarryIncreasingVersions(t *testing.T) {
	t.Parallel()
	b := kstream.NewBuilder()
	words := b.Stream("words", "words", serde.String(), serde.String())
	words.GroupByKey().Count("counts").ToStream().To("counts-out", serde.String(), serde.Int64())
	words.GroupByKey().WindowedBy(kstream.Tumbling(time.Minute)).Count("windowed").
		ToStream(kstream.WindowedKey).To("windowed-out", kstream.WindowedSerde(serde.String(), time.Minute), serde.Int64())
	d, err := weirtest.New(b, weirtest.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	in := weirtest.Input(d, "words", serde.String(), serde.String())
	stale := processor.Header{Key: processor.VersionHeader, Value: []byte("99999999999")}
	other := processor.Header{Key: "trace", Value: []byte("t1")}
	for i, k := range []string{"a", "b", "a", "a", "b"} {
		if err := in.Pipe(k, "x", at(int64(i)), stale, other); err != nil {
			t.Fatal(err)
		}
	}
	for _, topic := range []string{"counts-out", "windowed-out"} {
		recs, err := weirtest.Output(d, topic, serde.Bytes(), serde.Int64()).ReadAll()
		if err != nil {
			t.Fatal(err)
		}
		if len(recs) != 5 {
			t.Fatalf("%s: %d records, want 5", topic, len(recs))
		}
		last := map[string]uint64{}
		for i, r := range recs {
			v, ok := processor.RecordVersion(r.Headers)
			if !ok {
				t.Fatalf("%s: record %d has no version: %v", topic, i, r.Headers)
			}
			n := 0
			for _, h := range r.Headers {
				if h.Key == processor.VersionHeader {
					n++
				}
			}
			if n != 1 || !slices.ContainsFunc(r.Headers, func(h processor.Header) bool { return h.Key == "trace" && string(h.Value) == "t1" }) {
				t.Fatalf("%s: record %d headers %v: want one version and the input's trace header", topic, i, r.Headers)
			}
			if v >= 99999999999 || v <= last[string(r.Key)] {
				t.Fatalf("%s: record %d of key %q has version %d after %d", topic, i, r.Key, v, last[string(r.Key)])
			}
			last[string(r.Key)] = v
		}
	}
}
