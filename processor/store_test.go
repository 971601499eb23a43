package processor

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/weirstream/weir/serde"
)

// countProc counts values per key in a key-value store.
type countProc struct {
	spec  *KeyValueSpec[string, int64]
	store KeyValueStore[string, int64]
}

func (p *countProc) Init(ctx Context[string, int64]) error {
	s, err := p.spec.Open(ctx)
	p.store = s
	return err
}

func (p *countProc) Process(ctx Context[string, int64], rec Record[string, string]) error {
	n, _, err := p.store.Get(rec.Value)
	if err != nil {
		return err
	}
	if err := p.store.Put(rec.Value, n+1); err != nil {
		return err
	}
	return ctx.Forward(Record[string, int64]{Key: rec.Value, Value: n + 1, Timestamp: rec.Timestamp})
}

func (p *countProc) Close() error { return nil }

func TestKeyValueStoreThroughContext(t *testing.T) {
	t.Parallel()
	counts := KeyValue("counts", serde.String(), serde.Int64())
	tp := NewTopology()
	src := tp.AddSource("in", "in", serde.String(), serde.String())
	c := tp.AddProcessor("count", func() Processor[string, string, string, int64] { return &countProc{spec: counts} }, src)
	tp.AddStore(counts, c)
	tp.AddSink("out", "out", serde.String(), serde.Int64(), c)
	g, err := tp.graph()
	if err != nil {
		t.Fatal(err)
	}
	if len(g.Stores) != 1 || g.Stores[0].Users[0].Name != "count" {
		t.Fatalf("stores = %+v", g.Stores)
	}
	env := &fakeEnv{users: map[string]string{"counts": "count"}}
	insts := instantiate(t, g, env)
	for _, w := range []string{"b", "a", "b", "c", "b"} {
		if err := feed(t, insts["in"], "", w, time.UnixMilli(1)); err != nil {
			t.Fatal(err)
		}
	}
	mem := env.stores["counts"]
	var got []string
	for k, v := range mem.Range(nil, nil) {
		n, _ := serde.Int64().Deserialize("", v)
		got = append(got, string(k)+"="+strings.Repeat("|", int(n)))
	}
	if !slices.Equal(got, []string{"a=|", "b=|||", "c=|"}) {
		t.Errorf("store holds %v", got)
	}

	// The typed view: All and Range decode keys and values.
	p := &countProc{spec: counts}
	if err := p.Init(&nodeContext[string, int64]{env: env, node: "count"}); err != nil {
		t.Fatal(err)
	}
	var all []string
	for k, v := range p.store.All() {
		all = append(all, k+":"+strings.Repeat("|", int(v)))
	}
	if !slices.Equal(all, []string{"a:|", "b:|||", "c:|"}) {
		t.Errorf("All = %v", all)
	}
	var some []string
	for k := range p.store.Range("b", "c") {
		some = append(some, k)
	}
	if !slices.Equal(some, []string{"b"}) {
		t.Errorf("Range(b, c) = %v", some)
	}
	if err := p.store.Err(); err != nil {
		t.Error(err)
	}
	if n, err := p.store.Count(); err != nil || n != 3 {
		t.Errorf("Count = %d, %v; want 3", n, err)
	}
	p.store.Put("ba", 7)
	p.store.Put("bb", 8)
	var pre []string
	for k := range p.store.PrefixScan("b") {
		pre = append(pre, k)
	}
	if !slices.Equal(pre, []string{"b", "ba", "bb"}) {
		t.Errorf("PrefixScan(b) = %v", pre)
	}
}

func TestStoreValidation(t *testing.T) {
	t.Parallel()
	other := NewTopology()
	foreign := other.AddProcessor("foreign", split(), other.AddSource("s", "t", serde.String(), serde.String()))

	tp := NewTopology()
	src := tp.AddSource("in", "in", serde.String(), serde.String())
	p := tp.AddProcessor("p", split(), src)
	tp.AddStore(KeyValue("unused", serde.String(), serde.String()))
	tp.AddStore(KeyValue("s1", serde.String(), serde.String()), p)
	tp.AddStore(KeyValue("s1", serde.String(), serde.String()), p)
	tp.AddStore(KeyValue("on-source", serde.String(), serde.String()), src)
	tp.AddStore(KeyValue("cross", serde.String(), serde.String()), foreign)
	tp.AddStore(KeyValue("", serde.String(), serde.String()), p)
	err := tp.Validate()
	if err == nil {
		t.Fatal("Validate accepted bad stores")
	}
	for _, want := range []string{
		`store "unused" is not attached to any processor`,
		`duplicate store name "s1"`,
		`source "in" cannot use a store`,
		`node "foreign" belongs to another topology`,
		`a store has an empty name`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
}

func TestProcessorsSharingAStoreShareASubtopology(t *testing.T) {
	t.Parallel()
	tp := NewTopology()
	a := tp.AddProcessor("a", split(), tp.AddSource("sa", "ta", serde.String(), serde.String()))
	b := tp.AddProcessor("b", split(), tp.AddSource("sb", "tb", serde.String(), serde.String()))
	tp.AddStore(KeyValue("shared", serde.String(), serde.String()), a, b)
	g, err := tp.graph()
	if err != nil {
		t.Fatal(err)
	}
	if n := len(g.Subtopologies()); n != 1 {
		t.Fatalf("%d sub-topologies, want 1: a store joins its users", n)
	}
}
