package kstream

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/weirstream/weir/internal/streamtime"
	"github.com/weirstream/weir/processor"
	"github.com/weirstream/weir/serde"
)

// suppressTimeLimit adds the node and buffer of Suppress(UntilTimeLimit).
func (t *WindowedTable[K, V]) suppressTimeLimit(name string, s Suppression) *WindowedTable[K, V] {
	n := addTimeLimitSuppressor(t.b, t.node, name, t.keys, t.values, s, nil)
	return &WindowedTable[K, V]{b: t.b, node: n, name: name, keys: t.keys, values: t.values, windows: t.windows}
}

// addTimeLimitSuppressor adds a time-limit suppressor named name of the
// updates of parent and its buffer store. merge, when not nil, combines
// an update with the one the buffer holds for its window and key, which
// it replaces (a table's change keeps the old value of the first update
// the buffer held). It is a function, not a method, so that a table can
// buffer its changes without instantiating a WindowedTable of them.
func addTimeLimitSuppressor[K, V any](b *Builder, parent processor.Node[Windowed[K], V], name string, keys serde.Serde[K], values serde.Serde[V], s Suppression, merge func(held, next V) V) processor.Node[Windowed[K], V] {
	var spec *processor.KeyValueSpec[timedKey[K], bufferValue[V]]
	if keys != nil && values != nil {
		spec = processor.KeyValue(name, serde.Serde[timedKey[K]](timedKeySerde[K]{bufferKeySerde[K]{keys}}), serde.Serde[bufferValue[V]](bufferValueSerde[V]{values}))
	} else {
		// The aggregation reported its nil serde; Build fails.
		spec = processor.KeyValue[timedKey[K], bufferValue[V]](name, nil, nil)
	}
	n := b.t.AddProcessor(name, func() processor.Processor[Windowed[K], V, Windowed[K], V] {
		return &timeLimitSuppressor[K, V]{spec: spec, keys: bufferKeySerde[K]{keys}, values: bufferValueSerde[V]{values}, s: s, name: name, merge: merge}
	}, parent)
	b.t.AddStore(spec, n)
	b.t.KeyedByPartition(name) // the key after time and window (timedKeySerde.KeyLayout)
	return n
}

// timeLimitSuppressor is the processor of Suppress(UntilTimeLimit):
// Kafka Streams' KTableSuppressProcessor with a time-limit buffer. Its
// store orders the entries by the time they were buffered; index finds
// an entry's buffer time from its window and key.
type timeLimitSuppressor[K, V any] struct {
	spec   *processor.KeyValueSpec[timedKey[K], bufferValue[V]]
	keys   bufferKeySerde[K]
	values bufferValueSerde[V]
	s      Suppression
	name   string
	merge  func(held, next V) V
	buf    processor.KeyValueStore[timedKey[K], bufferValue[V]]
	ctx    processor.Context[Windowed[K], V]
	// index maps an entry's serialized window and key to its buffer
	// time and its size in the store; bytes is the sum of the sizes.
	index map[string]bufferedEntry
	bytes int64
	// oldest is the earliest buffer time in the store when index is not
	// empty, so that evict opens no iterator while nothing is due.
	oldest int64
	// now is the stream time the suppression has observed.
	now streamtime.Observed
}

type bufferedEntry struct {
	time, size int64
}

func (p *timeLimitSuppressor[K, V]) Init(ctx processor.Context[Windowed[K], V]) (err error) {
	if p.buf, err = p.spec.Open(ctx); err != nil {
		return err
	}
	p.ctx = ctx
	p.index, p.bytes = make(map[string]bufferedEntry), 0
	for k, v := range p.buf.All() {
		if len(p.index) == 0 {
			p.oldest = k.time // the store is ordered by buffer time
		}
		wk, size, err := p.sizeOf(k.w, v)
		if err != nil {
			return err
		}
		p.index[string(wk)] = bufferedEntry{time: k.time, size: size}
		p.bytes += size
	}
	if err := p.buf.Err(); err != nil {
		return err
	}
	return nil
}

func (p *timeLimitSuppressor[K, V]) Close() error { return nil }

// sizeOf returns the serialized window and key of an entry and the bytes
// the entry takes in the store.
func (p *timeLimitSuppressor[K, V]) sizeOf(w bufferKey[K], v bufferValue[V]) ([]byte, int64, error) {
	return bufferEntrySize(p.name, p.keys, p.values, w, v)
}

// bufferEntrySize returns a suppression buffer entry's serialized window
// and key, and what the entry counts towards a BufferLimit's MaxBytes:
// both serialized, plus 8 bytes.
func bufferEntrySize[K, V any](name string, keys bufferKeySerde[K], values bufferValueSerde[V], w bufferKey[K], v bufferValue[V]) ([]byte, int64, error) {
	wk, err := keys.Serialize(name, w)
	if err != nil {
		return nil, 0, fmt.Errorf("kstream: suppression %s: serialize key: %w", name, err)
	}
	vb, err := values.Serialize(name, v)
	if err != nil {
		return nil, 0, fmt.Errorf("kstream: suppression %s: serialize value: %w", name, err)
	}
	return wk, int64(8 + len(wk) + len(vb)), nil
}

// Process buffers an update and emits what the stream time observed with
// it (the timestamps of the updates that reached the suppression, as in
// Kafka Streams' KTableSuppressProcessor) has held long enough.
func (p *timeLimitSuppressor[K, V]) Process(ctx processor.Context[Windowed[K], V], rec processor.Record[Windowed[K], V]) error {
	now := p.now.Observe(ctx, rec.Timestamp.UnixMilli())
	w := bufferKey[K]{end: rec.Key.End.UnixMilli(), start: rec.Key.Start.UnixMilli(), key: rec.Key.Key}
	if rec.Tombstone {
		// A deletion (a session merged away) passes at once, and what
		// the buffer holds for its window goes with it.
		if err := p.forget(w); err != nil {
			return err
		}
		return ctx.Forward(rec)
	}
	v := bufferValue[V]{value: rec.Value, ts: rec.Timestamp.UnixMilli()}
	wk, size, err := p.sizeOf(w, v)
	if err != nil {
		return err
	}
	e, found := p.index[string(wk)]
	if !found {
		e.time = v.ts
		if len(p.index) == 0 || e.time < p.oldest {
			p.oldest = e.time
		}
	} else if p.merge != nil {
		held, ok, err := p.buf.Get(timedKey[K]{time: e.time, w: w})
		if err != nil {
			return err
		}
		if ok {
			v.value = p.merge(held.value, v.value)
			if _, size, err = p.sizeOf(w, v); err != nil {
				return err
			}
		}
	}
	if err := p.buf.Put(timedKey[K]{time: e.time, w: w}, v); err != nil {
		return err
	}
	p.bytes += size - e.size
	e.size = size
	p.index[string(wk)] = e
	if err := p.evict(now); err != nil {
		return err
	}
	if p.s.whenFull == FailWhenFull && p.full() {
		return fmt.Errorf("kstream: suppression %s: %d entries of %d bytes, past the limit %+v: %w",
			p.name, len(p.index), p.bytes, p.s.limit, ErrSuppressionBufferFull)
	}
	return nil
}

// forget deletes the buffered entry of window and key w, if there is one.
func (p *timeLimitSuppressor[K, V]) forget(w bufferKey[K]) error {
	wk, err := p.keys.Serialize(p.name, w)
	if err != nil {
		return fmt.Errorf("kstream: suppression %s: serialize key: %w", p.name, err)
	}
	e, found := p.index[string(wk)]
	if !found {
		return nil
	}
	delete(p.index, string(wk))
	p.bytes -= e.size
	return p.buf.Delete(timedKey[K]{time: e.time, w: w})
}

// full reports whether the buffer is past its limit.
func (p *timeLimitSuppressor[K, V]) full() bool {
	l := p.s.limit
	return (l.MaxRecords > 0 && len(p.index) > l.MaxRecords) || (l.MaxBytes > 0 && p.bytes > l.MaxBytes)
}

// evict emits and deletes, oldest first, the entries whose time limit
// stream time now has reached, and with EmitEarlyWhenFull those the
// buffer must lose to be within its limit.
func (p *timeLimitSuppressor[K, V]) evict(now int64) error {
	expiry := now - p.s.timeLimit.Milliseconds()
	early := p.s.whenFull == EmitEarlyWhenFull
	if len(p.index) == 0 || (p.oldest > expiry && !(early && p.full())) {
		return nil
	}
	for {
		// One entry at a time: the iterator must be done before the
		// store changes.
		var (
			k     timedKey[K]
			v     bufferValue[V]
			found bool
		)
		for k, v = range p.buf.All() {
			found = true
			break
		}
		if err := p.buf.Err(); err != nil {
			return err
		}
		if !found {
			return nil
		}
		if k.time > expiry && !(early && p.full()) {
			p.oldest = k.time
			return nil
		}
		wk, _, err := p.sizeOf(k.w, v)
		if err != nil {
			return err
		}
		if err := p.buf.Delete(k); err != nil {
			return err
		}
		p.bytes -= p.index[string(wk)].size
		delete(p.index, string(wk))
		out := processor.Record[Windowed[K], V]{
			Key:       Windowed[K]{Key: k.w.key, Start: time.UnixMilli(k.w.start).UTC(), End: time.UnixMilli(k.w.end).UTC()},
			Value:     v.value,
			Timestamp: time.UnixMilli(v.ts),
		}
		if err := p.ctx.Forward(out); err != nil {
			return err
		}
	}
}

// timedKey is the key of a time-limit buffer: the time the entry was
// buffered in ms, big-endian so that the store orders entries by it
// (windowed aggregations skip records before the epoch), then the window
// and key as a [bufferKey].
type timedKey[K any] struct {
	time int64
	w    bufferKey[K]
}

type timedKeySerde[K any] struct{ w bufferKeySerde[K] }

func (s timedKeySerde[K]) Serialize(topic string, k timedKey[K]) ([]byte, error) {
	wb, err := s.w.Serialize(topic, k.w)
	if err != nil {
		return nil, err
	}
	out := make([]byte, 8, 8+len(wb))
	binary.BigEndian.PutUint64(out, uint64(k.time))
	return append(out, wb...), nil
}

func (s timedKeySerde[K]) Deserialize(topic string, data []byte) (timedKey[K], error) {
	if len(data) < 8 {
		return timedKey[K]{}, errors.New("kstream: time-limit suppression buffer key: fewer than 8 bytes")
	}
	w, err := s.w.Deserialize(topic, data[8:])
	if err != nil {
		return timedKey[K]{}, err
	}
	return timedKey[K]{time: int64(binary.BigEndian.Uint64(data)), w: w}, nil
}
