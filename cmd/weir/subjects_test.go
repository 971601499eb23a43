package main

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/kstream"
	"github.com/weirstream/weir/schema"
	"github.com/weirstream/weir/serde"
	"github.com/weirstream/weir/weirtest/kafka"
)

// The Avro aggregate of TestForkAndRescaleCopyTheSchemaHistory, in two
// versions; totalV3 reads "last" without a default, so it can read what
// v2 wrote but not what v1 wrote: BACKWARD_TRANSITIVE refuses it once v1
// is in the subject's history, an empty subject takes it.
const (
	totalV1 = `{"type":"record","name":"Total","fields":[{"name":"n","type":"long"}]}`
	totalV2 = `{"type":"record","name":"Total","fields":[{"name":"n","type":"long"},{"name":"last","type":"string","default":""}]}`
	totalV3 = `{"type":"record","name":"Total","fields":[{"name":"n","type":"long"},{"name":"last","type":"string"}]}`
)

type totalOne struct {
	N int64 `avro:"n"`
}

type totalTwo struct {
	N    int64  `avro:"n"`
	Last string `avro:"last"`
}

// totals counts in's records per key in the Avro store store (schema
// text, Go type A) and writes each count to out as an int64.
func totals[A any](t *testing.T, reg *schema.Client, store, in, out, text string, add func(A, string) A, n func(A) int64) *kstream.Builder {
	t.Helper()
	values, err := serde.Avro[A](serde.AvroConfig{Registry: reg, Schema: text})
	if err != nil {
		t.Fatal(err)
	}
	b := kstream.NewBuilder()
	b.Stream("in", in, serde.String(), serde.String()).GroupByKey().
		Aggregate(store, func() A { var a A; return a }, func(_ string, v string, a A) A { return add(a, v) }, values).
		ToStream().MapValues(n).To(out, serde.String(), serde.Int64())
	return b
}

// A fork and a rescale copy the history of the stores' registry subjects
// to the new id: an upgrade the source's history refuses is refused on
// the copy too (on an empty subject it would pass the start check and
// fail at the first record that v1 wrote), and the copy runs on with the
// schemas it was written with. Without a registry, both refuse before
// they change anything.
func TestForkAndRescaleCopyTheSchemaHistory(t *testing.T) {
	t.Parallel()
	c := kafka.Cluster(t)
	reg, err := schema.New(schema.Config{URL: c.RegistryURL})
	if err != nil {
		t.Fatal(err)
	}
	in, out := c.Name(t, "sh-in"), c.Name(t, "sh-out")
	from, forked, rescaled := c.Name(t, "sh-app"), c.Name(t, "sh-fork"), c.Name(t, "sh-rescaled")
	c.CreateTopic(t, in, 2, nil)
	c.CreateTopic(t, out, 2, nil)
	cleanupApps(t, c, from, forked, rescaled)
	ctx := context.Background()
	v1 := func() *kstream.Builder {
		return totals(t, reg, "totals", in, out, totalV1, func(a totalOne, _ string) totalOne { a.N++; return a }, func(a totalOne) int64 { return a.N })
	}
	v2 := func() *kstream.Builder {
		return totals(t, reg, "totals", in, out, totalV2, func(a totalTwo, v string) totalTwo { a.N++; a.Last = v; return a }, func(a totalTwo) int64 { return a.N })
	}
	v3 := func() *kstream.Builder {
		return totals(t, reg, "totals", in, out, totalV3, func(a totalTwo, v string) totalTwo { a.N++; a.Last = v; return a }, func(a totalTwo) int64 { return a.N })
	}
	config := func(id string) weir.Config {
		cfg := rescaleConfig(c, id, t.TempDir())
		cfg.Registry = schema.Config{URL: c.RegistryURL}
		return cfg
	}

	// The source writes its state with v1, then with v2.
	ks := keys("k", 10)
	kafka.Produce(t, c, keyed(in, time.Now(), ks...)...)
	stop := runApp(t, v1(), config(from))
	counts(t, c, out, serde.String(), map[string]int64{ks[0]: 1, ks[9]: 1})
	stop()
	kafka.Produce(t, c, keyed(in, time.Now(), ks...)...)
	stop = runApp(t, v2(), config(from))
	counts(t, c, out, serde.String(), map[string]int64{ks[0]: 2, ks[9]: 2})
	stop()
	subject := schema.StoreSubject(from, "totals", schema.Value)
	if vs, err := reg.Versions(ctx, subject); err != nil || len(vs) != 2 {
		t.Fatalf("subject %s holds versions %v (%v); want 2", subject, vs, err)
	}

	brokers := strings.Join(c.Brokers, ",")
	for _, cmd := range [][]string{
		{"fork", "-brokers", brokers, "-from", from, "-to", forked},
		{"rescale", "-brokers", brokers, "-from", from, "-to", forked, "-partitions", "4"},
	} {
		code, _, errOut := weirCmd(t, append(cmd, "-registry", "")...)
		if code != exitUsage || !strings.Contains(errOut, "-registry") || !strings.Contains(errOut, subject) {
			t.Fatalf("%s without a registry = %d: %s", cmd[0], code, errOut)
		}
		if topicExists(t, &app{c: c}, forked+"-topology") {
			t.Fatalf("%s without a registry created the new id's topology topic", cmd[0])
		}
	}
	copied := func(id string) {
		t.Helper()
		sub := schema.StoreSubject(id, "totals", schema.Value)
		level, err := reg.Compatibility(ctx, sub)
		if err != nil || level != schema.BackwardTransitive {
			t.Errorf("subject %s: level %s (%v); want %s", sub, level, err, schema.BackwardTransitive)
		}
		for i, want := range []string{totalV1, totalV2} {
			r, err := reg.Version(ctx, sub, i+1)
			if err != nil {
				t.Fatalf("version %d of %s: %v", i+1, sub, err)
			}
			if same, err := sameSchema(r.Schema, want); err != nil || !same {
				t.Errorf("version %d of %s is %s; want %s", i+1, sub, r.Schema, want)
			}
		}
		// v3 is refused before the copy's first record, as it is on the source.
		w, err := weir.New(v3(), config(id))
		if err != nil {
			t.Fatal(err)
		}
		runCtx, cancel := context.WithTimeout(ctx, time.Minute)
		err = w.Run(runCtx)
		cancel()
		var se *weir.SchemaError
		if !errors.As(err, &se) || se.Subject != sub {
			t.Fatalf("%s with v3: Run = %v; want a *weir.SchemaError for subject %s", id, err, sub)
		}
	}

	code, outText, errOut := weirCmd(t, "fork", "-brokers", brokers, "-from", from, "-to", forked, "-registry", c.RegistryURL)
	if code != exitOK || !strings.Contains(outText, "copied subject "+subject) {
		t.Fatalf("fork = %d: %s%s", code, outText, errOut)
	}
	copied(forked)
	// The fork runs on with v2: its state, written with v1 and v2, reads.
	kafka.Produce(t, c, keyed(in, time.Now(), ks...)...)
	stop = runApp(t, v2(), config(forked))
	counts(t, c, out, serde.String(), map[string]int64{ks[0]: 3, ks[9]: 3})
	stop()

	// The source consumes the same records (into an output of its own),
	// so that nothing is left unread for the rescale.
	out2 := c.Name(t, "sh-out2")
	c.CreateTopic(t, out2, 2, nil)
	stop = runApp(t, totals(t, reg, "totals", in, out2, totalV2, func(a totalTwo, v string) totalTwo { a.N++; a.Last = v; return a }, func(a totalTwo) int64 { return a.N }), config(from))
	counts(t, c, out2, serde.String(), map[string]int64{ks[0]: 3, ks[9]: 3})
	stop()
	code, outText, errOut = weirCmd(t, "rescale", "-brokers", brokers, "-from", from, "-to", rescaled, "-partitions", "4", "-registry", c.RegistryURL)
	if code != exitOK || !strings.Contains(outText, "copied subject "+subject) {
		t.Fatalf("rescale = %d: %s%s", code, outText, errOut)
	}
	copied(rescaled)
}

// rename-store gives a stopped application's store a new name with its
// state and schema history: the version that calls the store by its new
// name starts (no removed store refused), continues its counts, and is
// refused an upgrade the old subject's history refuses.
func TestRenameStoreKeepsItsState(t *testing.T) {
	t.Parallel()
	c := kafka.Cluster(t)
	reg, err := schema.New(schema.Config{URL: c.RegistryURL})
	if err != nil {
		t.Fatal(err)
	}
	in, out, id := c.Name(t, "rn-in"), c.Name(t, "rn-out"), c.Name(t, "rn-app")
	c.CreateTopic(t, in, 2, nil)
	c.CreateTopic(t, out, 2, nil)
	cleanupApps(t, c, id)
	one := func(a totalOne, _ string) totalOne { a.N++; return a }
	two := func(a totalTwo, v string) totalTwo { a.N++; a.Last = v; return a }
	nOne, nTwo := func(a totalOne) int64 { return a.N }, func(a totalTwo) int64 { return a.N }
	cfg := func() weir.Config {
		cfg := rescaleConfig(c, id, t.TempDir())
		cfg.Registry = schema.Config{URL: c.RegistryURL}
		return cfg
	}
	ks := keys("r", 10)
	kafka.Produce(t, c, keyed(in, time.Now(), ks...)...)
	stop := runApp(t, totals(t, reg, "totals", in, out, totalV1, one, nOne), cfg())
	counts(t, c, out, serde.String(), map[string]int64{ks[0]: 1, ks[9]: 1})
	stop()
	kafka.Produce(t, c, keyed(in, time.Now(), ks...)...)
	stop = runApp(t, totals(t, reg, "totals", in, out, totalV2, two, nTwo), cfg())
	counts(t, c, out, serde.String(), map[string]int64{ks[0]: 2, ks[9]: 2})
	stop()

	brokers := strings.Join(c.Brokers, ",")
	if code, _, errOut := weirCmd(t, "rename-store", "-brokers", brokers, "-app", id, "-from", "nope", "-to", "x"); code != exitRefused || !strings.Contains(errOut, "no store") {
		t.Fatalf("rename of an unknown store = %d: %s", code, errOut)
	}
	code, outText, errOut := weirCmd(t, "rename-store", "-brokers", brokers, "-app", id, "-from", "totals", "-to", "sums", "-registry", c.RegistryURL)
	if code != exitOK || !strings.Contains(outText, "copied "+id+"-sums-changelog") || !strings.Contains(outText, "copied subject "+schema.StoreSubject(id, "totals", schema.Value)) {
		t.Fatalf("rename-store = %d: %s%s", code, outText, errOut)
	}
	// v3 is refused under the new name as under the old.
	w, err := weir.New(totals(t, reg, "sums", in, out, totalV3, two, nTwo), cfg())
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithTimeout(context.Background(), time.Minute)
	err = w.Run(runCtx)
	cancel()
	var se *weir.SchemaError
	if !errors.As(err, &se) || se.Subject != schema.StoreSubject(id, "sums", schema.Value) {
		t.Fatalf("v3 under the new name: Run = %v; want a *weir.SchemaError", err)
	}
	// The version with the new name continues the counts.
	kafka.Produce(t, c, keyed(in, time.Now(), ks...)...)
	stop = runApp(t, totals(t, reg, "sums", in, out, totalV2, two, nTwo), cfg())
	defer stop()
	want := map[string]int64{}
	for _, k := range ks {
		want[k] = 3
	}
	got := counts(t, c, out, serde.String(), want)
	for _, k := range ks {
		if s := got[k]; len(s) != 3 || s[2] != 3 {
			t.Fatalf("%s counted %v; want 1, 2, 3 (the state kept across the rename)", k, s)
		}
	}
}
