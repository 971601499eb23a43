package statelog_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/weirstream/weir/changelog"
	"github.com/weirstream/weir/internal/statelog"
)

func newTTL(t *testing.T, b statelog.Bytes, ttl time.Duration) *statelog.TTLBytes {
	t.Helper()
	s, err := statelog.NewTTLBytes(b, ttl)
	if err != nil {
		t.Fatalf("NewTTLBytes: %v", err)
	}
	return s
}

func ttlGet(t *testing.T, s *statelog.TTLBytes, key string) string {
	t.Helper()
	v, err := s.Get([]byte(key))
	if err != nil {
		t.Fatalf("Get(%q): %v", key, err)
	}
	if v == nil {
		return "<absent>"
	}
	return string(v)
}

func ttlPut(t *testing.T, s *statelog.TTLBytes, key, value string) {
	t.Helper()
	if err := s.Put([]byte(key), []byte(value)); err != nil {
		t.Fatalf("Put(%q): %v", key, err)
	}
}

func ttlExpire(t *testing.T, s *statelog.TTLBytes, now int64, limit int) int {
	t.Helper()
	n, err := s.Expire(ms(now), limit)
	if err != nil {
		t.Fatalf("Expire(%d): %v", now, err)
	}
	return n
}

func ttlAll(t *testing.T, s *statelog.TTLBytes) string {
	t.Helper()
	var out []string
	for k, v := range s.All() {
		out = append(out, fmt.Sprintf("%q=%q", k, v))
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprint(out)
}

func TestNewTTLBytesValidates(t *testing.T) {
	t.Parallel()
	for _, ttl := range []time.Duration{0, -time.Second, time.Microsecond, 1500 * time.Microsecond} {
		if _, err := statelog.NewTTLBytes(&statelog.Memory{}, ttl); err == nil {
			t.Errorf("NewTTLBytes(ttl %v) succeeded", ttl)
		}
	}
	if _, err := statelog.NewTTLBytes(nil, time.Second); err == nil {
		t.Error("NewTTLBytes(nil) succeeded")
	}
	s := newTTL(t, &statelog.Memory{}, time.Second)
	if s.TTL() != time.Second {
		t.Errorf("TTL() = %v", s.TTL())
	}
}

// TestTTLExpiresByStreamTime: an entry written at stream time s is found
// while the stream time is before s + TTL, and neither Get nor All sees
// it from then on, before and after Expire deleted it. Writing again
// starts the TTL over.
func TestTTLExpiresByStreamTime(t *testing.T) {
	t.Parallel()
	m := &statelog.Memory{}
	s := newTTL(t, m, 100*time.Millisecond)
	ttlExpire(t, s, 1000, 10)
	ttlPut(t, s, "a", "1")
	ttlPut(t, s, "b", "2")
	ttlExpire(t, s, 1050, 10)
	ttlPut(t, s, "b", "3") // b now expires at 1150
	ttlPut(t, s, "empty", "")
	if n := ttlExpire(t, s, 1099, 10); n != 0 {
		t.Errorf("Expire(1099) removed %d, want 0", n)
	}
	if got := ttlAll(t, s); got != `["a"="1" "b"="3" "empty"=""]` {
		t.Errorf("All at 1099 = %s", got)
	}
	if got := ttlGet(t, s, "a"); got != "1" {
		t.Errorf("Get(a) at 1099 = %s, want 1", got)
	}
	// 1100: a expired; b's first write too, but not its second.
	if n := ttlExpire(t, s, 1100, 10); n != 1 {
		t.Errorf("Expire(1100) removed %d, want 1 (a)", n)
	}
	if got := ttlGet(t, s, "a"); got != "<absent>" {
		t.Errorf("Get(a) at 1100 = %s, want absent", got)
	}
	if got := ttlGet(t, s, "b"); got != "3" {
		t.Errorf("Get(b) at 1100 = %s, want 3: writing again starts the TTL over", got)
	}
	// Expired but not yet deleted (limit 0): invisible all the same.
	ttlExpire(t, s, 1150, 0)
	if got := ttlGet(t, s, "b"); got != "<absent>" {
		t.Errorf("Get(b) at 1150 before its deletion = %s, want absent", got)
	}
	if got := ttlAll(t, s); got != "[]" {
		t.Errorf("All at 1150 before the deletions = %s, want []", got)
	}
	// Stream time never goes back.
	ttlExpire(t, s, 1000, 0)
	if got := ttlGet(t, s, "b"); got != "<absent>" {
		t.Errorf("Get(b) after an older stream time = %s, want absent", got)
	}
	if n := ttlExpire(t, s, 1150, 10); n != 2 {
		t.Errorf("Expire(1150) removed %d, want 2 (b, empty)", n)
	}
	if m.Len() != 0 {
		t.Errorf("after every entry expired the Bytes holds %d entries (index entries left behind?)", m.Len())
	}
}

// TestTTLExpireIsBounded: Expire deletes at most limit entries per call,
// and the calls that follow go on where it stopped.
func TestTTLExpireIsBounded(t *testing.T) {
	t.Parallel()
	m := &statelog.Memory{}
	s := newTTL(t, m, 10*time.Millisecond)
	for i := range 10 {
		ttlExpire(t, s, int64(1000+i), 3)
		ttlPut(t, s, fmt.Sprint(i), "v")
	}
	var got []int
	for now := int64(5000); ; now++ {
		n := ttlExpire(t, s, now, 3)
		if n == 0 {
			break
		}
		got = append(got, n)
	}
	if !slices.Equal(got, []int{3, 3, 3, 1}) {
		t.Errorf("removed per call = %v, want [3 3 3 1]", got)
	}
	if m.Len() != 0 {
		t.Errorf("the Bytes holds %d entries after everything expired", m.Len())
	}
}

// TestTTLExpireReadsNothingWhenNothingIsDue: with no entry due, Expire
// returns without scanning the index, however often it is called.
func TestTTLExpireReadsNothingWhenNothingIsDue(t *testing.T) {
	t.Parallel()
	f := &faultyBytes{}
	s := newTTL(t, f, time.Second)
	ttlExpire(t, s, 1000, 10)
	ttlPut(t, s, "a", "1") // expires at 2000
	f.fail = func(op string) error {
		if op == "range" {
			return errBoom
		}
		return nil
	}
	for now := int64(1000); now < 2000; now += 100 {
		if _, err := s.Expire(ms(now), 10); err != nil {
			t.Fatalf("Expire(%d) scanned the index with nothing due: %v", now, err)
		}
	}
	if _, err := s.Expire(ms(2000), 10); !errors.Is(err, errBoom) {
		t.Fatalf("Expire(2000) = %v; want it to scan the index (and meet the fault)", err)
	}
}

// TestTTLIndexHasOneEntryPerKey: Put and Delete keep one index entry per
// key, deleting the old one, so a key written often does not pile up
// index entries until its old expiries pass.
func TestTTLIndexHasOneEntryPerKey(t *testing.T) {
	t.Parallel()
	m := &statelog.Memory{}
	s := newTTL(t, m, 100*time.Millisecond)
	for now := int64(1000); now < 1050; now++ {
		ttlExpire(t, s, now, 10)
		ttlPut(t, s, "a", fmt.Sprint(now))
		ttlPut(t, s, "a", fmt.Sprint(now)) // the same expiry again
	}
	if m.Len() != 2 {
		t.Errorf("after 100 Puts of one key the Bytes holds %d entries, want 2 (the key and one index entry)", m.Len())
	}
	if err := s.Delete([]byte("a")); err != nil {
		t.Fatal(err)
	}
	if m.Len() != 0 {
		t.Errorf("after Delete the Bytes holds %d entries, want none", m.Len())
	}
}

// TestTTLStaleIndexEntries: the stale index entries a restore leaves (of
// a key's overwritten or deleted records) never delete the key's newer
// value, and go at their own expiry.
func TestTTLStaleIndexEntries(t *testing.T) {
	t.Parallel()
	c := newCommitter(statelog.TTLIndex())
	s := newTTL(t, c.buf, 100*time.Millisecond)
	ttlExpire(t, s, 1000, 10)
	ttlPut(t, s, "a", "1") // expires at 1100
	ttlPut(t, s, "d", "1")
	c.commit(t)
	if err := s.Delete([]byte("d")); err != nil {
		t.Fatal(err)
	}
	ttlExpire(t, s, 1050, 10)
	ttlPut(t, s, "a", "2") // expires at 1150
	c.commit(t)

	m := restoreInto(t, c.log, statelog.TTLIndex(), rand.New(rand.NewPCG(1, 1)))
	if got, want := m.Len(), 4; got != want {
		t.Fatalf("the restored Bytes holds %d entries, want %d (a, its index entry, and the stale ones of a@1100 and d@1100)", got, want)
	}
	r := newTTL(t, m, 100*time.Millisecond)
	if n := ttlExpire(t, r, 1100, 10); n != 0 {
		t.Errorf("Expire(1100) removed %d keys, want 0: only stale index entries were due", n)
	}
	if got := ttlGet(t, r, "a"); got != "2" {
		t.Errorf("Get(a) = %s, want 2", got)
	}
	if got, want := m.Len(), 2; got != want {
		t.Errorf("after Expire(1100) the Bytes holds %d entries, want %d (a and its index entry)", got, want)
	}
	if n := ttlExpire(t, r, 1150, 10); n != 1 || m.Len() != 0 {
		t.Errorf("Expire(1150) removed %d keys, leaving %d entries; want 1 and none", n, m.Len())
	}
}

// TestTTLOneChangelogRecordPerWriteAndRestore runs random writes, deletes
// and expiry over several commits: each Put or Delete, and each expired
// key deleted, is one changelog record, never an index entry. Restoring
// the changelog (as written and as compacted) gives a store that reads
// the same at the same stream time and expires the same keys after.
func TestTTLOneChangelogRecordPerWriteAndRestore(t *testing.T) {
	t.Parallel()
	keys := []string{"a", "b", "c", "d", "e", "f", ""}
	for seed := range uint64(20) {
		rng := rand.New(rand.NewPCG(seed, 6))
		c := newCommitter(statelog.TTLIndex())
		s := newTTL(t, c.buf, 50*time.Millisecond)
		now := int64(1000)
		ttlExpire(t, s, now, 64)
		for range 30 {
			changed := map[string]bool{}
			for range rng.IntN(6) {
				k := keys[rng.IntN(len(keys))]
				changed[k] = true
				if rng.IntN(5) == 0 {
					if err := s.Delete([]byte(k)); err != nil {
						t.Fatal(err)
					}
					continue
				}
				ttlPut(t, s, k, fmt.Sprint(rng.IntN(100)))
			}
			// The keys that expire as stream time moves on are deleted
			// (the limit exceeds the keys): changes too.
			now += rng.Int64N(20)
			before := map[string]bool{}
			for k := range s.All() {
				before[string(k)] = true
			}
			ttlExpire(t, s, now, 64)
			for k := range s.All() {
				delete(before, string(k))
			}
			for k := range before {
				changed[k] = true
			}
			if n := c.commit(t); n != len(changed) {
				t.Fatalf("seed %d: a commit that changed %d keys sent %d changelog records, want one per key", seed, len(changed), n)
			}
		}
		wantOnlyPrimaries(t, c.log)
		var want []string
		for _, k := range keys {
			want = append(want, k+"="+ttlGet(t, s, k))
		}
		wantAll := ttlAll(t, s)
		for name, log := range map[string][]statelog.Record{"full": c.log, "compacted": compacted(c.log)} {
			restored := restoreInto(t, log, statelog.TTLIndex(), rng)
			r := newTTL(t, restored, 50*time.Millisecond)
			ttlExpire(t, r, now, 1000)
			var got []string
			for _, k := range keys {
				got = append(got, k+"="+ttlGet(t, r, k))
			}
			if !slices.Equal(got, want) || ttlAll(t, r) != wantAll {
				t.Fatalf("seed %d: store restored from the %s changelog reads %v %s, want %v %s", seed, name, got, ttlAll(t, r), want, wantAll)
			}
			// Its rebuilt index expires every key, leaving nothing.
			ttlExpire(t, r, now+1000, 1000)
			if restored.Len() != 0 {
				t.Fatalf("seed %d: the store restored from the %s changelog holds %d entries after everything expired", seed, name, restored.Len())
			}
		}
	}
}

func TestTTLMalformed(t *testing.T) {
	t.Parallel()
	m := &statelog.Memory{}
	s := newTTL(t, m, time.Second)
	m.Put([]byte("\x01a"), []byte("short"))
	if _, err := s.Get([]byte("a")); !errors.Is(err, changelog.ErrMalformedKey) {
		t.Errorf("Get of a value without expiry = %v, want ErrMalformedKey", err)
	}
	for range s.All() {
	}
	if err := s.Err(); !errors.Is(err, changelog.ErrMalformedKey) {
		t.Errorf("All over a value without expiry: Err = %v, want ErrMalformedKey", err)
	}
	m.Delete([]byte("\x01a"))
	m.Put([]byte("\x02abc"), []byte{})
	if _, err := s.Expire(ms(1000), 10); !errors.Is(err, changelog.ErrMalformedKey) {
		t.Errorf("Expire over a short index entry = %v, want ErrMalformedKey", err)
	}
}
