package changelog

import (
	"container/list"
	"sync"
)

// DefaultReadCacheBytes is Options.ReadCacheBytes when it is zero.
const DefaultReadCacheBytes = 32 << 20

// cacheEntryOverhead is what an entry costs besides its key and value: the
// list element, the map slot and the entry itself, roughly.
const cacheEntryOverhead = 96

// readCache keeps recently read committed values of the database, and the
// keys found absent, so that a store's Get that misses its write buffer
// need not go to Badger (a read costs microseconds, a hit a map lookup).
// It holds only what Badger holds: every write to the database updates or
// forgets the keys it touches once the write has succeeded, and a dropped
// partition empties it. It is bounded by bytes (keys, values and a fixed
// overhead per entry) and evicts the least recently used entries; it is
// safe for concurrent use.
//
// Coherence rests on the runtime's ownership of state: the reads and
// writes of one store partition happen on one goroutine at a time (its
// task's thread, or its restore before the task runs), so a read's fill
// never races a write of the same key.
type readCache struct {
	mu    sync.Mutex
	limit int
	size  int
	ll    *list.List // front: most recently used; elements hold *cacheEntry
	items map[string]*list.Element
}

type cacheEntry struct {
	key    string
	val    []byte
	absent bool // the key has no value
}

func newReadCache(limit int) *readCache {
	if limit <= 0 {
		return nil
	}
	return &readCache{limit: limit, ll: list.New(), items: map[string]*list.Element{}}
}

// get returns the cached value of key: ok reports whether the cache knows
// the key, absent whether it knows the key has no value. The value is
// shared: callers must not modify it.
func (c *readCache) get(key []byte) (val []byte, absent, ok bool) {
	if c == nil {
		return nil, false, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.items[string(key)]
	if !ok {
		return nil, false, false
	}
	c.ll.MoveToFront(el)
	e := el.Value.(*cacheEntry)
	return e.val, e.absent, true
}

// put records key's committed value, or that it has none.
func (c *readCache) put(key, val []byte, absent bool) {
	if c == nil {
		return
	}
	cost := len(key) + len(val) + cacheEntryOverhead
	if cost > c.limit/8 {
		// One huge value would flush the cache: forget the key instead.
		c.forget(key)
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.items[string(key)]; ok {
		e := el.Value.(*cacheEntry)
		c.size += len(val) - len(e.val)
		e.val, e.absent = val, absent
		c.ll.MoveToFront(el)
	} else {
		e := &cacheEntry{key: string(key), val: val, absent: absent}
		c.items[e.key] = c.ll.PushFront(e)
		c.size += cost
	}
	for c.size > c.limit {
		el := c.ll.Back()
		e := el.Value.(*cacheEntry)
		c.ll.Remove(el)
		delete(c.items, e.key)
		c.size -= len(e.key) + len(e.val) + cacheEntryOverhead
	}
}

// forget drops key from the cache.
func (c *readCache) forget(key []byte) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.items[string(key)]; ok {
		e := el.Value.(*cacheEntry)
		c.ll.Remove(el)
		delete(c.items, e.key)
		c.size -= len(e.key) + len(e.val) + cacheEntryOverhead
	}
}

// clear empties the cache.
func (c *readCache) clear() {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ll.Init()
	clear(c.items)
	c.size = 0
}
