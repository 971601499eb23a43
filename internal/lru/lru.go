// Package lru is a small, bounded, least-recently-used cache safe for
// concurrent use. weir's schema and serde caches sit on it, so every cache
// that grows with data seen at run time (schema ids read from records) has a
// fixed upper bound.
package lru

import (
	"container/list"
	"sync"
)

// Cache maps keys to values and holds at most its capacity of entries: adding
// to a full cache evicts the least recently used entry. The zero value is not
// usable; call [New]. Methods are safe for concurrent use.
type Cache[K comparable, V any] struct {
	mu    sync.Mutex
	cap   int
	order *list.List // front: most recently used; elements hold *entry[K, V]
	items map[K]*list.Element
}

type entry[K comparable, V any] struct {
	key K
	val V
}

// New returns a cache holding at most capacity entries; a capacity below 1
// is taken as 1.
func New[K comparable, V any](capacity int) *Cache[K, V] {
	capacity = max(capacity, 1)
	return &Cache[K, V]{cap: capacity, order: list.New(), items: make(map[K]*list.Element, min(capacity, 64))}
}

// Get returns the value of key and marks it recently used.
func (c *Cache[K, V]) Get(key K) (V, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.items[key]; ok {
		c.order.MoveToFront(el)
		return el.Value.(*entry[K, V]).val, true
	}
	var zero V
	return zero, false
}

// Add sets the value of key, evicting the least recently used entry when the
// cache is full.
func (c *Cache[K, V]) Add(key K, val V) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.items[key]; ok {
		el.Value.(*entry[K, V]).val = val
		c.order.MoveToFront(el)
		return
	}
	c.items[key] = c.order.PushFront(&entry[K, V]{key: key, val: val})
	if c.order.Len() > c.cap {
		oldest := c.order.Back()
		c.order.Remove(oldest)
		delete(c.items, oldest.Value.(*entry[K, V]).key)
	}
}

// Len returns the number of entries, at most the capacity.
func (c *Cache[K, V]) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.order.Len()
}
