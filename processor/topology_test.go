package processor

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/weirstream/weir/serde"
)

var update = flag.Bool("update", false, "rewrite golden files")

func split() func() Processor[string, string, string, string] {
	return Func(func(ctx Context[string, string], rec Record[string, string]) error {
		for _, w := range strings.Fields(rec.Value) {
			if err := ctx.Forward(Record[string, string]{Key: w, Value: w, Timestamp: rec.Timestamp}); err != nil {
				return err
			}
		}
		return nil
	})
}

func count() func() Processor[string, string, string, int64] {
	return Func(func(ctx Context[string, int64], rec Record[string, string]) error {
		return ctx.Forward(Record[string, int64]{Key: rec.Key, Value: 1, Timestamp: rec.Timestamp})
	})
}

func wordCountTopology() *Topology {
	t := NewTopology()
	lines := t.AddSource("lines", "text-input", serde.String(), serde.String())
	words := t.AddProcessor("split", split(), lines)
	byWord := t.AddRepartition("words-by-word", serde.String(), serde.String(), words)
	counts := t.AddProcessor("count", count(), byWord)
	t.AddSink("out", "word-counts", serde.String(), serde.Int64(), counts)
	return t
}

func TestDescribeGolden(t *testing.T) {
	got := wordCountTopology().Describe()
	golden := filepath.Join("testdata", "wordcount.golden")
	if *update {
		if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("description changed (go test -update rewrites it):\n got:\n%s\nwant:\n%s", got, want)
	}
}

func TestSubtopologiesSplitAtRepartition(t *testing.T) {
	t.Parallel()
	g, err := wordCountTopology().graph()
	if err != nil {
		t.Fatal(err)
	}
	subs := g.Subtopologies()
	if len(subs) != 2 {
		t.Fatalf("got %d sub-topologies, want 2:\n%s", len(subs), g.Describe())
	}
	names := func(i int) []string {
		var out []string
		for _, n := range subs[i].Nodes {
			out = append(out, n.Name)
		}
		return out
	}
	if got := strings.Join(names(0), ","); got != "lines,split,words-by-word-sink" {
		t.Errorf("sub-topology 0 = %s", got)
	}
	if got := strings.Join(names(1), ","); got != "words-by-word-source,count,out" {
		t.Errorf("sub-topology 1 = %s", got)
	}
	if src := subs[1].Sources(); len(src) != 1 || !src[0].Internal || src[0].Topic != "words-by-word" {
		t.Errorf("sub-topology 1 does not read the repartition topic: %+v", src)
	}
}

func TestValidateReportsEveryProblem(t *testing.T) {
	t.Parallel()
	other := NewTopology()
	foreign := other.AddSource("foreign", "elsewhere", serde.String(), serde.String())

	tp := NewTopology()
	a := tp.AddSource("a", "in", serde.String(), serde.String())
	tp.AddSource("a", "in2", serde.String(), serde.String())                // duplicate name
	tp.AddSource("b", "in", serde.String(), serde.String())                 // topic read twice
	tp.AddSource("c", "bad topic!", serde.String(), serde.String())         // illegal topic
	tp.AddSource[string, string]("d", "in3", nil, serde.String())           // nil serde
	tp.AddProcessor("", split(), a)                                         // empty name
	tp.AddProcessor("orphan", split())                                      // no parent
	tp.AddProcessor("cross", split(), foreign)                              // handle of another topology
	tp.AddProcessor("zero", split(), Node[string, string]{})                // zero handle
	tp.AddProcessor[string, string, string, string]("nil-supplier", nil, a) // nil supplier

	err := tp.Validate()
	if err == nil {
		t.Fatal("Validate accepted a broken topology")
	}
	for _, want := range []string{
		`duplicate node name "a"`,
		`topic "in" is read by sources "a" and "b"`,
		`topic "bad topic!"`,
		`source "d": nil serde`,
		`empty name`,
		`processor "orphan" has no parent`,
		`parent "foreign" belongs to another topology`,
		`"zero": parent 0 is a zero Node`,
		`processor "nil-supplier": nil supplier`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
	if _, gerr := tp.graph(); gerr == nil {
		t.Error("Graph returned a graph for an invalid topology")
	}
}

func TestEmptyTopologyIsInvalid(t *testing.T) {
	t.Parallel()
	if err := NewTopology().Validate(); err == nil || !strings.Contains(err.Error(), "no nodes") {
		t.Fatalf("Validate() = %v, want an error about no nodes", err)
	}
}

// A dynamic sink needs a topic function and serdes, and is described as
// writing a topic chosen per record.
func TestDynamicSinkValidation(t *testing.T) {
	t.Parallel()
	top := NewTopology()
	src := top.AddSource("in", "in", serde.String(), serde.String())
	top.AddDynamicSink[string, string]("routed", nil, serde.String(), nil, src)
	err := top.Validate()
	if err == nil || !strings.Contains(err.Error(), `sink "routed": nil topic function`) || !strings.Contains(err.Error(), `sink "routed": nil serde`) {
		t.Fatalf("Validate = %v, want the nil topic function and serde reported", err)
	}
	ok := NewTopology()
	src = ok.AddSource("in", "in", serde.String(), serde.String())
	ok.AddDynamicSink("routed", func(k, _ string) string { return "out-" + k }, serde.String(), serde.String(), src)
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	if d := ok.Describe(); !strings.Contains(d, "a topic chosen per record") {
		t.Errorf("Describe does not say the sink's topic is chosen per record:\n%s", d)
	}
}
