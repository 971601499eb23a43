// Package storetest is a conformance suite for implementations of
// [statelog.Bytes]: every implementation (the in-memory one, the Badger
// one, the write buffer over it) runs [RunBytes] in its tests, so that the
// stores built on a Bytes can rely on its contract alone.
package storetest

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/weirstream/weir/internal/statelog"
)

// RunBytes checks that the stores newStore returns meet every clause of the
// statelog.Bytes contract, each in a subtest of t: gets, puts and deletes;
// Range and Backward with inclusive lo, exclusive hi and nil for an open
// side (and an empty, non-nil hi as an empty range); the empty key and keys
// holding 0x00 and 0xff; stopping an iteration early; that slices passed
// in are not retained and slices returned are the caller's; that a nil
// value is stored as empty; that deleting an absent key is no error; and a
// randomized comparison against a sorted map.
//
// newStore is called once per subtest, with the subtest's t, and must
// return an empty store; it registers any cleanup with t.Cleanup. The
// subtests run one after another, never in parallel.
func RunBytes(t *testing.T, newStore func(t *testing.T) statelog.Bytes) {
	t.Helper()
	tests := []struct {
		name string
		run  func(t *testing.T, s statelog.Bytes)
	}{
		{"GetAbsent", testGetAbsent},
		{"PutGet", testPutGet},
		{"Overwrite", testOverwrite},
		{"NilValueStoredAsEmpty", testNilValue},
		{"EmptyKey", testEmptyKey},
		{"Delete", testDelete},
		{"DeleteAbsent", testDeleteAbsent},
		{"BinaryKeysOrder", testBinaryKeysOrder},
		{"RangeBounds", testRangeBounds},
		{"EmptyHiIsEmptyRange", testEmptyHi},
		{"PrefixScan", testPrefixScan},
		{"EarlyBreak", testEarlyBreak},
		{"SeqReusable", testSeqReusable},
		{"GetReturnsCopy", testGetCopy},
		{"IteratorsYieldCopies", testIterCopies},
		{"YieldedSlicesStayValid", testYieldedValid},
		{"InputsNotRetained", testInputsNotRetained},
		{"ScanBoundsNotRetained", testBoundsNotRetained},
		{"LargeValue", testLargeValue},
		{"ErrClean", testErrClean},
		{"RandomAgainstModel", testRandomModel},
		{"Stamped", testStamped},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newStore(t)
			if s == nil {
				t.Fatal("storetest: newStore returned nil")
			}
			tt.run(t, s)
		})
	}
}

// entry is a key and value, as a Bytes yields them.
type entry struct{ k, v []byte }

func (e entry) String() string { return fmt.Sprintf("%q=%q", e.k, e.v) }

func fmtEntries(es []entry) string {
	parts := make([]string, len(es))
	for i, e := range es {
		parts[i] = e.String()
	}
	return "[" + strings.Join(parts, " ") + "]"
}

// fmtBound shows a range bound, telling nil (open) from empty.
func fmtBound(b []byte) string {
	if b == nil {
		return "nil"
	}
	return fmt.Sprintf("%q", b)
}

func put(t *testing.T, s statelog.Bytes, k, v string) {
	t.Helper()
	if err := s.Put([]byte(k), []byte(v)); err != nil {
		t.Fatalf("Put(%q, %q): %v", k, v, err)
	}
}

func del(t *testing.T, s statelog.Bytes, k string) {
	t.Helper()
	if err := s.Delete([]byte(k)); err != nil {
		t.Fatalf("Delete(%q): %v", k, err)
	}
}

// wantGet checks Get(k): want nil means absent.
func wantGet(t *testing.T, s statelog.Bytes, k []byte, want []byte) {
	t.Helper()
	got, err := s.Get(k)
	if err != nil {
		t.Fatalf("Get(%q): %v", k, err)
	}
	switch {
	case want == nil && got != nil:
		t.Errorf("Get(%q) = %q, want nil (absent)", k, got)
	case want != nil && got == nil:
		t.Errorf("Get(%q) = nil (absent), want %q (present)", k, want)
	case !bytes.Equal(got, want):
		t.Errorf("Get(%q) = %q, want %q", k, got, want)
	}
}

// collect ranges over Range or Backward and checks Err after.
func collect(t *testing.T, s statelog.Bytes, backward bool, lo, hi []byte) []entry {
	t.Helper()
	seq, name := s.Range(lo, hi), "Range"
	if backward {
		seq, name = s.Backward(lo, hi), "Backward"
	}
	var es []entry
	for k, v := range seq {
		es = append(es, entry{slices.Clone(k), slices.Clone(v)})
	}
	if err := s.Err(); err != nil {
		t.Fatalf("%s(%s, %s): Err after iterating: %v", name, fmtBound(lo), fmtBound(hi), err)
	}
	return es
}

// wantScan checks both Range(lo, hi) and Backward(lo, hi) against want, in
// ascending order.
func wantScan(t *testing.T, s statelog.Bytes, lo, hi []byte, want []entry) {
	t.Helper()
	if got := collect(t, s, false, lo, hi); !equalEntries(got, want) {
		t.Errorf("Range(%s, %s) yielded %s, want %s", fmtBound(lo), fmtBound(hi), fmtEntries(got), fmtEntries(want))
	}
	rev := slices.Clone(want)
	slices.Reverse(rev)
	if got := collect(t, s, true, lo, hi); !equalEntries(got, rev) {
		t.Errorf("Backward(%s, %s) yielded %s, want %s", fmtBound(lo), fmtBound(hi), fmtEntries(got), fmtEntries(rev))
	}
}

func equalEntries(a, b []entry) bool {
	return slices.EqualFunc(a, b, func(x, y entry) bool { return bytes.Equal(x.k, y.k) && bytes.Equal(x.v, y.v) })
}

func entries(kvs ...string) []entry {
	es := make([]entry, 0, len(kvs)/2)
	for i := 0; i+1 < len(kvs); i += 2 {
		es = append(es, entry{[]byte(kvs[i]), []byte(kvs[i+1])})
	}
	return es
}

func testGetAbsent(t *testing.T, s statelog.Bytes) {
	wantGet(t, s, []byte("missing"), nil)
	wantGet(t, s, nil, nil)
	wantGet(t, s, []byte{}, nil)
	wantScan(t, s, nil, nil, nil)
	put(t, s, "b", "1")
	wantGet(t, s, []byte("a"), nil)
	wantGet(t, s, []byte("b\x00"), nil)
	wantGet(t, s, []byte("c"), nil)
}

func testPutGet(t *testing.T, s statelog.Bytes) {
	put(t, s, "k1", "v1")
	put(t, s, "k2", "v2")
	wantGet(t, s, []byte("k1"), []byte("v1"))
	wantGet(t, s, []byte("k2"), []byte("v2"))
	wantScan(t, s, nil, nil, entries("k1", "v1", "k2", "v2"))
}

func testOverwrite(t *testing.T, s statelog.Bytes) {
	put(t, s, "k", "a long first value")
	put(t, s, "k", "short")
	wantGet(t, s, []byte("k"), []byte("short"))
	wantScan(t, s, nil, nil, entries("k", "short"))
}

func testNilValue(t *testing.T, s statelog.Bytes) {
	if err := s.Put([]byte("nil"), nil); err != nil {
		t.Fatalf("Put(%q, nil): %v", "nil", err)
	}
	if err := s.Put([]byte("empty"), []byte{}); err != nil {
		t.Fatalf("Put(%q, []byte{}): %v", "empty", err)
	}
	for _, k := range []string{"nil", "empty"} {
		got, err := s.Get([]byte(k))
		if err != nil {
			t.Fatalf("Get(%q): %v", k, err)
		}
		if got == nil || len(got) != 0 {
			t.Errorf("Get(%q) after putting an empty value = %#v, want a non-nil empty slice (nil means absent)", k, got)
		}
	}
	for _, backward := range []bool{false, true} {
		if got := collect(t, s, backward, nil, nil); len(got) != 2 || len(got[0].v) != 0 || len(got[1].v) != 0 {
			t.Errorf("scan (backward=%v) after putting two empty values yielded %s, want both keys with empty values", backward, fmtEntries(got))
		}
	}
}

func testEmptyKey(t *testing.T, s statelog.Bytes) {
	put(t, s, "", "empty key")
	put(t, s, "\x00", "zero")
	put(t, s, "a", "a")
	wantGet(t, s, []byte{}, []byte("empty key"))
	wantGet(t, s, nil, []byte("empty key")) // nil and empty are the same key
	all := entries("", "empty key", "\x00", "zero", "a", "a")
	wantScan(t, s, nil, nil, all)
	wantScan(t, s, []byte{}, nil, all)
	wantScan(t, s, nil, []byte("\x00"), all[:1])
	if err := s.Delete(nil); err != nil {
		t.Fatalf("Delete(nil): %v", err)
	}
	wantGet(t, s, []byte{}, nil)
	wantScan(t, s, nil, nil, all[1:])
}

func testDelete(t *testing.T, s statelog.Bytes) {
	put(t, s, "a", "1")
	put(t, s, "b", "2")
	put(t, s, "c", "3")
	del(t, s, "b")
	wantGet(t, s, []byte("b"), nil)
	wantGet(t, s, []byte("a"), []byte("1"))
	wantGet(t, s, []byte("c"), []byte("3"))
	wantScan(t, s, nil, nil, entries("a", "1", "c", "3"))
	del(t, s, "b") // again
	put(t, s, "b", "again")
	wantGet(t, s, []byte("b"), []byte("again"))
	wantScan(t, s, nil, nil, entries("a", "1", "b", "again", "c", "3"))
	for _, k := range []string{"a", "b", "c"} {
		del(t, s, k)
	}
	wantScan(t, s, nil, nil, nil)
}

func testDeleteAbsent(t *testing.T, s statelog.Bytes) {
	del(t, s, "never there")
	if err := s.Delete(nil); err != nil {
		t.Errorf("Delete(nil) on an empty store: %v", err)
	}
	put(t, s, "k", "v")
	del(t, s, "k\x00") // a neighbour of a present key
	del(t, s, "")
	wantScan(t, s, nil, nil, entries("k", "v"))
}

// binaryKeys are keys whose order trips up implementations that treat keys
// as strings, zero-terminated, or as prefixes of one another.
var binaryKeys = []string{
	"", "\x00", "\x00\x00", "\x00\x01", "\x00\xff", "\x01",
	"a", "a\x00", "a\x00\x00", "a\x00b", "a\x01", "a\xff", "ab", "b",
	"\x7f", "\x80", "\xfe\xff", "\xff", "\xff\x00", "\xff\xff", "\xff\xff\xff",
}

func putBinaryKeys(t *testing.T, s statelog.Bytes) []entry {
	t.Helper()
	perm := rand.New(rand.NewPCG(1, 2)).Perm(len(binaryKeys))
	for _, i := range perm { // in no particular order
		put(t, s, binaryKeys[i], fmt.Sprintf("v%d", i))
	}
	want := make([]entry, len(binaryKeys))
	for i, k := range binaryKeys {
		want[i] = entry{[]byte(k), []byte(fmt.Sprintf("v%d", i))}
	}
	slices.SortFunc(want, func(a, b entry) int { return bytes.Compare(a.k, b.k) })
	return want
}

func testBinaryKeysOrder(t *testing.T, s statelog.Bytes) {
	want := putBinaryKeys(t, s)
	wantScan(t, s, nil, nil, want)
	for _, e := range want {
		wantGet(t, s, e.k, e.v)
	}
}

func testRangeBounds(t *testing.T, s statelog.Bytes) {
	all := putBinaryKeys(t, s)
	// between returns the entries in [lo, hi), nil meaning open.
	between := func(lo, hi []byte) []entry {
		var es []entry
		for _, e := range all {
			if (lo == nil || bytes.Compare(e.k, lo) >= 0) && (hi == nil || bytes.Compare(e.k, hi) < 0) {
				es = append(es, e)
			}
		}
		return es
	}
	bounds := [][]byte{nil, []byte("a"), []byte("a\x00"), []byte("a\x00a"), []byte("aa"), []byte("\x00"), []byte("\xff"), []byte("\xff\xff\xff\xff"), []byte("zzz")}
	for _, lo := range bounds {
		for _, hi := range bounds {
			wantScan(t, s, lo, hi, between(lo, hi))
		}
	}
	// lo == hi and lo > hi are empty ranges, not errors.
	wantScan(t, s, []byte("a"), []byte("a"), nil)
	wantScan(t, s, []byte("b"), []byte("a"), nil)
	wantScan(t, s, []byte("\xff"), []byte("\x00"), nil)
	// lo inclusive, hi exclusive, on adjacent present keys.
	ia := slices.IndexFunc(all, func(e entry) bool { return string(e.k) == "a" })
	wantScan(t, s, []byte("a"), []byte("a\x00"), all[ia:ia+1])
	wantScan(t, s, []byte("a\x00"), []byte("a\x00\x00"), all[ia+1:ia+2])
}

func testEmptyHi(t *testing.T, s statelog.Bytes) {
	put(t, s, "", "empty key")
	put(t, s, "a", "1")
	// An empty, non-nil hi is the bound "", below every key: the range is
	// empty. Only nil leaves a side open.
	wantScan(t, s, nil, []byte{}, nil)
	wantScan(t, s, []byte{}, []byte{}, nil)
}

func testPrefixScan(t *testing.T, s statelog.Bytes) {
	all := putBinaryKeys(t, s)
	for _, p := range []string{"a", "a\x00", "\x00", "\xff", "\xff\xff", "ab", "zz"} {
		prefix := []byte(p)
		var want []entry
		for _, e := range all {
			if bytes.HasPrefix(e.k, prefix) {
				want = append(want, e)
			}
		}
		wantScan(t, s, prefix, statelog.PrefixEnd(prefix), want)
	}
}

func testEarlyBreak(t *testing.T, s statelog.Bytes) {
	for i := range 10 {
		put(t, s, fmt.Sprintf("k%d", i), fmt.Sprintf("v%d", i))
	}
	for _, backward := range []bool{false, true} {
		seq, name := s.Range(nil, nil), "Range"
		first := "k0"
		if backward {
			seq, name, first = s.Backward(nil, nil), "Backward", "k9"
		}
		n := 0
		for k := range seq {
			n++
			if string(k) != first {
				t.Errorf("%s(nil, nil) yielded %q first, want %q", name, k, first)
			}
			break
		}
		if n != 1 {
			t.Errorf("%s(nil, nil) yielded %d entries before the loop broke, want 1", name, n)
		}
		if err := s.Err(); err != nil {
			t.Errorf("%s: Err after breaking out of the loop: %v", name, err)
		}
		// Break in the middle, then use the store: nothing may be held.
		n = 0
		for range seq {
			if n++; n == 5 {
				break
			}
		}
		put(t, s, "after-break-"+name, "x")
		wantGet(t, s, []byte("k3"), []byte("v3"))
		del(t, s, "after-break-"+name)
	}
	// Nested iterations, the inner one broken early.
	count := 0
	for range s.Range(nil, nil) {
		for range s.Backward(nil, nil) {
			break
		}
		count++
	}
	if count != 10 {
		t.Errorf("Range(nil, nil) with a nested, broken Backward yielded %d entries, want 10", count)
	}
	wantScan(t, s, nil, nil, func() []entry {
		var es []entry
		for i := range 10 {
			es = append(es, entry{[]byte(fmt.Sprintf("k%d", i)), []byte(fmt.Sprintf("v%d", i))})
		}
		return es
	}())
}

func testSeqReusable(t *testing.T, s statelog.Bytes) {
	put(t, s, "a", "1")
	put(t, s, "b", "2")
	for _, backward := range []bool{false, true} {
		seq := s.Range(nil, nil)
		if backward {
			seq = s.Backward(nil, nil)
		}
		var runs [2][]entry
		for i := range runs {
			for k, v := range seq {
				runs[i] = append(runs[i], entry{slices.Clone(k), slices.Clone(v)})
			}
		}
		if len(runs[0]) != 2 || !equalEntries(runs[0], runs[1]) {
			t.Errorf("ranging twice over one sequence (backward=%v) yielded %s, then %s; want the 2 entries both times", backward, fmtEntries(runs[0]), fmtEntries(runs[1]))
		}
	}
}

func testGetCopy(t *testing.T, s statelog.Bytes) {
	put(t, s, "k", "value")
	got, err := s.Get([]byte("k"))
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	for i := range got {
		got[i] = 'X'
	}
	_ = append(got[:0], "overwritten through capacity"...)
	wantGet(t, s, []byte("k"), []byte("value"))
	wantScan(t, s, nil, nil, entries("k", "value"))
}

func testIterCopies(t *testing.T, s statelog.Bytes) {
	put(t, s, "k1", "v1")
	put(t, s, "k2", "v2")
	for _, backward := range []bool{false, true} {
		seq := s.Range(nil, nil)
		if backward {
			seq = s.Backward(nil, nil)
		}
		for k, v := range seq {
			for i := range k {
				k[i] = 'X'
			}
			for i := range v {
				v[i] = 'Y'
			}
			_ = append(v[:0], "overwritten through capacity"...)
		}
		if err := s.Err(); err != nil {
			t.Fatalf("Err: %v", err)
		}
		wantGet(t, s, []byte("k1"), []byte("v1"))
		wantGet(t, s, []byte("k2"), []byte("v2"))
		wantScan(t, s, nil, nil, entries("k1", "v1", "k2", "v2"))
	}
}

func testYieldedValid(t *testing.T, s statelog.Bytes) {
	var want []entry
	for i := range 100 {
		k, v := fmt.Sprintf("key-%03d", i), strings.Repeat(fmt.Sprint(i%10), 10+i)
		put(t, s, k, v)
		want = append(want, entry{[]byte(k), []byte(v)})
	}
	for _, backward := range []bool{false, true} {
		seq := s.Range(nil, nil)
		if backward {
			seq = s.Backward(nil, nil)
		}
		// Keep the yielded slices themselves, not copies: an implementation
		// reusing a buffer between steps shows here.
		var got []entry
		for k, v := range seq {
			got = append(got, entry{k, v})
		}
		if err := s.Err(); err != nil {
			t.Fatalf("Err: %v", err)
		}
		w := want
		if backward {
			w = slices.Clone(want)
			slices.Reverse(w)
		}
		if !equalEntries(got, w) {
			t.Errorf("slices yielded by a scan (backward=%v) changed after the next steps: got %s", backward, fmtEntries(got[:min(5, len(got))]))
		}
	}
}

func testInputsNotRetained(t *testing.T, s statelog.Bytes) {
	k, v := []byte("key"), []byte("value")
	if err := s.Put(k, v); err != nil {
		t.Fatalf("Put: %v", err)
	}
	copy(k, "KEY")
	copy(v, "VALUE")
	wantGet(t, s, []byte("key"), []byte("value"))
	wantGet(t, s, []byte("KEY"), nil)
	// A key buffer reused for the next Put.
	buf := []byte("k0")
	for i := range 3 {
		buf[1] = byte('0' + i)
		if err := s.Put(buf, buf); err != nil {
			t.Fatalf("Put: %v", err)
		}
	}
	wantScan(t, s, []byte("k"), []byte("k\xff"), entries("k0", "k0", "k1", "k1", "k2", "k2", "key", "value"))
}

// testBoundsNotRetained changes the caller's hi and lo while a scan runs:
// an implementation comparing each key with the caller's slices (rather
// than copies taken when the loop starts) ends early or yields too much.
// Changing the bounds between the call and the loop is not checked:
// statelog.Memory's sequences read them when ranged.
func testBoundsNotRetained(t *testing.T, s statelog.Bytes) {
	for i := range 5 {
		put(t, s, fmt.Sprintf("r%d", i), "x")
	}
	put(t, s, "s", "after")
	for _, backward := range []bool{false, true} {
		name, lo, hi := "Range", []byte("r"), []byte("r9")
		seq := s.Range(lo, hi)
		if backward {
			name, seq = "Backward", s.Backward(lo, hi)
		}
		got := 0
		for range seq {
			copy(hi, "r0")
			copy(lo, "r4")
			got++
		}
		if got != 5 {
			t.Errorf("%s(%q, %q) whose bounds the caller changed to (%q, %q) during the loop yielded %d entries, want 5: "+
				"the store must not retain slices passed in (clone lo and hi when the loop starts)", name, "r", "r9", "r4", "r0", got)
		}
	}
}

func testLargeValue(t *testing.T, s statelog.Bytes) {
	big := make([]byte, 1<<20)
	for i := range big {
		big[i] = byte(i * 7)
	}
	if err := s.Put([]byte("big"), big); err != nil {
		t.Fatalf("Put of a 1 MiB value: %v", err)
	}
	got, err := s.Get([]byte("big"))
	if err != nil {
		t.Fatalf("Get of a 1 MiB value: %v", err)
	}
	if !bytes.Equal(got, big) {
		t.Errorf("Get of a 1 MiB value returned %d bytes that differ from those put", len(got))
	}
	bigKey := bytes.Repeat([]byte{0xab, 0x00, 0xff}, 1000)
	put(t, s, string(bigKey), "v")
	wantGet(t, s, bigKey, []byte("v"))
}

func testErrClean(t *testing.T, s statelog.Bytes) {
	if err := s.Err(); err != nil {
		t.Errorf("Err on a new store = %v, want nil", err)
	}
	put(t, s, "a", "1")
	for range s.Range(nil, nil) {
	}
	for range s.Backward([]byte("a"), nil) {
	}
	if err := s.Err(); err != nil {
		t.Errorf("Err after successful scans = %v, want nil", err)
	}
	if err := s.Err(); err != nil {
		t.Errorf("Err called twice = %v, want nil", err)
	}
}

// testRandomModel runs random operations on the store and on a map, and
// compares gets and scans with random bounds after each batch.
func testRandomModel(t *testing.T, s statelog.Bytes) {
	r := rand.New(rand.NewPCG(7, 11))
	alphabet := []byte{0x00, 0x01, 'a', 'b', 0x7f, 0x80, 0xfe, 0xff}
	randKey := func() []byte {
		k := make([]byte, r.IntN(4))
		for i := range k {
			k[i] = alphabet[r.IntN(len(alphabet))]
		}
		return k
	}
	model := map[string][]byte{}
	sorted := func() []entry {
		es := make([]entry, 0, len(model))
		for k, v := range model {
			es = append(es, entry{[]byte(k), v})
		}
		sort.Slice(es, func(i, j int) bool { return bytes.Compare(es[i].k, es[j].k) < 0 })
		return es
	}
	for round := range 20 {
		for range 50 {
			k := randKey()
			if r.IntN(3) == 0 {
				if err := s.Delete(k); err != nil {
					t.Fatalf("round %d: Delete(%q): %v", round, k, err)
				}
				delete(model, string(k))
				continue
			}
			v := []byte(fmt.Sprintf("r%d-%d", round, r.IntN(1000)))
			if r.IntN(10) == 0 {
				v = nil
			}
			if err := s.Put(k, v); err != nil {
				t.Fatalf("round %d: Put(%q, %q): %v", round, k, v, err)
			}
			model[string(k)] = append([]byte{}, v...)
		}
		for range 20 {
			k := randKey()
			want, ok := model[string(k)]
			if ok && want == nil {
				want = []byte{}
			}
			wantGet(t, s, k, want)
		}
		all := sorted()
		for range 10 {
			var lo, hi []byte
			if r.IntN(4) != 0 {
				lo = randKey()
			}
			if r.IntN(4) != 0 {
				hi = randKey()
			}
			var want []entry
			for _, e := range all {
				if (lo == nil || bytes.Compare(e.k, lo) >= 0) && (hi == nil || bytes.Compare(e.k, hi) < 0) {
					want = append(want, e)
				}
			}
			wantScan(t, s, lo, hi, want)
		}
		if t.Failed() {
			t.Fatalf("round %d: the store diverged from the model; stopping", round)
		}
	}
}

// testStamped checks that a value put with a timestamp gives it back, and
// reads as any value through Get and the scans; that Put and Delete drop
// it; and that a negative timestamp (before 1970) survives.
func testStamped(t *testing.T, s statelog.Bytes) {
	wantStamp := func(k string, want []byte, ts int64, stamped bool) {
		t.Helper()
		v, gotTS, gotStamped, err := s.GetStamped([]byte(k))
		if err != nil {
			t.Fatalf("GetStamped(%q): %v", k, err)
		}
		if !bytes.Equal(v, want) || (want == nil) != (v == nil) || gotStamped != stamped || (stamped && gotTS != ts) {
			t.Errorf("GetStamped(%q) = %q, %d, %v; want %q, %d, %v", k, v, gotTS, gotStamped, want, ts, stamped)
		}
	}
	if err := s.PutStamped([]byte("a"), []byte("1"), 5000); err != nil {
		t.Fatal(err)
	}
	if err := s.PutStamped([]byte("b"), nil, -7); err != nil {
		t.Fatal(err)
	}
	put(t, s, "c", "3")
	wantStamp("a", []byte("1"), 5000, true)
	wantStamp("b", []byte{}, -7, true)
	wantStamp("c", []byte("3"), 0, false)
	wantStamp("d", nil, 0, false)
	wantGet(t, s, []byte("a"), []byte("1"))
	if got, want := fmtEntries(collect(t, s, false, nil, nil)), `["a"="1" "b"="" "c"="3"]`; got != want {
		t.Errorf("Range over stamped values = %s, want %s", got, want)
	}
	if got, want := fmtEntries(collect(t, s, true, nil, nil)), `["c"="3" "b"="" "a"="1"]`; got != want {
		t.Errorf("Backward over stamped values = %s, want %s", got, want)
	}
	put(t, s, "a", "2")
	wantStamp("a", []byte("2"), 0, false)
	del(t, s, "b")
	wantStamp("b", nil, 0, false)
	if err := s.PutStamped([]byte("b"), []byte("x"), 9); err != nil {
		t.Fatal(err)
	}
	wantStamp("b", []byte("x"), 9, true)
}
