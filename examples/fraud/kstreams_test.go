package main

import (
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"testing"
	"time"

	"github.com/weirstream/weir/internal/kstreamsrun"
	"github.com/weirstream/weir/serde"
	"github.com/weirstream/weir/weirtest"
)

// TestAlertsAreKafkaStreams runs the topology and the same topology
// written with Kafka Streams (the conformance suite's runner, scenario
// "fraud", through its TopologyTestDriver) on the same logins, and
// compares the alerts record by record: the users, the windows, the
// counts and the timestamps (each window's largest, docs/semantics.md,
// "Result timestamps"), in order.
func TestAlertsAreKafkaStreams(t *testing.T) {
	t.Parallel()
	cases := map[string][]kstreamsrun.Record{"fraud.sample": nil}
	for _, l := range sampleLogins() {
		cases["fraud.sample"] = append(cases["fraud.sample"], loginRecord(l.user, l.value, l.at))
	}
	for seed := range uint64(5) {
		cases[fmt.Sprintf("fraud.seed-%d", seed)] = randomLogins(seed, 3000)
	}
	dir, err := filepath.Abs(filepath.Join("..", "..", "conformance", "kstreams"))
	if err != nil {
		t.Fatal(err)
	}
	ks, failed, err := kstreamsrun.Run(dir, t.TempDir(), cases)
	if err != nil {
		t.Fatal(err)
	}
	alerts := 0
	for name, in := range cases {
		if failed[name] != "" {
			t.Fatalf("%s: Kafka Streams failed: %s", name, failed[name])
		}
		got := runWeir(t, in)
		if msg := kstreamsrun.FirstDifference(got, ks[name], kstreamsrun.Equal); msg != "" {
			t.Errorf("%s: %s", name, msg)
		}
		alerts += len(got)
	}
	t.Logf("%d cases, %d alerts compared", len(cases), alerts)
	if alerts < 10 {
		t.Errorf("%d alerts in all cases: the inputs exercise too little", alerts)
	}
}

// loginRecord is a login on the runner's input topic "a"; an empty value
// is a record without one.
func loginRecord(user, value string, at time.Duration) kstreamsrun.Record {
	r := kstreamsrun.Record{Topic: "a", TS: at.Milliseconds()}
	if user != "" {
		r.Key = &user
	}
	if value != "" {
		r.Value = &value
	}
	return r
}

// randomLogins writes n logins of six users over about 20 minutes, from
// seed: mostly failures, some successes, logins without "ok", with a null
// one, records without a value or without a key, mostly in time order
// with some out of order and some later than the grace period.
func randomLogins(seed uint64, n int) []kstreamsrun.Record {
	rng := rand.New(rand.NewPCG(seed, seed+1))
	values := []string{fail, fail, fail, fail, ok, `{"ip": "192.0.2.1"}`, `{"ok": null}`, `{"ok": false, "x": 1}`, ""}
	var recs []kstreamsrun.Record
	now := time.Duration(0)
	for range n {
		now += time.Duration(rng.IntN(800)) * time.Millisecond
		at := now
		switch r := rng.IntN(20); {
		case r == 0:
			at -= time.Duration(rng.IntN(120)) * time.Second // often late
		case r < 3:
			at -= time.Duration(rng.IntN(8)) * time.Second // within grace
		}
		user := fmt.Sprintf("u%d", rng.IntN(6))
		if rng.IntN(50) == 0 {
			user = ""
		}
		recs = append(recs, loginRecord(user, values[rng.IntN(len(values))], max(at, 0)))
	}
	return recs
}

// runWeir pipes in through the topology with the default flags and the
// application's error policies (a login that is not JSON is skipped; the
// Kafka Streams side counts only what reads as a failure), and returns the
// alerts as the runner's records.
func runWeir(t *testing.T, in []kstreamsrun.Record) []kstreamsrun.Record {
	t.Helper()
	o, _ := parseFlags(nil)
	cfg, err := config(o)
	if err != nil {
		t.Fatal(err)
	}
	d, err := weirtest.New(Topology(o.params(), probes{}), weirtest.Config{DeserializationErrors: cfg.DeserializationErrors})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	topic := weirtest.Input(d, o.input, serde.Bytes(), serde.Bytes())
	bytesOf := func(p *string) []byte {
		if p == nil {
			return nil
		}
		return []byte(*p)
	}
	for i, r := range in {
		var err error
		if r.Value == nil {
			err = topic.PipeTombstone(bytesOf(r.Key), time.UnixMilli(r.TS))
		} else {
			err = topic.Pipe(bytesOf(r.Key), bytesOf(r.Value), time.UnixMilli(r.TS))
		}
		if err != nil {
			t.Fatalf("login %d (%s): %v", i, r, err)
		}
	}
	recs, err := weirtest.Output(d, o.output, serde.String(), serde.String()).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	out := make([]kstreamsrun.Record, 0, len(recs))
	for _, r := range recs {
		k, v := r.Key, r.Value
		out = append(out, kstreamsrun.Record{Key: &k, Value: &v, TS: r.Timestamp.UnixMilli()})
	}
	return out
}
