package statelog_test

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/weirstream/weir/changelog"
	"github.com/weirstream/weir/internal/statelog"
)

// The window and session stores once sent their time index to the
// changelog beside their values: two records per update, doubling the
// changelog of a dedup store (issue 20, item 6). These tests pin one
// record per update, and that a restore from those records rebuilds the
// index, giving the state the writer had.

// committer is a store partition as the runtime runs it, without a
// broker: writes go to a write buffer over base; commit sends the
// buffer's changes as the runtime does (statelog.Produce with the
// store's index) to a log, then applies them to base.
type committer struct {
	base *statelog.Memory
	buf  *statelog.Buffer
	idx  statelog.Index
	log  []statelog.Record
}

func newCommitter(idx statelog.Index) *committer {
	base := &statelog.Memory{}
	return &committer{base: base, buf: statelog.NewBuffer(base), idx: idx}
}

// commit produces and flushes the buffer, and returns how many records it
// sent.
func (c *committer) commit(t *testing.T) int {
	t.Helper()
	before := len(c.log)
	_, err := statelog.Produce(c.buf.Changes(), c.idx, "app-s-changelog", 0, nil, func(m *sarama.ProducerMessage) error {
		k, err := m.Key.Encode()
		if err != nil {
			return err
		}
		var v []byte
		if m.Value != nil {
			if v, err = m.Value.Encode(); err != nil {
				return err
			}
		}
		c.log = append(c.log, statelog.Record{Key: k, Value: v, Offset: int64(len(c.log))})
		return nil
	})
	if err != nil {
		t.Fatalf("Produce: %v", err)
	}
	if err := c.buf.Flush(); err != nil {
		t.Fatalf("Flush: %v", err)
	}
	return len(c.log) - before
}

// compacted returns the log as compaction leaves it: each key's last
// record, tombstones included (delete.retention.ms has not passed).
func compacted(log []statelog.Record) []statelog.Record {
	last := map[string]int{}
	for i, r := range log {
		last[string(r.Key)] = i
	}
	var out []statelog.Record
	for i, r := range log {
		if last[string(r.Key)] == i {
			out = append(out, r)
		}
	}
	return out
}

// restoreInto applies recs to an empty Memory as the runtime's restore
// does: in batches (of varying sizes, as fetches return them), each
// turned into entries by RestoreEntries with idx.
func restoreInto(t *testing.T, recs []statelog.Record, idx statelog.Index, rng *rand.Rand) *statelog.Memory {
	t.Helper()
	m := &statelog.Memory{}
	var entries []statelog.Entry
	for len(recs) > 0 {
		n := min(len(recs), 1+rng.IntN(7))
		var err error
		if entries, err = statelog.RestoreEntries(entries[:0], recs[:n], idx, false); err != nil {
			t.Fatalf("RestoreEntries: %v", err)
		}
		if err := m.Apply(entries); err != nil {
			t.Fatal(err)
		}
		recs = recs[n:]
	}
	return m
}

// dump lists every entry of b, as "key=value" in hex.
func dump(t *testing.T, b statelog.Bytes) []string {
	t.Helper()
	var out []string
	for k, v := range b.Range(nil, nil) {
		out = append(out, fmt.Sprintf("%x=%x", k, v))
	}
	if err := b.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// wantOnlyPrimaries fails t if the log holds a record of an index entry.
func wantOnlyPrimaries(t *testing.T, log []statelog.Record) {
	t.Helper()
	for _, r := range log {
		if len(r.Key) == 0 || r.Key[0] != 0x01 {
			t.Fatalf("changelog record %x at offset %d is not a primary entry", r.Key, r.Offset)
		}
	}
}

func TestWindowUpdateIsOneChangelogRecord(t *testing.T) {
	t.Parallel()
	c := newCommitter(statelog.WindowIndex())
	w := newWindows(t, c.buf, 100*time.Millisecond, 10*time.Millisecond)
	putWindow(t, w, win{"a", 1000, "1"})
	putWindow(t, w, win{"a", 1010, "2"})
	putWindow(t, w, win{"b", 1000, "3"})
	if n := c.commit(t); n != 3 {
		t.Errorf("three window puts sent %d changelog records, want 3", n)
	}
	putWindow(t, w, win{"a", 1000, "4"})
	if err := w.Put([]byte("b"), ms(1000), nil); err != nil {
		t.Fatal(err)
	}
	if n := c.commit(t); n != 2 {
		t.Errorf("an update and a deletion sent %d changelog records, want 2", n)
	}
	// a@1000 expires at stream time 1101: one tombstone.
	if removed, err := w.Expire(ms(1101)); err != nil || removed != 1 {
		t.Fatalf("Expire = %d, %v; want 1 window removed", removed, err)
	}
	if n := c.commit(t); n != 1 {
		t.Errorf("expiring a window sent %d changelog records, want 1", n)
	}
	wantOnlyPrimaries(t, c.log)
	// The index is in the committed state all the same.
	if got := collectWindows(t, w, w.FetchAll(ms(0), ms(5000))); fmt.Sprint(got) != `["a"@1010="2"]` {
		t.Errorf("FetchAll after the commits = %v", got)
	}
}

func TestSessionUpdateIsOneChangelogRecord(t *testing.T) {
	t.Parallel()
	c := newCommitter(statelog.SessionIndex())
	s := newSessions(t, c.buf, 100*time.Millisecond)
	putSession(t, s, sess{"a", 1000, 1000, "1"})
	putSession(t, s, sess{"b", 1000, 1005, "2"})
	if n := c.commit(t); n != 2 {
		t.Errorf("two session puts sent %d changelog records, want 2", n)
	}
	// A merge: remove a[1000,1000], put a[1000,1020].
	if err := s.Remove([]byte("a"), ms(1000), ms(1000)); err != nil {
		t.Fatal(err)
	}
	putSession(t, s, sess{"a", 1000, 1020, "3"})
	if n := c.commit(t); n != 2 {
		t.Errorf("a session merge sent %d changelog records, want 2", n)
	}
	if removed, err := s.Expire(ms(1106)); err != nil || removed != 1 {
		t.Fatalf("Expire = %d, %v; want 1 session removed", removed, err)
	}
	if n := c.commit(t); n != 1 {
		t.Errorf("expiring a session sent %d changelog records, want 1", n)
	}
	wantOnlyPrimaries(t, c.log)
}

// indexedStore is what the restore tests need of a window or session
// store: random updates, and every read it offers, printed.
type indexedStore struct {
	name string
	idx  statelog.Index
	open func(t *testing.T, b statelog.Bytes) indexedOps
}

type indexedOps struct {
	// update makes a random change at stream time now.
	update func(rng *rand.Rand, now int64) error
	expire func(now int64) (int, error)
	// reads prints the results of the store's reads, by key and by time.
	reads func(t *testing.T) string
}

var storeKeys = []string{"a", "b", "c\x00", ""}

func windowOps(t *testing.T, b statelog.Bytes) indexedOps {
	w := newWindows(t, b, 100*time.Millisecond, 10*time.Millisecond)
	return indexedOps{
		update: func(rng *rand.Rand, now int64) error {
			key := []byte(storeKeys[rng.IntN(len(storeKeys))])
			start := now - rng.Int64N(60)
			var v []byte // nil deletes
			if rng.IntN(4) > 0 {
				v = fmt.Appendf(nil, "%d", rng.IntN(1000))
			}
			if err := w.Put(key, ms(start), v); err != nil && !errors.Is(err, changelog.ErrExpired) {
				return err
			}
			return nil
		},
		expire: func(now int64) (int, error) { return w.Expire(ms(now)) },
		reads: func(t *testing.T) string {
			var b strings.Builder
			for _, k := range storeKeys {
				fmt.Fprintf(&b, "fetch %q: %v\n", k, fetchRange(t, w, k, 0, 1<<40, false))
			}
			fmt.Fprintf(&b, "fetchAll: %v\n", collectWindows(t, w, w.FetchAll(ms(0), ms(1<<40))))
			fmt.Fprintf(&b, "all: %v\n", collectWindows(t, w, w.All()))
			return b.String()
		},
	}
}

func sessionOps(t *testing.T, b statelog.Bytes) indexedOps {
	s := newSessions(t, b, 100*time.Millisecond)
	return indexedOps{
		update: func(rng *rand.Rand, now int64) error {
			key := []byte(storeKeys[rng.IntN(len(storeKeys))])
			end := now - rng.Int64N(60)
			start := end - rng.Int64N(20)
			if rng.IntN(4) == 0 {
				return s.Remove(key, ms(start), ms(end))
			}
			if err := s.Put(key, ms(start), ms(end), fmt.Appendf(nil, "%d", rng.IntN(1000))); err != nil && !errors.Is(err, changelog.ErrExpired) {
				return err
			}
			return nil
		},
		expire: func(now int64) (int, error) { return s.Expire(ms(now)) },
		reads: func(t *testing.T) string {
			var b strings.Builder
			for _, k := range storeKeys {
				fmt.Fprintf(&b, "find %q: %v\n", k, findSessions(t, s, k, 0, 1<<40))
			}
			var all []sess
			for k, v := range s.All() {
				all = append(all, sess{string(k.Key), k.Start.UnixMilli(), k.End.UnixMilli(), string(v)})
			}
			if err := s.Err(); err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(&b, "all: %v\n", all)
			return b.String()
		},
	}
}

var indexedStores = []indexedStore{
	{"window", statelog.WindowIndex(), windowOps},
	{"session", statelog.SessionIndex(), sessionOps},
}

// TestRestoreRebuildsIndex runs random updates and expiry on a window and
// a session store over several commits, then restores the changelog they
// wrote, as it is and as compaction leaves it, into an empty state. The
// restored state must equal the writer's byte for byte, index included,
// and so must every read, and expiry must go on to remove the same
// entries.
func TestRestoreRebuildsIndex(t *testing.T) {
	t.Parallel()
	for _, st := range indexedStores {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			for seed := range uint64(20) {
				rng := rand.New(rand.NewPCG(seed, 20))
				c := newCommitter(st.idx)
				ops := st.open(t, c.buf)
				now := int64(1000)
				for range 30 {
					for range rng.IntN(8) {
						if err := ops.update(rng, now); err != nil {
							t.Fatal(err)
						}
					}
					now += rng.Int64N(30)
					if _, err := ops.expire(now); err != nil {
						t.Fatal(err)
					}
					c.commit(t)
				}
				wantOnlyPrimaries(t, c.log)
				want, wantReads := dump(t, c.base), ops.reads(t)
				for name, log := range map[string][]statelog.Record{"full": c.log, "compacted": compacted(c.log)} {
					restored := restoreInto(t, log, st.idx, rng)
					if got := dump(t, restored); !slices.Equal(got, want) {
						t.Fatalf("seed %d: state restored from the %s changelog differs:\n got %v\nwant %v", seed, name, got, want)
					}
					r := st.open(t, restored)
					if _, err := r.expire(now); err != nil {
						t.Fatal(err)
					}
					if got := r.reads(t); got != wantReads {
						t.Fatalf("seed %d: reads of the store restored from the %s changelog:\n%s\nwant\n%s", seed, name, got, wantReads)
					}
					// Expiry finds every window through the rebuilt index.
					if _, err := r.expire(now + 1000); err != nil {
						t.Fatal(err)
					}
					if left := dump(t, restored); len(left) != 0 {
						t.Fatalf("seed %d: after everything expired the restored store holds %v", seed, left)
					}
				}
			}
		})
	}
}

// TestRestoreOldChangelogWithIndexRecords restores changelogs as weir
// wrote them before local indexes, index records included: the index
// records are dropped and the primary ones rebuild the same index, so the
// state is the one the writer had.
func TestRestoreOldChangelogWithIndexRecords(t *testing.T) {
	t.Parallel()
	for _, st := range indexedStores {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			rng := rand.New(rand.NewPCG(7, 20))
			c := newCommitter(nil) // every entry to the changelog, as before
			ops := st.open(t, c.buf)
			now := int64(1000)
			for range 40 {
				for range rng.IntN(8) {
					if err := ops.update(rng, now); err != nil {
						t.Fatal(err)
					}
				}
				now += rng.Int64N(30)
				if _, err := ops.expire(now); err != nil {
					t.Fatal(err)
				}
				c.commit(t)
			}
			indexRecords := 0
			for _, r := range c.log {
				if st.idx.Holds(r.Key) {
					indexRecords++
				}
			}
			if indexRecords == 0 {
				t.Fatal("the old-style changelog holds no index record: the test tests nothing")
			}
			want := dump(t, c.base)
			for name, log := range map[string][]statelog.Record{"full": c.log, "compacted": compacted(c.log)} {
				if got := dump(t, restoreInto(t, log, st.idx, rng)); !slices.Equal(got, want) {
					t.Fatalf("state restored from the %s old changelog differs:\n got %v\nwant %v", name, got, want)
				}
			}
		})
	}
}

func TestIndexDeriveRefusesMalformedRecords(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		idx  statelog.Index
		rec  statelog.Record
	}{
		{"window: no kind byte", statelog.WindowIndex(), statelog.Record{Key: []byte("x"), Value: []byte{}}},
		{"window: too short", statelog.WindowIndex(), statelog.Record{Key: []byte{0x01, 0, 1}, Value: []byte{}}},
		{"window: no terminator", statelog.WindowIndex(), statelog.Record{Key: append([]byte{0x01, 'a', 'b'}, make([]byte, 8)...), Value: []byte{}}},
		{"session: one time only", statelog.SessionIndex(), statelog.Record{Key: append([]byte{0x01, 'a', 0, 1}, make([]byte, 8)...)}},
		{"ttl: no kind byte", statelog.TTLIndex(), statelog.Record{Key: []byte{0x03, 'a'}, Value: make([]byte, 8)}},
		{"ttl: value without expiry", statelog.TTLIndex(), statelog.Record{Key: []byte{0x01, 'a'}, Value: []byte("v")}},
	}
	for _, tt := range tests {
		tt.rec.Offset = 41
		_, err := statelog.RestoreEntries(nil, []statelog.Record{tt.rec}, tt.idx, false)
		if !errors.Is(err, changelog.ErrMalformedKey) || !strings.Contains(err.Error(), "offset 41") {
			t.Errorf("%s: RestoreEntries = %v, want an error wrapping ErrMalformedKey naming offset 41", tt.name, err)
		}
	}
}

func TestRestoreEntriesWithoutIndexKeepsRecords(t *testing.T) {
	t.Parallel()
	recs := []statelog.Record{{Key: []byte("\x02k"), Value: []byte("v")}, {Key: []byte("k")}}
	got, err := statelog.RestoreEntries(nil, recs, nil, false)
	if err != nil || len(got) != 2 || !bytes.Equal(got[0].Key, recs[0].Key) || got[0].Deleted || !got[1].Deleted {
		t.Fatalf("RestoreEntries(nil index) = %+v, %v; want the records as they are, a nil value deleting", got, err)
	}
}
