package processor

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/weirstream/weir/internal/graph"
	"github.com/weirstream/weir/serde"
)

// input is a node instance that receives records of type Record[K, V].
// Parents call it directly, so records stay typed between nodes.
type input[K, V any] interface {
	process(rec Record[K, V]) error
}

// nodeErr attributes err to node unless a node further down already did.
func nodeErr(node string, err error) error {
	if err == nil {
		return nil
	}
	var ne *graph.NodeError
	if errors.As(err, &ne) {
		return err
	}
	return &graph.NodeError{Node: node, Err: err}
}

// children asserts the instances of a node's children to the input type the
// node forwards to. The typed handles make a mismatch impossible; it would
// be a bug in weir, reported as an error.
func typedChildren[K, V any](node string, children []graph.Instance) ([]input[K, V], error) {
	out := make([]input[K, V], len(children))
	for i, c := range children {
		in, ok := c.(input[K, V])
		if !ok {
			return nil, fmt.Errorf("processor: internal error: child %d of %q has the wrong input type %T", i, node, c)
		}
		out[i] = in
	}
	return out, nil
}

// nodeContext is the Context of one node instance.
type nodeContext[K, V any] struct {
	context.Context
	env        graph.TaskEnv
	node       string
	children   []input[K, V]
	childNames []string
}

func newNodeContext[K, V any](env graph.TaskEnv, n *graph.Node, children []graph.Instance) (*nodeContext[K, V], error) {
	typed, err := typedChildren[K, V](n.Name, children)
	if err != nil {
		return nil, err
	}
	names := make([]string, len(n.Children))
	for i, c := range n.Children {
		names[i] = c.Name
	}
	return &nodeContext[K, V]{Context: env.Context(), env: env, node: n.Name, children: typed, childNames: names}, nil
}

func (c *nodeContext[K, V]) Forward(rec Record[K, V]) error {
	for _, ch := range c.children {
		if err := ch.process(rec); err != nil {
			return err
		}
	}
	return nil
}

func (c *nodeContext[K, V]) ForwardTo(child string, rec Record[K, V]) error {
	for i, name := range c.childNames {
		if name == child {
			return c.children[i].process(rec)
		}
	}
	return fmt.Errorf("processor: %q has no child %q", c.node, child)
}

func (c *nodeContext[K, V]) Metadata() (Metadata, bool) {
	return c.env.Metadata()
}

func (c *nodeContext[K, V]) StreamTime() time.Time { return c.env.StreamTime() }
func (c *nodeContext[K, V]) ApplicationID() string { return c.env.ApplicationID() }
func (c *nodeContext[K, V]) TaskID() string        { return c.env.TaskID() }

func (c *nodeContext[K, V]) Schedule(interval time.Duration, typ PunctuationType, fn Punctuator) (func(), error) {
	if interval < time.Millisecond {
		return nil, fmt.Errorf("processor: %q: punctuation interval %v is below 1ms", c.node, interval)
	}
	if fn == nil {
		return nil, fmt.Errorf("processor: %q: nil punctuator", c.node)
	}
	switch typ {
	case StreamTime, WallClockTime:
	default:
		return nil, fmt.Errorf("processor: %q: unknown punctuation type %d", c.node, typ)
	}
	node := c.node
	return c.env.Schedule(node, interval, typ, func(t time.Time) error { return nodeErr(node, fn(t)) })
}

// sourceInstance deserializes the records of one topic partition.
type sourceInstance[K, V any] struct {
	ctx     *nodeContext[K, V]
	keys    serde.Serde[K]
	values  serde.Serde[V]
	extract TimestampExtractor[K, V]
	// partitionTime is the largest timestamp extracted so far on this
	// source's partition; extractors use it to repair bad timestamps.
	partitionTime time.Time
	head          Record[K, V]
}

func (s *sourceInstance[K, V]) Init() error  { return nil }
func (s *sourceInstance[K, V]) Close() error { return nil }

func (s *sourceInstance[K, V]) Decode(raw *graph.RawRecord) (time.Time, error) {
	k, err := s.keys.Deserialize(raw.Topic, raw.Key)
	if err != nil {
		return time.Time{}, &graph.DecodeError{Stage: "key", Err: err}
	}
	v, err := s.values.Deserialize(raw.Topic, raw.Value)
	if err != nil {
		return time.Time{}, &graph.DecodeError{Stage: "value", Err: err}
	}
	rec := Record[K, V]{Key: k, Value: v, Timestamp: raw.Timestamp, Headers: raw.Headers}
	if s.extract != nil {
		ts, err := s.extract(rec, s.partitionTime)
		if err != nil {
			return time.Time{}, &graph.DecodeError{Stage: "timestamp", Err: err}
		}
		rec.Timestamp = ts
	}
	if rec.Timestamp.Before(time.UnixMilli(0)) {
		return time.Time{}, &graph.DecodeError{Stage: "timestamp", Err: fmt.Errorf("negative timestamp %d ms", rec.Timestamp.UnixMilli())}
	}
	if rec.Timestamp.After(s.partitionTime) {
		s.partitionTime = rec.Timestamp
	}
	s.head = rec
	return rec.Timestamp, nil
}

func (s *sourceInstance[K, V]) Process() error {
	rec := s.head
	s.head = Record[K, V]{} // drop references held by the record
	return s.ctx.Forward(rec)
}

// processorInstance runs a user Processor.
type processorInstance[KIn, VIn, KOut, VOut any] struct {
	ctx *nodeContext[KOut, VOut]
	p   Processor[KIn, VIn, KOut, VOut]
}

func (p *processorInstance[KIn, VIn, KOut, VOut]) Init() error {
	return nodeErr(p.ctx.node, p.p.Init(p.ctx))
}

func (p *processorInstance[KIn, VIn, KOut, VOut]) Close() error {
	return nodeErr(p.ctx.node, p.p.Close())
}

func (p *processorInstance[KIn, VIn, KOut, VOut]) process(rec Record[KIn, VIn]) error {
	return nodeErr(p.ctx.node, p.p.Process(p.ctx, rec))
}

// sinkInstance serializes records and hands them to the task's producer.
type sinkInstance[K, V any] struct {
	env         graph.TaskEnv
	node        string
	topic       string // the name given; for an internal topic, expanded by the runtime
	serdeTopic  string // the real topic, which serdes see
	internal    bool
	keys        serde.Serde[K]
	values      serde.Serde[V]
	partitioner Partitioner[K, V]
	partitions  int32
}

func (s *sinkInstance[K, V]) Init() error {
	if s.partitioner != nil {
		n, err := s.env.PartitionCount(s.topic, s.internal)
		if err != nil {
			return nodeErr(s.node, err)
		}
		s.partitions = n
	}
	return nil
}

func (s *sinkInstance[K, V]) Close() error { return nil }

func (s *sinkInstance[K, V]) process(rec Record[K, V]) error {
	k, err := s.keys.Serialize(s.serdeTopic, rec.Key)
	if err != nil {
		return nodeErr(s.node, fmt.Errorf("serialize key for %s: %w", s.serdeTopic, err))
	}
	v, err := s.values.Serialize(s.serdeTopic, rec.Value)
	if err != nil {
		return nodeErr(s.node, fmt.Errorf("serialize value for %s: %w", s.serdeTopic, err))
	}
	partition := int32(-1)
	if s.partitioner != nil {
		partition = s.partitioner(rec.Key, rec.Value, s.partitions)
		if partition < 0 || partition >= s.partitions {
			return nodeErr(s.node, fmt.Errorf("partitioner chose partition %d of %s, which has %d", partition, s.serdeTopic, s.partitions))
		}
	}
	return nodeErr(s.node, s.env.Send(s.topic, s.internal, k, v, rec.Timestamp, rec.Headers, partition))
}
