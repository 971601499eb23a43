package processor

import (
	"errors"
	"testing"
	"time"

	"github.com/weirstream/weir/changelog"
	"github.com/weirstream/weir/internal/statelog"
	"github.com/weirstream/weir/serde"
)

// memoryStoreContext opens every store on one in-memory Bytes, at a
// stream time the test sets.
type memoryStoreContext struct {
	b   *statelog.Memory
	now time.Time
}

func (c *memoryStoreContext) storeBytes(string) (statelog.Bytes, error) { return c.b, nil }
func (c *memoryStoreContext) StreamTime() time.Time                     { return c.now }

func at(ms int64) time.Time { return time.UnixMilli(ms).UTC() }

// TestVersionedStore follows one key's versions: lookups as of a time find
// the version valid then, whatever order the versions were written in; a
// deletion is a version; versions no lookup within the history can need
// are deleted when the key is next written, lookups before the history
// find only a latest version valid then, and versions from before the
// history are refused.
func TestVersionedStore(t *testing.T) {
	t.Parallel()
	ctx := &memoryStoreContext{b: &statelog.Memory{}}
	st, err := Versioned("v", 100*time.Millisecond, serde.String(), serde.String()).Open(ctx)
	if err != nil {
		t.Fatal(err)
	}
	get := func(asOf int64) string {
		t.Helper()
		v, from, found, err := st.GetAsOf("k", at(asOf))
		if err != nil {
			t.Fatal(err)
		}
		if !found {
			return "-"
		}
		return v + "@" + from.Format("05.000")
	}
	ctx.now = at(30)
	for _, w := range []struct {
		v  string
		ms int64
	}{{"a", 10}, {"c", 30}, {"b", 20}} { // b arrives out of order
		if err := st.Put("k", w.v, at(w.ms)); err != nil {
			t.Fatal(err)
		}
	}
	// Another key, whose versions must not mix with k's.
	if err := st.Put("k2", "z", at(15)); err != nil {
		t.Fatal(err)
	}
	for asOf, want := range map[int64]string{5: "-", 10: "a@00.010", 19: "a@00.010", 20: "b@00.020", 29: "b@00.020", 30: "c@00.030", 1000: "c@00.030"} {
		if got := get(asOf); got != want {
			t.Errorf("as of %d: %s, want %s", asOf, got, want)
		}
	}
	if err := st.Delete("k", at(40)); err != nil {
		t.Fatal(err)
	}
	if got := get(45); got != "-" {
		t.Errorf("after the deletion: %s, want none", got)
	}
	if got := get(35); got != "c@00.030" {
		t.Errorf("before the deletion: %s, want c@00.030", got)
	}
	if _, _, found, err := st.Get("k"); err != nil || found {
		t.Errorf("Get of a deleted key = %v, %v", found, err)
	}
	// Stream time moves on: the history starts at 150 - 100 = 50. The
	// version valid at 50 (the deletion at 40) stays; older ones go at
	// the next write.
	ctx.now = at(150)
	if err := st.Put("k", "d", at(150)); err != nil {
		t.Fatal(err)
	}
	if got := get(30); got != "-" {
		t.Errorf("as of 30, before the history: %s, want none", got)
	}
	if got := get(60); got != "-" {
		t.Errorf("as of 60 (deleted at 40): %s, want none", got)
	}
	if v, from, found, err := st.Get("k"); err != nil || !found || v != "d" || !from.Equal(at(150)) {
		t.Errorf("Get = %q, %v, %v, %v; want d from 150", v, from, found, err)
	}
	entries := 0
	for range ctx.b.Range(nil, nil) {
		entries++
	}
	if entries != 3 { // k@40 (deletion), k@150, k2@15
		t.Errorf("%d entries kept, want 3: the versions before 40 are not needed", entries)
	}
	if v, _, found, _ := st.GetAsOf("k2", at(60)); !found || v != "z" {
		t.Errorf("k2 as of 60 = %q, %v; want z", v, found)
	}
	// Before the history only the latest version is known: k2's, from
	// 15, answers as of 30; k's, from 150, does not (above).
	if v, _, found, _ := st.GetAsOf("k2", at(30)); !found || v != "z" {
		t.Errorf("k2 as of 30, before the history = %q, %v; want z, its latest version, valid since 15", v, found)
	}
	// A version from before the history is not kept.
	if err := st.Put("k", "late", at(49)); !errors.Is(err, changelog.ErrExpired) {
		t.Errorf("Put before the history = %v, want changelog.ErrExpired", err)
	}
	if err := st.Delete("k2", at(10)); !errors.Is(err, changelog.ErrExpired) {
		t.Errorf("Delete before the history = %v, want changelog.ErrExpired", err)
	}
	if got := get(60); got != "-" {
		t.Errorf("as of 60 after a refused version at 49: %s, want none (deleted at 40)", got)
	}
}
