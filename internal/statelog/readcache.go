package statelog

import (
	"hash/maphash"
	"sync"

	"github.com/weirstream/weir/internal/slotlist"
)

// cacheEntryOverhead is what an entry costs besides its key and value: its
// slot and its map entry, roughly.
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
// A read that missed fills the cache only if no write touched the key
// (or a key sharing its stripe) since the miss: reads from outside the
// task that owns a partition (store views, interactive queries, standby
// reads) run beside its commits, and a value read from Badger just before
// a commit must not land in the cache after the commit updated it: the
// task would then read the old value back, and count from it. Each write
// bumps its key's stripe generation under mu; the miss returns the
// generation, and fill compares.
//
// The entries are a slotlist in order of use, most recent first: a store
// reading many keys once each (a store larger than the cache) evicts and
// fills at every read, and this costs no allocation but the key's.
type readCache struct {
	mu    sync.Mutex
	limit int
	size  int
	items map[string]int32 // a key's element in order
	order slotlist.List[cacheEntry]
	seed  maphash.Seed
	gens  [cacheStripes]uint64
}

// cacheStripes is how many write generations a cache keeps (a power of
// two): a write delays the fills of about 1/cacheStripes of the keys
// being read at that moment.
const cacheStripes = 256

type cacheEntry struct {
	key    string
	local       // val, ts and stamped
	absent bool // the key has no value
}

func newReadCache(limit int) *readCache {
	if limit <= 0 {
		return nil
	}
	return &readCache{limit: limit, items: map[string]int32{}, seed: maphash.MakeSeed()}
}

func (c *readCache) stripe(key []byte) *uint64 {
	return &c.gens[maphash.Bytes(c.seed, key)&(cacheStripes-1)]
}

// get returns the cached value of key: ok reports whether the cache knows
// the key, absent whether it knows the key has no value. The value is
// shared: callers must not modify it. On a miss, stamp is what fill needs
// to store what the caller then reads from the database.
func (c *readCache) get(key []byte) (val local, absent, ok bool, stamp uint64) {
	if c == nil {
		return local{}, false, false, 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	i, ok := c.items[string(key)]
	if !ok {
		return local{}, false, false, *c.stripe(key)
	}
	c.order.MoveToFront(i)
	e := c.order.At(i)
	return e.local, e.absent, true, 0
}

// fill records what a read that missed (stamp from get) found in the
// database, unless a write touched the key's stripe since: the value
// read may then be older than the database's.
func (c *readCache) fill(key []byte, val local, absent bool, stamp uint64) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if *c.stripe(key) != stamp {
		return
	}
	c.store(key, val, absent)
}

// put records key's committed value, or that it has none, as written.
func (c *readCache) put(key []byte, val local, absent bool) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	*c.stripe(key)++
	c.store(key, val, absent)
}

// store records key's value. c.mu is held.
func (c *readCache) store(key []byte, val local, absent bool) {
	cost := len(key) + len(val.val) + cacheEntryOverhead
	if cost > c.limit/8 {
		// One huge value would flush the cache: forget the key instead.
		c.drop(key)
		return
	}
	if i, ok := c.items[string(key)]; ok {
		e := c.order.At(i)
		c.size += len(val.val) - len(e.val)
		e.local, e.absent = val, absent
		c.order.MoveToFront(i)
	} else {
		k := string(key)
		c.items[k] = c.order.PushFront(cacheEntry{key: k, local: val, absent: absent})
		c.size += cost
	}
	for c.size > c.limit {
		i, _ := c.order.Back()
		c.remove(i)
	}
}

// forget drops key from the cache: a write whose outcome is not known,
// or that the cache does not keep.
func (c *readCache) forget(key []byte) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	*c.stripe(key)++
	c.drop(key)
}

// drop removes key's entry. c.mu is held.
func (c *readCache) drop(key []byte) {
	if i, ok := c.items[string(key)]; ok {
		c.remove(i)
	}
}

// clear empties the cache.
func (c *readCache) clear() {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	clear(c.items)
	c.order = slotlist.List[cacheEntry]{}
	c.size = 0
	for i := range c.gens {
		c.gens[i]++
	}
}

// remove evicts element i's entry. c.mu is held.
func (c *readCache) remove(i int32) {
	e := c.order.Remove(i)
	delete(c.items, e.key)
	c.size -= len(e.key) + len(e.val) + cacheEntryOverhead
}
