// Package queue is the bounded hand-off between a partition's fetching
// goroutine and the stream thread that processes it.
//
// A Queue holds at most a number of items and of bytes. Push blocks while
// it is full, which stops the fetching goroutine and so stops fetching:
// a slow task makes lag grow, never memory. The consumer side never blocks.
//
// A blocked Push resumes once the queue has drained to half of both
// limits (or is empty), not at every item that leaves: waking the
// fetching goroutine for one record at a time made the two goroutines
// trade the processor record by record, and on a machine with few cores
// the stream thread spent most of its time waiting for its turn to run.
package queue

import (
	"context"
	"errors"
	"sync"
	"time"
)

// ErrClosed is returned by Push on a closed queue.
var ErrClosed = errors.New("queue: closed")

// Limits bound a queue. A single item larger than Bytes is still admitted
// into an empty queue, so an oversized record cannot wedge a partition.
type Limits struct {
	Items int // at least 1
	Bytes int // at least 1
}

// Queue is a bounded FIFO of T, safe for one producer and one consumer
// goroutine (and Close from any goroutine).
type Queue[T any] struct {
	limits Limits
	size   func(T) int
	notify func() // called when an item arrives; must not block

	mu      sync.Mutex
	items   []T // ring buffer of capacity limits.Items
	head, n int
	bytes   int
	closed  bool
	space   chan struct{} // signalled (cap 1) when a waiting Push may go on, or on close
	done    chan struct{} // closed by Close

	blocked time.Duration // time Push spent waiting for space
	waiting time.Time     // when the Push waiting now started; zero if none
}

// New returns an empty queue. size gives an item's byte size; notify, if
// not nil, is called after each Push without any lock held.
func New[T any](limits Limits, size func(T) int, notify func()) *Queue[T] {
	limits.Items = max(limits.Items, 1)
	limits.Bytes = max(limits.Bytes, 1)
	return &Queue[T]{
		limits: limits,
		size:   size,
		notify: notify,
		items:  make([]T, limits.Items),
		space:  make(chan struct{}, 1),
		done:   make(chan struct{}),
	}
}

// Push appends v, waiting while the queue is full. It returns ctx's error
// if ctx ends first and ErrClosed if the queue is or gets closed.
func (q *Queue[T]) Push(ctx context.Context, v T) error {
	sz := q.size(v)
	defer q.stopWaiting()
	for {
		q.mu.Lock()
		if q.closed {
			q.mu.Unlock()
			return ErrClosed
		}
		if q.n == 0 || q.n < q.limits.Items && q.bytes+sz <= q.limits.Bytes {
			q.items[(q.head+q.n)%len(q.items)] = v
			q.n++
			q.bytes += sz
			q.mu.Unlock()
			if q.notify != nil {
				q.notify()
			}
			return nil
		}
		if q.waiting.IsZero() {
			q.waiting = time.Now()
		}
		q.mu.Unlock()
		select {
		case <-q.space:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// stopWaiting adds the wait of the Push that ends to the blocked time.
func (q *Queue[T]) stopWaiting() {
	q.mu.Lock()
	if !q.waiting.IsZero() {
		q.blocked += time.Since(q.waiting)
		q.waiting = time.Time{}
	}
	q.mu.Unlock()
}

// Peek returns the oldest item without removing it.
func (q *Queue[T]) Peek() (T, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.n == 0 {
		var zero T
		return zero, false
	}
	return q.items[q.head], true
}

// Pop removes the oldest item.
func (q *Queue[T]) Pop() (T, bool) {
	q.mu.Lock()
	var zero T
	if q.n == 0 {
		q.mu.Unlock()
		return zero, false
	}
	v := q.items[q.head]
	q.items[q.head] = zero // let the item be collected
	q.head = (q.head + 1) % len(q.items)
	q.n--
	q.bytes -= q.size(v)
	// Wake a waiting Push only once half the queue is free (see the
	// package comment). The Push rechecks its own item's room and waits
	// again if it does not fit; every Pop below the mark signals again,
	// and an empty queue admits any item, so it cannot wait forever.
	wake := !q.waiting.IsZero() && (q.n == 0 || 2*q.n <= q.limits.Items && 2*q.bytes <= q.limits.Bytes)
	q.mu.Unlock()
	if wake {
		select {
		case q.space <- struct{}{}:
		default:
		}
	}
	return v, true
}

// Len returns the number of items and bytes queued.
func (q *Queue[T]) Len() (items, bytes int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.n, q.bytes
}

// Blocked returns the total time Push has waited for space, including a
// wait still going on.
func (q *Queue[T]) Blocked() time.Duration {
	q.mu.Lock()
	defer q.mu.Unlock()
	if !q.waiting.IsZero() {
		return q.blocked + time.Since(q.waiting)
	}
	return q.blocked
}

// Done is closed when the queue is closed.
func (q *Queue[T]) Done() <-chan struct{} { return q.done }

// Close wakes a waiting Push with ErrClosed and drops the queued items.
// Closing twice is a no-op.
func (q *Queue[T]) Close() {
	q.mu.Lock()
	if !q.closed {
		q.closed = true
		clear(q.items)
		q.n, q.bytes = 0, 0
		close(q.done)
	}
	q.mu.Unlock()
	select {
	case q.space <- struct{}{}:
	default:
	}
}
