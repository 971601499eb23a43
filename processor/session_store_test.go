package processor

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/weirstream/weir/changelog"
	"github.com/weirstream/weir/internal/graph"
	"github.com/weirstream/weir/internal/statelog"
	"github.com/weirstream/weir/serde"
)

// openSession opens spec for a processor "p" of env.
func openSession[V any](t *testing.T, env *clockEnv, spec *SessionSpec[string, V]) SessionStore[string, V] {
	t.Helper()
	if env.users == nil {
		env.users = map[string]string{}
	}
	env.users[spec.Name()] = "p"
	s, err := spec.Open(&nodeContext[string, string]{env: env, node: "p"})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func sess(key string, start, end int64) Windowed[string] {
	return Windowed[string]{Key: key, Start: ms(start), End: ms(end)}
}

// sessionCountProc counts records per session of a key, sessions being
// separated by more than gap without records: Kafka Streams' session
// windowed count, done with FindSessions, Remove and Put.
type sessionCountProc struct {
	spec  *SessionSpec[string, int64]
	gap   time.Duration
	store SessionStore[string, int64]
	late  int
}

func (p *sessionCountProc) Init(ctx Context[string, int64]) error {
	s, err := p.spec.Open(ctx)
	p.store = s
	return err
}

func (p *sessionCountProc) Process(ctx Context[string, int64], rec Record[string, string]) error {
	merged := Windowed[string]{Key: rec.Key, Start: rec.Timestamp, End: rec.Timestamp}
	count := int64(1)
	// Collect first: the iterator reads the store as it goes.
	var old []Windowed[string]
	for s, n := range p.store.FindSessions(rec.Key, rec.Timestamp.Add(-p.gap), rec.Timestamp.Add(p.gap)) {
		old = append(old, s)
		count += n
		if s.Start.Before(merged.Start) {
			merged.Start = s.Start
		}
		if s.End.After(merged.End) {
			merged.End = s.End
		}
	}
	if err := p.store.Err(); err != nil {
		return err
	}
	for _, s := range old {
		if err := p.store.Remove(s); err != nil {
			return err
		}
	}
	if err := p.store.Put(merged, count); errors.Is(err, changelog.ErrExpired) {
		p.late++
		return nil
	} else if err != nil {
		return err
	}
	return ctx.Forward(Record[string, int64]{Key: rec.Key, Value: count, Timestamp: rec.Timestamp})
}

func (p *sessionCountProc) Close() error { return nil }

type sessionValue struct {
	key        string
	start, end int64
	value      int64
}

func collectSessions(seq func(func(Windowed[string], int64) bool)) []sessionValue {
	var out []sessionValue
	for s, n := range seq {
		out = append(out, sessionValue{s.Key, s.Start.UnixMilli(), s.End.UnixMilli(), n})
	}
	return out
}

func TestSessionStoreFindSessionsBoundaries(t *testing.T) {
	t.Parallel()
	env := &clockEnv{fakeEnv: &fakeEnv{}}
	s := openSession(t, env, Session("sessions", time.Hour, serde.String(), serde.Int64()))
	for i, x := range []Windowed[string]{
		sess("a", 10, 20), sess("a", 30, 40), sess("a", 50, 50), sess("a", 5, 40), sess("b", 10, 20), sess("", 0, 100),
	} {
		if err := s.Put(x, int64(i+1)); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		earliestEnd, latestStart int64
		want                     []sessionValue
	}{
		// End == earliestEnd and Start == latestStart are included; order
		// is by end, then start.
		{20, 30, []sessionValue{{"a", 10, 20, 1}, {"a", 5, 40, 4}, {"a", 30, 40, 2}}},
		{21, 29, []sessionValue{{"a", 5, 40, 4}}},
		{41, 50, []sessionValue{{"a", 50, 50, 3}}},
		{50, 49, nil},
		{0, 100, []sessionValue{{"a", 10, 20, 1}, {"a", 5, 40, 4}, {"a", 30, 40, 2}, {"a", 50, 50, 3}}},
		{51, 100, nil},
	} {
		got := collectSessions(s.FindSessions("a", ms(c.earliestEnd), ms(c.latestStart)))
		if !slices.Equal(got, c.want) {
			t.Errorf("FindSessions(a, %d, %d) = %v, want %v", c.earliestEnd, c.latestStart, got, c.want)
		}
	}
	// Times are rounded down to the millisecond.
	if got := collectSessions(s.FindSessions("a", ms(40).Add(999*time.Microsecond), ms(29).Add(999*time.Microsecond))); !slices.Equal(got, []sessionValue{{"a", 5, 40, 4}}) {
		t.Errorf("FindSessions(a, 40.999, 29.999) = %v, want a [5,40] only", got)
	}

	// Fetch and Remove need the exact start and end.
	if n, ok, err := s.Fetch(sess("a", 30, 40)); err != nil || !ok || n != 2 {
		t.Errorf("Fetch(a [30,40]) = %d, %v, %v", n, ok, err)
	}
	if _, ok, err := s.Fetch(sess("a", 30, 41)); err != nil || ok {
		t.Errorf("Fetch(a [30,41]) = %v, %v; want absent", ok, err)
	}
	if err := s.Remove(sess("a", 30, 41)); err != nil {
		t.Errorf("Remove of an absent session = %v", err)
	}
	if err := s.Remove(sess("a", 30, 40)); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := s.Fetch(sess("a", 30, 40)); ok {
		t.Error("Fetch found a removed session")
	}
	if err := s.Put(sess("a", 41, 40), 1); err == nil {
		t.Error("Put of a session that ends before it starts succeeded")
	}

	// All orders by key, then end, then start.
	want := []sessionValue{{"", 0, 100, 6}, {"a", 10, 20, 1}, {"a", 5, 40, 4}, {"a", 50, 50, 3}, {"b", 10, 20, 5}}
	if got := collectSessions(s.All()); !slices.Equal(got, want) {
		t.Errorf("All = %v, want %v", got, want)
	}
	if err := s.Err(); err != nil {
		t.Error(err)
	}
	if n := env.stores["sessions"].Len(); n != 10 {
		t.Errorf("the store's Bytes hold %d entries, want 10 for 5 sessions", n)
	}
}

func TestSessionMergeAggregation(t *testing.T) {
	t.Parallel()
	spec := Session("session-counts", 50*time.Millisecond, serde.String(), serde.Int64())
	var proc *sessionCountProc
	tp := NewTopology()
	src := tp.AddSource("in", "in", serde.String(), serde.String())
	c := tp.AddProcessor("count", func() Processor[string, string, string, int64] {
		proc = &sessionCountProc{spec: spec, gap: 10 * time.Millisecond}
		return proc
	}, src)
	tp.AddStore(spec, c)
	tp.AddSink("out", "out", serde.String(), serde.Int64(), c)
	g, err := tp.graph()
	if err != nil {
		t.Fatal(err)
	}
	if st := g.Stores[0]; st.Kind != graph.SessionStore || st.Retention != 50*time.Millisecond {
		t.Errorf("graph store = %+v", st)
	}
	env := &clockEnv{fakeEnv: &fakeEnv{users: map[string]string{"session-counts": "count"}}}
	in := instantiate(t, g, env)["in"]

	steps := []struct {
		key  string
		ts   int64
		want []sessionValue // All after the record
	}{
		{"a", 0, []sessionValue{{"a", 0, 0, 1}}},
		{"a", 5, []sessionValue{{"a", 0, 5, 2}}},
		// 30 is more than the gap after 5: a new session.
		{"a", 30, []sessionValue{{"a", 0, 5, 2}, {"a", 30, 30, 1}}},
		// 15 is within the gap of [0,5] (end 5 = 15 - gap), not of [30,30].
		{"a", 15, []sessionValue{{"a", 0, 15, 3}, {"a", 30, 30, 1}}},
		{"b", 17, []sessionValue{{"a", 0, 15, 3}, {"a", 30, 30, 1}, {"b", 17, 17, 1}}},
		// 20 bridges [0,15] and [30,30] (start 30 = 20 + gap).
		{"a", 20, []sessionValue{{"a", 0, 30, 5}, {"b", 17, 17, 1}}},
	}
	for _, st := range steps {
		if err := env.feedAt(t, in, st.key, "", ms(st.ts)); err != nil {
			t.Fatal(err)
		}
		if got := collectSessions(proc.store.All()); !slices.Equal(got, st.want) {
			t.Fatalf("after %s@%d: sessions %v, want %v", st.key, st.ts, got, st.want)
		}
	}
	// Removed sessions leave nothing behind: two entries per session.
	if n := env.stores["session-counts"].Len(); n != 4 {
		t.Errorf("the store's Bytes hold %d entries, want 4 for 2 sessions", n)
	}
	var forwarded []string
	for _, s := range env.sent {
		forwarded = append(forwarded, s.key)
	}
	if len(forwarded) != len(steps) {
		t.Errorf("forwarded %v, want one record per input", forwarded)
	}

	// Stream time 75: the cutoff is 25, so b's session (end 17) expires
	// and a's (end 30) stays.
	if err := env.feedAt(t, in, "c", "", ms(75)); err != nil {
		t.Fatal(err)
	}
	if got, want := collectSessions(proc.store.All()), []sessionValue{{"a", 0, 30, 5}, {"c", 75, 75, 1}}; !slices.Equal(got, want) {
		t.Errorf("after expiry: %v, want %v", got, want)
	}
	if n := env.stores["session-counts"].Len(); n != 4 {
		t.Errorf("the store's Bytes hold %d entries after expiry, want 4", n)
	}
	// A record for b at 12 would make the session [12,12], ended before
	// the cutoff: late, and not written.
	if err := env.feedAt(t, in, "b", "", ms(12)); err != nil {
		t.Fatal(err)
	}
	if proc.late != 1 {
		t.Errorf("late = %d, want 1", proc.late)
	}
	// A record for a at 24 merges with [0,30], which has not expired.
	if err := env.feedAt(t, in, "a", "", ms(24)); err != nil {
		t.Fatal(err)
	}
	if got, want := collectSessions(proc.store.All()), []sessionValue{{"a", 0, 30, 6}, {"c", 75, 75, 1}}; !slices.Equal(got, want) {
		t.Errorf("after late records: %v, want %v", got, want)
	}
	err = proc.store.Put(sess("b", 0, 24), 1)
	if !errors.Is(err, changelog.ErrExpired) || !strings.Contains(err.Error(), "session-counts") {
		t.Errorf("Put of an expired session = %v, want ErrExpired naming the store", err)
	}
	// Stream time 81: the cutoff is 31, and a Remove alone expires a's session.
	env.now = ms(81)
	if err := proc.store.Remove(sess("x", 0, 0)); err != nil {
		t.Fatal(err)
	}
	if n := env.stores["session-counts"].Len(); n != 2 {
		t.Errorf("the store's Bytes hold %d entries, want 2 after a's session expired", n)
	}
	if _, ok, _ := proc.store.Fetch(sess("a", 0, 30)); ok {
		t.Error("Fetch found an expired session")
	}
}

func TestSessionStoreDecodeErrorEndsIteration(t *testing.T) {
	t.Parallel()
	env := &clockEnv{fakeEnv: &fakeEnv{}}
	s := openSession(t, env, Session("bad", time.Hour, serde.String(), serde.Int64()))
	if err := s.Put(sess("a", 0, 1), 1); err != nil {
		t.Fatal(err)
	}
	raw, err := statelog.NewSessionBytes(env.stores["bad"], time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if err := raw.Put([]byte("a"), ms(2), ms(3), []byte{1}); err != nil {
		t.Fatal(err)
	}
	if err := raw.Put([]byte{0xff}, ms(0), ms(0), []byte{0, 0, 0, 0, 0, 0, 0, 1}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		seq  func(func(Windowed[string], int64) bool)
		err  string
	}{
		{"FindSessions", s.FindSessions("a", ms(0), ms(10)), "store bad: deserialize value"},
		{"All", s.All(), "store bad: deserialize value"},
	} {
		got := collectSessions(c.seq)
		err := s.Err()
		if !slices.Equal(got, []sessionValue{{"a", 0, 1, 1}}) || err == nil || !strings.Contains(err.Error(), c.err) {
			t.Errorf("%s yielded %v then Err = %v; want the good session then %q", c.name, got, err, c.err)
		}
		if err := s.Err(); err != nil {
			t.Errorf("%s: second Err = %v, want it cleared", c.name, err)
		}
	}
	if err := raw.Remove([]byte("a"), ms(2), ms(3)); err != nil {
		t.Fatal(err)
	}
	// Keys sort as bytes: "a" then 0xff, which does not decode.
	got := collectSessions(s.All())
	if err := s.Err(); !slices.Equal(got, []sessionValue{{"a", 0, 1, 1}}) || err == nil || !strings.Contains(err.Error(), "deserialize key") {
		t.Errorf("All yielded %v then Err = %v; want a key decode error", got, err)
	}
	if _, _, err := s.Fetch(Windowed[string]{Key: "a", Start: ms(2), End: ms(3)}); err != nil {
		t.Errorf("Fetch of a removed session = %v", err)
	}
}

func TestSessionStoreKeepsEmptyValues(t *testing.T) {
	// A serde may serialize a value as nil; the byte store removes on nil,
	// so the typed store must store it as empty instead.
	t.Parallel()
	env := &clockEnv{fakeEnv: &fakeEnv{}}
	s := openSession(t, env, Session("raw", time.Second, serde.String(), serde.Bytes()))
	if err := s.Put(sess("k", 0, 0), nil); err != nil {
		t.Fatal(err)
	}
	if v, ok, err := s.Fetch(sess("k", 0, 0)); err != nil || !ok || len(v) != 0 {
		t.Errorf("Fetch = %q, %v, %v; want an empty value", v, ok, err)
	}
}

func TestSessionSpecValidation(t *testing.T) {
	t.Parallel()
	ctx := &nodeContext[string, string]{env: &fakeEnv{}, node: "p"}
	for _, c := range []struct {
		spec *SessionSpec[string, int64]
		want []string
	}{
		{Session("zero", 0, serde.String(), serde.Int64()), []string{`store "zero"`, "retention 0s is below one millisecond"}},
		{Session("sub", time.Microsecond, serde.String(), serde.Int64()), []string{`store "sub"`, "retention 1µs"}},
		{Session[string, int64]("noserde", time.Minute, serde.String(), nil), []string{`store "noserde"`, "nil serde"}},
		{Session[string, int64]("both", -time.Second, nil, nil), []string{`store "both"`, "nil serde", "retention -1s"}},
	} {
		_, err := c.spec.Open(ctx)
		for _, want := range c.want {
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("Open(%s) = %v, want an error with %q", c.spec.Name(), err, want)
			}
		}
	}
}
