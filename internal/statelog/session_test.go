package statelog_test

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/weirstream/weir/changelog"
	"github.com/weirstream/weir/internal/statelog"
)

// sess is a session and its value, as the tests write them: times in ms.
type sess struct {
	key        string
	start, end int64
	val        string
}

func (x sess) String() string { return fmt.Sprintf("%q[%d,%d]=%q", x.key, x.start, x.end, x.val) }

func newSessions(t *testing.T, b statelog.Bytes, retention time.Duration) *statelog.SessionBytes {
	t.Helper()
	s, err := statelog.NewSessionBytes(b, retention)
	if err != nil {
		t.Fatalf("NewSessionBytes: %v", err)
	}
	return s
}

func putSession(t *testing.T, s *statelog.SessionBytes, x sess) {
	t.Helper()
	if err := s.Put([]byte(x.key), ms(x.start), ms(x.end), []byte(x.val)); err != nil {
		t.Fatalf("Put(%v): %v", x, err)
	}
}

func findSessions(t *testing.T, s *statelog.SessionBytes, key string, earliestEnd, latestStart int64) []sess {
	t.Helper()
	var got []sess
	for k, v := range s.FindSessions([]byte(key), ms(earliestEnd), ms(latestStart)) {
		if string(k.Key) != key {
			t.Errorf("FindSessions(%q) yielded a session of key %q", key, k.Key)
		}
		if k.Start.Location() != time.UTC || k.End.Location() != time.UTC {
			t.Errorf("FindSessions yielded times in %v, %v; want UTC", k.Start.Location(), k.End.Location())
		}
		got = append(got, sess{string(k.Key), k.Start.UnixMilli(), k.End.UnixMilli(), string(v)})
	}
	wantErrNil(t, s.Err(), "FindSessions")
	return got
}

func allSessions(t *testing.T, s *statelog.SessionBytes) []sess {
	t.Helper()
	var got []sess
	for k, v := range s.All() {
		got = append(got, sess{string(k.Key), k.Start.UnixMilli(), k.End.UnixMilli(), string(v)})
	}
	wantErrNil(t, s.Err(), "All")
	return got
}

func TestNewSessionBytesValidates(t *testing.T) {
	t.Parallel()
	if s, err := statelog.NewSessionBytes(&statelog.Memory{}, time.Minute); err != nil || s.Retention() != time.Minute {
		t.Errorf("NewSessionBytes(memory, 1m) = %v, %v", s, err)
	}
	_, err := statelog.NewSessionBytes(nil, 0)
	if err == nil || !strings.Contains(err.Error(), "Bytes is nil") || !strings.Contains(err.Error(), "retention 0s") {
		t.Errorf("NewSessionBytes(nil, 0) = %v, want both problems named", err)
	}
	if _, err := statelog.NewSessionBytes(&statelog.Memory{}, -time.Second); err == nil {
		t.Error("NewSessionBytes with a negative retention succeeded")
	}
}

func TestSessionPutFetchRemove(t *testing.T) {
	t.Parallel()
	m := &statelog.Memory{}
	s := newSessions(t, m, time.Hour)
	fetch := func(key string, start, end int64) []byte {
		t.Helper()
		v, err := s.FetchSession([]byte(key), ms(start), ms(end))
		if err != nil {
			t.Fatalf("FetchSession: %v", err)
		}
		return v
	}
	putSession(t, s, sess{"k", 0, 10, "a"})
	putSession(t, s, sess{"k", 0, 10, "b"})
	putSession(t, s, sess{"k", 5, 5, "point"}) // a session of one record
	if v := fetch("k", 0, 10); string(v) != "b" {
		t.Errorf("FetchSession after overwrite = %q, want b", v)
	}
	if v := fetch("k", 5, 5); string(v) != "point" {
		t.Errorf("FetchSession(k, 5, 5) = %q, want point", v)
	}
	for _, miss := range [][2]int64{{0, 11}, {1, 10}, {10, 0}, {5, 6}} {
		if v := fetch("k", miss[0], miss[1]); v != nil {
			t.Errorf("FetchSession(k, %d, %d) = %q, want nil", miss[0], miss[1], v)
		}
	}
	if err := s.Put([]byte("k"), ms(11), ms(10), []byte("x")); err == nil {
		t.Error("Put of a session starting after its end succeeded")
	}
	if m.Len() != 4 {
		t.Errorf("store holds %d entries for 2 sessions, want 4", m.Len())
	}
	if err := s.Remove([]byte("k"), ms(0), ms(10)); err != nil {
		t.Fatal(err)
	}
	if err := s.Remove([]byte("k"), ms(0), ms(10)); err != nil {
		t.Errorf("removing an absent session: %v", err)
	}
	if err := s.Put([]byte("k"), ms(5), ms(5), nil); err != nil {
		t.Fatal(err)
	}
	if m.Len() != 0 {
		t.Errorf("store holds %d entries after removing every session, want 0", m.Len())
	}
	if err := s.Put([]byte("k"), ms(1), ms(2), []byte{}); err != nil {
		t.Fatal(err)
	}
	if v := fetch("k", 1, 2); v == nil || len(v) != 0 {
		t.Errorf("FetchSession of an empty value = %#v, want non-nil empty", v)
	}
}

// TestFindSessionsBoundaries checks the bounds of FindSessions: end >=
// earliestEnd and start <= latestStart, both included.
func TestFindSessionsBoundaries(t *testing.T) {
	t.Parallel()
	s := newSessions(t, &statelog.Memory{}, time.Hour)
	ss := []sess{ // in the order FindSessions yields them: by end, then start
		{"k", -30, -20, "s1"},
		{"k", -5, 0, "s2"},
		{"k", 0, 0, "s3"},
		{"k", 10, 20, "s4"},
		{"k", 15, 20, "s5"},
		{"k", 40, 50, "s6"},
	}
	for _, x := range slices.Backward(ss) {
		putSession(t, s, x)
	}
	for _, k := range []string{"", "k\x00", "kk", "j\xff", "k\xff"} { // neighbours that must not leak
		putSession(t, s, sess{k, -10, 10, "other"})
	}
	tests := []struct {
		name                     string
		earliestEnd, latestStart int64
		want                     []sess
	}{
		{"everything", math.MinInt64, math.MaxInt64, ss},
		{"end equal to earliestEnd is included", 20, 100, ss[3:]},
		{"end before earliestEnd is excluded", 21, 100, ss[5:]},
		{"start equal to latestStart is included", math.MinInt64, 10, ss[:4]},
		{"start after latestStart is excluded", math.MinInt64, 9, ss[:3]},
		{"both bounds on one session", 50, 40, ss[5:]},
		{"zero on both", 0, 0, ss[1:3]},
		{"negative times", -20, -30, ss[:1]},
		{"gap merge around 12 with gap 5", 12 - 5, 12 + 5, ss[3:5]},
		{"nothing in between", 1, 9, nil},
		{"earliestEnd after every end", 51, math.MaxInt64, nil},
		{"latestStart before every start", math.MinInt64, -31, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := findSessions(t, s, "k", tt.earliestEnd, tt.latestStart); !slices.Equal(got, tt.want) {
				t.Errorf("FindSessions(k, %d, %d) = %v, want %v", tt.earliestEnd, tt.latestStart, got, tt.want)
			}
		})
	}
	if got := findSessions(t, s, "k\x00", math.MinInt64, math.MaxInt64); !slices.Equal(got, []sess{{"k\x00", -10, 10, "other"}}) {
		t.Errorf("FindSessions(k\\x00) = %v, want its one session", got)
	}
	if got := findSessions(t, s, "absent", math.MinInt64, math.MaxInt64); got != nil {
		t.Errorf("FindSessions(absent) = %v, want nothing", got)
	}
	for range s.FindSessions([]byte("k"), ms(math.MinInt64), ms(math.MaxInt64)) {
		break
	}
	wantErrNil(t, s.Err(), "FindSessions broken early")
}

func TestSessionAll(t *testing.T) {
	t.Parallel()
	s := newSessions(t, &statelog.Memory{}, time.Hour)
	in := []sess{{"b", 0, 1, "b"}, {"a", 5, 9, "a2"}, {"a", 1, 9, "a1"}, {"a", 0, 3, "a0"}, {"a\x00", -4, -3, "a0"}, {"", 7, 7, "e"}}
	for _, x := range in {
		putSession(t, s, x)
	}
	want := []sess{{"", 7, 7, "e"}, {"a", 0, 3, "a0"}, {"a", 1, 9, "a1"}, {"a", 5, 9, "a2"}, {"a\x00", -4, -3, "a0"}, {"b", 0, 1, "b"}}
	if got := allSessions(t, s); !slices.Equal(got, want) {
		t.Errorf("All = %v, want %v", got, want)
	}
}

func TestSessionExpire(t *testing.T) {
	t.Parallel()
	m := &statelog.Memory{}
	s := newSessions(t, m, 100*time.Millisecond)
	ss := []sess{
		{"a", -300, -200, "old"},
		{"a", 0, 99, "ends before cutoff"},
		{"a", 0, 100, "ends at cutoff"},
		{"b", 50, 150, "long"},
		{"b", 98, 98, "point before"},
		{"c", 250, 300, "new"},
	}
	for _, x := range ss {
		putSession(t, s, x)
	}
	n, err := s.Expire(ms(200)) // cutoff 100: sessions ending before 100 go
	if err != nil || n != 3 {
		t.Fatalf("Expire(200) = %d, %v; want 3, nil", n, err)
	}
	want := []sess{ss[2], ss[3], ss[5]}
	if got := allSessions(t, s); !slices.Equal(got, want) {
		t.Errorf("All after Expire = %v, want %v", got, want)
	}
	if m.Len() != 2*len(want) {
		t.Errorf("store holds %d entries for %d sessions, want %d", m.Len(), len(want), 2*len(want))
	}
	err = s.Put([]byte("a"), ms(90), ms(99), []byte("late"))
	if !errors.Is(err, changelog.ErrExpired) {
		t.Errorf("Put of a session ending at 99 after Expire(200) = %v, want ErrExpired", err)
	}
	if err := s.Put([]byte("a"), ms(0), ms(100), []byte("merged")); err != nil {
		t.Errorf("Put of a session ending at the cutoff: %v", err)
	}
	if n, err := s.Expire(ms(150)); n != 0 || err != nil {
		t.Errorf("Expire with stream time going back = %d, %v; want 0, nil", n, err)
	}
	if got := findSessions(t, s, "a", math.MinInt64, math.MaxInt64); !slices.Equal(got, []sess{{"a", 0, 100, "merged"}}) {
		t.Errorf("FindSessions(a) after Expire = %v", got)
	}
	if n, err := s.Expire(ms(201)); n != 1 || err != nil {
		t.Errorf("Expire(201) = %d, %v; want 1 (the session ending at 100), nil", n, err)
	}
	if v, err := s.FetchSession([]byte("a"), ms(0), ms(100)); v != nil || err != nil {
		t.Errorf("FetchSession of an expired session = %q, %v; want nil", v, err)
	}
	if n, err := s.Expire(ms(math.MaxInt64)); n != 2 || err != nil {
		t.Errorf("Expire(max) = %d, %v; want 2, nil", n, err)
	}
	if m.Len() != 0 {
		t.Errorf("store holds %d entries after every session expired", m.Len())
	}
}

// TestSessionExpireResumes checks that reads skip expired sessions that a
// failed Expire left, and that the next Expire deletes them.
func TestSessionExpireResumes(t *testing.T) {
	t.Parallel()
	f := &faultyBytes{}
	s := newSessions(t, f, 10*time.Millisecond)
	for i := range 20 {
		putSession(t, s, sess{"k", int64(i), int64(i + 1), "v"})
	}
	f.fail = failAfter("delete", 3)
	if n, err := s.Expire(ms(25)); !errors.Is(err, errBoom) || n != 1 { // cutoff 15
		t.Fatalf("Expire with failing deletes = %d, %v; want 1, boom", n, err)
	}
	if got := findSessions(t, s, "k", math.MinInt64, math.MaxInt64); len(got) != 6 || got[0].end != 15 {
		t.Errorf("FindSessions after a failed Expire = %v, want the sessions ending at 15 and later", got)
	}
	if got := allSessions(t, s); len(got) != 6 {
		t.Errorf("All after a failed Expire = %v, want 6 sessions", got)
	}
	f.fail = nil
	if n, err := s.Expire(ms(25)); n != 13 || err != nil {
		t.Errorf("Expire after the failure = %d, %v; want 13, nil", n, err)
	}
	if f.Len() != 12 {
		t.Errorf("store holds %d entries, want 12", f.Len())
	}
}

func TestSessionErrors(t *testing.T) {
	t.Parallel()
	f := &faultyBytes{}
	s := newSessions(t, f, time.Hour)
	for i := range 5 {
		putSession(t, s, sess{"k", int64(i), int64(i), "v"})
	}
	for name, seq := range map[string]func() int{
		"FindSessions": func() int { return count(s.FindSessions([]byte("k"), ms(0), ms(10))) },
		"All":          func() int { return count(s.All()) },
	} {
		f.fail = failAfter("range", 2)
		if n := seq(); n != 2 {
			t.Errorf("%s with a failing Bytes yielded %d, want 2", name, n)
		}
		if err := s.Err(); !errors.Is(err, errBoom) {
			t.Errorf("%s: Err = %v, want boom", name, err)
		}
	}
	f.fail = failAfter("put", 0)
	if err := s.Put([]byte("k"), ms(0), ms(1), []byte("v")); !errors.Is(err, errBoom) {
		t.Errorf("Put on a failing Bytes = %v", err)
	}
	f.fail = failAfter("delete", 0)
	if err := s.Remove([]byte("k"), ms(0), ms(0)); !errors.Is(err, errBoom) {
		t.Errorf("Remove on a failing Bytes = %v", err)
	}
	// Undecodable entries are reported, never a panic.
	f.fail = nil
	for _, bad := range []string{"\x01k\x00\x01\x80", "\x01\x00", "\x02\x00"} {
		if err := f.Memory.Put([]byte(bad), nil); err != nil {
			t.Fatal(err)
		}
	}
	count(s.FindSessions([]byte("k"), ms(math.MinInt64), ms(math.MaxInt64)))
	if err := s.Err(); !errors.Is(err, changelog.ErrMalformedKey) {
		t.Errorf("FindSessions over a malformed entry: Err = %v, want ErrMalformedKey", err)
	}
	count(s.All())
	if err := s.Err(); !errors.Is(err, changelog.ErrMalformedKey) {
		t.Errorf("All over a malformed entry: Err = %v, want ErrMalformedKey", err)
	}
	if _, err := s.Expire(ms(math.MaxInt64)); !errors.Is(err, changelog.ErrMalformedKey) {
		t.Errorf("Expire over a malformed index entry = %v, want ErrMalformedKey", err)
	}
}

func TestSessionCopies(t *testing.T) {
	t.Parallel()
	s := newSessions(t, &statelog.Memory{}, time.Hour)
	key, val := []byte("key"), []byte("val")
	if err := s.Put(key, ms(1), ms(2), val); err != nil {
		t.Fatal(err)
	}
	copy(key, "XXX")
	copy(val, "YYY")
	for k, v := range s.FindSessions([]byte("key"), ms(0), ms(5)) {
		copy(k.Key, "ZZZ")
		copy(v, "ZZZ")
	}
	for k, v := range s.All() {
		copy(k.Key, "ZZZ")
		copy(v, "ZZZ")
	}
	v, _ := s.FetchSession([]byte("key"), ms(1), ms(2))
	copy(v, "ZZZ")
	if got := allSessions(t, s); !slices.Equal(got, []sess{{"key", 1, 2, "val"}}) {
		t.Errorf("after changing slices given and returned, All = %v", got)
	}
}

// TestSessionModel runs a session-window aggregation (count per session,
// gap 10ms) with out-of-order records and expiry, and checks the store
// against sessions computed directly.
func TestSessionModel(t *testing.T) {
	t.Parallel()
	const gap, retention = 10, 60
	r := rand.New(rand.NewPCG(9, 9))
	m := &statelog.Memory{}
	s := newSessions(t, m, retention*time.Millisecond)
	keys := []string{"a", "a\x00", "ab", ""}
	model := map[sess]bool{} // val empty
	counts := map[sess]int{}
	streamTime := int64(math.MinInt64) // the store's, as given to Expire
	cutoff := func() int64 {
		if streamTime == math.MinInt64 {
			return math.MinInt64
		}
		return streamTime - retention
	}
	for i := range 400 {
		key, ts := keys[r.IntN(len(keys))], int64(i/2+r.IntN(40)-30)
		// The sessions to merge, by the model.
		var want []sess
		for x := range model {
			if x.key == key && x.end >= max(ts-gap, cutoff()) && x.start <= ts+gap {
				want = append(want, x)
			}
		}
		slices.SortFunc(want, func(a, b sess) int { return cmp.Or(cmp.Compare(a.end, b.end), cmp.Compare(a.start, b.start)) })
		// Merge: collect, then write.
		merged := sess{key: key, start: ts, end: ts}
		total := 1
		var olds []sess
		for k, v := range s.FindSessions([]byte(key), ms(ts-gap), ms(ts+gap)) {
			old := sess{key: string(k.Key), start: k.Start.UnixMilli(), end: k.End.UnixMilli()}
			olds = append(olds, old)
			c, err := strconv.Atoi(string(v))
			if err != nil {
				t.Fatalf("step %d: value of %v: %v", i, old, err)
			}
			total += c
			merged.start = min(merged.start, old.start)
			merged.end = max(merged.end, old.end)
		}
		wantErrNil(t, s.Err(), "FindSessions")
		if !slices.Equal(olds, want) {
			t.Fatalf("step %d: FindSessions(%q, %d, %d) = %v, want %v", i, key, ts-gap, ts+gap, olds, want)
		}
		for _, old := range olds {
			if err := s.Remove([]byte(old.key), ms(old.start), ms(old.end)); err != nil {
				t.Fatal(err)
			}
			delete(model, old)
		}
		err := s.Put([]byte(key), ms(merged.start), ms(merged.end), []byte(strconv.Itoa(total)))
		if late := merged.end < cutoff(); late != errors.Is(err, changelog.ErrExpired) || (!late && err != nil) {
			t.Fatalf("step %d: Put(%v) = %v; late = %v", i, merged, err, late)
		}
		if err == nil {
			model[merged], counts[merged] = true, total
		}
		if i%7 == 0 {
			streamTime = max(streamTime, ts)
			n, err := s.Expire(ms(ts))
			if err != nil {
				t.Fatal(err)
			}
			want := 0
			for x := range model {
				if x.end < cutoff() {
					delete(model, x)
					want++
				}
			}
			if n != want {
				t.Fatalf("step %d: Expire(%d) removed %d sessions, want %d", i, ts, n, want)
			}
		}
		var live []sess
		for x := range model {
			live = append(live, sess{x.key, x.start, x.end, fmt.Sprint(counts[x])})
		}
		slices.SortFunc(live, func(a, b sess) int {
			return cmp.Or(bytes.Compare([]byte(a.key), []byte(b.key)), cmp.Compare(a.end, b.end), cmp.Compare(a.start, b.start))
		})
		if got := allSessions(t, s); !slices.Equal(got, live) {
			t.Fatalf("step %d: All = %v, want %v", i, got, live)
		}
		if m.Len() != 2*len(live) {
			t.Fatalf("step %d: store holds %d entries for %d sessions", i, m.Len(), len(live))
		}
	}
}
