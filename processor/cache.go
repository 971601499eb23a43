package processor

import (
	"github.com/weirstream/weir/internal/graph"
	"github.com/weirstream/weir/internal/slotlist"
)

// cacheEntryOverhead is what a cached record costs besides its key's
// identity and its value's size: the record, its slot and map entry.
const cacheEntryOverhead = 96

// RecordCache holds back the records a processor forwards, by key, until
// its task commits: a key updated many times between two commits is
// forwarded once, with its latest record (value, timestamp and headers).
// It is Kafka Streams' record cache (cache.max.bytes.buffering), which
// the DSL's aggregations use; a Processor API processor opts in by
// forwarding through one. The changelog and the local store need no such
// cache: weir writes a store's changes once per commit anyway.
//
// What is held is forwarded before every commit of the task, in the
// order the keys were last updated, so the commit carries it: under
// exactly once a key's record is committed with the input offsets that
// produced it, never before and never lost. When the task goes back to
// its last commit (an aborted transaction), what is held is dropped with
// the rest of the uncommitted work and built again by the replay.
//
// Caching is on when Config.CacheMaxBytes is above 0 (it is off by
// default). Every cache of an instance shares that budget; past it, a
// cache that takes a record forwards its least recently updated ones
// until the instance is within the budget again. With caching off
// (Config.CacheMaxBytes 0, also weirtest.Config's) Forward forwards at
// once.
//
// Downstream nodes receive a held record at the commit, after records the
// task processed later: a downstream node that acts on the task's stream
// time (closing windows, expiring entries) may act before it sees the
// update. Such chains should not cache; the DSL's windowed aggregations
// cache only when no Suppress(UntilWindowCloses) follows them.
//
// A RecordCache belongs to the node whose Context made it and is used
// from that node's methods and punctuators only.
type RecordCache[K, V any] struct {
	ctx    Context[K, V]
	budget *graph.CacheBudget
	id     func(K) (string, error)
	size   func(V) int
	// byKey finds a held key's element in held, the records in update
	// order (first is the least recently updated): holding a key costs no
	// allocation once held's slots have grown, which they do up to the
	// most records held at once (see retainSlots).
	byKey map[string]int32
	held  slotlist.List[cached[K, V]]
	bytes int64
}

// retainSlots is the most slots a cache always keeps when it has
// forwarded or dropped everything (at every commit). Above it, a cache
// keeps its slots while the interval that ends used at least a quarter of
// them, so that a steady load of many keys reuses them from commit to
// commit, and gives them up after an interval that used fewer: a burst of
// many keys does not pin their memory (about 100 bytes a slot besides the
// key and value) for the task's life.
const retainSlots = 4096

type cached[K, V any] struct {
	id   string
	rec  Record[K, V]
	size int64
}

// NewRecordCache returns a record cache forwarding to ctx's children,
// normally made in Init. id gives a key's identity (two keys with the same
// id are the same key; a serialized key will do); size, if not nil,
// estimates a value's bytes for the budget (nil counts none). Records are
// forwarded at once when ctx is not the runtime's or caching is off.
func NewRecordCache[K, V any](ctx Context[K, V], id func(K) (string, error), size func(V) int) *RecordCache[K, V] {
	c := &RecordCache[K, V]{ctx: ctx, id: id, size: size}
	if nc, ok := ctx.(*nodeContext[K, V]); ok && nc.env.CacheBudget() != nil {
		c.budget = nc.env.CacheBudget()
		c.byKey = map[string]int32{}
		nc.caches = append(nc.caches, c)
	}
	return c
}

// Forward holds rec as its key's latest record, replacing the one held,
// and forwards the least recently updated records while the instance's
// caches are over their budget. With caching off it forwards rec.
func (c *RecordCache[K, V]) Forward(rec Record[K, V]) error {
	return c.Merge(rec, nil)
}

// Merge is Forward for records that carry what they replace (the DSL's
// table updates, with the value forwarded before them): when a record is
// held for rec's key, merge combines the two (held first) into the
// record held from now on; nil merge keeps rec. With caching off it
// forwards rec.
func (c *RecordCache[K, V]) Merge(rec Record[K, V], merge func(held, next Record[K, V]) Record[K, V]) error {
	if c.budget == nil {
		return c.ctx.Forward(rec)
	}
	id, err := c.id(rec.Key)
	if err != nil {
		return err
	}
	size := int64(len(id) + cacheEntryOverhead)
	if c.size != nil {
		size += int64(c.size(rec.Value))
	}
	if i, ok := c.byKey[id]; ok {
		ce := c.held.At(i)
		if merge != nil {
			rec = merge(ce.rec, rec)
		}
		ce.rec = rec
		c.budget.Give(ce.size)
		c.bytes -= ce.size
		ce.size = size
		c.held.MoveToBack(i)
	} else {
		c.byKey[id] = c.held.PushBack(cached[K, V]{id: id, rec: rec, size: size})
	}
	c.bytes += size
	if !c.budget.Take(size) {
		return nil
	}
	for c.budget.Over() && c.held.Len() > 0 {
		if err := c.forwardOldest(); err != nil {
			return err
		}
	}
	return nil
}

// Len returns the number of records held.
func (c *RecordCache[K, V]) Len() int { return c.held.Len() }

// forwardOldest forwards and forgets the least recently updated record.
func (c *RecordCache[K, V]) forwardOldest() error {
	i, _ := c.held.Front()
	ce := c.held.Remove(i)
	delete(c.byKey, ce.id)
	c.budget.Give(ce.size)
	c.bytes -= ce.size
	return c.ctx.Forward(ce.rec)
}

// flush forwards everything held, least recently updated first.
func (c *RecordCache[K, V]) flush() error {
	for c.held.Len() > 0 {
		if err := c.forwardOldest(); err != nil {
			return err
		}
	}
	c.reset()
	return nil
}

// discard drops everything held.
func (c *RecordCache[K, V]) discard() {
	c.budget.Give(c.bytes)
	c.bytes = 0
	clear(c.byKey)
	c.reset()
}

// reset empties the slots, keeping them as retainSlots says.
func (c *RecordCache[K, V]) reset() {
	if c.held.Cap() > retainSlots && c.held.Slots() < c.held.Cap()/4 {
		c.held = slotlist.List[cached[K, V]]{}
	} else {
		c.held.Clear()
	}
}

// heldRecords is a node's record cache, as its instance sees it.
type heldRecords interface {
	flush() error
	discard()
}
