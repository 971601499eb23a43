package processor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"
	"unsafe"

	"github.com/weirstream/weir/internal/graph"
	"github.com/weirstream/weir/serde"
)

// input is a node instance that receives records of type Record[K, V].
// Parents call it directly, so records stay typed between nodes.
type input[K, V any] interface {
	process(rec Record[K, V]) error
}

// nodeErr attributes err to node unless a node further down already did,
// or it is a topology error, which names its node itself.
func nodeErr(node string, err error) error {
	if err == nil {
		return nil
	}
	var ne *graph.NodeError
	var te *TopologyError
	if errors.As(err, &ne) || errors.As(err, &te) {
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
	env      graph.TaskEnv
	n        *graph.Node
	node     string
	children []input[K, V] // the instances of n.Children, in their order
	log      *slog.Logger  // made by the first Logger call
	// fault is a topology error that ForwardTo returned: the processor's
	// method or punctuator fails with it whatever the processor did with
	// the error (see takeFault).
	fault error
	// caches are the node's record caches (NewRecordCache), flushed
	// before each commit and dropped when the node closes.
	caches []heldRecords
}

func newNodeContext[K, V any](env graph.TaskEnv, n *graph.Node, children []graph.Instance) (*nodeContext[K, V], error) {
	typed, err := typedChildren[K, V](n.Name, children)
	if err != nil {
		return nil, err
	}
	return &nodeContext[K, V]{Context: env.Context(), env: env, n: n, node: n.Name, children: typed}, nil
}

func (c *nodeContext[K, V]) Forward(rec Record[K, V]) error {
	for _, ch := range c.children {
		if err := ch.process(rec); err != nil {
			return err
		}
	}
	return nil
}

func (c *nodeContext[K, V]) ForwardTo(child Child[K, V], rec Record[K, V]) error {
	r := child.r
	switch {
	case r == nil:
		return c.topologyError(errors.New("forward to the zero Child; take handles with Node.Child while building the topology"))
	case r.parent != c.n:
		return c.topologyError(fmt.Errorf("forward to %q, a Child handle of node %q; take this node's own handle with Node.Child", r.name, r.parent.Name))
	case r.child == nil:
		return c.topologyError(fmt.Errorf("no child %q", r.name))
	}
	for i, n := range c.n.Children {
		if n == r.child {
			return c.children[i].process(rec)
		}
	}
	// resolve found r.child among the children, which do not change.
	return c.topologyError(fmt.Errorf("internal error: child %q not found", r.name))
}

// topologyError records err as the node's topology error and returns it.
func (c *nodeContext[K, V]) topologyError(err error) error {
	te := &TopologyError{Node: c.node, Err: err}
	if c.fault == nil {
		c.fault = te
	}
	return te
}

// takeFault returns the topology error recorded since the last call, if
// any, else err attributed to the node. A processor that drops ForwardTo's
// error still fails: the record would otherwise go nowhere, silently, and
// it is not the record's fault.
func (c *nodeContext[K, V]) takeFault(err error) error {
	if f := c.fault; f != nil {
		c.fault = nil
		return f
	}
	return nodeErr(c.node, err)
}

func (c *nodeContext[K, V]) Logger() *slog.Logger {
	if c.log == nil {
		h := c.env.Logger().Handler().WithAttrs([]slog.Attr{slog.String("node", c.node)})
		c.log = slog.New(&recordHandler{h: h, env: c.env})
	}
	return c.log
}

func (c *nodeContext[K, V]) Metadata() (Metadata, bool) {
	md, ok := c.env.Metadata()
	return Metadata(md), ok
}

func (c *nodeContext[K, V]) StreamTime() time.Time { return c.env.StreamTime() }

// ResumedStreamTime is the task's stream time committed before it
// started (see internal/streamtime); not part of Context.
func (c *nodeContext[K, V]) ResumedStreamTime() time.Time { return c.env.ResumedStreamTime() }

// InputKeyNull reports whether the input record's Kafka key is null
// (see "Records with a null key"); not part of Context.
func (c *nodeContext[K, V]) InputKeyNull() bool    { return c.env.InputKeyNull() }
func (c *nodeContext[K, V]) NextVersion() uint64   { return c.env.NextVersion() }
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
	return c.env.Schedule(c.node, interval, graph.PunctuationType(typ), func(t time.Time) error { return c.takeFault(fn(t)) })
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
	// tombstones: a null value is a tombstone, not the serde's to decode.
	tombstones bool
	// rawKeys, rawValues: the serde is [serde.Bytes], so K (or V) is
	// []byte and decoding is a copy. Decode makes the copies of both in
	// one allocation (see ownBytes).
	rawKeys, rawValues bool
}

// isBytes reports whether s is [serde.Bytes]. Interfaces holding
// different dynamic types compare unequal without panicking, so any
// serde of the application's may be passed.
func isBytes[T any](s serde.Serde[T]) bool { return any(s) == any(serde.Bytes()) }

// ownBytes returns copies of key and value (nil stays nil) that share one
// allocation, each capped at its length so that appending to one cannot
// overwrite the other. The copies are the application's: nothing of the
// runtime refers to them, and a replay decodes the record afresh.
func ownBytes(key, value []byte) (k, v []byte) {
	buf := make([]byte, 0, len(key)+len(value))
	if key != nil {
		buf = append(buf, key...)
		k = buf[:len(key):len(key)]
	}
	if value != nil {
		buf = append(buf, value...)
		v = buf[len(buf)-len(value) : len(buf) : len(buf)]
	}
	return k, v
}

// asBytes returns b as a T; T must be []byte, which a source checks
// (rawKeys, rawValues) before it calls it. A conversion through any would
// allocate per record.
func asBytes[T any](b []byte) T { return *(*T)(unsafe.Pointer(&b)) }

func (s *sourceInstance[K, V]) Init() error  { return nil }
func (s *sourceInstance[K, V]) Close() error { return nil }

func (s *sourceInstance[K, V]) Decode(raw *graph.RawRecord) (time.Time, error) {
	tombstone := s.tombstones && raw.Value == nil
	// The byte slices a Bytes serde would copy, copied together (nil and
	// nil cost nothing).
	var kb, vb []byte
	if s.rawKeys {
		kb = raw.Key
	}
	if s.rawValues && !tombstone {
		vb = raw.Value
	}
	kb, vb = ownBytes(kb, vb)
	var (
		k   K
		v   V
		err error
	)
	if s.rawKeys {
		k = asBytes[K](kb)
	} else if k, err = serde.Decode(s.keys, raw.Topic, raw.Key); err != nil {
		return time.Time{}, &graph.DecodeError{Stage: "key", Err: err}
	}
	switch {
	case tombstone:
	case s.rawValues:
		v = asBytes[V](vb)
	default:
		if v, err = serde.Decode(s.values, raw.Topic, raw.Value); err != nil {
			return time.Time{}, &graph.DecodeError{Stage: "value", Err: err}
		}
	}
	rec := Record[K, V]{Key: k, Value: v, Timestamp: raw.Timestamp, Headers: fromRuntime(raw.Headers), Tombstone: tombstone}
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
	return p.ctx.takeFault(p.p.Init(p.ctx))
}

func (p *processorInstance[KIn, VIn, KOut, VOut]) Close() error {
	// After a commit the caches are empty; otherwise the task goes back
	// to its last commit and what they hold is dropped with the rest.
	for _, c := range p.ctx.caches {
		c.discard()
	}
	return nodeErr(p.ctx.node, p.p.Close())
}

// Flush implements graph.Flusher: it forwards what the node's record
// caches hold.
func (p *processorInstance[KIn, VIn, KOut, VOut]) Flush() error {
	for _, c := range p.ctx.caches {
		if err := c.flush(); err != nil {
			return p.ctx.takeFault(err)
		}
	}
	return p.ctx.takeFault(nil)
}

// NodeName implements graph.Flusher.
func (p *processorInstance[KIn, VIn, KOut, VOut]) NodeName() string { return p.ctx.node }

func (p *processorInstance[KIn, VIn, KOut, VOut]) process(rec Record[KIn, VIn]) error {
	return p.ctx.takeFault(p.p.Process(p.ctx, rec))
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
	// topicFor, when set, chooses each record's topic (AddDynamicSink).
	topicFor func(key K, value V) string
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
	if s.topicFor != nil {
		topic := s.topicFor(rec.Key, rec.Value)
		if topic == "" {
			return nodeErr(s.node, errors.New("the topic function gave an empty topic name"))
		}
		s.topic, s.serdeTopic = topic, topic
	}
	k, err := s.keys.Serialize(s.serdeTopic, rec.Key)
	if err != nil {
		return nodeErr(s.node, fmt.Errorf("serialize key for %s: %w", s.serdeTopic, err))
	}
	var v []byte
	if !rec.Tombstone {
		if v, err = s.values.Serialize(s.serdeTopic, rec.Value); err != nil {
			return nodeErr(s.node, fmt.Errorf("serialize value for %s: %w", s.serdeTopic, err))
		}
	}
	partition := int32(-1)
	if s.partitioner != nil {
		partition = s.partitioner(rec.Key, rec.Value, s.partitions)
		if partition < 0 || partition >= s.partitions {
			return nodeErr(s.node, fmt.Errorf("partitioner chose partition %d of %s, which has %d", partition, s.serdeTopic, s.partitions))
		}
	}
	return nodeErr(s.node, s.env.Send(s.topic, s.internal, k, v, rec.Timestamp, toRuntime(rec.Headers), partition))
}
