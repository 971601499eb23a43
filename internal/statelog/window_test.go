package statelog_test

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"iter"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/weirstream/weir/changelog"
	"github.com/weirstream/weir/internal/statelog"
)

// faultyBytes is a Memory whose operations fail when fail says so: op is
// "put", "delete", "get" or "range" (for each step of Range and Backward).
type faultyBytes struct {
	statelog.Memory
	fail   func(op string) error
	err    error
	ranges int // Range calls
}

func (f *faultyBytes) check(op string) error {
	if f.fail == nil {
		return nil
	}
	return f.fail(op)
}

func (f *faultyBytes) Get(k []byte) ([]byte, error) {
	if err := f.check("get"); err != nil {
		return nil, err
	}
	return f.Memory.Get(k)
}

func (f *faultyBytes) Put(k, v []byte) error {
	if err := f.check("put"); err != nil {
		return err
	}
	return f.Memory.Put(k, v)
}

func (f *faultyBytes) Delete(k []byte) error {
	if err := f.check("delete"); err != nil {
		return err
	}
	return f.Memory.Delete(k)
}

func (f *faultyBytes) scan(seq iter.Seq2[[]byte, []byte]) iter.Seq2[[]byte, []byte] {
	return func(yield func([]byte, []byte) bool) {
		for k, v := range seq {
			if err := f.check("range"); err != nil {
				f.err = err
				return
			}
			if !yield(k, v) {
				return
			}
		}
	}
}

func (f *faultyBytes) Range(lo, hi []byte) iter.Seq2[[]byte, []byte] {
	f.ranges++
	return f.scan(f.Memory.Range(lo, hi))
}

func (f *faultyBytes) Backward(lo, hi []byte) iter.Seq2[[]byte, []byte] {
	return f.scan(f.Memory.Backward(lo, hi))
}

func (f *faultyBytes) Err() error {
	err := f.err
	f.err = nil
	return err
}

// failAfter returns a fail function for faultyBytes that lets n operations
// named op succeed, then fails them all with errBoom.
func failAfter(op string, n int) func(string) error {
	return func(o string) error {
		if o != op {
			return nil
		}
		if n > 0 {
			n--
			return nil
		}
		return errBoom
	}
}

var errBoom = errors.New("boom")

func newWindows(t *testing.T, b statelog.Bytes, retention, size time.Duration) *statelog.WindowBytes {
	t.Helper()
	w, err := statelog.NewWindowBytes(b, retention, size)
	if err != nil {
		t.Fatalf("NewWindowBytes: %v", err)
	}
	return w
}

// win is a window and its value, as the tests write them: times in ms.
type win struct {
	key   string
	start int64
	val   string
}

func (x win) String() string { return fmt.Sprintf("%q@%d=%q", x.key, x.start, x.val) }

func putWindow(t *testing.T, w *statelog.WindowBytes, x win) {
	t.Helper()
	if err := w.Put([]byte(x.key), ms(x.start), []byte(x.val)); err != nil {
		t.Fatalf("Put(%v): %v", x, err)
	}
}

// wantErrNil fails t if an iterator of the store met an error.
func wantErrNil(t *testing.T, err error, what string) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: Err = %v", what, err)
	}
}

func fetchRange(t *testing.T, w *statelog.WindowBytes, key string, from, to int64, backward bool) []win {
	t.Helper()
	seq := w.FetchRange([]byte(key), ms(from), ms(to))
	if backward {
		seq = w.FetchRangeBackward([]byte(key), ms(from), ms(to))
	}
	var got []win
	for start, v := range seq {
		if start.Location() != time.UTC {
			t.Errorf("FetchRange yielded a start in %v, want UTC", start.Location())
		}
		got = append(got, win{key, start.UnixMilli(), string(v)})
	}
	wantErrNil(t, w.Err(), "FetchRange")
	return got
}

func collectWindows(t *testing.T, w *statelog.WindowBytes, seq iter.Seq2[statelog.WindowKey, []byte]) []win {
	t.Helper()
	var got []win
	for k, v := range seq {
		got = append(got, win{string(k.Key), k.Start.UnixMilli(), string(v)})
	}
	wantErrNil(t, w.Err(), "scan")
	return got
}

func TestNewWindowBytesValidates(t *testing.T) {
	t.Parallel()
	m := &statelog.Memory{}
	tests := []struct {
		name            string
		b               statelog.Bytes
		retention, size time.Duration
		want            []string // substrings of the error; none for no error
	}{
		{"ok", m, time.Hour, time.Minute, nil},
		{"retention equal to size", m, time.Minute, time.Minute, nil},
		{"nil bytes", nil, time.Hour, time.Minute, []string{"Bytes is nil"}},
		{"zero size", m, time.Hour, 0, []string{"size 0s"}},
		{"negative size", m, time.Hour, -time.Second, []string{"size -1s"}},
		{"size below a millisecond", m, time.Hour, time.Microsecond, []string{"below one millisecond"}},
		{"retention below size", m, time.Second, time.Minute, []string{"retention 1s is shorter than the window size 1m0s"}},
		{"everything", nil, -1, 0, []string{"Bytes is nil", "size 0s", "retention -1ns"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w, err := statelog.NewWindowBytes(tt.b, tt.retention, tt.size)
			if tt.want == nil {
				if err != nil || w == nil {
					t.Fatalf("NewWindowBytes = %v, %v; want a store", w, err)
				}
				if w.Size() != tt.size || w.Retention() != tt.retention {
					t.Errorf("Size, Retention = %v, %v; want %v, %v", w.Size(), w.Retention(), tt.size, tt.retention)
				}
				return
			}
			if err == nil || w != nil {
				t.Fatalf("NewWindowBytes = %v, %v; want an error", w, err)
			}
			for _, s := range tt.want {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not mention %q", err, s)
				}
			}
		})
	}
}

func TestWindowPutFetch(t *testing.T) {
	t.Parallel()
	m := &statelog.Memory{}
	w := newWindows(t, m, time.Hour, time.Minute)
	fetch := func(key string, start int64) []byte {
		t.Helper()
		v, err := w.Fetch([]byte(key), ms(start))
		if err != nil {
			t.Fatalf("Fetch(%q, %d): %v", key, start, err)
		}
		return v
	}
	if v := fetch("k", 0); v != nil {
		t.Errorf("Fetch on an empty store = %q, want nil", v)
	}
	putWindow(t, w, win{"k", 0, "first"})
	putWindow(t, w, win{"k", 0, "second"})
	putWindow(t, w, win{"k", 60_000, "next"})
	if v := fetch("k", 0); string(v) != "second" {
		t.Errorf("Fetch after overwrite = %q, want %q", v, "second")
	}
	if v := fetch("k", 1); v != nil {
		t.Errorf("Fetch of a start without a window = %q, want nil", v)
	}
	if m.Len() != 4 {
		t.Errorf("store holds %d entries for 2 windows, want 4 (window and index entry each)", m.Len())
	}
	// A nil value deletes; an empty one is stored.
	if err := w.Put([]byte("k"), ms(0), nil); err != nil {
		t.Fatalf("Put nil: %v", err)
	}
	if v := fetch("k", 0); v != nil {
		t.Errorf("Fetch after Put(nil) = %q, want nil", v)
	}
	if err := w.Put([]byte("k"), ms(60_000), []byte{}); err != nil {
		t.Fatalf("Put empty: %v", err)
	}
	if v := fetch("k", 60_000); v == nil || len(v) != 0 {
		t.Errorf("Fetch after Put([]byte{}) = %#v, want a non-nil empty value", v)
	}
	if err := w.Put([]byte("absent"), ms(0), nil); err != nil {
		t.Errorf("deleting an absent window: %v", err)
	}
	if m.Len() != 2 {
		t.Errorf("store holds %d entries for 1 window, want 2", m.Len())
	}
}

func TestWindowFetchRange(t *testing.T) {
	t.Parallel()
	w := newWindows(t, &statelog.Memory{}, time.Hour, 10*time.Millisecond)
	var all []win
	for _, start := range []int64{-20, -10, 0, 10, 20} {
		x := win{"k", start, fmt.Sprint("v", start)}
		putWindow(t, w, x)
		all = append(all, x)
	}
	putWindow(t, w, win{"other", 0, "no"})
	tests := []struct {
		from, to int64
		want     []win
	}{
		{-20, 20, all},
		{math.MinInt64, math.MaxInt64, all},
		{-10, 10, all[1:4]}, // both ends included
		{-9, 9, all[2:3]},
		{0, 0, all[2:3]},
		{1, 9, nil},
		{10, -10, nil}, // from after to
		{21, 100, nil},
	}
	for _, tt := range tests {
		if got := fetchRange(t, w, "k", tt.from, tt.to, false); !slices.Equal(got, tt.want) {
			t.Errorf("FetchRange(k, %d, %d) = %v, want %v", tt.from, tt.to, got, tt.want)
		}
		rev := slices.Clone(tt.want)
		slices.Reverse(rev)
		if got := fetchRange(t, w, "k", tt.from, tt.to, true); !slices.Equal(got, rev) {
			t.Errorf("FetchRangeBackward(k, %d, %d) = %v, want %v", tt.from, tt.to, got, rev)
		}
	}
	for start := range w.FetchRangeBackward([]byte("k"), ms(-100), ms(100)) {
		if start.UnixMilli() != 20 {
			t.Errorf("FetchRangeBackward yielded %v first, want 20ms", start.UnixMilli())
		}
		break
	}
	wantErrNil(t, w.Err(), "FetchRangeBackward, broken early")
}

// TestWindowKeysDoNotLeak checks that keys that are prefixes of one
// another, or differ in 0x00 and 0xff bytes, keep their windows apart.
func TestWindowKeysDoNotLeak(t *testing.T) {
	t.Parallel()
	w := newWindows(t, &statelog.Memory{}, time.Hour, time.Millisecond)
	keys := []string{"", "\x00", "\x00\x01", "a", "a\x00", "a\x00\x00", "a\x00\x01", "a\x01", "ab", "a\xff", "\xff", "\xff\xff"}
	for _, k := range keys {
		for _, start := range []int64{-1, 0, 1} {
			putWindow(t, w, win{k, start, k + "|" + fmt.Sprint(start)})
		}
	}
	for _, k := range keys {
		want := []win{{k, -1, k + "|-1"}, {k, 0, k + "|0"}, {k, 1, k + "|1"}}
		if got := fetchRange(t, w, k, math.MinInt64, math.MaxInt64, false); !slices.Equal(got, want) {
			t.Errorf("FetchRange(%q) = %v, want %v", k, got, want)
		}
		if got := fetchRange(t, w, k, math.MinInt64, math.MaxInt64, true); len(got) != 3 || got[0] != want[2] {
			t.Errorf("FetchRangeBackward(%q) = %v, want %v reversed", k, got, want)
		}
	}
	for _, k := range []string{"b", "a\x00\x02", "\x01"} {
		if got := fetchRange(t, w, k, math.MinInt64, math.MaxInt64, false); len(got) != 0 {
			t.Errorf("FetchRange of absent key %q = %v, want nothing", k, got)
		}
	}
}

func TestWindowFetchAllAndAll(t *testing.T) {
	t.Parallel()
	w := newWindows(t, &statelog.Memory{}, time.Hour, time.Millisecond)
	for _, x := range []win{{"b", 5, "b5"}, {"a", 5, "a5"}, {"a\x00", 5, "a05"}, {"", 5, "e5"}, {"b", -3, "b-3"}, {"a", 10, "a10"}, {"c", 0, "c0"}} {
		putWindow(t, w, x)
	}
	byTime := []win{{"b", -3, "b-3"}, {"c", 0, "c0"}, {"", 5, "e5"}, {"a", 5, "a5"}, {"a\x00", 5, "a05"}, {"b", 5, "b5"}, {"a", 10, "a10"}}
	tests := []struct {
		from, to int64
		want     []win
	}{
		{math.MinInt64, math.MaxInt64, byTime},
		{-3, 10, byTime},
		{0, 5, byTime[1:6]},
		{5, 5, byTime[2:6]},
		{-2, -1, nil},
		{6, 5, nil},
	}
	for _, tt := range tests {
		if got := collectWindows(t, w, w.FetchAll(ms(tt.from), ms(tt.to))); !slices.Equal(got, tt.want) {
			t.Errorf("FetchAll(%d, %d) = %v, want %v", tt.from, tt.to, got, tt.want)
		}
	}
	byKey := []win{{"", 5, "e5"}, {"a", 5, "a5"}, {"a", 10, "a10"}, {"a\x00", 5, "a05"}, {"b", -3, "b-3"}, {"b", 5, "b5"}, {"c", 0, "c0"}}
	if got := collectWindows(t, w, w.All()); !slices.Equal(got, byKey) {
		t.Errorf("All() = %v, want %v", got, byKey)
	}
	n := 0
	for range w.FetchAll(ms(math.MinInt64), ms(math.MaxInt64)) {
		if n++; n == 2 {
			break
		}
	}
	for range w.All() {
		break
	}
	wantErrNil(t, w.Err(), "scans broken early")
}

func TestWindowExtremeTimes(t *testing.T) {
	t.Parallel()
	w := newWindows(t, &statelog.Memory{}, time.Hour, time.Millisecond)
	zero := time.Time{} // year 1, before 1970
	putWindow(t, w, win{"k", math.MinInt64, "min"})
	if err := w.Put([]byte("k"), zero, []byte("year 1")); err != nil {
		t.Fatal(err)
	}
	putWindow(t, w, win{"k", -1, "-1"})
	putWindow(t, w, win{"k", 0, "epoch"})
	putWindow(t, w, win{"k", math.MaxInt64, "max"})
	want := []win{{"k", math.MinInt64, "min"}, {"k", zero.UnixMilli(), "year 1"}, {"k", -1, "-1"}, {"k", 0, "epoch"}, {"k", math.MaxInt64, "max"}}
	if got := fetchRange(t, w, "k", math.MinInt64, math.MaxInt64, false); !slices.Equal(got, want) {
		t.Errorf("FetchRange = %v, want %v", got, want)
	}
	if got := collectWindows(t, w, w.FetchAll(ms(math.MinInt64), ms(math.MaxInt64))); !slices.Equal(got, want) {
		t.Errorf("FetchAll = %v, want %v", got, want)
	}
	if v, err := w.Fetch([]byte("k"), zero); err != nil || string(v) != "year 1" {
		t.Errorf("Fetch(k, time.Time{}) = %q, %v", v, err)
	}
	// Expiring at the extremes neither panics nor overflows.
	if n, err := w.Expire(ms(math.MinInt64)); n != 0 || err != nil {
		t.Errorf("Expire(min) = %d, %v; want 0, nil", n, err)
	}
	if n, err := w.Expire(ms(math.MaxInt64)); n != 4 || err != nil {
		t.Errorf("Expire(max) = %d, %v; want 4, nil", n, err)
	}
	if got := collectWindows(t, w, w.All()); !slices.Equal(got, want[4:]) {
		t.Errorf("All after Expire(max) = %v, want %v", got, want[4:])
	}
}

func TestWindowExpire(t *testing.T) {
	t.Parallel()
	m := &statelog.Memory{}
	w := newWindows(t, m, 100*time.Millisecond, 10*time.Millisecond)
	var all []win
	for start := int64(-50); start <= 250; start += 10 {
		for _, k := range []string{"a", "b"} {
			x := win{k, start, fmt.Sprint(k, start)}
			putWindow(t, w, x)
			all = append(all, x)
		}
	}
	if n, err := w.Expire(ms(40)); n != 0 || err != nil { // cutoff -60: nothing before it
		t.Fatalf("Expire(40) = %d, %v; want 0, nil", n, err)
	}
	n, err := w.Expire(ms(199)) // cutoff 100: starts -50..90 go, 100 stays
	if err != nil || n != 30 {
		t.Fatalf("Expire(199) = %d, %v; want 30, nil", n, err)
	}
	var live []win
	for _, x := range all {
		if x.start >= 100 {
			live = append(live, x)
		}
	}
	slices.SortFunc(live, func(a, b win) int { return cmp.Or(strings.Compare(a.key, b.key), cmp.Compare(a.start, b.start)) })
	if got := collectWindows(t, w, w.All()); !slices.Equal(got, live) {
		t.Errorf("All after Expire(199) = %v, want %v", got, live)
	}
	if m.Len() != 2*len(live) {
		t.Errorf("store holds %d entries for %d windows, want %d: Expire left entries behind", m.Len(), len(live), 2*len(live))
	}
	if n, err := w.Expire(ms(199)); n != 0 || err != nil {
		t.Errorf("Expire(199) again = %d, %v; want 0, nil", n, err)
	}
	if n, err := w.Expire(ms(150)); n != 0 || err != nil {
		t.Errorf("Expire(150), stream time going back = %d, %v; want 0, nil", n, err)
	}
	// Late puts: before the cutoff fails, at the cutoff succeeds.
	err = w.Put([]byte("a"), ms(99), []byte("late"))
	if !errors.Is(err, changelog.ErrExpired) {
		t.Errorf("Put of a window starting at 99 after Expire(199): err = %v, want ErrExpired", err)
	}
	if v, _ := w.Fetch([]byte("a"), ms(99)); v != nil {
		t.Errorf("a rejected late Put was written: Fetch = %q", v)
	}
	if err := w.Put([]byte("a"), ms(100), []byte("on time")); err != nil {
		t.Errorf("Put of a window starting at the cutoff: %v", err)
	}
	if err := w.Put([]byte("a"), ms(-1000), nil); err != nil {
		t.Errorf("deleting an expired window: %v", err)
	}
	if got := fetchRange(t, w, "a", math.MinInt64, 100, false); !slices.Equal(got, []win{{"a", 100, "on time"}}) {
		t.Errorf("FetchRange(a, min, 100) = %v, want only the window at 100", got)
	}
	// Expire in small steps removes exactly the windows that fall behind.
	for st := int64(200); st <= 359; st++ {
		n, err := w.Expire(ms(st))
		if err != nil {
			t.Fatal(err)
		}
		want := 0
		if c := st - 99; c%10 == 1 && c-1 <= 250 { // cutoff passed a start c-1
			want = 2
		}
		if n != want {
			t.Fatalf("Expire(%d) removed %d windows, want %d", st, n, want)
		}
	}
	if m.Len() != 0 {
		t.Errorf("store holds %d entries after every window expired, want 0", m.Len())
	}
}

// TestWindowExpireBatches checks Expire over more windows than it deletes
// per batch.
func TestWindowExpireBatches(t *testing.T) {
	t.Parallel()
	m := &statelog.Memory{}
	w := newWindows(t, m, time.Second, time.Millisecond)
	const n = 2500
	for i := range n {
		putWindow(t, w, win{fmt.Sprint("k", i%7), int64(i / 3), "v"})
	}
	kept := m.Len()
	putWindow(t, w, win{"late", 10_000, "v"})
	removed, err := w.Expire(ms(1000 + 10_000 - 1))
	if err != nil || removed != n {
		t.Fatalf("Expire = %d, %v; want %d, nil", removed, err, n)
	}
	if m.Len() != 2 {
		t.Errorf("store holds %d entries (of %d), want 2: the window at 10s", m.Len(), kept+2)
	}
}

// TestWindowExpireResumes checks that Expire, failing half way, leaves no
// expired window visible and deletes the rest on its next call.
func TestWindowExpireResumes(t *testing.T) {
	t.Parallel()
	f := &faultyBytes{}
	w := newWindows(t, f, 10*time.Millisecond, time.Millisecond)
	for i := range 20 {
		putWindow(t, w, win{"k", int64(i), "v"})
	}
	f.fail = failAfter("delete", 10)
	n, err := w.Expire(ms(24)) // cutoff 15
	if !errors.Is(err, errBoom) || n != 5 {
		t.Fatalf("Expire with failing deletes = %d, %v; want 5, boom", n, err)
	}
	if got := fetchRange(t, w, "k", 0, 100, false); len(got) != 5 || got[0].start != 15 {
		t.Errorf("FetchRange after a failed Expire = %v, want the windows from 15 only", got)
	}
	if got := collectWindows(t, w, w.All()); len(got) != 5 {
		t.Errorf("All after a failed Expire = %v, want the 5 windows from 15", got)
	}
	if got := collectWindows(t, w, w.FetchAll(ms(0), ms(100))); len(got) != 5 {
		t.Errorf("FetchAll after a failed Expire = %v, want the 5 windows from 15", got)
	}
	if v, _ := w.Fetch([]byte("k"), ms(14)); v != nil {
		t.Errorf("Fetch of an expired window = %q, want nil", v)
	}
	f.fail = nil
	if n, err := w.Expire(ms(25)); n != 11 || err != nil {
		t.Errorf("Expire after the failure = %d, %v; want 11 (10 left over, 1 new), nil", n, err)
	}
	if f.Len() != 8 {
		t.Errorf("store holds %d entries, want 8", f.Len())
	}
}

func TestWindowErrors(t *testing.T) {
	t.Parallel()
	f := &faultyBytes{}
	w := newWindows(t, f, time.Hour, time.Millisecond)
	for i := range 5 {
		putWindow(t, w, win{"k", int64(i), "v"})
	}
	scans := map[string]func() int{
		"FetchRange":         func() int { return count(w.FetchRange([]byte("k"), ms(0), ms(10))) },
		"FetchRangeBackward": func() int { return count(w.FetchRangeBackward([]byte("k"), ms(0), ms(10))) },
		"FetchAll":           func() int { return count(w.FetchAll(ms(0), ms(10))) },
		"All":                func() int { return count(w.All()) },
	}
	for name, scan := range scans {
		f.fail = failAfter("range", 2)
		if n := scan(); n != 2 {
			t.Errorf("%s with a failing Bytes yielded %d windows, want 2 before the failure", name, n)
		}
		if err := w.Err(); !errors.Is(err, errBoom) {
			t.Errorf("%s: Err = %v, want boom", name, err)
		}
		if err := w.Err(); err != nil {
			t.Errorf("%s: Err called again = %v, want nil", name, err)
		}
	}
	f.fail = failAfter("get", 1)
	if n := count(w.FetchAll(ms(0), ms(10))); n != 1 {
		t.Errorf("FetchAll with failing gets yielded %d windows, want 1", n)
	}
	if err := w.Err(); !errors.Is(err, errBoom) {
		t.Errorf("FetchAll with failing gets: Err = %v, want boom", err)
	}
	// The index entry is written, the window is not: readers skip the
	// index entry, and Expire removes it.
	f.fail = failAfter("put", 1)
	if err := w.Put([]byte("k"), ms(100), []byte("v")); !errors.Is(err, errBoom) {
		t.Errorf("Put on a failing Bytes: %v, want boom", err)
	}
	f.fail = nil
	if got := collectWindows(t, w, w.FetchAll(ms(0), ms(1000))); len(got) != 5 {
		t.Errorf("FetchAll after a half-done Put = %v, want the 5 windows before it", got)
	}
	if v, _ := w.Fetch([]byte("k"), ms(100)); v != nil {
		t.Errorf("Fetch of a window whose Put failed = %q, want nil", v)
	}
	f.fail = failAfter("range", 0)
	if _, err := w.Expire(ms(time.Hour.Milliseconds() + 3)); !errors.Is(err, errBoom) {
		t.Errorf("Expire on a failing Bytes: %v, want boom", err)
	}
}

func count[K, V any](seq iter.Seq2[K, V]) int {
	n := 0
	for range seq {
		n++
	}
	return n
}

// TestWindowMalformed checks that entries the store cannot decode are
// reported by Err (or Expire's error) as ErrMalformedKey, not a panic.
func TestWindowMalformed(t *testing.T) {
	t.Parallel()
	for _, bad := range []string{"\x01", "\x01k", "\x01k\x00\x01\x80", "\x01k\x00\x07" + strings.Repeat("\x80", 8), "\x02", "\x02\x80\x00", "\x02" + strings.Repeat("\x00", 8) + "k", "\x02" + strings.Repeat("\x00", 8) + "k\x00\x01x"} {
		m := &statelog.Memory{}
		w := newWindows(t, m, time.Hour, time.Millisecond)
		putWindow(t, w, win{"k", 0, "v"})
		if err := m.Put([]byte(bad), []byte("junk")); err != nil {
			t.Fatal(err)
		}
		count(w.All())
		count(w.FetchAll(ms(math.MinInt64), ms(math.MaxInt64)))
		count(w.FetchRange([]byte("k"), ms(math.MinInt64), ms(math.MaxInt64)))
		err := w.Err()
		_, expErr := w.Expire(ms(math.MaxInt64))
		if bad[0] == 0x01 && !errors.Is(err, changelog.ErrMalformedKey) {
			t.Errorf("scans over a store holding %x: Err = %v, want ErrMalformedKey", bad, err)
		}
		if bad[0] == 0x02 && !errors.Is(expErr, changelog.ErrMalformedKey) {
			t.Errorf("Expire over a store holding %x: %v, want ErrMalformedKey", bad, expErr)
		}
	}
}

func TestWindowCopies(t *testing.T) {
	t.Parallel()
	w := newWindows(t, &statelog.Memory{}, time.Hour, time.Millisecond)
	key, val := []byte("key"), []byte("val")
	if err := w.Put(key, ms(1), val); err != nil {
		t.Fatal(err)
	}
	copy(key, "XXX")
	copy(val, "YYY")
	v, _ := w.Fetch([]byte("key"), ms(1))
	if string(v) != "val" {
		t.Fatalf("Fetch after changing the slices given to Put = %q, want %q", v, "val")
	}
	copy(v, "ZZZ")
	for _, v := range w.FetchRange([]byte("key"), ms(0), ms(2)) {
		copy(v, "ZZZ")
	}
	for k, v := range w.FetchAll(ms(0), ms(2)) {
		copy(k.Key, "ZZZ")
		copy(v, "ZZZ")
	}
	for k, v := range w.All() {
		copy(k.Key, "ZZZ")
		copy(v, "ZZZ")
	}
	want := []win{{"key", 1, "val"}}
	if got := collectWindows(t, w, w.All()); !slices.Equal(got, want) {
		t.Errorf("after changing returned slices, All = %v, want %v", got, want)
	}
}

// TestWindowModel runs random puts, deletes and expiries, with keys that
// are prefixes of one another and times around zero, against a map.
func TestWindowModel(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(3, 5))
	const retention = 50
	m := &statelog.Memory{}
	w := newWindows(t, m, retention*time.Millisecond, time.Millisecond)
	keys := []string{"", "a", "a\x00", "ab", "\x00", "\xff"}
	model := map[win]bool{} // val empty in keys of model
	vals := map[win]string{}
	streamTime := int64(math.MinInt64)
	for round := range 300 {
		x := win{keys[r.IntN(len(keys))], int64(r.IntN(200) - 100 + round/2), ""}
		switch op := r.IntN(10); {
		case op < 6:
			v := fmt.Sprint(round)
			err := w.Put([]byte(x.key), ms(x.start), []byte(v))
			if late := streamTime != math.MinInt64 && x.start <= streamTime-retention; late != errors.Is(err, changelog.ErrExpired) || (!late && err != nil) {
				t.Fatalf("round %d: Put(%v) = %v, late = %v", round, x, err, late)
			}
			if err == nil {
				model[x], vals[x] = true, v
			}
		case op < 8:
			if err := w.Put([]byte(x.key), ms(x.start), nil); err != nil {
				t.Fatal(err)
			}
			delete(model, x)
		default:
			st := int64(r.IntN(200) - 100 + round/2)
			n, err := w.Expire(ms(st))
			if err != nil {
				t.Fatal(err)
			}
			streamTime = max(streamTime, st)
			want := 0
			for y := range model {
				if y.start <= streamTime-retention {
					delete(model, y)
					want++
				}
			}
			if n != want {
				t.Fatalf("round %d: Expire(%d) removed %d, want %d", round, st, n, want)
			}
		}
		var live []win
		for y := range model {
			live = append(live, win{y.key, y.start, vals[y]})
		}
		byTime := slices.SortedFunc(slices.Values(live), func(a, b win) int {
			return cmp.Or(cmp.Compare(a.start, b.start), bytes.Compare([]byte(a.key), []byte(b.key)))
		})
		if got := collectWindows(t, w, w.FetchAll(ms(math.MinInt64), ms(math.MaxInt64))); !slices.Equal(got, byTime) {
			t.Fatalf("round %d: FetchAll = %v, want %v", round, got, byTime)
		}
		if m.Len() != 2*len(live) {
			t.Fatalf("round %d: store holds %d entries for %d windows", round, m.Len(), len(live))
		}
		lo, hi := int64(r.IntN(200)-100), int64(r.IntN(200)-100)
		k := keys[r.IntN(len(keys))]
		var want []win
		for _, y := range byTime {
			if y.key == k && y.start >= lo && y.start <= hi {
				want = append(want, y)
			}
		}
		if got := fetchRange(t, w, k, lo, hi, false); !slices.Equal(got, want) {
			t.Fatalf("round %d: FetchRange(%q, %d, %d) = %v, want %v", round, k, lo, hi, got, want)
		}
	}
}

// TestWindowExpireSkipsScansUntilSomethingCanExpire: stream time moves
// with every record, windows expire now and then; Expire scans the time
// index only once the cutoff passes the earliest window indexed, and a
// window put below that earliest one is still expired on time.
func TestWindowExpireSkipsScansUntilSomethingCanExpire(t *testing.T) {
	t.Parallel()
	f := &faultyBytes{}
	w := newWindows(t, f, 10*time.Millisecond, time.Millisecond)
	putWindow(t, w, win{"a", 100, "v"})
	if n, err := w.Expire(ms(104)); n != 0 || err != nil { // cutoff 95: learns the earliest, 100
		t.Fatalf("Expire(104) = %d, %v", n, err)
	}
	before := f.ranges
	for st := int64(105); st <= 108; st++ { // cutoffs 96..99: nothing below 100
		if n, err := w.Expire(ms(st)); n != 0 || err != nil {
			t.Fatalf("Expire(%d) = %d, %v", st, n, err)
		}
	}
	if f.ranges != before {
		t.Errorf("Expire scanned %d times while nothing could expire", f.ranges-before)
	}
	putWindow(t, w, win{"c", 99, "v"})                     // at the cutoff: allowed, and the earliest now
	if n, err := w.Expire(ms(109)); n != 1 || err != nil { // cutoff 100: c goes, a stays
		t.Fatalf("Expire(109) = %d, %v; want the window at 99", n, err)
	}
	if v, _ := w.Fetch([]byte("c"), ms(99)); v != nil {
		t.Error("a window put below the earliest known one was not expired")
	}
	if v, _ := w.Fetch([]byte("a"), ms(100)); v == nil {
		t.Error("window a at 100 is gone before its time")
	}
}
