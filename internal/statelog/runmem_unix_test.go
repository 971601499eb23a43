//go:build unix

package statelog

import (
	"testing"
	"unsafe"

	"github.com/weirstream/weir/changelog"
)

// within reports whether the n bytes at p lie in mem.
func within(p unsafe.Pointer, n int, mem []byte) bool {
	lo, at := uintptr(unsafe.Pointer(unsafe.SliceData(mem))), uintptr(p)
	return at >= lo && at+uintptr(n) <= lo+uintptr(len(mem))
}

// A load told what comes keeps its run in its mapping, outside the heap,
// through spills, loads exactly the changelog's state, and frees the
// mapping when it ends.
func TestBulkRunOutsideTheHeap(t *testing.T) {
	t.Parallel()
	db, err := Open(t.TempDir(), changelog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	entries, model := randomChangelog(7, 60_000, 20_000)
	s := db.Space("s", 0)
	// The first entry comes twice, as a changelog may hold a record again.
	b := bulkLoadWith(t, db, s, entries, 512<<10, "", func(bk *Bulk) {
		bk.Expect(int64(len(entries)))
		if err := bk.Add(entries[:1]); err != nil {
			t.Fatal(err)
		}
		if bk.mem == nil {
			t.Fatal("the run expected is on the heap, not in a mapping")
		}
		if !within(unsafe.Pointer(unsafe.SliceData(bk.refs)), cap(bk.refs)*bulkRefBytes, bk.mem) ||
			!within(unsafe.Pointer(unsafe.SliceData(bk.arena)), cap(bk.arena), bk.mem) {
			t.Fatal("the run's refs or arena are outside its mapping")
		}
	})
	if len(b.runs) != 0 || b.mem != nil || b.refs != nil {
		t.Errorf("after Finish: %d runs listed, mapping %v, refs %v", len(b.runs), b.mem != nil, b.refs != nil)
	}
	checkSpace(t, s, model)
}
