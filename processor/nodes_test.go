package processor

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/weirstream/weir/internal/graph"
	"github.com/weirstream/weir/internal/statelog"
	"github.com/weirstream/weir/serde"
)

// fakeEnv is a task environment that records what sinks send.
type fakeEnv struct {
	stores    map[string]*statelog.Memory
	users     map[string]string // store -> the one node allowed to use it
	sent      []sent
	schedules []fakeSchedule
	meta      graph.Metadata
	inRecord  bool
	log       *slog.Logger // nil: discard
	cache     *graph.CacheBudget
	version   uint64
}

type sent struct {
	topic      string
	internal   bool
	key, value string
	ts         time.Time
	partition  int32
}

type fakeSchedule struct {
	node     string
	interval time.Duration
	typ      graph.PunctuationType
	fn       func(time.Time) error
}

func (e *fakeEnv) Context() context.Context         { return context.Background() }
func (e *fakeEnv) ApplicationID() string            { return "app" }
func (e *fakeEnv) TaskID() string                   { return "0_0" }
func (e *fakeEnv) Partition() int32                 { return 0 }
func (e *fakeEnv) Metadata() (graph.Metadata, bool) { return e.meta, e.inRecord }
func (e *fakeEnv) StreamTime() time.Time            { return time.Time{} }
func (e *fakeEnv) ResumedStreamTime() time.Time     { return time.Time{} }
func (e *fakeEnv) InputKeyNull() bool               { return false }
func (e *fakeEnv) NextVersion() uint64              { e.version++; return e.version }
func (e *fakeEnv) Logger() *slog.Logger {
	if e.log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return e.log
}
func (e *fakeEnv) PartitionCount(string, bool) (int32, error) { return 4, nil }
func (e *fakeEnv) CountLate()                                 {}
func (e *fakeEnv) CacheBudget() *graph.CacheBudget            { return e.cache }
func (e *fakeEnv) Schedule(node string, interval time.Duration, typ graph.PunctuationType, fn func(time.Time) error) (func(), error) {
	e.schedules = append(e.schedules, fakeSchedule{node, interval, typ, fn})
	return func() {}, nil
}
func (e *fakeEnv) Store(node, name string) (statelog.Bytes, error) {
	if e.users[name] != node {
		return nil, fmt.Errorf("%s may not use %s", node, name)
	}
	if e.stores == nil {
		e.stores = map[string]*statelog.Memory{}
	}
	if e.stores[name] == nil {
		e.stores[name] = &statelog.Memory{}
	}
	return e.stores[name], nil
}
func (e *fakeEnv) Send(topic string, internal bool, key, value []byte, ts time.Time, _ []graph.Header, partition int32) error {
	e.sent = append(e.sent, sent{topic, internal, string(key), string(value), ts, partition})
	return nil
}

// instantiate builds every node of g for one task, children first, and
// initialises them parents first, as the runtime does.
func instantiate(t *testing.T, g *graph.Graph, env graph.TaskEnv) map[string]graph.Instance {
	t.Helper()
	made := map[*graph.Node]graph.Instance{}
	var build func(n *graph.Node) graph.Instance
	build = func(n *graph.Node) graph.Instance {
		if inst, ok := made[n]; ok {
			return inst
		}
		var children []graph.Instance
		for _, c := range n.Children {
			children = append(children, build(c))
		}
		inst, err := n.New(env, children)
		if err != nil {
			t.Fatalf("New(%s): %v", n.Name, err)
		}
		made[n] = inst
		return inst
	}
	out := map[string]graph.Instance{}
	for _, n := range g.Nodes {
		out[n.Name] = build(n)
	}
	for _, n := range g.Nodes {
		if err := out[n.Name].Init(); err != nil {
			t.Fatalf("Init(%s): %v", n.Name, err)
		}
	}
	return out
}

func feed(t *testing.T, src graph.Instance, key, value string, ts time.Time) error {
	t.Helper()
	s := src.(graph.SourceInstance)
	raw := &graph.RawRecord{Key: []byte(key), Value: []byte(value), Timestamp: ts, Topic: "text-input"}
	if _, err := s.Decode(raw); err != nil {
		return err
	}
	return s.Process()
}

func TestRecordsFlowThroughTypedNodes(t *testing.T) {
	t.Parallel()
	g, err := wordCountTopology().graph()
	if err != nil {
		t.Fatal(err)
	}
	env := &fakeEnv{}
	insts := instantiate(t, g, env)
	ts := time.UnixMilli(1_700_000_000_000)
	if err := feed(t, insts["lines"], "", "to be or", ts); err != nil {
		t.Fatal(err)
	}
	// Sub-topology 0 writes every word to the repartition topic, keyed by word.
	var words []string
	for _, s := range env.sent {
		if s.topic != "words-by-word" || !s.internal || s.partition != -1 || !s.ts.Equal(ts) {
			t.Errorf("unexpected send %+v", s)
		}
		words = append(words, s.key)
	}
	if !slices.Equal(words, []string{"to", "be", "or"}) {
		t.Errorf("repartitioned keys = %v", words)
	}
	// Sub-topology 1 counts and writes 8-byte big-endian values.
	env.sent = nil
	if err := feed(t, insts["words-by-word-source"], "be", "be", ts); err != nil {
		t.Fatal(err)
	}
	if len(env.sent) != 1 || env.sent[0].topic != "word-counts" || env.sent[0].value != "\x00\x00\x00\x00\x00\x00\x00\x01" {
		t.Errorf("sink got %+v", env.sent)
	}
}

func TestDecodeErrorsNameTheStage(t *testing.T) {
	t.Parallel()
	tp := NewTopology()
	src := tp.AddSource("n", "numbers", serde.String(), serde.Int64(),
		WithTimestampExtractor(func(rec Record[string, int64], _ time.Time) (time.Time, error) {
			if rec.Value < 0 {
				return time.Time{}, errors.New("negative value has no time")
			}
			return time.UnixMilli(rec.Value), nil
		}))
	tp.AddSink("out", "o", serde.String(), serde.Int64(), src)
	g, err := tp.graph()
	if err != nil {
		t.Fatal(err)
	}
	s := instantiate(t, g, &fakeEnv{})["n"].(graph.SourceInstance)

	cases := []struct {
		key   []byte
		value []byte
		stage string
	}{
		{[]byte{0xff}, []byte{0, 0, 0, 0, 0, 0, 0, 1}, "key"},
		{[]byte("k"), []byte{1, 2}, "value"},
		{[]byte("k"), []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, "timestamp"},
	}
	for _, c := range cases {
		_, err := s.Decode(&graph.RawRecord{Key: c.key, Value: c.value, Topic: "numbers"})
		var de *graph.DecodeError
		if !errors.As(err, &de) || de.Stage != c.stage {
			t.Errorf("Decode(%x, %x) = %v, want a %s DecodeError", c.key, c.value, err, c.stage)
		}
	}
	ts, err := s.Decode(&graph.RawRecord{Key: []byte("k"), Value: []byte{0, 0, 0, 0, 0, 0, 0x03, 0xe8}, Topic: "numbers"})
	if err != nil || ts.UnixMilli() != 1000 {
		t.Errorf("extracted time = %v, %v; want 1000 ms", ts.UnixMilli(), err)
	}
}

func TestForwardToAndErrorsNameTheNode(t *testing.T) {
	t.Parallel()
	tp := NewTopology()
	src := tp.AddSource("in", "in", serde.String(), serde.String())
	// The router's handles are assigned once its children exist; its
	// supplier runs only when a task starts.
	routes := map[string]Child[string, string]{}
	router := tp.AddProcessor("router", Func(func(ctx Context[string, string], rec Record[string, string]) error {
		return ctx.ForwardTo(routes[rec.Key], rec)
	}), src)
	tp.AddSink("left", "left-topic", serde.String(), serde.String(), router)
	tp.AddSink("right", "right-topic", serde.String(), serde.String(), router)
	tp.AddProcessor("failing", Func(func(ctx Context[string, string], rec Record[string, string]) error {
		return errors.New("boom")
	}), router)
	misrouter := tp.AddProcessor("misrouter", Func(func(ctx Context[string, string], rec Record[string, string]) error {
		return ctx.ForwardTo(Child[string, string]{}, rec)
	}), router)
	tp.AddSink("misrouter-out", "misrouted", serde.String(), serde.String(), misrouter)
	other := tp.AddProcessor("other", split(), tp.AddSource("in2", "in2", serde.String(), serde.String()))
	tp.AddSink("other-out", "other-topic", serde.String(), serde.String(), other)
	for _, name := range []string{"left", "right", "failing", "misrouter"} {
		routes[name] = router.Child(name)
	}
	routes["foreign"] = other.Child("other-out") // a handle of another node
	g, err := tp.graph()
	if err != nil {
		t.Fatal(err)
	}
	env := &fakeEnv{}
	insts := instantiate(t, g, env)
	if err := feed(t, insts["in"], "right", "v", time.UnixMilli(1)); err != nil {
		t.Fatal(err)
	}
	if len(env.sent) != 1 || env.sent[0].topic != "right-topic" {
		t.Fatalf("ForwardTo(right) sent %+v", env.sent)
	}
	err = feed(t, insts["in"], "failing", "v", time.UnixMilli(1))
	var ne *graph.NodeError
	if !errors.As(err, &ne) || ne.Node != "failing" || ne.Err.Error() != "boom" {
		t.Errorf("processor error = %v, want NodeError from failing", err)
	}
	// Handles that are no route of the router are the topology's fault:
	// a TopologyError naming the router, not an error of the record.
	// A child's topology error reaches the task as it is, through the
	// parents that forwarded to it.
	for key, want := range map[string]struct{ node, err string }{
		"nobody":    {"router", "zero Child"},
		"foreign":   {"router", `"other-out", a Child handle of node "other"`},
		"misrouter": {"misrouter", "zero Child"},
	} {
		err := feed(t, insts["in"], key, "v", time.UnixMilli(1))
		var te *TopologyError
		if !errors.As(err, &te) || te.Node != want.node || !strings.Contains(te.Err.Error(), want.err) || errors.As(err, &ne) {
			t.Errorf("ForwardTo(%s) = %v, want a TopologyError of %s (%s) and no NodeError", key, err, want.node, want.err)
		}
	}
}

// A misspelt child name fails the topology's validation, which weir.New
// runs, instead of the first record that takes the route.
func TestMisspeltChildFailsValidate(t *testing.T) {
	t.Parallel()
	tp := NewTopology()
	src := tp.AddSource("in", "in", serde.String(), serde.String())
	var out Child[string, string]
	balance := tp.AddProcessor("balance", Func(func(ctx Context[string, string], rec Record[string, string]) error {
		return ctx.ForwardTo(out, rec)
	}), src)
	tp.AddSink("balance-out", "balances", serde.String(), serde.String(), balance)
	tp.AddSink("rejects-out", "rejects", serde.String(), serde.String(), balance)
	out = balance.Child("balance-ot")
	err := tp.Validate()
	want := `processor: "balance" has no child "balance-ot" (Node.Child); its children are "balance-out", "rejects-out"`
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("Validate() = %v, want %s", err, want)
	}
	if _, err := tp.graph(); err == nil {
		t.Fatal("Graph accepted a misspelt child")
	}

	// Spelt right, the handle routes, and its name is the child's.
	tp = NewTopology()
	src = tp.AddSource("in", "in", serde.String(), serde.String())
	balance = tp.AddProcessor("balance", Func(func(ctx Context[string, string], rec Record[string, string]) error {
		return ctx.ForwardTo(out, rec)
	}), src)
	out = balance.Child("balance-out") // taken before the child is added
	tp.AddSink("rejects-out", "rejects", serde.String(), serde.String(), balance)
	tp.AddSink("balance-out", "balances", serde.String(), serde.String(), balance)
	g, err := tp.graph()
	if err != nil {
		t.Fatal(err)
	}
	env := &fakeEnv{}
	if err := feed(t, instantiate(t, g, env)["in"], "k", "v", time.UnixMilli(1)); err != nil {
		t.Fatal(err)
	}
	if len(env.sent) != 1 || env.sent[0].topic != "balances" || out.Name() != "balance-out" {
		t.Errorf("ForwardTo(%s) sent %+v", out.Name(), env.sent)
	}
	// A handle taken once the topology runs (in a supplier, say) is
	// resolved at once and leaves the built topology as it is.
	out = balance.Child("rejects-out")
	env.sent = nil
	if err := feed(t, instantiate(t, g, env)["in"], "k", "v", time.UnixMilli(1)); err != nil || len(env.sent) != 1 || env.sent[0].topic != "rejects" {
		t.Errorf("ForwardTo a late handle = %v, sent %+v", err, env.sent)
	}
	out = balance.Child("nope")
	if err := tp.Validate(); err != nil {
		t.Errorf("a late handle changed the built topology: %v", err)
	}
	var te *TopologyError
	if err := feed(t, instantiate(t, g, env)["in"], "k", "v", time.UnixMilli(1)); !errors.As(err, &te) || !strings.Contains(err.Error(), `no child "nope"`) {
		t.Errorf("ForwardTo a late misspelt handle = %v, want a TopologyError", err)
	}
	if (Node[string, string]{}).Child("x") != (Child[string, string]{}) {
		t.Error("Child of the zero Node is not the zero Child")
	}
}

// A processor that drops ForwardTo's topology error still fails with it:
// its record would otherwise go nowhere, silently.
func TestTopologyErrorIsSticky(t *testing.T) {
	t.Parallel()
	tp := NewTopology()
	src := tp.AddSource("in", "in", serde.String(), serde.String())
	var zero Child[string, string]
	p := tp.AddProcessor("careless", func() Processor[string, string, string, string] {
		return &initProc{init: func(ctx Context[string, string]) error {
			_, err := ctx.Schedule(time.Second, WallClockTime, func(time.Time) error {
				_ = ctx.ForwardTo(zero, Record[string, string]{})
				return nil
			})
			return err
		}, process: func(ctx Context[string, string], rec Record[string, string]) error {
			_ = ctx.ForwardTo(zero, rec)
			return nil
		}}
	}, src)
	tp.AddSink("out", "out", serde.String(), serde.String(), p)
	g, err := tp.graph()
	if err != nil {
		t.Fatal(err)
	}
	env := &fakeEnv{}
	insts := instantiate(t, g, env)
	var te *TopologyError
	if err := feed(t, insts["in"], "k", "v", time.UnixMilli(1)); !errors.As(err, &te) || te.Node != "careless" {
		t.Errorf("Process dropped ForwardTo's error: got %v, want a TopologyError", err)
	}
	if len(env.schedules) != 1 {
		t.Fatalf("scheduled %d punctuators, want 1", len(env.schedules))
	}
	if err := env.schedules[0].fn(time.Now()); !errors.As(err, &te) || te.Node != "careless" {
		t.Errorf("punctuator dropped ForwardTo's error: got %v, want a TopologyError", err)
	}
}

// Opening a store the processor is not attached to is the wiring's fault,
// even when the processor opens it lazily, while a record is processed.
func TestUnattachedStoreIsATopologyError(t *testing.T) {
	t.Parallel()
	spec := KeyValue("counts", serde.String(), serde.Int64())
	tp := NewTopology()
	src := tp.AddSource("in", "in", serde.String(), serde.String())
	user := tp.AddProcessor("user", split(), src)
	tp.AddStore(spec, user)
	lazy := tp.AddProcessor("lazy", Func(func(ctx Context[string, string], rec Record[string, string]) error {
		_, err := spec.Open(ctx)
		return err
	}), src)
	tp.AddSink("out", "out", serde.String(), serde.String(), lazy)
	g, err := tp.graph()
	if err != nil {
		t.Fatal(err)
	}
	env := &fakeEnv{users: map[string]string{"counts": "user"}}
	err = feed(t, instantiate(t, g, env)["in"], "k", "v", time.UnixMilli(1))
	var te *TopologyError
	if !errors.As(err, &te) || te.Node != "lazy" || !strings.Contains(err.Error(), "lazy may not use counts") {
		t.Errorf("opening an unattached store = %v, want a TopologyError of lazy", err)
	}
}

func TestCustomPartitionerIsChecked(t *testing.T) {
	t.Parallel()
	tp := NewTopology()
	src := tp.AddSource("in", "in", serde.String(), serde.String())
	tp.AddSink("out", "out", serde.String(), serde.String(), src,
		WithPartitioner(func(key, _ string, n int32) int32 { return int32(len(key)) % (n + 1) }))
	g, _ := tp.graph()
	env := &fakeEnv{}
	insts := instantiate(t, g, env)
	if err := feed(t, insts["in"], "abc", "v", time.UnixMilli(1)); err != nil {
		t.Fatal(err)
	}
	if env.sent[0].partition != 3 {
		t.Errorf("partition = %d, want 3", env.sent[0].partition)
	}
	// The fake topic has 4 partitions: 4 is out of range.
	if err := feed(t, insts["in"], "abcd", "v", time.UnixMilli(1)); err == nil || !strings.Contains(err.Error(), "partition 4") {
		t.Errorf("out-of-range partition = %v", err)
	}
}

func TestScheduleValidates(t *testing.T) {
	t.Parallel()
	var got []error
	tp := NewTopology()
	src := tp.AddSource("in", "in", serde.String(), serde.String())
	p := tp.AddProcessor("p", func() Processor[string, string, string, string] {
		return &initProc{init: func(ctx Context[string, string]) error {
			_, e1 := ctx.Schedule(0, StreamTime, func(time.Time) error { return nil })
			_, e2 := ctx.Schedule(time.Second, WallClockTime, nil)
			_, e3 := ctx.Schedule(time.Second, StreamTime, func(time.Time) error { return errors.New("tick") })
			got = append(got, e1, e2, e3)
			return nil
		}}
	}, src)
	tp.AddSink("out", "out", serde.String(), serde.String(), p)
	g, _ := tp.graph()
	env := &fakeEnv{}
	instantiate(t, g, env)
	if got[0] == nil || got[1] == nil || got[2] != nil {
		t.Fatalf("Schedule errors = %v; want errors for a zero interval and a nil punctuator only", got)
	}
	if len(env.schedules) != 1 || env.schedules[0].node != "p" || env.schedules[0].typ != graph.StreamTime {
		t.Fatalf("scheduled %+v", env.schedules)
	}
	var ne *graph.NodeError
	if err := env.schedules[0].fn(time.Now()); !errors.As(err, &ne) || ne.Node != "p" {
		t.Errorf("punctuator error = %v, want NodeError from p", err)
	}
}

type initProc struct {
	init    func(ctx Context[string, string]) error
	process func(ctx Context[string, string], rec Record[string, string]) error // nil: forward
}

func (p *initProc) Init(ctx Context[string, string]) error { return p.init(ctx) }
func (p *initProc) Process(ctx Context[string, string], rec Record[string, string]) error {
	if p.process != nil {
		return p.process(ctx, rec)
	}
	return ctx.Forward(rec)
}
func (p *initProc) Close() error { return nil }

// nonComparableSerde is a serde whose dynamic type cannot be compared, to
// show that telling serde.Bytes apart from it does not panic.
type nonComparableSerde struct{ seen map[string]bool }

func (nonComparableSerde) Serialize(_ string, v []byte) ([]byte, error) { return v, nil }
func (nonComparableSerde) Deserialize(_ string, data []byte) ([]byte, error) {
	return append([]byte("x"), data...), nil
}

func TestByteSourcesHandOutPrivateCopies(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name       string
		keys       serde.Serde[[]byte]
		tombstones bool
		key, value []byte
		wantKey    []byte
		wantValue  []byte
		tombstone  bool
	}{
		{name: "both", keys: serde.Bytes(), key: []byte("key"), value: []byte("value"), wantKey: []byte("key"), wantValue: []byte("value")},
		{name: "nil key", keys: serde.Bytes(), key: nil, value: []byte("v"), wantKey: nil, wantValue: []byte("v")},
		{name: "empty key and value", keys: serde.Bytes(), key: []byte{}, value: []byte{}, wantKey: []byte{}, wantValue: []byte{}},
		{name: "nil value", keys: serde.Bytes(), key: []byte("k"), value: nil, wantKey: []byte("k"), wantValue: nil},
		{name: "tombstone", keys: serde.Bytes(), tombstones: true, key: []byte("k"), value: nil, wantKey: []byte("k"), wantValue: nil, tombstone: true},
		{name: "key serde of its own", keys: nonComparableSerde{seen: map[string]bool{}}, key: []byte("k"), value: []byte("v"), wantKey: []byte("xk"), wantValue: []byte("v")},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tp := NewTopology()
			var opts []SourceOption[[]byte, []byte]
			if c.tombstones {
				opts = append(opts, WithTombstones[[]byte, []byte]())
			}
			src := tp.AddSource("in", "in", c.keys, serde.Bytes(), opts...)
			var got []Record[[]byte, []byte]
			p := tp.AddProcessor("keep", Func(func(_ Context[[]byte, []byte], rec Record[[]byte, []byte]) error {
				got = append(got, rec)
				return nil
			}), src)
			tp.AddSink("out", "out", serde.Bytes(), serde.Bytes(), p)
			g, err := tp.graph()
			if err != nil {
				t.Fatal(err)
			}
			s := instantiate(t, g, &fakeEnv{})["in"].(graph.SourceInstance)
			raw := &graph.RawRecord{Key: bytes.Clone(c.key), Value: bytes.Clone(c.value), Topic: "in", Timestamp: time.UnixMilli(1)}
			for range 2 { // the second time as a replay decodes it
				if _, err := s.Decode(raw); err != nil {
					t.Fatal(err)
				}
				if err := s.Process(); err != nil {
					t.Fatal(err)
				}
			}
			for i, rec := range got {
				if !bytes.Equal(rec.Key, c.wantKey) || (rec.Key == nil) != (c.wantKey == nil) ||
					!bytes.Equal(rec.Value, c.wantValue) || (rec.Value == nil) != (c.wantValue == nil) || rec.Tombstone != c.tombstone {
					t.Fatalf("record %d = key %q (nil %t), value %q (nil %t), tombstone %t; want %q, %q, %t",
						i, rec.Key, rec.Key == nil, rec.Value, rec.Value == nil, rec.Tombstone, c.wantKey, c.wantValue, c.tombstone)
				}
				// The application owns what it got: growing the key must not
				// reach the value, nor writing either reach the input or the
				// other decoding of the record.
				if rec.Key != nil {
					_ = append(rec.Key, '!')
				}
				if !bytes.Equal(rec.Value, c.wantValue) {
					t.Fatalf("record %d: appending to the key changed the value to %q", i, rec.Value)
				}
				for j := range rec.Key {
					rec.Key[j] ^= 0xff
				}
				for j := range rec.Value {
					rec.Value[j] ^= 0xff
				}
			}
			if !bytes.Equal(raw.Key, c.key) || !bytes.Equal(raw.Value, c.value) {
				t.Errorf("the input changed to %q, %q", raw.Key, raw.Value)
			}
			if len(c.wantValue) > 0 && !bytes.Equal(got[0].Value, got[1].Value) {
				t.Errorf("the two decodings share memory: values %q and %q", got[0].Value, got[1].Value)
			}
		})
	}
}
