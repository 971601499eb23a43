// Package firsterror keeps the first error of several, for iterators that
// report their errors afterwards through an Err method.
package firsterror

import "sync"

// Keeper keeps the first error set since it was last taken. Its zero
// value is ready; it is safe for concurrent use.
type Keeper struct {
	mu  sync.Mutex
	err error
}

// Set keeps err unless an error is kept already; nil is ignored.
func (k *Keeper) Set(err error) {
	if err == nil {
		return
	}
	k.mu.Lock()
	if k.err == nil {
		k.err = err
	}
	k.mu.Unlock()
}

// Take returns the error kept, and clears it.
func (k *Keeper) Take() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	err := k.err
	k.err = nil
	return err
}
