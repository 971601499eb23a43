package weir

import (
	"slices"
	"testing"
)

// Cleanups deferred before anything is added run what is added after, in
// reverse order: with a value receiver, the deferred call saw the empty
// list, and a stopped App kept its state directory locked.
func TestCleanupsDeferredFirstRunInReverse(t *testing.T) {
	var got []int
	func() {
		var undo cleanups
		defer undo.run()
		for i := range 3 {
			undo.add(func() { got = append(got, i) })
		}
	}()
	if want := []int{2, 1, 0}; !slices.Equal(got, want) {
		t.Fatalf("cleanups ran %v, want %v", got, want)
	}
}
