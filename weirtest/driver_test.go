package weirtest_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/weirstream/weir/processor"
	"github.com/weirstream/weir/serde"
	"github.com/weirstream/weir/weirtest"
)

// splitTopology is in -> split (one record per word, keyed by the word)
// -> repartition "by-word" -> tag (value "<task>:<word>") -> out, with a
// second repartition hop "again" behind tag feeding out2.
func splitTopology() *processor.Topology {
	t := processor.NewTopology()
	in := t.AddSource("in", "in", serde.String(), serde.String())
	split := t.AddProcessor("split", processor.Func(func(ctx processor.Context[string, string], rec processor.Record[string, string]) error {
		for _, w := range strings.Fields(rec.Value) {
			if err := ctx.Forward(processor.Record[string, string]{Key: w, Value: w, Timestamp: rec.Timestamp, Headers: rec.Headers}); err != nil {
				return err
			}
		}
		return nil
	}), in)
	byWord := t.AddRepartition("by-word", serde.String(), serde.String(), split)
	tag := t.AddProcessor("tag", processor.Func(func(ctx processor.Context[string, string], rec processor.Record[string, string]) error {
		rec.Value = ctx.TaskID() + ":" + rec.Value
		return ctx.Forward(rec)
	}), byWord)
	t.AddSink("out", "out", serde.String(), serde.String(), tag)
	again := t.AddRepartition("again", serde.String(), serde.String(), tag)
	t.AddSink("out2", "out2", serde.String(), serde.String(), again)
	return t
}

func values(t *testing.T, recs []processor.Record[string, string], err error) []string {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, r := range recs {
		out = append(out, r.Key+"="+r.Value)
	}
	return out
}

// TestRepartitionRecordsAreRoutedInside: records written to a
// repartition topic are processed by the task of the sub-topology that
// reads it, in the order they were written, before Pipe returns.
func TestRepartitionRecordsAreRoutedInside(t *testing.T) {
	t.Parallel()
	d, err := weirtest.New(splitTopology(), weirtest.Config{ApplicationID: "app"})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	h := processor.Header{Key: "h", Value: []byte("1")}
	if err := weirtest.Input(d, "in", serde.String(), serde.String()).Pipe("line", "a b", time.UnixMilli(7), h); err != nil {
		t.Fatal(err)
	}
	out := weirtest.Output(d, "out", serde.String(), serde.String())
	recs, err := out.ReadAll()
	if got, want := values(t, recs, err), []string{"a=1_0:a", "b=1_0:b"}; !slices.Equal(got, want) {
		t.Errorf("out = %v, want %v", got, want)
	}
	for _, r := range recs {
		if r.Timestamp.UnixMilli() != 7 || len(r.Headers) != 1 || r.Headers[0].Key != "h" {
			t.Errorf("record %+v lost its timestamp or headers", r)
		}
	}
	recs, err = weirtest.Output(d, "out2", serde.String(), serde.String()).ReadAll()
	if got, want := values(t, recs, err), []string{"a=1_0:a", "b=1_0:b"}; !slices.Equal(got, want) {
		t.Errorf("out2 = %v, want %v", got, want)
	}
	// ReadAll consumes.
	if recs, err := out.ReadAll(); err != nil || len(recs) != 0 {
		t.Errorf("second ReadAll = %v, %v; want nothing", recs, err)
	}
	// Internal topics cannot be written from outside.
	if err := weirtest.Input(d, "app-by-word-repartition", serde.String(), serde.String()).Pipe("x", "x", time.UnixMilli(8)); err == nil {
		t.Error("Pipe to a repartition topic succeeded")
	}
}

// counter counts records per key in store "counts" and forwards nothing.
type counter struct {
	spec   *processor.KeyValueSpec[string, int64]
	counts processor.KeyValueStore[string, int64]
	closed *bool
}

func (c *counter) Init(ctx processor.Context[string, int64]) (err error) {
	c.counts, err = c.spec.Open(ctx)
	return err
}

func (c *counter) Process(_ processor.Context[string, int64], rec processor.Record[string, string]) error {
	n, _, err := c.counts.Get(rec.Key)
	if err != nil {
		return err
	}
	return c.counts.Put(rec.Key, n+1)
}

func (c *counter) Close() error {
	*c.closed = true
	return nil
}

func TestKeyValueStoreAndClose(t *testing.T) {
	t.Parallel()
	spec := processor.KeyValue("counts", serde.String(), serde.Int64())
	closed := false
	top := processor.NewTopology()
	in := top.AddSource("in", "in", serde.String(), serde.String())
	c := top.AddProcessor("count", func() processor.Processor[string, string, string, int64] {
		return &counter{spec: spec, closed: &closed}
	}, in)
	top.AddStore(spec, c)
	d, err := weirtest.New(top, weirtest.Config{})
	if err != nil {
		t.Fatal(err)
	}
	pipe := weirtest.Input(d, "in", serde.String(), serde.String())
	for _, k := range []string{"x", "y", "x"} {
		if err := pipe.Pipe(k, "", time.UnixMilli(1)); err != nil {
			t.Fatal(err)
		}
	}
	view := weirtest.KeyValueStore(d, "counts", serde.String(), serde.Int64())
	if n, found, err := view.Get("x"); err != nil || !found || n != 2 {
		t.Errorf("Get(x) = %d, %v, %v; want 2, true", n, found, err)
	}
	if _, found, err := view.Get("z"); err != nil || found {
		t.Errorf("Get(z) found %v, %v; want a miss", found, err)
	}
	all, err := view.All()
	if want := []weirtest.Entry[string, int64]{{Key: "x", Value: 2}, {Key: "y", Value: 1}}; err != nil || !slices.Equal(all, want) {
		t.Errorf("All = %v, %v; want %v", all, err, want)
	}
	if _, _, err := weirtest.KeyValueStore(d, "nope", serde.String(), serde.Int64()).Get("x"); err == nil {
		t.Error("Get on a missing store succeeded")
	}
	if err := d.Close(); err != nil || !closed {
		t.Errorf("Close = %v, processor closed %v", err, closed)
	}
	if err := d.Close(); err != nil {
		t.Errorf("second Close = %v", err)
	}
	if err := pipe.Pipe("x", "", time.UnixMilli(2)); err == nil {
		t.Error("Pipe after Close succeeded")
	}
}

func TestNewRejectsAnInvalidTopology(t *testing.T) {
	t.Parallel()
	if _, err := weirtest.New(processor.NewTopology(), weirtest.Config{}); err == nil {
		t.Error("New accepted an empty topology")
	}
	if _, err := weirtest.New(nil, weirtest.Config{}); err == nil {
		t.Error("New accepted nil")
	}
}
