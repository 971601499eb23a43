package processor

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/weirstream/weir/internal/graph"
	"github.com/weirstream/weir/internal/statelog"
	"github.com/weirstream/weir/serde"
)

// dedupProc forwards a record only if no record with its key was seen
// within its store's TTL: the deduplication a TTL store is for.
type dedupProc struct {
	spec  *TTLSpec[string, int64]
	store TTLStore[string, int64]
}

func (p *dedupProc) Init(ctx Context[string, string]) error {
	s, err := p.spec.Open(ctx)
	p.store = s
	return err
}

func (p *dedupProc) Process(ctx Context[string, string], rec Record[string, string]) error {
	if _, seen, err := p.store.Get(rec.Key); err != nil || seen {
		return err
	}
	if err := p.store.Put(rec.Key, rec.Timestamp.UnixMilli()); err != nil {
		return err
	}
	return ctx.Forward(rec)
}

func (p *dedupProc) Close() error { return nil }

func dedupTopology(t *testing.T, spec *TTLSpec[string, int64]) (graph.Instance, *dedupProc, *clockEnv) {
	t.Helper()
	var proc *dedupProc
	tp := NewTopology()
	src := tp.AddSource("in", "in", serde.String(), serde.String())
	d := tp.AddProcessor("dedup", func() Processor[string, string, string, string] {
		proc = &dedupProc{spec: spec}
		return proc
	}, src)
	tp.AddStore(spec, d)
	tp.AddSink("out", "out", serde.String(), serde.String(), d)
	g, err := tp.graph()
	if err != nil {
		t.Fatal(err)
	}
	if g.Stores[0].Kind != graph.TTLStore {
		t.Fatalf("store kind %q, want %q (the runtime picks the changelog layout by it)", g.Stores[0].Kind, graph.TTLStore)
	}
	env := &clockEnv{fakeEnv: &fakeEnv{users: map[string]string{spec.Name(): "dedup"}}}
	insts := instantiate(t, g, env)
	return insts["in"], proc, env
}

// TestTTLStoreDeduplicatesByStreamTime: a key is remembered for the TTL
// after it was written, in stream time: a duplicate within it is dropped,
// one after it passes again. A late record (older timestamp) measures
// from the stream time, not its own timestamp.
func TestTTLStoreDeduplicatesByStreamTime(t *testing.T) {
	t.Parallel()
	spec := TTL("seen", 100*time.Millisecond, serde.String(), serde.Int64())
	src, p, env := dedupTopology(t, spec)
	for _, r := range []struct {
		key string
		ts  int64
	}{
		{"a", 1000}, {"b", 1010}, {"a", 1050}, // a: duplicate within 100 ms
		{"x", 1060},
		{"late", 900}, // stream time stays 1060: late expires at 1160, not 1000
		{"a", 1100},   // a written at 1000: expired at 1100, passes
		{"b", 1109},   // b written at 1010: 99 ms, still a duplicate
		{"late", 1159},
		{"late", 1160},
	} {
		if err := env.feedAt(t, src, r.key, "", ms(r.ts)); err != nil {
			t.Fatal(err)
		}
	}
	var got []string
	for _, s := range env.sent {
		got = append(got, fmt.Sprintf("%s@%d", s.key, s.ts.UnixMilli()))
	}
	want := []string{"a@1000", "b@1010", "x@1060", "late@900", "a@1100", "late@1160"}
	if !slices.Equal(got, want) {
		t.Errorf("forwarded %v, want %v", got, want)
	}
	// a was written again at 1100: found until 1200.
	env.now = ms(1199)
	if v, ok, err := p.store.Get("a"); err != nil || !ok || v != 1100 {
		t.Errorf("Get(a) at 1199 = %d, %v, %v; want 1100", v, ok, err)
	}
	var keys []string
	for k := range p.store.All() {
		keys = append(keys, k)
	}
	if err := p.store.Err(); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(keys, []string{"a", "late"}) {
		t.Errorf("All at 1199 = %v, want [a late]", keys)
	}
	env.now = ms(1200)
	if _, ok, err := p.store.Get("a"); err != nil || ok {
		t.Errorf("Get(a) at 1200 = %v, %v; want expired", ok, err)
	}
	if err := p.store.Delete("late"); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := p.store.Get("late"); ok {
		t.Error("Get(late) after Delete found it")
	}
}

// TestTTLStorePurgesInBoundedSteps: when a pause of the stream expires
// many entries at once, they are invisible at once and deleted at most
// ttlPurgeLimit per call, until none is left.
func TestTTLStorePurgesInBoundedSteps(t *testing.T) {
	t.Parallel()
	spec := TTL("seen", time.Second, serde.String(), serde.Int64())
	src, p, env := dedupTopology(t, spec)
	const keys = 3*ttlPurgeLimit + 10
	for i := range keys {
		if err := env.feedAt(t, src, fmt.Sprint("k", i), "", ms(1000)); err != nil {
			t.Fatal(err)
		}
	}
	mem := env.stores["seen"]
	if mem.Len() != 2*keys {
		t.Fatalf("the store holds %d entries, want %d (a value and an index entry per key)", mem.Len(), 2*keys)
	}
	env.now = ms(5000)
	for k := range p.store.All() {
		t.Fatalf("All after the TTL passed yields %q", k)
	}
	if err := p.store.Err(); err != nil {
		t.Fatal(err)
	}
	if got := 2*keys - mem.Len(); got != 2*ttlPurgeLimit {
		t.Errorf("the first call after the pause deleted %d entries, want %d (the limit's keys and their index entries)", got, 2*ttlPurgeLimit)
	}
	var steps []int
	for mem.Len() > 0 && len(steps) < 10 {
		before := mem.Len()
		if _, ok, err := p.store.Get("k0"); err != nil || ok {
			t.Fatalf("Get(k0) = %v, %v; want expired", ok, err)
		}
		steps = append(steps, (before-mem.Len())/2)
	}
	if want := []int{ttlPurgeLimit, ttlPurgeLimit, 10}; !slices.Equal(steps, want) {
		t.Errorf("keys deleted per call = %v, want %v", steps, want)
	}
}

func TestTTLSpecValidates(t *testing.T) {
	t.Parallel()
	for _, ttl := range []time.Duration{0, -time.Second, 1500 * time.Microsecond} {
		spec := TTL("dedup-ids", ttl, serde.String(), serde.Int64())
		if _, err := spec.Open(memStores{}); err == nil || !strings.Contains(err.Error(), `"dedup-ids"`) {
			t.Errorf("Open with ttl %v = %v; want an error naming the store", ttl, err)
		}
	}
	if _, err := TTL[string, int64]("dedup-ids", time.Second, nil, serde.Int64()).Open(memStores{}); err == nil {
		t.Error("Open with a nil serde succeeded")
	}
	spec := TTL("s", time.Minute, serde.String(), serde.Int64())
	if spec.Name() != "s" || spec.TTL() != time.Minute {
		t.Errorf("Name, TTL = %q, %v", spec.Name(), spec.TTL())
	}
	if _, err := spec.Open(memStores{}); err != nil {
		t.Errorf("Open of a valid spec: %v", err)
	}
}

// memStores is a StoreContext whose stores are empty Memories.
type memStores struct{}

func (memStores) storeBytes(string) (statelog.Bytes, error) { return &statelog.Memory{}, nil }
