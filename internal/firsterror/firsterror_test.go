package firsterror

import (
	"errors"
	"sync"
	"testing"
)

// The first error is kept and taken once; nil is ignored; concurrent
// setters keep exactly one of theirs.
func TestKeeper(t *testing.T) {
	var k Keeper
	first, second := errors.New("first"), errors.New("second")
	k.Set(nil)
	k.Set(first)
	k.Set(second)
	if err := k.Take(); err != first {
		t.Fatalf("Take = %v, want first", err)
	}
	if err := k.Take(); err != nil {
		t.Fatalf("a second Take = %v, want nil", err)
	}
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		errs[i] = errors.New("concurrent")
		wg.Go(func() { k.Set(errs[i]) })
	}
	wg.Wait()
	got := k.Take()
	found := false
	for _, e := range errs {
		found = found || e == got
	}
	if !found {
		t.Fatalf("Take = %v, want one of the errors set", got)
	}
}
