// Package slotlist is a doubly linked list whose elements live in the
// slots of one slice, linked by index, with the slots of removed elements
// reused: the order of use of a cache (least recently used first) costs
// no allocation per element once the slots have grown, and holds no
// pointer of its own for the collector to follow, where container/list
// allocates an element per push. It is not safe for concurrent use.
package slotlist

// List is a list of values of type T. The zero List is empty and ready to
// use; assigning the zero List drops every slot. An element is known by
// its slot's index, which stays its own until it is removed.
type List[T any] struct {
	slots      []slot[T]
	head, tail int32 // one more than the index of the first and last; 0: none
	free       int32 // one more than the index of the first free slot; 0: none
	n          int
}

type slot[T any] struct {
	v          T
	prev, next int32 // one more than the neighbours' indexes; 0: none
}

// Len returns the number of elements.
func (l *List[T]) Len() int { return l.n }

// Slots returns the number of slots made since the list was last
// cleared, in use or free: the most elements it has held at once since.
func (l *List[T]) Slots() int { return len(l.slots) }

// Cap returns the number of slots the list holds memory for.
func (l *List[T]) Cap() int { return cap(l.slots) }

// At returns the value of element i, which the caller may change in
// place until it removes i.
func (l *List[T]) At(i int32) *T { return &l.slots[i].v }

// Front returns the first element, or false when the list is empty.
func (l *List[T]) Front() (int32, bool) { return l.head - 1, l.head != 0 }

// Back returns the last element, or false when the list is empty.
func (l *List[T]) Back() (int32, bool) { return l.tail - 1, l.tail != 0 }

// Next returns the element after i, or false when i is the last.
func (l *List[T]) Next(i int32) (int32, bool) {
	n := l.slots[i].next
	return n - 1, n != 0
}

// PushFront adds v at the front and returns its element.
func (l *List[T]) PushFront(v T) int32 {
	i := l.take(v)
	l.linkFront(i)
	return i
}

// PushBack adds v at the back and returns its element.
func (l *List[T]) PushBack(v T) int32 {
	i := l.take(v)
	l.linkBack(i)
	return i
}

// MoveToFront moves element i to the front.
func (l *List[T]) MoveToFront(i int32) {
	if l.head != i+1 {
		l.unlink(i)
		l.linkFront(i)
	}
}

// MoveToBack moves element i to the back.
func (l *List[T]) MoveToBack(i int32) {
	if l.tail != i+1 {
		l.unlink(i)
		l.linkBack(i)
	}
}

// Remove takes element i out of the list and returns its value; its slot
// lets the value go and is reused by a later push.
func (l *List[T]) Remove(i int32) T {
	l.unlink(i)
	s := &l.slots[i]
	v := s.v
	*s = slot[T]{next: l.free}
	l.free = i + 1
	l.n--
	return v
}

// Clear empties the list and keeps its slots' memory for the next
// elements; assign the zero List to let it go.
func (l *List[T]) Clear() {
	clear(l.slots) // lets the values go
	l.slots = l.slots[:0]
	l.head, l.tail, l.free, l.n = 0, 0, 0, 0
}

func (l *List[T]) take(v T) int32 {
	l.n++
	if f := l.free; f != 0 {
		i := f - 1
		l.free = l.slots[i].next
		l.slots[i] = slot[T]{v: v}
		return i
	}
	l.slots = append(l.slots, slot[T]{v: v})
	return int32(len(l.slots) - 1)
}

func (l *List[T]) linkFront(i int32) {
	s := &l.slots[i]
	s.prev, s.next = 0, l.head
	if l.head != 0 {
		l.slots[l.head-1].prev = i + 1
	} else {
		l.tail = i + 1
	}
	l.head = i + 1
}

func (l *List[T]) linkBack(i int32) {
	s := &l.slots[i]
	s.prev, s.next = l.tail, 0
	if l.tail != 0 {
		l.slots[l.tail-1].next = i + 1
	} else {
		l.head = i + 1
	}
	l.tail = i + 1
}

func (l *List[T]) unlink(i int32) {
	s := &l.slots[i]
	if s.prev != 0 {
		l.slots[s.prev-1].next = s.next
	} else {
		l.head = s.next
	}
	if s.next != 0 {
		l.slots[s.next-1].prev = s.prev
	} else {
		l.tail = s.prev
	}
}
