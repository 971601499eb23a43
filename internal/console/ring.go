package console

import "sync"

// ring keeps the last n values pushed, oldest first. It is safe for
// concurrent use.
type ring[T any] struct {
	mu   sync.Mutex
	buf  []T
	next int // where the next push goes once buf is full
	full bool
}

// newRing returns a ring of n values (at least 1).
func newRing[T any](n int) *ring[T] {
	return &ring[T]{buf: make([]T, 0, max(n, 1))}
}

// push adds v, dropping the oldest value when the ring is full.
func (r *ring[T]) push(v T) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.full {
		r.buf = append(r.buf, v)
		if len(r.buf) == cap(r.buf) {
			r.full = true
		}
		return
	}
	r.buf[r.next] = v
	r.next = (r.next + 1) % len(r.buf)
}

// all returns the values, oldest first, in a new slice.
func (r *ring[T]) all() []T {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]T, 0, len(r.buf))
	out = append(out, r.buf[r.next:]...)
	return append(out, r.buf[:r.next]...)
}

// size returns the most values the ring keeps.
func (r *ring[T]) size() int { return cap(r.buf) }
