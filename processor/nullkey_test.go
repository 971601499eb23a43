package processor

import (
	"fmt"
	"iter"
	"slices"
	"testing"
	"time"

	"github.com/weirstream/weir/internal/graph"
	"github.com/weirstream/weir/internal/statelog"
	"github.com/weirstream/weir/serde"
)

// guardedMemory is a store's bytes under the runtime's null-key rule, as
// weir's task gives them: while active (a null-key record is processed),
// writes of the empty key are dropped and counted, and reads of it miss.
type guardedMemory struct {
	statelog.Memory
	active  bool
	dropped int
}

var _ graph.NullKeyGuard = (*guardedMemory)(nil)

func (g *guardedMemory) NullKey(key []byte) bool { return g.active && len(key) == 0 }
func (g *guardedMemory) DropNullKey(key []byte) bool {
	if !g.NullKey(key) {
		return false
	}
	g.dropped++
	return true
}
func (g *guardedMemory) Get(key []byte) ([]byte, error) {
	if g.NullKey(key) {
		return nil, nil
	}
	return g.Memory.Get(key)
}
func (g *guardedMemory) Put(key, value []byte) error {
	if g.DropNullKey(key) {
		return nil
	}
	return g.Memory.Put(key, value)
}
func (g *guardedMemory) Delete(key []byte) error {
	if g.DropNullKey(key) {
		return nil
	}
	return g.Memory.Delete(key)
}

// guardedEnv gives every store the same guardedMemory.
type guardedEnv struct {
	*clockEnv
	mem *guardedMemory
}

func (e *guardedEnv) Store(string, string) (statelog.Bytes, error) { return e.mem, nil }

func newGuardedEnv() (*guardedEnv, StoreContext) {
	env := &guardedEnv{clockEnv: &clockEnv{fakeEnv: &fakeEnv{}}, mem: &guardedMemory{}}
	return env, &nodeContext[string, string]{env: env, node: "p"}
}

// A window store's bytes see keys with a prefix byte before the user key,
// never an empty key, so the rule for null-key records would not reach
// them there: the store applies it to the user key. Its expiry, which
// deletes windows no record named, is not affected.
func TestWindowStoreAppliesTheNullKeyRuleToTheUserKey(t *testing.T) {
	t.Parallel()
	env, ctx := newGuardedEnv()
	s, err := Window("w", time.Second, 10*time.Second, serde.String(), serde.Int64()).Open(ctx)
	if err != nil {
		t.Fatal(err)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	// A record with a present but empty key and a keyed one.
	must(s.Put("", ms(0), 1))
	must(s.Put("a", ms(0), 1))

	env.mem.active = true // a record with a null Kafka key
	must(s.Put("", ms(1000), 2))
	must(s.Put("a", ms(1000), 2))
	if v, found, err := s.Fetch("", ms(0)); err != nil || found {
		t.Errorf(`Fetch("") = %v, %v, %v; want a miss`, v, found, err)
	}
	for name, seq := range map[string]func(string, time.Time, time.Time) iter.Seq2[time.Time, int64]{
		"FetchRange": s.FetchRange, "FetchRangeBackward": s.FetchRangeBackward,
	} {
		for start := range seq("", ms(0), ms(5000)) {
			t.Errorf(`%s("") yields the window at %v; want nothing`, name, start)
		}
	}
	if _, found, _ := s.Fetch("a", ms(1000)); !found {
		t.Error(`Fetch("a") misses; a keyed read must not`)
	}
	if env.mem.dropped != 1 {
		t.Errorf("%d writes dropped, want 1 (the empty key's Put)", env.mem.dropped)
	}
	var all []string
	for w, v := range s.All() {
		all = append(all, fmt.Sprintf("%q@%d=%d", w.Key, w.Start.UnixMilli(), v))
	}
	if want := []string{`""@0=1`, `"a"@0=1`, `"a"@1000=2`}; !slices.Equal(all, want) {
		t.Errorf("All = %v, want %v", all, want)
	}

	// Stream time moves on during a null-key record: every expired window
	// goes, the one under the empty key too.
	env.now = ms(10_500)
	must(s.Put("b", ms(10_000), 1))
	if n := env.mem.Len(); n != 4 {
		t.Errorf("%d entries after expiry, want 4 (the windows at 1000 and 10000, each with its index entry)", n)
	}
	if _, found, _ := s.Fetch("", ms(0)); found {
		t.Error("the expired window under the empty key is still there")
	}
}

// The same for a session store: Put and Remove of the empty user key are
// dropped, Fetch and FindSessions of it miss, All and expiry are unchanged.
func TestSessionStoreAppliesTheNullKeyRuleToTheUserKey(t *testing.T) {
	t.Parallel()
	env, ctx := newGuardedEnv()
	s, err := Session("s", 10*time.Second, serde.String(), serde.Int64()).Open(ctx)
	if err != nil {
		t.Fatal(err)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(s.Put(sess("", 0, 0), 1))
	must(s.Put(sess("a", 0, 0), 1))

	env.mem.active = true
	must(s.Put(sess("", 1000, 1000), 2))
	must(s.Remove(sess("", 0, 0)))
	must(s.Put(sess("a", 1000, 1000), 2))
	if v, found, err := s.Fetch(sess("", 0, 0)); err != nil || found {
		t.Errorf(`Fetch("") = %v, %v, %v; want a miss`, v, found, err)
	}
	for w := range s.FindSessions("", ms(0), ms(5000)) {
		t.Errorf(`FindSessions("") yields %v; want nothing`, w)
	}
	if env.mem.dropped != 2 {
		t.Errorf("%d writes dropped, want 2 (the empty key's Put and Remove)", env.mem.dropped)
	}
	var all []string
	for w, v := range s.All() {
		all = append(all, fmt.Sprintf("%q@%d-%d=%d", w.Key, w.Start.UnixMilli(), w.End.UnixMilli(), v))
	}
	if want := []string{`""@0-0=1`, `"a"@0-0=1`, `"a"@1000-1000=2`}; !slices.Equal(all, want) {
		t.Errorf("All = %v, want %v", all, want)
	}

	env.now = ms(10_500)
	must(s.Put(sess("b", 10_000, 10_000), 1))
	if n := env.mem.Len(); n != 4 {
		t.Errorf("%d entries after expiry, want 4 (the sessions ending at 1000 and 10000, each with its index entry)", n)
	}
}
