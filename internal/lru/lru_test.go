package lru

import "testing"

func TestEvictsLeastRecentlyUsed(t *testing.T) {
	t.Parallel()
	c := New[int, string](2)
	c.Add(1, "a")
	c.Add(2, "b")
	if _, ok := c.Get(1); !ok { // 1 is now the most recent
		t.Fatal("1 missing")
	}
	c.Add(3, "c") // evicts 2
	if _, ok := c.Get(2); ok {
		t.Error("2 kept, want evicted as least recently used")
	}
	for k, want := range map[int]string{1: "a", 3: "c"} {
		if got, ok := c.Get(k); !ok || got != want {
			t.Errorf("Get(%d) = %q, %v; want %q", k, got, ok, want)
		}
	}
	if c.Len() != 2 {
		t.Errorf("Len = %d, want the capacity 2", c.Len())
	}
	c.Add(1, "z")
	if got, _ := c.Get(1); got != "z" || c.Len() != 2 {
		t.Errorf("update: Get(1) = %q, Len %d", got, c.Len())
	}
	if New[int, int](0).cap != 1 {
		t.Error("capacity 0 not raised to 1")
	}
}
