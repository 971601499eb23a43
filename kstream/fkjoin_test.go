package kstream_test

import (
	"strings"
	"testing"

	"github.com/weirstream/weir/kstream"
	"github.com/weirstream/weir/serde"
)

// TestForeignKeyJoin follows orders (id → "customer|item") joined to
// customers (id → name) by the customer id in the order, with Kafka
// Streams' KIP-213 semantics: the result follows changes of either side,
// a changed foreign key retracts the old result, and a deletion of either
// side deletes (inner) or unjoins (left) the results it had. An inner
// join also deletes the result of a row that changes its foreign key to
// one without a row, even when it had none (Kafka Streams' tombstones:
// conformance/pinned_test.go).
func TestForeignKeyJoin(t *testing.T) {
	t.Parallel()
	b := kstream.NewBuilder()
	orders := b.Table("orders", "orders", serde.String(), serde.String())
	customers := b.Table("customers", "customers", serde.String(), serde.String())
	customerOf := func(order string) string { c, _, _ := strings.Cut(order, "|"); return c }
	item := func(order string) string { _, i, _ := strings.Cut(order, "|"); return i }
	orders.JoinOnForeignKey("inner-fk", customers, customerOf, func(order, name string) string {
		return item(order) + " for " + name
	}, serde.String()).ToStream().To("inner", serde.String(), serde.String())
	orders.LeftJoinOnForeignKey("left-fk", customers, customerOf, func(order, name string, found bool) string {
		if !found {
			name = "nobody"
		}
		return item(order) + " for " + name
	}, serde.String()).ToStream().To("leftjoin", serde.String(), serde.String())
	d := driver(t, b)
	run(t, d,
		step{topic: "customers", key: "c1", value: "ann", ts: 1},
		step{topic: "customers", key: "c2", value: "bob", ts: 1},
		step{topic: "orders", key: "o1", value: "c1|tv", ts: 2},
		step{topic: "orders", key: "o2", value: "c3|pen", ts: 3},  // no customer c3 yet
		step{topic: "customers", key: "c3", value: "cid", ts: 4},  // now there is
		step{topic: "customers", key: "c1", value: "anna", ts: 5}, // renamed
		step{topic: "orders", key: "o1", value: "c2|tv", ts: 6},   // the foreign key changes
		step{topic: "customers", key: "c1", value: "ann2", ts: 7}, // o1 no longer follows c1
		step{topic: "customers", key: "c2", del: true, ts: 8},     // o1's customer is deleted
		step{topic: "orders", key: "o2", del: true, ts: 9},        // an order is deleted
		step{topic: "orders", key: "o1", value: "c9|tv", ts: 10},  // to a customer who does not exist
	)
	expectRows(t, d, "inner", serde.String(),
		"o1=tv for ann@2", "o2=pen for cid@4", "o1=tv for anna@5", "o1=tv for bob@6", "o1=<deleted>@8",
		"o2=<deleted>@9", "o1=<deleted>@10")
	expectRows(t, d, "leftjoin", serde.String(),
		"o1=tv for ann@2", "o2=pen for nobody@3", "o2=pen for cid@4", "o1=tv for anna@5", "o1=tv for bob@6",
		"o1=tv for nobody@8", "o2=<deleted>@9", "o1=tv for nobody@10")
	got := store(t, d, "left-fk", serde.String(), serde.String())
	if len(got) != 1 || got[0].Key != "o1" || got[0].Value != "tv for nobody" {
		t.Errorf("left-fk store = %v, want only o1 = tv for nobody", got)
	}
}
