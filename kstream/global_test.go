package kstream_test

import (
	"strings"
	"testing"

	"github.com/weirstream/weir/kstream"
	"github.com/weirstream/weir/serde"
)

// A stream joins a global table by a key computed from its records, with
// no repartition: the global table's updates (and deletions) are visible
// to later records.
func TestGlobalTableJoin(t *testing.T) {
	t.Parallel()
	b := kstream.NewBuilder()
	products := b.GlobalTable("products", "products", serde.String(), serde.String())
	orders := b.Stream("orders", "orders", serde.String(), serde.String()) // order id → "product|qty"
	product := func(_ string, order string) string { p, _, _ := strings.Cut(order, "|"); return p }
	orders.JoinGlobal(products, product, func(_ string, order, name string) string { return order + "=" + name }).
		To("inner", serde.String(), serde.String())
	orders.LeftJoinGlobal(products, product, func(_ string, order, name string, found bool) string {
		if !found {
			name = "?"
		}
		return order + "=" + name
	}).To("leftjoin", serde.String(), serde.String())
	d := driver(t, b)
	run(t, d,
		step{topic: "products", key: "p1", value: "tv", ts: 1},
		step{topic: "orders", key: "o1", value: "p1|2", ts: 2},
		step{topic: "orders", key: "o2", value: "p2|1", ts: 3}, // no such product
		step{topic: "products", key: "p2", value: "pen", ts: 4},
		step{topic: "products", key: "p1", value: "radio", ts: 5},
		step{topic: "orders", key: "o3", value: "p1|1", ts: 6},
		step{topic: "orders", key: "o4", value: "p2|5", ts: 7},
		step{topic: "products", key: "p2", del: true, ts: 8},
		step{topic: "orders", key: "o5", value: "p2|1", ts: 9},
	)
	expectRows(t, d, "inner", serde.String(), "o1=p1|2=tv@2", "o3=p1|1=radio@6", "o4=p2|5=pen@7")
	expectRows(t, d, "leftjoin", serde.String(), "o1=p1|2=tv@2", "o2=p2|1=?@3", "o3=p1|1=radio@6", "o4=p2|5=pen@7", "o5=p2|1=?@9")
}

// A global table's topic is read by nothing else, and its store's name is
// its own.
func TestGlobalTableBuildChecks(t *testing.T) {
	t.Parallel()
	b := kstream.NewBuilder()
	b.GlobalTable("g", "shared", serde.String(), serde.String())
	b.Stream("s", "shared", serde.String(), serde.String()).To("out", serde.String(), serde.String())
	b.GlobalTable("g", "other", serde.String(), serde.String())
	_, err := b.Build()
	if err == nil {
		t.Fatal("Build accepted a topic read twice and a duplicate store")
	}
	for _, want := range []string{`topic "shared" is read by`, `duplicate store name "g"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Build error %q does not say %q", err, want)
		}
	}
}
