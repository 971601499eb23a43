package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

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
	want := options{input: "payments", output: "balances", appID: "payments", guarantee: "exactly_once", dedupTTL: 10 * time.Minute}
	if o != want {
		t.Errorf("defaults changed: %+v, want %+v", o, want)
	}
	o, err = parseFlags([]string{"-brokers", "a:1,b:2", "-input", "i", "-output", "o", "-app-id", "x", "-state-dir", "/s",
		"-guarantee", "at_least_once", "-dedup-ttl", "1h"})
	want = options{brokers: "a:1,b:2", input: "i", output: "o", appID: "x", stateDir: "/s", guarantee: "at_least_once", dedupTTL: time.Hour}
	if err != nil || o != want {
		t.Errorf("parseFlags = %+v, %v; want %+v", o, err, want)
	}
	for _, args := range [][]string{{"-dedup-ttl", "0s"}, {"-dedup-ttl", "1500us"}, {"extra"}} {
		if _, err := parseFlags(args); err == nil {
			t.Errorf("parseFlags(%q) accepted", args)
		}
	}
}

func TestDuplicatesAreCountedOnce(t *testing.T) {
	t.Parallel()
	o, _ := parseFlags(nil) // -dedup-ttl 10m
	d, err := weirtest.New(Topology(o.params(), probes{}), weirtest.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	in := weirtest.Input(d, o.input, serde.String(), serde.String())
	out := weirtest.Output(d, o.output, serde.String(), serde.JSON[Balance]())
	m := time.Minute
	for i, p := range []struct {
		account string
		at      time.Duration
		value   string
	}{
		{"a", 0, `{"id": "p1", "amount": 1000}`},
		{"a", 1 * m, `{"id": "p2", "amount": -300}`},
		{"a", 2 * m, `{"id": "p1", "amount": 1000}`},  // duplicate: dropped
		{"b", 3 * m, `{"id": "p1", "amount": 50}`},    // another account's p1: counted
		{"a", 4 * m, `{"id": "p2", "amount": -999}`},  // duplicate id, other amount: dropped (and logged)
		{"a", 5 * m, `{"amount": 7}`},                 // no id: dropped (and logged)
		{"b", 9 * m, `{"id": "p1", "amount": 50}`},    // duplicate, 6 min after: dropped
		{"a", 11 * m, `{"id": "p3", "amount": 1}`},    // stream time 11 min: a/p1 (written at 0) and a/p2 (1 min) expired
		{"a", 11 * m, `{"id": "p1", "amount": 1000}`}, // p1 again, after the TTL: counted again
		{"b", 12 * m, `{"id": "p1", "amount": 50}`},   // b/p1 was written at 3 min: still remembered
	} {
		if err := in.Pipe(p.account, p.value, time.UnixMilli(0).Add(p.at)); err != nil {
			t.Fatalf("payment %d: %v", i, err)
		}
	}
	got, err := out.ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	want := []Balance{{"a", 1000}, {"a", 700}, {"b", 50}, {"a", 701}, {"a", 1701}}
	if len(got) != len(want) {
		t.Fatalf("balances %+v, want %+v", got, want)
	}
	for i, w := range want {
		if got[i].Key != w.Account || got[i].Value != w {
			t.Errorf("balance %d = %s %+v, want %+v", i, got[i].Key, got[i].Value, w)
		}
	}
	n, _, err := weirtest.KeyValueStore(d, "balances", serde.String(), serde.Int64()).Get("a")
	if err != nil || n != 1701 {
		t.Errorf("store balances: a = %d, %v; want 1701", n, err)
	}
}

// TestEmbeddedRun runs the example as `go run ./payments` does and checks
// the balances it writes and what it prints.
func TestEmbeddedRun(t *testing.T) {
	o, _ := parseFlags(nil)
	cluster, err := kafka.StartEmbedded(4, o.input, o.output)
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	cfg, err := config(o)
	if err != nil {
		t.Fatal(err)
	}
	r, err := balanceSample(cluster.Brokers(), o, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.balances) != 10 {
		t.Errorf("%d balances written, want 10 (14 payments, 4 duplicates)", len(r.balances))
	}
	var out bytes.Buffer
	printReport(&out, o, r)
	for _, want := range []string{
		"dropped 4 duplicates",
		`{"account":"acc-1001","balance":9499}`,
		`{"account":"acc-1002","balance":4050}`,
		`{"account":"acc-1003","balance":60000}`,
		`{"account":"acc-1004","balance":1734}`,
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %s:\n%s", want, out.String())
		}
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

func TestPaymentWithoutKeyIsDropped(t *testing.T) {
	t.Parallel()
	o, _ := parseFlags(nil)
	reg := prometheus.NewRegistry()
	d, err := weirtest.New(Topology(o.params(), probes{}), weirtest.Config{Metrics: reg})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	in := weirtest.Input(d, o.input, serde.String(), serde.String())
	if err := in.PipeNullKey(`{"id": "p1", "amount": 5}`, time.UnixMilli(0)); err != nil {
		t.Fatal(err)
	}
	if err := in.Pipe("a", `{"id": "p1", "amount": 7}`, time.UnixMilli(1)); err != nil {
		t.Fatal(err)
	}
	got, err := weirtest.Output(d, o.output, serde.String(), serde.JSON[Balance]()).ReadAll()
	if err != nil || len(got) != 1 || got[0].Value != (Balance{"a", 7}) {
		t.Errorf("balances %+v, %v; want a's 7 only", got, err)
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var dropped float64
	for _, f := range families {
		if f.GetName() == "weir_records_dropped_total" {
			for _, m := range f.GetMetric() {
				dropped += m.GetCounter().GetValue()
			}
		}
	}
	if dropped != 1 {
		t.Errorf("weir_records_dropped_total = %v, want 1", dropped)
	}
}
