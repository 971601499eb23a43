package slotlist

import (
	"container/list"
	"math/rand/v2"
	"testing"
)

// Over random pushes, moves, removals and clears, a List holds what
// container/list holds, in the same order, and reuses freed slots.
func TestListMatchesContainerList(t *testing.T) {
	t.Parallel()
	var l List[int]
	model := list.New()
	elems := map[int32]*list.Element{} // l's element -> the model's
	rng := rand.New(rand.NewPCG(1, 2))
	pick := func() int32 {
		for i := range elems {
			return i
		}
		return -1
	}
	most := 0
	for step := range 50_000 {
		switch op := rng.IntN(100); {
		case op < 30:
			elems[l.PushBack(step)] = model.PushBack(step)
		case op < 50:
			elems[l.PushFront(step)] = model.PushFront(step)
		case op < 65:
			if i := pick(); i >= 0 {
				l.MoveToFront(i)
				model.MoveToFront(elems[i])
			}
		case op < 80:
			if i := pick(); i >= 0 {
				l.MoveToBack(i)
				model.MoveToBack(elems[i])
			}
		case op < 99:
			if i := pick(); i >= 0 {
				if got, want := l.Remove(i), model.Remove(elems[i]).(int); got != want {
					t.Fatalf("step %d: Remove(%d) = %d, want %d", step, i, got, want)
				}
				delete(elems, i)
			}
		default:
			l.Clear()
			model.Init()
			clear(elems)
		}
		most = max(most, l.Len())
		if l.Len() != model.Len() {
			t.Fatalf("step %d: Len %d, want %d", step, l.Len(), model.Len())
		}
		i, ok := l.Front()
		for e := model.Front(); e != nil; e = e.Next() {
			if !ok || *l.At(i) != e.Value.(int) {
				t.Fatalf("step %d: the order differs from container/list's at %v", step, e.Value)
			}
			i, ok = l.Next(i)
		}
		if ok {
			t.Fatalf("step %d: the list goes on past container/list's end", step)
		}
		if b, ok := l.Back(); ok != (model.Len() > 0) || ok && *l.At(b) != model.Back().Value.(int) {
			t.Fatalf("step %d: Back differs from container/list's", step)
		}
	}
	if l.Slots() > most {
		t.Errorf("%d slots for at most %d elements at once: freed slots are not reused", l.Slots(), most)
	}
}
