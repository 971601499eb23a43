package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/examples/internal/kafkaio"
	"github.com/weirstream/weir/serde"
	"github.com/weirstream/weir/weirtest"
	"github.com/weirstream/weir/weirtest/kafka"
)

func TestFlagsKeepTheirContract(t *testing.T) {
	t.Parallel()
	o, err := parseFlags(nil)
	if err != nil {
		t.Fatal(err)
	}
	want := options{orders: "orders", customers: "customers", products: "products", output: "enriched-orders",
		appID: "enrich", guarantee: "exactly_once"}
	if o != want {
		t.Errorf("defaults changed: %+v, want %+v", o, want)
	}
	o, err = parseFlags([]string{"-brokers", "a:1,b:2", "-orders", "o", "-customers", "c", "-products", "p", "-output", "e",
		"-app-id", "x", "-state-dir", "/s", "-guarantee", "at_least_once"})
	want = options{brokers: "a:1,b:2", orders: "o", customers: "c", products: "p", output: "e",
		appID: "x", stateDir: "/s", guarantee: "at_least_once"}
	if err != nil || o != want {
		t.Errorf("parseFlags = %+v, %v; want %+v", o, err, want)
	}
	for _, args := range [][]string{{"extra"}, {"-orders", ""}, {"-products", "customers"}, {"-output", "orders"}} {
		if _, err := parseFlags(args); err == nil {
			t.Errorf("parseFlags(%q) accepted", args)
		}
	}
	if _, err := config(options{guarantee: "twice"}); err == nil {
		t.Error("config accepted -guarantee twice")
	}
}

func TestOrdersAreEnriched(t *testing.T) {
	t.Parallel()
	o, _ := parseFlags(nil)
	customerCalls, enrichedCalls := 0, 0
	d, err := weirtest.New(Topology(o.params(), probes{
		customer: func() { customerCalls++ },
		enriched: func() { enrichedCalls++ },
	}), weirtest.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	customers := weirtest.Input(d, o.customers, serde.String(), serde.String())
	products := weirtest.Input(d, o.products, serde.String(), serde.String())
	orders := weirtest.Input(d, o.orders, serde.String(), serde.String())
	out := weirtest.Output(d, o.output, serde.String(), serde.JSON[Enriched]())
	at := func(s int) time.Time { return time.UnixMilli(0).Add(time.Duration(s) * time.Second) }

	for _, p := range []struct{ id, value string }{
		{"p-1", `{"name": "Kettle", "price": 3000}`},
		{"p-2", `{"name": "Mug", "price": 450}`},
	} {
		if err := products.Pipe(p.id, p.value, at(0)); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct{ id, value string }{
		{"c-1", `{"name": "Ana", "tier": "gold"}`},
		{"c-2", `{"name": "Ben", "tier": "silver"}`},
		{"c-3", `{"name": "Cai", "tier": "bronze"}`},
	} {
		if err := customers.Pipe(c.id, c.value, at(1)); err != nil {
			t.Fatal(err)
		}
	}
	pipe := func(customer, value string, s int) {
		t.Helper()
		if err := orders.Pipe(customer, value, at(s)); err != nil {
			t.Fatalf("order %s %s: %v", customer, value, err)
		}
	}
	pipe("c-1", `{"id": "o-1", "product": "p-1", "qty": 2}`, 10)
	pipe("c-2", `{"id": "o-2", "product": "p-2", "qty": 3, "note": "ignored"}`, 11)
	pipe("c-9", `{"id": "o-3", "product": "p-1", "qty": 1}`, 12) // unknown customer
	pipe("c-3", `{"id": "o-4", "product": "p-9", "qty": 4}`, 13) // unknown product
	if err := customers.PipeTombstone("c-2", at(14)); err != nil {
		t.Fatal(err)
	}
	if err := customers.PipeTombstone("c-8", at(14)); err != nil { // unknown: no change
		t.Fatal(err)
	}
	pipe("c-2", `{"id": "o-5", "product": "p-2", "qty": 1}`, 15) // deleted customer
	if err := customers.Pipe("c-1", `{"name": "Ana", "tier": "platinum"}`, at(16)); err != nil {
		t.Fatal(err)
	}
	if err := products.Pipe("p-1", `{"name": "Kettle", "price": 2500}`, at(16)); err != nil {
		t.Fatal(err)
	}
	if err := products.PipeTombstone("p-2", at(16)); err != nil {
		t.Fatal(err)
	}
	pipe("c-1", `{"id": "o-6", "product": "p-1", "qty": 1}`, 17) // updated customer and price
	pipe("c-1", `{"id": "o-7", "product": "p-2", "qty": 1}`, 18) // deleted product

	got, err := out.ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	want := []Enriched{
		{Order: "o-1", Customer: "c-1", Name: "Ana", Tier: "gold", Product: "p-1", ProductName: "Kettle", Qty: 2, Total: 6000},
		{Order: "o-2", Customer: "c-2", Name: "Ben", Tier: "silver", Product: "p-2", ProductName: "Mug", Qty: 3, Total: 1350},
		{Order: "o-3", Customer: "c-9", Tier: "unknown", Product: "p-1", ProductName: "Kettle", Qty: 1, Total: 3000},
		{Order: "o-4", Customer: "c-3", Name: "Cai", Tier: "bronze", Product: "p-9", Qty: 4},
		{Order: "o-5", Customer: "c-2", Tier: "unknown", Product: "p-2", ProductName: "Mug", Qty: 1, Total: 450},
		{Order: "o-6", Customer: "c-1", Name: "Ana", Tier: "platinum", Product: "p-1", ProductName: "Kettle", Qty: 1, Total: 2500},
		{Order: "o-7", Customer: "c-1", Name: "Ana", Tier: "platinum", Product: "p-2", Qty: 1},
	}
	if len(got) != len(want) {
		t.Fatalf("%d enriched orders %+v, want %d", len(got), got, len(want))
	}
	for i, w := range want {
		if got[i].Key != w.Customer || got[i].Value != w || got[i].Tombstone {
			t.Errorf("enriched order %d = %s %+v, want %+v", i, got[i].Key, got[i].Value, w)
		}
		if ts := at(10 + i); i < 4 && !got[i].Timestamp.Equal(ts) {
			t.Errorf("enriched order %d at %v, want the order's %v", i, got[i].Timestamp, ts)
		}
	}
	// Three customers, c-2 deleted, c-1 updated; the tombstone of c-8,
	// which the table did not hold, changes nothing but is passed on, as
	// Kafka Streams passes it.
	if customerCalls != 6 || enrichedCalls != len(want) {
		t.Errorf("probes called %d and %d times, want 6 and %d", customerCalls, enrichedCalls, len(want))
	}
	if _, found, err := weirtest.KeyValueStore(d, "customers", serde.String(), serde.JSON[Customer]()).Get("c-2"); err != nil || found {
		t.Errorf("store customers still holds c-2 (%v)", err)
	}
}

func TestOrderThatDoesNotDeserializeStops(t *testing.T) {
	t.Parallel()
	o, _ := parseFlags(nil)
	for _, value := range []string{`{"id": "o-1", "product": "p-1", "qty": 1.5}`, `not json`} {
		d, err := weirtest.New(Topology(o.params(), probes{}), weirtest.Config{})
		if err != nil {
			t.Fatal(err)
		}
		err = weirtest.Input(d, o.orders, serde.String(), serde.String()).Pipe("c-1", value, time.UnixMilli(0))
		var fe *serde.FormatError
		if !errors.As(err, &fe) {
			t.Errorf("order %s: %v, want a serde.FormatError", value, err)
		}
		d.Close()
	}
	d, err := weirtest.New(Topology(o.params(), probes{}), weirtest.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	// An order without a value is a tombstone of the stream, which the
	// join skips, as Kafka Streams' drops a null value.
	if err := weirtest.Input(d, o.orders, serde.String(), serde.String()).PipeTombstone("c-1", time.UnixMilli(0)); err != nil {
		t.Errorf("order without a value: %v, want it skipped", err)
	}
}

func TestProductThatDoesNotDeserializeStopsItsOrders(t *testing.T) {
	t.Parallel()
	o, _ := parseFlags(nil)
	d, err := weirtest.New(Topology(o.params(), probes{}), weirtest.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	// A global table stores the record as it is: no error yet.
	if err := weirtest.Input(d, o.products, serde.String(), serde.String()).Pipe("p-1", `{"name": "Mug", "price": "4.50"}`, time.UnixMilli(0)); err != nil {
		t.Fatalf("product: %v", err)
	}
	orders := weirtest.Input(d, o.orders, serde.String(), serde.String())
	err = orders.Pipe("c-1", `{"id": "o-1", "product": "p-1", "qty": 1}`, time.UnixMilli(1))
	var re *weir.RecordError
	if !errors.As(err, &re) || re.Node != "join-products" || re.Topic != o.orders {
		t.Errorf("order of the bad product: %v, want a weir.RecordError of node join-products on %s", err, o.orders)
	}
}

func TestOrderWithoutKeyIsWrittenWithoutCustomer(t *testing.T) {
	t.Parallel()
	o, _ := parseFlags(nil)
	d, err := weirtest.New(Topology(o.params(), probes{}), weirtest.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := weirtest.Input(d, o.customers, serde.String(), serde.String()).Pipe("", `{"name": "Nobody", "tier": "gold"}`, time.UnixMilli(0)); err != nil {
		t.Fatal(err)
	}
	if err := weirtest.Input(d, o.orders, serde.String(), serde.String()).PipeNullKey(`{"id": "o-1", "product": "p-1", "qty": 1}`, time.UnixMilli(1)); err != nil {
		t.Fatal(err)
	}
	got, err := weirtest.Output(d, o.output, serde.Bytes(), serde.JSON[Enriched]()).ReadAll()
	want := Enriched{Order: "o-1", Tier: UnknownTier, Product: "p-1", Qty: 1}
	if err != nil || len(got) != 1 || got[0].Key != nil || got[0].Value != want {
		t.Errorf("enriched %+v, %v; want one record with a null key and %+v", got, err, want)
	}
}

// TestEmbeddedRun runs the example as `go run ./enrich` does and checks
// the enriched orders it writes and what it prints.
func TestEmbeddedRun(t *testing.T) {
	o, _ := parseFlags(nil)
	cluster, err := kafka.StartEmbedded(kafkaio.DefaultPartitions, o.orders, o.customers, o.products, o.output)
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	cfg, err := config(o)
	if err != nil {
		t.Fatal(err)
	}
	r, err := enrichSample(cluster.Brokers(), o, cfg)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]Enriched{}
	for _, rec := range r.enriched {
		var e Enriched
		if err := json.Unmarshal(rec.Value, &e); err != nil {
			t.Fatalf("%s: %v", rec.Value, err)
		}
		if string(rec.Key) != e.Customer {
			t.Errorf("order %s keyed %q, want its customer %q", e.Order, rec.Key, e.Customer)
		}
		got[e.Order] = e
	}
	for _, w := range []Enriched{
		{Order: "o-1", Customer: "c-1001", Name: "Ana Ruiz", Tier: "gold", Product: "p-10", ProductName: "Espresso beans 1 kg", Qty: 2, Total: 4900},
		{Order: "o-3", Customer: "c-1003", Name: "Chen Wei", Tier: "silver", Product: "p-12", ProductName: "Milk jug", Qty: 3, Total: 3825},
		{Order: "o-5", Customer: "c-1009", Tier: "unknown", Product: "p-10", ProductName: "Espresso beans 1 kg", Qty: 1, Total: 2450},
		{Order: "o-6", Customer: "c-1002", Name: "Ben Okafor", Tier: "silver", Product: "p-99", Qty: 2},
		{Order: "o-7", Customer: "c-1004", Tier: "unknown", Product: "p-12", ProductName: "Milk jug", Qty: 1, Total: 1275},
		{Order: "o-10", Customer: "c-1002", Name: "Ben Okafor", Tier: "silver", Product: "p-13", ProductName: "Paper filters x100", Qty: 10, Total: 3990},
	} {
		if got[w.Order] != w {
			t.Errorf("order %s enriched as %+v, want %+v", w.Order, got[w.Order], w)
		}
	}
	if len(got) != len(sampleOrders()) {
		t.Errorf("%d distinct orders enriched, want %d", len(got), len(sampleOrders()))
	}
	var out bytes.Buffer
	printReport(&out, o, r)
	for _, want := range []string{
		"enriched 10 orders: 2 with an unknown customer, 1 with an unknown product",
		"  o-1   c-1001  Ana Ruiz           gold      2 x p-10  Espresso beans 1 kg      49.00\n",
		"  o-5   c-1009  (unknown customer) unknown   1 x p-10  Espresso beans 1 kg      24.50\n",
		"  o-6   c-1002  Ben Okafor         silver    2 x p-99  (unknown product)         0.00\n",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, out.String())
		}
	}
	// In event-time order: o-10 is the last order.
	if lines := strings.Split(strings.TrimSpace(out.String()), "\n"); !strings.HasPrefix(lines[len(lines)-1], "  o-10 ") {
		t.Errorf("report does not end with o-10:\n%s", out.String())
	}
}

func TestCents(t *testing.T) {
	t.Parallel()
	for c, want := range map[int64]string{0: "0.00", 5: "0.05", 1999: "19.99", -2500: "-25.00", -7: "-0.07"} {
		if got := cents(c); got != want {
			t.Errorf("cents(%d) = %s, want %s", c, got, want)
		}
	}
}

// TestGuaranteeIsExactlyOnceByDefault checks what the README promises of
// the default configuration.
func TestGuaranteeIsExactlyOnceByDefault(t *testing.T) {
	t.Parallel()
	o, _ := parseFlags(nil)
	cfg, err := config(o)
	if err != nil || cfg.Guarantee != weir.ExactlyOnce || cfg.ApplicationID != "enrich" {
		t.Errorf("config = %+v, %v; want exactly once, application id enrich", cfg, err)
	}
}
