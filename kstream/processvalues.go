package kstream

import (
	"errors"
	"fmt"

	"github.com/weirstream/weir/processor"
)

// ErrForwardOutsideRecord is returned by Forward and ForwardTo of a
// [Stream.ProcessValues] processor called while no input record is being
// processed (in a punctuator): the key of such a record is not fixed by an
// input, so it could move records away from the partition of their key.
var ErrForwardOutsideRecord = errors.New("kstream: ProcessValues processor forwarded outside Process")

// ProcessValues is [Stream.Process] for processors that keep the key:
// every record they forward from Process takes the key of the input
// record being processed, whatever key it was given, so the result keeps
// the stream's partitioning and groups without a repartition. Forwarding
// from a punctuator returns [ErrForwardOutsideRecord]. name names the
// node and is required; the stores are attached as in Process. Kafka
// Streams' KStream.processValues.
func (s *Stream[K, V]) ProcessValues[VOut any](name string, supplier func() processor.Processor[K, V, K, VOut], stores ...processor.StoreSpec) *Stream[K, VOut] {
	fixed := func() processor.Processor[K, V, K, VOut] {
		return &fixedKey[K, V, VOut]{inner: supplier()}
	}
	n := s.b.t.AddProcessor(name, fixed, s.node)
	for _, st := range stores {
		s.b.t.AddStore(st, n)
	}
	return derive(s, n, name)
}

// fixedKey runs a processor with a context whose forwards carry the key
// of the record being processed.
type fixedKey[K, V, VOut any] struct {
	inner processor.Processor[K, V, K, VOut]
	ctx   fixedKeyContext[K, VOut]
}

func (p *fixedKey[K, V, VOut]) Init(ctx processor.Context[K, VOut]) error {
	p.ctx.Context = ctx
	return p.inner.Init(&p.ctx)
}

func (p *fixedKey[K, V, VOut]) Process(ctx processor.Context[K, VOut], rec processor.Record[K, V]) error {
	p.ctx.Context, p.ctx.key, p.ctx.inRecord = ctx, rec.Key, true
	defer func() {
		var zero K
		p.ctx.key, p.ctx.inRecord = zero, false
	}()
	return p.inner.Process(&p.ctx, rec)
}

func (p *fixedKey[K, V, VOut]) Close() error { return p.inner.Close() }

// fixedKeyContext is the context a ProcessValues processor sees. It is
// reused for every record of its task: the runtime calls a processor from
// one goroutine.
type fixedKeyContext[K, V any] struct {
	processor.Context[K, V]
	key      K
	inRecord bool
}

func (c *fixedKeyContext[K, V]) Forward(rec processor.Record[K, V]) error {
	if !c.inRecord {
		return fmt.Errorf("task %s: %w", c.TaskID(), ErrForwardOutsideRecord)
	}
	rec.Key = c.key
	return c.Context.Forward(rec)
}

func (c *fixedKeyContext[K, V]) ForwardTo(child processor.Child[K, V], rec processor.Record[K, V]) error {
	if !c.inRecord {
		return fmt.Errorf("task %s: %w", c.TaskID(), ErrForwardOutsideRecord)
	}
	rec.Key = c.key
	return c.Context.ForwardTo(child, rec)
}
