package weirtest_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/weirstream/weir/kstream"
	"github.com/weirstream/weir/schema"
	"github.com/weirstream/weir/serde"
	"github.com/weirstream/weir/weirtest"
)

type total struct {
	N    int64  `avro:"n"`
	Last string `avro:"last"`
}

const (
	totalV1 = `{"type":"record","name":"Total","fields":[{"name":"n","type":"long"},{"name":"last","type":"string"}]}`
	// v2 adds a field with a default: it reads v1's records.
	totalV2 = `{"type":"record","name":"Total","fields":[{"name":"n","type":"long"},{"name":"last","type":"string"},{"name":"region","type":"string","default":""}]}`
	// v3 changes the type of n: it cannot read what v1 or v2 wrote.
	totalV3 = `{"type":"record","name":"Total","fields":[{"name":"n","type":"string"},{"name":"last","type":"string"}]}`
)

// An Avro store runs in the driver with the in-memory registry: what it
// keeps reads back, through the registry's ids.
func TestRegistryServesAnAvroStore(t *testing.T) {
	reg := weirtest.NewRegistry()
	totals, err := serde.Avro[total](serde.AvroConfig{Registry: reg, Schema: totalV1})
	if err != nil {
		t.Fatal(err)
	}
	b := kstream.NewBuilder()
	b.Stream("in", "orders", serde.String(), serde.String()).GroupByKey().
		Aggregate("totals", func() total { return total{} }, func(_ string, v string, a total) total { return total{N: a.N + 1, Last: v} }, totals).
		ToStream().To("out", serde.String(), totals)
	d, err := weirtest.New(b, weirtest.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	in := weirtest.Input(d, "orders", serde.String(), serde.String())
	for i, v := range []string{"a", "b", "c"} {
		if err := in.Pipe("alice", v, time.UnixMilli(int64(1000+i))); err != nil {
			t.Fatal(err)
		}
	}
	got, found, err := weirtest.KeyValueStore(d, "totals", serde.String(), totals).Get("alice")
	if err != nil || !found || got != (total{N: 3, Last: "c"}) {
		t.Fatalf("store: %+v, %v, %v; want {3 c}", got, found, err)
	}
	recs, err := weirtest.Output(d, "out", serde.String(), totals).ReadAll()
	if err != nil || len(recs) != 3 || recs[2].Value != (total{N: 3, Last: "c"}) {
		t.Fatalf("output: %+v, %v", recs, err)
	}
}

// The registry refuses what a real one refuses at the subject's level,
// and gives a schema the id it has in every subject.
func TestRegistryChecksCompatibility(t *testing.T) {
	ctx := context.Background()
	reg := weirtest.NewRegistry()
	v1, err := reg.Register(ctx, "s-value", totalV1)
	if err != nil || v1.ID != 1 || v1.Version != 1 {
		t.Fatalf("first registration: %+v, %v", v1, err)
	}
	v2, err := reg.Register(ctx, "s-value", totalV2)
	if err != nil || v2.Version != 2 {
		t.Fatalf("a field with a default: %+v, %v", v2, err)
	}
	if again, err := reg.Register(ctx, "s-value", totalV1); err != nil || again != v1 {
		t.Fatalf("v1 again: %+v, %v; want %+v", again, err, v1)
	}
	var inc *schema.IncompatibleError
	if _, err := reg.Register(ctx, "s-value", totalV3); !errors.As(err, &inc) || inc.Subject != "s-value" {
		t.Fatalf("a changed field type: %v; want a *schema.IncompatibleError", err)
	}
	reg.SetCompatibility("s-value", schema.None)
	if _, err := reg.Register(ctx, "s-value", totalV3); err != nil {
		t.Fatalf("under NONE: %v", err)
	}
	if other, err := reg.Register(ctx, "t-value", totalV1); err != nil || other.ID != v1.ID || other.Version != 1 {
		t.Fatalf("v1 under another subject: %+v, %v; want id %d, version 1", other, err, v1.ID)
	}
	if text, err := reg.SchemaByID(ctx, v2.ID); err != nil || text != totalV2 {
		t.Fatalf("SchemaByID(%d) = %q, %v", v2.ID, text, err)
	}
	if _, err := reg.SchemaByID(ctx, 99); !errors.Is(err, schema.ErrNotFound) {
		t.Fatalf("an unknown id: %v; want schema.ErrNotFound", err)
	}
	if vs := reg.Versions("s-value"); len(vs) != 3 {
		t.Fatalf("versions of s-value: %v; want 3", vs)
	}
}
