package processor

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/weirstream/weir/changelog"
	"github.com/weirstream/weir/internal/graph"
	"github.com/weirstream/weir/internal/statelog"
	"github.com/weirstream/weir/serde"
)

// clockEnv is a fakeEnv whose stream time the test sets, as the runtime
// does before it processes each record.
type clockEnv struct {
	*fakeEnv
	now time.Time
}

func (e *clockEnv) StreamTime() time.Time { return e.now }

// feedAt advances the stream time to ts, if later, and feeds a record.
func (e *clockEnv) feedAt(t *testing.T, src graph.Instance, key, value string, ts time.Time) error {
	t.Helper()
	if ts.After(e.now) {
		e.now = ts
	}
	return feed(t, src, key, value, ts)
}

func ms(n int64) time.Time { return time.UnixMilli(n) }

// topicSerde records the topics a serde is called with.
type topicSerde[T any] struct {
	serde.Serde[T]
	topics map[string]bool
}

func (s *topicSerde[T]) Serialize(topic string, v T) ([]byte, error) {
	s.topics[topic] = true
	return s.Serde.Serialize(topic, v)
}

func (s *topicSerde[T]) Deserialize(topic string, b []byte) (T, error) {
	s.topics[topic] = true
	return s.Serde.Deserialize(topic, b)
}

// windowCountProc counts records per key in tumbling windows of its store's
// size, as a windowed aggregation does, and counts the late records the
// store refuses.
type windowCountProc struct {
	spec  *WindowSpec[string, int64]
	store WindowStore[string, int64]
	late  int
}

func (p *windowCountProc) Init(ctx Context[string, int64]) error {
	s, err := p.spec.Open(ctx)
	p.store = s
	return err
}

func (p *windowCountProc) Process(ctx Context[string, int64], rec Record[string, string]) error {
	size := p.spec.Size().Milliseconds()
	start := ms(rec.Timestamp.UnixMilli() / size * size)
	n, _, err := p.store.Fetch(rec.Key, start)
	if err != nil {
		return err
	}
	if err := p.store.Put(rec.Key, start, n+1); errors.Is(err, changelog.ErrExpired) {
		p.late++
		return nil
	} else if err != nil {
		return err
	}
	return ctx.Forward(Record[string, int64]{Key: rec.Key, Value: n + 1, Timestamp: rec.Timestamp})
}

func (p *windowCountProc) Close() error { return nil }

// windowCountTopology runs a windowCountProc on spec and returns the
// source instance, the processor and the env.
func windowCountTopology(t *testing.T, spec *WindowSpec[string, int64]) (graph.Instance, *windowCountProc, *clockEnv) {
	t.Helper()
	var proc *windowCountProc
	tp := NewTopology()
	src := tp.AddSource("in", "in", serde.String(), serde.String())
	c := tp.AddProcessor("count", func() Processor[string, string, string, int64] {
		proc = &windowCountProc{spec: spec}
		return proc
	}, src)
	tp.AddStore(spec, c)
	tp.AddSink("out", "out", serde.String(), serde.Int64(), c)
	g, err := tp.graph()
	if err != nil {
		t.Fatal(err)
	}
	env := &clockEnv{fakeEnv: &fakeEnv{users: map[string]string{spec.Name(): "count"}}}
	insts := instantiate(t, g, env)
	return insts["in"], proc, env
}

// win is a window as the tests compare it: times in Unix milliseconds,
// and whether Start was in UTC.
type win struct {
	key        string
	start, end int64
	value      int64
	utc        bool
}

func collectWindows(seq func(func(Windowed[string], int64) bool)) []win {
	var out []win
	for w, v := range seq {
		out = append(out, win{w.Key, w.Start.UnixMilli(), w.End.UnixMilli(), v, w.Start.Location() == time.UTC})
	}
	return out
}

func wnd(key string, start, end, value int64) win { return win{key, start, end, value, true} }

func TestWindowStoreThroughContext(t *testing.T) {
	t.Parallel()
	keys := &topicSerde[string]{serde.String(), map[string]bool{}}
	values := &topicSerde[int64]{serde.Int64(), map[string]bool{}}
	spec := Window[string, int64]("windowed-counts", 10*time.Millisecond, time.Hour, keys, values)
	src, p, env := windowCountTopology(t, spec)
	for _, r := range []struct {
		key string
		ts  int64
	}{{"b", 3}, {"a", 5}, {"b", 9}, {"a", 12}, {"b", 20}, {"a", 29}, {"a", 30}, {"b", 1}} {
		if err := env.feedAt(t, src, r.key, "", ms(r.ts)); err != nil {
			t.Fatal(err)
		}
	}
	s := p.store

	// Fetch rounds the start down to the millisecond.
	if n, ok, err := s.Fetch("b", ms(0).Add(999*time.Microsecond)); err != nil || !ok || n != 3 {
		t.Errorf("Fetch(b, 0.999ms) = %d, %v, %v; want 3", n, ok, err)
	}
	for _, c := range []struct {
		key   string
		start int64
	}{{"b", 10}, {"a", 1}, {"c", 0}} {
		if n, ok, err := s.Fetch(c.key, ms(c.start)); err != nil || ok {
			t.Errorf("Fetch(%s, %d) = %d, %v, %v; want absent", c.key, c.start, n, ok, err)
		}
	}

	type startValue struct{ start, value int64 }
	collect := func(seq func(func(time.Time, int64) bool)) []startValue {
		var out []startValue
		for st, v := range seq {
			if st.Location() != time.UTC {
				t.Errorf("start %v is not in UTC", st)
			}
			out = append(out, startValue{st.UnixMilli(), v})
		}
		return out
	}
	// Both ends are included; from and to are rounded down.
	if got, want := collect(s.FetchRange("a", ms(0), ms(30))), []startValue{{0, 1}, {10, 1}, {20, 1}, {30, 1}}; !slices.Equal(got, want) {
		t.Errorf("FetchRange(a, 0, 30) = %v, want %v", got, want)
	}
	if got, want := collect(s.FetchRange("a", ms(1), ms(20).Add(time.Microsecond))), []startValue{{10, 1}, {20, 1}}; !slices.Equal(got, want) {
		t.Errorf("FetchRange(a, 1, 20.001) = %v, want %v", got, want)
	}
	if got, want := collect(s.FetchRangeBackward("a", ms(10), ms(30))), []startValue{{30, 1}, {20, 1}, {10, 1}}; !slices.Equal(got, want) {
		t.Errorf("FetchRangeBackward(a, 10, 30) = %v, want %v", got, want)
	}
	if got := collect(s.FetchRange("a", ms(30), ms(10))); len(got) != 0 {
		t.Errorf("FetchRange(a, 30, 10) = %v, want nothing", got)
	}
	// Breaking out of the loop stops the scan.
	var first []int64
	for st := range s.FetchRange("a", ms(0), ms(30)) {
		first = append(first, st.UnixMilli())
		break
	}
	if !slices.Equal(first, []int64{0}) {
		t.Errorf("first of FetchRange = %v", first)
	}

	// FetchAll orders by start, then key; End is Start + size.
	if got, want := collectWindows(s.FetchAll(ms(0), ms(20))), []win{
		wnd("a", 0, 10, 1), wnd("b", 0, 10, 3), wnd("a", 10, 20, 1), wnd("a", 20, 30, 1), wnd("b", 20, 30, 1),
	}; !slices.Equal(got, want) {
		t.Errorf("FetchAll(0, 20) =\n%v, want\n%v", got, want)
	}
	// All orders by key, then start.
	if got, want := collectWindows(s.All()), []win{
		wnd("a", 0, 10, 1), wnd("a", 10, 20, 1), wnd("a", 20, 30, 1), wnd("a", 30, 40, 1), wnd("b", 0, 10, 3), wnd("b", 20, 30, 1),
	}; !slices.Equal(got, want) {
		t.Errorf("All =\n%v, want\n%v", got, want)
	}
	if err := s.Err(); err != nil {
		t.Error(err)
	}
	if p.late != 0 {
		t.Errorf("%d records counted late within retention", p.late)
	}
	// Two byte entries per window (see changelog/window.go).
	if n := env.stores["windowed-counts"].Len(); n != 12 {
		t.Errorf("the store's Bytes hold %d entries, want 12 for 6 windows", n)
	}
	if len(keys.topics) != 1 || !keys.topics["windowed-counts"] || len(values.topics) != 1 || !values.topics["windowed-counts"] {
		t.Errorf("serdes saw topics %v and %v, want the store's name", keys.topics, values.topics)
	}
}

func TestWindowStoreExpiresOnStreamTime(t *testing.T) {
	t.Parallel()
	spec := Window("expiring", 10*time.Millisecond, 100*time.Millisecond, serde.String(), serde.Int64())
	src, p, env := windowCountTopology(t, spec)
	mem := func() int { return env.stores["expiring"].Len() }
	for _, ts := range []int64{0, 50, 100} {
		if err := env.feedAt(t, src, "k", "", ms(ts)); err != nil {
			t.Fatal(err)
		}
	}
	// Stream time 100 has expired the window at 0 already: a window store
	// keeps the windows that start after stream time minus the retention.
	if n := mem(); n != 4 {
		t.Fatalf("%d entries at stream time 100, want 4", n)
	}

	// Stream time 160: the cutoff is 61, so the window at 50 expires,
	// and a read alone deletes them through the task's Bytes.
	env.now = ms(160)
	if got, want := collectWindows(p.store.All()), []win{wnd("k", 100, 110, 1)}; !slices.Equal(got, want) {
		t.Errorf("All after expiry = %v, want %v", got, want)
	}
	if n := mem(); n != 2 {
		t.Errorf("%d entries after expiry, want 2: expired windows must be deleted", n)
	}
	if _, ok, _ := p.store.Fetch("k", ms(50)); ok {
		t.Error("Fetch found an expired window")
	}

	// A late record for window 50 is refused, counted, and not written.
	if err := env.feedAt(t, src, "k", "", ms(55)); err != nil {
		t.Fatal(err)
	}
	if p.late != 1 {
		t.Errorf("late = %d, want 1", p.late)
	}
	err := p.store.Put("k", ms(59), 7)
	if !errors.Is(err, changelog.ErrExpired) || !strings.Contains(err.Error(), "expiring") {
		t.Errorf("Put of an expired window = %v, want ErrExpired naming the store", err)
	}
	if err := p.store.Put("k", ms(60), 7); !errors.Is(err, changelog.ErrExpired) {
		t.Errorf("Put at stream time minus the retention = %v, want ErrExpired", err)
	}
	// The window at the cutoff is still retained.
	if err := p.store.Put("k", ms(61), 7); err != nil {
		t.Errorf("Put at the cutoff = %v", err)
	}
	if n := mem(); n != 4 {
		t.Errorf("%d entries, want 4: an expired Put must not write", n)
	}

	// Expiry happens on writes too, without a read first.
	env.now = ms(171)
	if err := p.store.Put("k", ms(170), 1); err != nil {
		t.Fatal(err)
	}
	if n := mem(); n != 4 {
		t.Errorf("%d entries, want 4 after the window at 60 expired", n)
	}
	if got, want := collectWindows(p.store.All()), []win{wnd("k", 100, 110, 1), wnd("k", 170, 180, 1)}; !slices.Equal(got, want) {
		t.Errorf("All = %v, want %v", got, want)
	}
	if n := mem(); n != 4 {
		t.Errorf("%d entries, want 4 after the window at 60 expired", n)
	}
	if err := p.store.Err(); err != nil {
		t.Error(err)
	}
}

func TestWindowStoreKeepsEmptyValues(t *testing.T) {
	// A serde may serialize a value as nil; the byte store deletes on nil,
	// so the typed store must store it as empty instead.
	t.Parallel()
	spec := Window("raw", time.Second, time.Second, serde.String(), serde.Bytes())
	env := &clockEnv{fakeEnv: &fakeEnv{users: map[string]string{"raw": "p"}}}
	s, err := spec.Open(&nodeContext[string, string]{env: env, node: "p"})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Put("k", ms(0), nil); err != nil {
		t.Fatal(err)
	}
	if v, ok, err := s.Fetch("k", ms(0)); err != nil || !ok || len(v) != 0 {
		t.Errorf("Fetch = %q, %v, %v; want an empty value", v, ok, err)
	}
}

func TestWindowStoreDecodeErrorEndsIteration(t *testing.T) {
	t.Parallel()
	spec := Window("bad", 10*time.Millisecond, time.Hour, serde.String(), serde.Int64())
	env := &clockEnv{fakeEnv: &fakeEnv{users: map[string]string{"bad": "p"}}}
	s, err := spec.Open(&nodeContext[string, string]{env: env, node: "p"})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"a", "c"} {
		if err := s.Put(k, ms(0), 1); err != nil {
			t.Fatal(err)
		}
	}
	// Write a value the Int64 serde cannot read, and a key the String
	// serde cannot read, beside the store.
	raw, err := statelog.NewWindowBytes(env.stores["bad"], time.Hour, 10*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if err := raw.Put([]byte("b"), ms(0), []byte{1, 2, 3}); err != nil {
		t.Fatal(err)
	}
	if err := raw.Put([]byte{0xff}, ms(10), []byte{0, 0, 0, 0, 0, 0, 0, 1}); err != nil {
		t.Fatal(err)
	}

	cases := []struct {
		name string
		seq  func(func(Windowed[string], int64) bool)
		want []string
		err  string
	}{
		{"All", s.All(), []string{"a"}, "deserialize value"},
		{"FetchAll", s.FetchAll(ms(0), ms(0)), []string{"a"}, "deserialize value"},
		{"FetchAll key", s.FetchAll(ms(10), ms(10)), nil, "deserialize key"},
	}
	for _, c := range cases {
		var got []string
		for w := range c.seq {
			got = append(got, w.Key)
		}
		err := s.Err()
		if !slices.Equal(got, c.want) || err == nil || !strings.Contains(err.Error(), "store bad: "+c.err) {
			t.Errorf("%s yielded %v then Err = %v; want %v then a %q error", c.name, got, err, c.want, c.err)
		}
		if err := s.Err(); err != nil {
			t.Errorf("%s: second Err = %v, want it cleared", c.name, err)
		}
	}
	for range s.FetchRange("b", ms(0), ms(10)) {
		t.Error("FetchRange yielded an undecodable value")
	}
	if err := s.Err(); err == nil || !strings.Contains(err.Error(), "deserialize value") {
		t.Errorf("FetchRange: Err = %v", err)
	}
	if _, _, err := s.Fetch("b", ms(0)); err == nil {
		t.Error("Fetch of an undecodable value succeeded")
	}
}

func TestWindowSpecValidation(t *testing.T) {
	t.Parallel()
	env := &fakeEnv{users: map[string]string{}}
	ctx := &nodeContext[string, string]{env: env, node: "p"}
	for _, c := range []struct {
		spec *WindowSpec[string, int64]
		want []string
	}{
		{Window("zero", 0, time.Hour, serde.String(), serde.Int64()), []string{`store "zero"`, "window size 0s"}},
		{Window("negative", -time.Second, time.Hour, serde.String(), serde.Int64()), []string{`store "negative"`, "window size -1s"}},
		{Window("fraction", 1500*time.Microsecond, time.Hour, serde.String(), serde.Int64()), []string{`store "fraction"`, "window size 1.5ms"}},
		{Window("short", time.Minute, time.Second, serde.String(), serde.Int64()), []string{`store "short"`, "retention 1s is shorter than the window size 1m0s"}},
		{Window[string, int64]("noserde", time.Minute, time.Minute, nil, serde.Int64()), []string{`store "noserde"`, "nil serde"}},
		{Window[string, int64]("all", 0, -1, nil, nil), []string{"nil serde", "window size 0s", "retention -1ns"}},
	} {
		_, err := c.spec.Open(ctx)
		for _, want := range c.want {
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("Open(%s) = %v, want an error with %q", c.spec.Name(), err, want)
			}
		}
	}

	// A valid spec declares a window store with its retention.
	tp := NewTopology()
	p := tp.AddProcessor("p", split(), tp.AddSource("in", "in", serde.String(), serde.String()))
	tp.AddStore(Window("w", time.Minute, 2*time.Hour, serde.String(), serde.Int64()), p)
	g, err := tp.graph()
	if err != nil {
		t.Fatal(err)
	}
	if st := g.Stores[0]; st.Name != "w" || st.Kind != graph.WindowStore || st.Retention != 2*time.Hour {
		t.Errorf("graph store = %+v", st)
	}
}

func (x win) String() string {
	return fmt.Sprintf("%s[%d,%d)=%d", x.key, x.start, x.end, x.value)
}
