package conformance

import (
	"fmt"
	"strconv"
	"time"

	"github.com/weirstream/weir/kstream"
	"github.com/weirstream/weir/serde"
)

// A scenario is one row of README.md's table: a topology reading topics
// a (and b when twoInputs) and writing strings to out. The Kafka Streams
// side of the same row is in kstreams/src/main/java.
type scenario struct {
	name      string
	twoInputs bool
	build     func(b *kstream.Builder)
}

var str = serde.String()

// num is int(v) of README.md: a value the generator wrote ("0".."99").
// weir's stateless steps pass a tombstone on without calling the
// function, except SelectKey, which sees its zero value: 0 then, as no
// result of it is kept (the count skips tombstones).
func num(v string) int {
	n, _ := strconv.Atoi(v)
	return n
}

// s is s(x) of README.md.
func s(v string, found bool) string {
	if !found {
		return "null"
	}
	return v
}

func windowKey(w kstream.Windowed[string], _ int64) string {
	return fmt.Sprintf("%s@%d-%d", w.Key, w.Start.UnixMilli(), w.End.UnixMilli())
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func sum(x, y string) string  { return strconv.Itoa(num(x) + num(y)) }
func diff(x, y string) string { return strconv.Itoa(num(x) - num(y)) }

func streamA(b *kstream.Builder) *kstream.Stream[string, string] {
	return b.Stream("a", "a", str, str)
}

func streamB(b *kstream.Builder) *kstream.Stream[string, string] {
	return b.Stream("b", "b", str, str)
}

func notMultipleOf3(_ string, v string) bool { return num(v)%3 != 0 }

func countWindows(g *kstream.WindowedTable[string, int64]) {
	g.ToStream(windowKey).MapValues(itoa).To("out", str, str)
}

func filterCountTumbling(b *kstream.Builder) *kstream.WindowedTable[string, int64] {
	return streamA(b).DropTombstones().Filter(notMultipleOf3).GroupByKey().
		WindowedBy(kstream.Tumbling(10 * time.Second).Grace(5 * time.Second)).Count("counts")
}

var (
	symmetric  = kstream.JoinWithin(5*time.Second, 5*time.Second).Grace(2 * time.Second)
	asymmetric = kstream.JoinWithin(2*time.Second, 6*time.Second).Grace(time.Second)
)

func joined(_ string, l, r string) string { return l + "|" + r }
func leftJoined(_ string, l, r string, found bool) string {
	return l + "|" + s(r, found)
}
func outerJoined(_ string, l string, lf bool, r string, rf bool) string {
	return s(l, lf) + "|" + s(r, rf)
}

// windowKeyOf is windowKey for a windowed table of A.
func windowKeyOf[A any](w kstream.Windowed[string], _ A) string { return windowKey(w, 0) }

// ownKey looks a global table up under the record's key.
func ownKey(k, _ string) string { return k }

// groupedByRest is table(a) grouped by "g" + int(v) % 3, the value kept.
func groupedByRest(b *kstream.Builder) *kstream.GroupedTable[string, string] {
	return b.Table("ta", "a", str, str).
		GroupBy("by-rest", func(_ string, v string) (string, string) { return "g" + strconv.Itoa(num(v)%3), v }, str, str)
}

func fk(v string) string { return "k" + strconv.Itoa(num(v)%5) }

var scenarios = []scenario{
	{name: "count", build: func(b *kstream.Builder) {
		streamA(b).GroupByKey().Count("counts").ToStream().MapValues(itoa).To("out", str, str)
	}},
	{name: "reduce-sum", build: func(b *kstream.Builder) {
		streamA(b).GroupByKey().Reduce("sums", sum, str).ToStream().To("out", str, str)
	}},
	{name: "aggregate-concat", build: func(b *kstream.Builder) {
		streamA(b).DropTombstones().GroupByKey().Aggregate("concat", func() string { return "" },
			func(_ string, v, agg string) string { return agg + v + ";" }, str).
			ToStream().To("out", str, str)
	}},
	{name: "count-tumbling", build: func(b *kstream.Builder) {
		countWindows(streamA(b).GroupByKey().
			WindowedBy(kstream.Tumbling(10 * time.Second).Grace(5 * time.Second)).Count("counts"))
	}},
	{name: "filter-count-tumbling", build: func(b *kstream.Builder) {
		countWindows(filterCountTumbling(b))
	}},
	{name: "filter-count-suppress", build: func(b *kstream.Builder) {
		countWindows(filterCountTumbling(b).Suppress("final", kstream.UntilWindowCloses()))
	}},
	{name: "count-hopping", build: func(b *kstream.Builder) {
		countWindows(streamA(b).GroupByKey().
			WindowedBy(kstream.Hopping(10*time.Second, 5*time.Second).Grace(2 * time.Second)).Count("counts"))
	}},
	{name: "count-sliding", build: func(b *kstream.Builder) {
		countWindows(streamA(b).GroupByKey().
			SlidingWindowedBy(kstream.Sliding(5 * time.Second).Grace(2 * time.Second)).Count("counts"))
	}},
	{name: "count-session", build: func(b *kstream.Builder) {
		countWindows(streamA(b).GroupByKey().
			SessionWindowedBy(kstream.Sessions(5 * time.Second).Grace(2 * time.Second)).Count("counts"))
	}},
	{name: "join-inner", twoInputs: true, build: func(b *kstream.Builder) {
		streamA(b).JoinStream("j", streamB(b), symmetric, joined, str, str).To("out", str, str)
	}},
	{name: "join-left", twoInputs: true, build: func(b *kstream.Builder) {
		streamA(b).LeftJoinStream("j", streamB(b), symmetric, leftJoined, str, str).To("out", str, str)
	}},
	{name: "join-outer", twoInputs: true, build: func(b *kstream.Builder) {
		streamA(b).OuterJoinStream("j", streamB(b), symmetric, outerJoined, str, str).To("out", str, str)
	}},
	{name: "join-asymmetric", twoInputs: true, build: func(b *kstream.Builder) {
		streamA(b).JoinStream("j", streamB(b), asymmetric, joined, str, str).To("out", str, str)
	}},
	{name: "stream-table-join", twoInputs: true, build: func(b *kstream.Builder) {
		streamA(b).Join(b.Table("tb", "b", str, str), joined).To("out", str, str)
	}},
	{name: "stream-table-left-join", twoInputs: true, build: func(b *kstream.Builder) {
		streamA(b).LeftJoin(b.Table("tb", "b", str, str), leftJoined).To("out", str, str)
	}},
	{name: "table", build: func(b *kstream.Builder) {
		b.Table("ta", "a", str, str).ToStream().To("out", str, str)
	}},
	{name: "table-filter", build: func(b *kstream.Builder) {
		b.Table("ta", "a", str, str).Filter(notMultipleOf3).ToStream().To("out", str, str)
	}},
	{name: "table-join", twoInputs: true, build: func(b *kstream.Builder) {
		b.Table("ta", "a", str, str).Join(b.Table("tb", "b", str, str), joined).ToStream().To("out", str, str)
	}},
	{name: "table-left-join", twoInputs: true, build: func(b *kstream.Builder) {
		b.Table("ta", "a", str, str).LeftJoin(b.Table("tb", "b", str, str), leftJoined).ToStream().To("out", str, str)
	}},
	{name: "table-outer-join", twoInputs: true, build: func(b *kstream.Builder) {
		b.Table("ta", "a", str, str).OuterJoin(b.Table("tb", "b", str, str), outerJoined).ToStream().To("out", str, str)
	}},
	{name: "fk-join", twoInputs: true, build: func(b *kstream.Builder) {
		b.Table("ta", "a", str, str).JoinOnForeignKey("fk", b.Table("tb", "b", str, str), fk,
			func(l, r string) string { return l + "|" + r }, str).ToStream().To("out", str, str)
	}},
	{name: "fk-left-join", twoInputs: true, build: func(b *kstream.Builder) {
		b.Table("ta", "a", str, str).LeftJoinOnForeignKey("fk", b.Table("tb", "b", str, str), fk,
			func(l, r string, found bool) string { return l + "|" + s(r, found) }, str).ToStream().To("out", str, str)
	}},
	{name: "table-groupby-reduce", build: func(b *kstream.Builder) {
		b.Table("ta", "a", str, str).
			GroupBy("by-rest", func(_ string, v string) (string, string) { return "g" + strconv.Itoa(num(v)%3), v }, str, str).
			Reduce("sums", sum, diff, str).ToStream().To("out", str, str)
	}},
	{name: "table-groupby-count", build: func(b *kstream.Builder) {
		groupedByRest(b).Count("counts").ToStream().MapValues(itoa).To("out", str, str)
	}},
	{name: "table-groupby-aggregate", build: func(b *kstream.Builder) {
		groupedByRest(b).Aggregate("sums", func() string { return "0" },
			func(_ string, v, agg string) string { return sum(agg, v) },
			func(_ string, v, agg string) string { return diff(agg, v) }, str).
			ToStream().To("out", str, str)
	}},
	{name: "reduce-tumbling", build: func(b *kstream.Builder) {
		streamA(b).DropTombstones().GroupByKey().
			WindowedBy(kstream.Tumbling(10*time.Second).Grace(5*time.Second)).Reduce("sums", sum, str).
			ToStream(windowKeyOf[string]).To("out", str, str)
	}},
	{name: "aggregate-hopping", build: func(b *kstream.Builder) {
		streamA(b).DropTombstones().GroupByKey().
			WindowedBy(kstream.Hopping(10*time.Second, 5*time.Second).Grace(2*time.Second)).
			Aggregate("concat", func() string { return "" }, func(_ string, v, agg string) string { return agg + v + ";" }, str).
			ToStream(windowKeyOf[string]).To("out", str, str)
	}},
	{name: "aggregate-session", build: func(b *kstream.Builder) {
		streamA(b).DropTombstones().GroupByKey().
			SessionWindowedBy(kstream.Sessions(5*time.Second).Grace(2*time.Second)).
			Aggregate("sums", func() string { return "0" }, func(_ string, v, agg string) string { return sum(agg, v) },
				func(_ string, x, y string) string { return sum(x, y) }, str).
			ToStream(windowKeyOf[string]).To("out", str, str)
	}},
	{name: "suppress-time-limit", build: func(b *kstream.Builder) {
		countWindows(streamA(b).GroupByKey().
			WindowedBy(kstream.Tumbling(10*time.Second).Grace(5*time.Second)).Count("counts").
			Suppress("limited", kstream.UntilTimeLimit(3*time.Second, kstream.BufferLimit{MaxRecords: 1000}, kstream.EmitEarlyWhenFull)))
	}},
	{name: "global-join", twoInputs: true, build: func(b *kstream.Builder) {
		streamA(b).JoinGlobal(b.GlobalTable("gb", "b", str, str), ownKey,
			func(_ string, l, r string) string { return l + "|" + r }).To("out", str, str)
	}},
	{name: "global-left-join", twoInputs: true, build: func(b *kstream.Builder) {
		streamA(b).LeftJoinGlobal(b.GlobalTable("gb", "b", str, str), ownKey, leftJoined).To("out", str, str)
	}},
	{name: "versioned-join", twoInputs: true, build: func(b *kstream.Builder) {
		streamA(b).Join(b.VersionedTable("vt", "b", str, str, 10*time.Second), joined).To("out", str, str)
	}},
	{name: "split-merge", build: func(b *kstream.Builder) {
		parts := streamA(b).DropTombstones().Split("s",
			kstream.When("even", func(_ string, v string) bool { return num(v)%2 == 0 }))
		parts.Branch("even").MapValues(func(v string) string { return "e" + v }).
			Merge(parts.Default().MapValues(func(v string) string { return "o" + v })).To("out", str, str)
	}},
	{name: "rekey-count", build: func(b *kstream.Builder) {
		streamA(b).DropTombstones().SelectKey(func(_, v string) string { return "r" + strconv.Itoa(num(v)%4) }).
			Repartition("rekey", str, str).GroupByKey().Count("counts").ToStream().MapValues(itoa).To("out", str, str)
	}},
}
