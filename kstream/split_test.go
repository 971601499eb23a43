package kstream_test

import (
	"strings"
	"testing"

	"github.com/weirstream/weir/kstream"
	"github.com/weirstream/weir/serde"
	"github.com/weirstream/weir/weirtest"
)

// Each record goes to the first branch that accepts it, or to the default
// branch; never to two.
func TestSplitSendsEachRecordToOneBranch(t *testing.T) {
	t.Parallel()
	b := kstream.NewBuilder()
	br := b.Stream("in", "in", serde.String(), serde.String()).Split("by-kind",
		kstream.When("short", func(_, v string) bool { return len(v) <= 3 }),
		kstream.When("fruit", func(_, v string) bool { return strings.HasSuffix(v, "berry") || v == "fig" }),
	)
	br.Branch("short").To("short", serde.String(), serde.String())
	br.Branch("fruit").To("fruit", serde.String(), serde.String())
	br.Default().To("rest", serde.String(), serde.String())
	d := driver(t, b)
	pipe(t, d, "in",
		kv[string, string]{"k1", "fig", 1},       // short and fruit: the first branch only
		kv[string, string]{"k2", "raspberry", 2}, // fruit
		kv[string, string]{"k3", "carrot", 3},    // none
		kv[string, string]{"k4", "yam", 4},       // short
	)
	expect(t, d, "short", serde.String(), serde.String(), kv[string, string]{"k1", "fig", 1}, kv[string, string]{"k4", "yam", 4})
	expect(t, d, "fruit", serde.String(), serde.String(), kv[string, string]{"k2", "raspberry", 2})
	expect(t, d, "rest", serde.String(), serde.String(), kv[string, string]{"k3", "carrot", 3})
}

func TestSplitBuildErrors(t *testing.T) {
	t.Parallel()
	b := kstream.NewBuilder()
	br := b.Stream("in", "in", serde.String(), serde.String()).Split("s",
		kstream.When("a", func(_, v string) bool { return v == "a" }),
		kstream.When("a", func(_, v string) bool { return v == "b" }),
		kstream.When[string, string]("nil", nil),
	)
	br.Branch("missing").To("out", serde.String(), serde.String())
	_, err := b.Build()
	if err == nil {
		t.Fatal("Build accepted a split with duplicate, nil and unknown branches")
	}
	for _, want := range []string{`two branches named "a"`, `branch 2 needs a name and a predicate`, `has no branch "missing"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Build error %q does not say %q", err, want)
		}
	}
}

// ToDynamic writes each record to the topic its function chooses.
func TestToDynamicChoosesTheTopicPerRecord(t *testing.T) {
	t.Parallel()
	b := kstream.NewBuilder()
	b.Stream("in", "in", serde.String(), serde.String()).
		ToDynamic(func(k, _ string) string { return "out-" + k }, serde.String(), serde.String())
	d := driver(t, b)
	pipe(t, d, "in", kv[string, string]{"a", "1", 1}, kv[string, string]{"b", "2", 2}, kv[string, string]{"a", "3", 3})
	expect(t, d, "out-a", serde.String(), serde.String(), kv[string, string]{"a", "1", 1}, kv[string, string]{"a", "3", 3})
	expect(t, d, "out-b", serde.String(), serde.String(), kv[string, string]{"b", "2", 2})
}

// An empty topic name fails the record's node instead of writing nowhere.
func TestToDynamicEmptyTopicFails(t *testing.T) {
	t.Parallel()
	b := kstream.NewBuilder()
	b.Stream("in", "in", serde.String(), serde.String()).
		ToDynamic(func(_, v string) string { return v }, serde.String(), serde.String())
	d := driver(t, b)
	err := weirtest.Input(d, "in", serde.String(), serde.String()).Pipe("k", "", at(1))
	if err == nil || !strings.Contains(err.Error(), "empty topic name") {
		t.Fatalf("Pipe = %v, want the empty topic name named", err)
	}
}
