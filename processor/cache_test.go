package processor

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/weirstream/weir/internal/graph"
	"github.com/weirstream/weir/serde"
)

// cachedTopology forwards each "text-input" record through a RecordCache
// to the sink "out".
func cachedTopology() *Topology {
	t := NewTopology()
	src := t.AddSource("in", "text-input", serde.String(), serde.String())
	p := t.AddProcessor("cached", func() Processor[string, string, string, string] { return &cachingProcessor{} }, src)
	t.AddSink("out", "out", serde.String(), serde.String(), p)
	return t
}

type cachingProcessor struct {
	cache *RecordCache[string, string]
}

func (p *cachingProcessor) Init(ctx Context[string, string]) error {
	p.cache = NewRecordCache(ctx, func(k string) (string, error) { return k, nil }, func(v string) int { return len(v) })
	return nil
}

func (p *cachingProcessor) Process(_ Context[string, string], rec Record[string, string]) error {
	return p.cache.Forward(rec)
}

func (p *cachingProcessor) Close() error { return nil }

func sentPairs(env *fakeEnv) []string {
	var out []string
	for _, s := range env.sent {
		out = append(out, s.key+"="+s.value)
	}
	return out
}

// TestRecordCacheForwardsTheLatestPerKeyAtFlush: records are held until
// the task flushes; a key updated several times is forwarded once, with
// its latest value and timestamp, keys in the order of their last update.
func TestRecordCacheForwardsTheLatestPerKeyAtFlush(t *testing.T) {
	t.Parallel()
	g, err := cachedTopology().graph()
	if err != nil {
		t.Fatal(err)
	}
	env := &fakeEnv{cache: graph.NewCacheBudget(1 << 20)}
	insts := instantiate(t, g, env)
	ts := time.UnixMilli(1_700_000_000_000)
	for i, kv := range [][2]string{{"a", "1"}, {"b", "1"}, {"a", "2"}, {"c", "1"}, {"b", "2"}} {
		if err := feed(t, insts["in"], kv[0], kv[1], ts.Add(time.Duration(i)*time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	if len(env.sent) != 0 {
		t.Fatalf("sent before the flush: %v", sentPairs(env))
	}
	f, ok := insts["cached"].(graph.Flusher)
	if !ok || f.NodeName() != "cached" {
		t.Fatal("a processor instance is not a graph.Flusher named after its node")
	}
	if env.cache.Used() == 0 {
		t.Fatal("the held records take nothing from the budget")
	}
	if err := f.Flush(); err != nil {
		t.Fatal(err)
	}
	if got, want := sentPairs(env), []string{"a=2", "c=1", "b=2"}; !slices.Equal(got, want) {
		t.Fatalf("flushed %v, want %v", got, want)
	}
	if !env.sent[0].ts.Equal(ts.Add(2 * time.Second)) {
		t.Errorf("a's record has timestamp %v, want its latest update's %v", env.sent[0].ts, ts.Add(2*time.Second))
	}
	if env.cache.Used() != 0 {
		t.Errorf("%d bytes still counted after the flush", env.cache.Used())
	}
	if err := f.Flush(); err != nil || len(env.sent) != 3 {
		t.Fatalf("a second flush sent again: %v, %v", sentPairs(env), err)
	}
}

// TestRecordCacheStaysWithinTheBudget: past the instance's budget the
// cache forwards its least recently updated records at once; what a
// closing node still holds is dropped and given back to the budget.
func TestRecordCacheStaysWithinTheBudget(t *testing.T) {
	t.Parallel()
	g, err := cachedTopology().graph()
	if err != nil {
		t.Fatal(err)
	}
	// Room for two entries: each costs its key, its value and the overhead.
	env := &fakeEnv{cache: graph.NewCacheBudget(2 * (1 + 1 + 96))}
	insts := instantiate(t, g, env)
	ts := time.UnixMilli(1_700_000_000_000)
	for _, k := range []string{"a", "b", "a", "c", "d"} {
		if err := feed(t, insts["in"], k, "x", ts); err != nil {
			t.Fatal(err)
		}
	}
	// c evicts b (a was updated after it), d evicts a.
	if got, want := sentPairs(env), []string{"b=x", "a=x"}; !slices.Equal(got, want) {
		t.Fatalf("evicted %v, want %v", got, want)
	}
	if env.cache.Used() > 2*(1+1+96) {
		t.Fatalf("%d bytes held, over the budget", env.cache.Used())
	}
	if err := insts["cached"].Close(); err != nil {
		t.Fatal(err)
	}
	if env.cache.Used() != 0 || len(env.sent) != 2 {
		t.Fatalf("after Close: %d bytes held, sent %v; want the rest dropped", env.cache.Used(), sentPairs(env))
	}
}

// TestRecordCacheOffForwardsAtOnce: with caching off the cache forwards
// each record as it comes.
func TestRecordCacheOffForwardsAtOnce(t *testing.T) {
	t.Parallel()
	g, err := cachedTopology().graph()
	if err != nil {
		t.Fatal(err)
	}
	env := &fakeEnv{}
	insts := instantiate(t, g, env)
	for _, kv := range [][2]string{{"a", "1"}, {"a", "2"}} {
		if err := feed(t, insts["in"], kv[0], kv[1], time.UnixMilli(1)); err != nil {
			t.Fatal(err)
		}
	}
	if got, want := sentPairs(env), []string{"a=1", "a=2"}; !slices.Equal(got, want) {
		t.Fatalf("sent %v, want %v", got, want)
	}
}

// TestRecordCacheMatchesAModel: over random updates, evictions and
// flushes (slots freed and taken again, and given up after a burst of
// more than retainSlots keys), the cache forwards what a plain list in
// update order would: each key's latest value, least recently updated
// first.
func TestRecordCacheMatchesAModel(t *testing.T) {
	t.Parallel()
	g, err := cachedTopology().graph()
	if err != nil {
		t.Fatal(err)
	}
	const (
		entry = 6 + 4 + 96 // a key "k%05d", a value "%04d" and the overhead
		held  = retainSlots + 500
	)
	env := &fakeEnv{cache: graph.NewCacheBudget(held * entry)}
	insts := instantiate(t, g, env)
	f := insts["cached"].(graph.Flusher)
	rng := rand.New(rand.NewPCG(5, 5))
	var model, want []string // "key=value": held in update order, and forwarded
	checked := 0
	for step := range 30_000 {
		keys := 300
		if step >= 10_000 && step < 20_000 {
			keys = 99_999 // a burst of new keys, past retainSlots
		}
		if rng.IntN(2000) == 0 || step == 20_000 {
			if err := f.Flush(); err != nil {
				t.Fatal(err)
			}
			want, model = append(want, model...), nil
		} else {
			k, v := fmt.Sprintf("k%05d", rng.IntN(keys)), fmt.Sprintf("%04d", step%10_000)
			if err := feed(t, insts["in"], k, v, time.UnixMilli(int64(step))); err != nil {
				t.Fatal(err)
			}
			model = slices.DeleteFunc(model, func(kv string) bool { return strings.HasPrefix(kv, k+"=") })
			model = append(model, k+"="+v)
			if len(model) > held {
				want, model = append(want, model[0]), model[1:]
			}
		}
		if len(env.sent) != len(want) {
			t.Fatalf("step %d: forwarded %d records, want %d", step, len(env.sent), len(want))
		}
		for ; checked < len(want); checked++ {
			if s := env.sent[checked]; s.key+"="+s.value != want[checked] {
				t.Fatalf("step %d: record %d forwarded is %s=%s, want %s", step, checked, s.key, s.value, want[checked])
			}
		}
	}
	if env.cache.Used() != int64(len(model))*entry {
		t.Errorf("%d bytes counted for %d records held", env.cache.Used(), len(model))
	}
}

// TestRecordCacheKeepsTheSlotsItUses: past retainSlots, a cache keeps its
// slots from one commit to the next while it keeps using them, and gives
// them up after an interval that used few.
func TestRecordCacheKeepsTheSlotsItUses(t *testing.T) {
	t.Parallel()
	c := &RecordCache[string, string]{}
	hold := func(n int) {
		for range n {
			c.held.PushBack(cached[string, string]{})
		}
		c.reset()
	}
	hold(3 * retainSlots)
	grown := c.held.Cap()
	if grown < 3*retainSlots {
		t.Fatalf("after an interval of %d slots the cache kept %d", 3*retainSlots, grown)
	}
	hold(3 * retainSlots)
	if c.held.Cap() != grown {
		t.Fatalf("a steady load of %d slots: capacity %d, then %d", 3*retainSlots, grown, c.held.Cap())
	}
	hold(10)
	if c.held.Cap() != 0 {
		t.Fatalf("after an interval of 10 slots the cache still holds %d", c.held.Cap())
	}
	hold(10)
	if c.held.Cap() == 0 || c.held.Cap() > retainSlots {
		t.Fatalf("a small load: capacity %d, want at most %d and some", c.held.Cap(), retainSlots)
	}
}
