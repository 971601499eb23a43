package processor

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/weirstream/weir/internal/graph"
	"github.com/weirstream/weir/serde"
)

// Topology is a processing graph under construction. Build it with the Add
// methods, then pass it to weir.New. The zero value is not usable; call
// [NewTopology]. A Topology is not safe for concurrent use while it is being
// built, and must not change once an application runs it.
type Topology struct {
	handle // the runtime's way to the graph (graph.Of)
	g      graph.Graph
	names  map[string]*graph.Node
	topics map[string]string // source topic -> source node
	repart map[string]bool
	routes []*route // Child handles, checked by Validate
	errs   []error
	// built is set once Build has handed the topology to an application;
	// it changes no more (see Node.Child).
	built bool
}

// NewTopology returns an empty topology.
func NewTopology() *Topology {
	t := &Topology{names: map[string]*graph.Node{}, topics: map[string]string{}, repart: map[string]bool{}}
	t.handle = graph.NewHandle(t.graph)
	return t
}

// handle names graph.Handle for embedding: an embedded field takes the
// name of the type as written, so the field stays unexported.
type handle = graph.Handle

// Node is a typed handle to a node's output: records of type Record[K, V].
// Pass it as a parent to the Add methods. The zero Node is invalid.
type Node[K, V any] struct {
	t *Topology
	n *graph.Node
}

// Name returns the node's name.
func (n Node[K, V]) Name() string {
	if n.n == nil {
		return ""
	}
	return n.n.Name
}

// Child returns a handle to the child of n named name, for a processor
// that sends a record to that child only, with [Context.ForwardTo], instead
// of to all its children with [Context.Forward]. The child may be added
// after the handle is taken; [Topology.Validate] (and so weir.New) fails
// when n has no child of that name once the topology is built, so a
// misspelt name never reaches a running application. Hand the handle to
// the processor through its supplier:
//
//	var toBalances, toRejects processor.Child[string, Balance]
//	balance := t.AddProcessor("balance", func() processor.Processor[string, Payment, string, Balance] {
//		return &balancer{ok: toBalances, rejected: toRejects}
//	}, payments)
//	t.AddSink("balance-out", "balances", serde.String(), balanceSerde, balance)
//	t.AddSink("rejects-out", "payment-rejects", serde.String(), balanceSerde, balance)
//	toBalances, toRejects = balance.Child("balance-out"), balance.Child("rejects-out")
//
// The supplier runs only when a task starts, after the topology is built,
// so it sees the assigned handles. Take handles while building: one taken
// once an application runs the topology (in a supplier or a processor) is
// not checked by weir.New, and forwarding to it fails with a
// weir.TopologyError if the name is wrong. Child on the zero Node returns
// the zero Child.
func (n Node[K, V]) Child(name string) Child[K, V] {
	if n.n == nil || n.t == nil {
		return Child[K, V]{}
	}
	r := &route{parent: n.n, name: name}
	if n.t.built {
		// The topology no longer changes and tasks may be taking handles
		// concurrently: resolve at once, and keep t as it is. A wrong
		// name fails ForwardTo.
		_ = r.resolve()
		return Child[K, V]{r: r}
	}
	n.t.routes = append(n.t.routes, r)
	return Child[K, V]{r: r}
}

// Child is a typed handle to one child of a processor, which receives
// records of type Record[K, V]: the processor's output type. Take it with
// [Node.Child] and pass it to [Context.ForwardTo]. A Child is a small
// value, safe to copy and to share between the tasks of an application.
// The zero Child is invalid: forwarding to it, or to a Child of another
// node, stops the application with a weir.TopologyError, never a record
// error.
type Child[K, V any] struct {
	r *route
}

// Name returns the child's name, "" for the zero Child.
func (c Child[K, V]) Name() string {
	if c.r == nil {
		return ""
	}
	return c.r.name
}

// route is what a Child handle names: a child of parent, by name, which
// Validate resolves to the child's node.
type route struct {
	parent *graph.Node
	name   string
	child  *graph.Node // set by resolve; nil while parent has no such child
}

// resolve finds the child r names, or reports that parent has none.
func (r *route) resolve() error {
	r.child = nil
	names := make([]string, 0, len(r.parent.Children))
	for _, c := range r.parent.Children {
		if c.Name == r.name {
			r.child = c
			return nil
		}
		names = append(names, strconv.Quote(c.Name))
	}
	has := "it has no children"
	if len(names) > 0 {
		has = "its children are " + strings.Join(names, ", ")
	}
	return fmt.Errorf("processor: %q has no child %q (Node.Child); %s", r.parent.Name, r.name, has)
}

// TimestampExtractor gives a record its event time. partitionTime is the
// largest timestamp extracted so far on the record's partition (zero at
// first), for extractors that repair missing or invalid times. An error
// hands the record to the application's timestamp error policy.
type TimestampExtractor[K, V any] func(rec Record[K, V], partitionTime time.Time) (time.Time, error)

// SourceOption configures a source.
type SourceOption[K, V any] func(*sourceConfig[K, V])

type sourceConfig[K, V any] struct {
	extract    TimestampExtractor[K, V]
	tombstones bool
}

// WithTimestampExtractor sets a source's timestamp extractor. The default
// uses the Kafka record's timestamp (Kafka Streams'
// FailOnInvalidTimestamp: a negative timestamp is an error).
func WithTimestampExtractor[K, V any](fn TimestampExtractor[K, V]) SourceOption[K, V] {
	return func(c *sourceConfig[K, V]) { c.extract = fn }
}

// WithTombstones makes a source pass a record whose value is null on as
// a tombstone ([Record.Tombstone], with the zero value) instead of giving
// the null to the value serde. Tables read their topics this way.
func WithTombstones[K, V any]() SourceOption[K, V] {
	return func(c *sourceConfig[K, V]) { c.tombstones = true }
}

// Partitioner picks the partition of a sink record among partitions.
type Partitioner[K, V any] func(key K, value V, partitions int32) int32

// SinkOption configures a sink.
type SinkOption[K, V any] func(*sinkConfig[K, V])

type sinkConfig[K, V any] struct {
	partitioner Partitioner[K, V]
}

// WithPartitioner sets a sink's partitioner. The default is Kafka's murmur2
// hash of the serialized key, which Java producers and Kafka Streams use
// too, so co-partitioning with their topics holds.
func WithPartitioner[K, V any](fn Partitioner[K, V]) SinkOption[K, V] {
	return func(c *sinkConfig[K, V]) { c.partitioner = fn }
}

// RepartitionOption configures a repartition topic. The only option is
// [Partitions].
type RepartitionOption struct{ apply func(*graph.Repartition) }

// Partitions sets the partition count of a repartition topic. The default
// is the largest partition count among the source topics of the
// sub-topology that writes it.
func Partitions(n int32) RepartitionOption {
	return RepartitionOption{apply: func(r *graph.Repartition) { r.Partitions = n }}
}

func (t *Topology) fail(format string, args ...any) {
	t.errs = append(t.errs, fmt.Errorf("processor: "+format, args...))
}

// add registers a node and links it to its parents.
func (t *Topology) add(n *graph.Node, parents []*graph.Node) {
	switch {
	case n.Name == "":
		t.fail("a %s has an empty name; every node needs an explicit name", n.Kind)
	case !graph.LegalName(n.Name):
		t.fail("node name %q: use only letters, digits, '.', '_' and '-'", n.Name)
	case t.names[n.Name] != nil:
		t.fail("duplicate node name %q", n.Name)
	}
	if n.Kind != graph.KindSource && len(parents) == 0 {
		t.fail("%s %q has no parent", n.Kind, n.Name)
	}
	for _, p := range parents {
		p.Children = append(p.Children, n)
		n.Parents = append(n.Parents, p)
	}
	if n.Name != "" && t.names[n.Name] == nil {
		t.names[n.Name] = n
	}
	t.g.Nodes = append(t.g.Nodes, n)
}

// parents resolves typed handles, reporting handles that do not belong to t.
func parentsOf[K, V any](t *Topology, child string, ps []Node[K, V]) []*graph.Node {
	out := make([]*graph.Node, 0, len(ps))
	for i, p := range ps {
		switch {
		case p.n == nil:
			t.fail("%q: parent %d is a zero Node", child, i)
		case p.t != t:
			t.fail("%q: parent %q belongs to another topology", child, p.n.Name)
		case p.n.Kind == graph.KindSink:
			t.fail("%q: parent %q is a sink", child, p.n.Name)
		default:
			out = append(out, p.n)
		}
	}
	return out
}

// AddSource adds a node that reads topic with the given serdes. A topic may
// be read by one source only.
func (t *Topology) AddSource[K, V any](name, topic string, keys serde.Serde[K], values serde.Serde[V], opts ...SourceOption[K, V]) Node[K, V] {
	var cfg sourceConfig[K, V]
	for _, o := range opts {
		o(&cfg)
	}
	if keys == nil || values == nil {
		t.fail("source %q: nil serde", name)
	}
	t.checkTopic("source "+name, topic)
	if prev, ok := t.topics[topic]; ok {
		t.fail("topic %q is read by sources %q and %q; one source per topic", topic, prev, name)
	} else {
		t.topics[topic] = name
	}
	n := &graph.Node{Name: name, Kind: graph.KindSource, Topic: topic}
	n.New = newSource(n, keys, values, cfg)
	t.add(n, nil)
	return Node[K, V]{t: t, n: n}
}

func newSource[K, V any](n *graph.Node, keys serde.Serde[K], values serde.Serde[V], cfg sourceConfig[K, V]) func(graph.TaskEnv, []graph.Instance) (graph.Instance, error) {
	return func(env graph.TaskEnv, children []graph.Instance) (graph.Instance, error) {
		ctx, err := newNodeContext[K, V](env, n, children)
		if err != nil {
			return nil, err
		}
		return &sourceInstance[K, V]{ctx: ctx, keys: keys, values: values, extract: cfg.extract, tombstones: cfg.tombstones,
			rawKeys: isBytes(keys), rawValues: isBytes(values)}, nil
	}
}

// AddProcessor adds a node that runs the processors supplier creates, one
// per task, on the records of its parents.
func (t *Topology) AddProcessor[KIn, VIn, KOut, VOut any](name string, supplier func() Processor[KIn, VIn, KOut, VOut], parents ...Node[KIn, VIn]) Node[KOut, VOut] {
	if supplier == nil {
		t.fail("processor %q: nil supplier", name)
	}
	n := &graph.Node{Name: name, Kind: graph.KindProcessor}
	n.New = func(env graph.TaskEnv, children []graph.Instance) (graph.Instance, error) {
		ctx, err := newNodeContext[KOut, VOut](env, n, children)
		if err != nil {
			return nil, err
		}
		p := supplier()
		if p == nil {
			return nil, fmt.Errorf("processor: supplier of %q returned nil", name)
		}
		return &processorInstance[KIn, VIn, KOut, VOut]{ctx: ctx, p: p}, nil
	}
	t.add(n, parentsOf(t, name, parents))
	return Node[KOut, VOut]{t: t, n: n}
}

// AddSink adds a node that writes parent's records to topic. The topic is
// not created by weir: it must exist when the application starts. Several
// sinks may write the same topic.
func (t *Topology) AddSink[K, V any](name, topic string, keys serde.Serde[K], values serde.Serde[V], parent Node[K, V], opts ...SinkOption[K, V]) {
	var cfg sinkConfig[K, V]
	for _, o := range opts {
		o(&cfg)
	}
	if keys == nil || values == nil {
		t.fail("sink %q: nil serde", name)
	}
	t.checkTopic("sink "+name, topic)
	n := &graph.Node{Name: name, Kind: graph.KindSink, Topic: topic, Keys: graph.SchemaSerdeOf(keys), Values: graph.SchemaSerdeOf(values)}
	n.New = newSink(n, keys, values, cfg.partitioner)
	t.add(n, parentsOf(t, name, []Node[K, V]{parent}))
}

func newSink[K, V any](n *graph.Node, keys serde.Serde[K], values serde.Serde[V], p Partitioner[K, V]) func(graph.TaskEnv, []graph.Instance) (graph.Instance, error) {
	return func(env graph.TaskEnv, _ []graph.Instance) (graph.Instance, error) {
		real := n.Topic
		if n.Internal {
			real = graph.InternalTopic(env.ApplicationID(), n.Topic)
		}
		return &sinkInstance[K, V]{
			env: env, node: n.Name, topic: n.Topic, serdeTopic: real, internal: n.Internal,
			keys: keys, values: values, partitioner: p,
		}, nil
	}
}

// AddDynamicSink adds a sink that writes each record to the topic topicFor
// returns for it, with keys and values serialized for that topic and
// partitioned by key (Kafka's murmur2). The topics must exist: they are
// not known at start, so weir neither checks nor creates them, and a
// record for a topic that does not exist makes its transaction abort
// until Config.MaxConsecutiveAborts stops the application, naming the
// topic. An empty topic name fails the record's node. Kafka Streams'
// KStream.to(TopicNameExtractor).
func (t *Topology) AddDynamicSink[K, V any](name string, topicFor func(key K, value V) string, keys serde.Serde[K], values serde.Serde[V], parent Node[K, V]) {
	if keys == nil || values == nil {
		t.fail("sink %q: nil serde", name)
	}
	if topicFor == nil {
		t.fail("sink %q: nil topic function", name)
	}
	n := &graph.Node{Name: name, Kind: graph.KindSink, Dynamic: true, Keys: graph.SchemaSerdeOf(keys), Values: graph.SchemaSerdeOf(values)}
	n.New = func(env graph.TaskEnv, _ []graph.Instance) (graph.Instance, error) {
		return &sinkInstance[K, V]{env: env, node: n.Name, keys: keys, values: values, topicFor: topicFor}, nil
	}
	t.add(n, parentsOf(t, name, []Node[K, V]{parent}))
}

// AddRepartition routes parent's records through the internal topic
// "<application id>-<name>-repartition", partitioned by key, and returns the
// node that reads them back. The two sides land in different
// sub-topologies. It adds two nodes, named name+"-sink" and name+"-source".
func (t *Topology) AddRepartition[K, V any](name string, keys serde.Serde[K], values serde.Serde[V], parent Node[K, V], opts ...RepartitionOption) Node[K, V] {
	r := &graph.Repartition{Name: name}
	for _, o := range opts {
		if o.apply != nil {
			o.apply(r)
		}
	}
	if keys == nil || values == nil {
		t.fail("repartition %q: nil serde", name)
	}
	if r.Partitions < 0 {
		t.fail("repartition %q: negative partition count %d", name, r.Partitions)
	}
	if t.repart[name] {
		t.fail("duplicate repartition name %q", name)
	}
	t.repart[name] = true
	t.checkTopic("repartition "+name, "x-"+name+graph.RepartitionSuffix)
	t.g.Repartitions = append(t.g.Repartitions, r)

	sink := &graph.Node{Name: name + "-sink", Kind: graph.KindSink, Topic: name, Internal: true,
		Keys: graph.SchemaSerdeOf(keys), Values: graph.SchemaSerdeOf(values)}
	sink.New = newSink[K, V](sink, keys, values, nil)
	t.add(sink, parentsOf(t, name, []Node[K, V]{parent}))

	src := &graph.Node{Name: name + "-source", Kind: graph.KindSource, Topic: name, Internal: true}
	// Tombstones travel through repartition topics as null values.
	src.New = newSource[K, V](src, keys, values, sourceConfig[K, V]{tombstones: true})
	t.add(src, nil)
	return Node[K, V]{t: t, n: src}
}

func (t *Topology) checkTopic(who, topic string) {
	switch {
	case topic == "":
		t.fail("%s: empty topic name", who)
	case len(topic) > 249:
		t.fail("%s: topic name longer than 249 characters", who)
	case !graph.LegalName(topic):
		t.fail("%s: topic %q: Kafka allows only letters, digits, '.', '_' and '-'", who, topic)
	}
}

// Validate reports every problem found while building, together: errors.Join
// of errors that each name the node at fault. A topology without a source
// is an error, and so is a [Child] handle naming no child of its node.
func (t *Topology) Validate() error {
	errs := append([]error(nil), t.errs...)
	if len(t.g.Nodes) == 0 {
		errs = append(errs, errors.New("processor: the topology has no nodes"))
	}
	if err := checkAcyclic(t.g.Nodes); err != nil {
		errs = append(errs, err)
	}
	if !t.built {
		// Once built, the routes are resolved and tasks read them.
		errs = append(errs, t.resolveRoutes()...)
	}
	return errors.Join(errs...)
}

// resolveRoutes finds the child each Child handle names, reporting a name
// that is not a child of its node: a misspelt child fails weir.New, not
// the first record that takes that route.
func (t *Topology) resolveRoutes() []error {
	var errs []error
	for _, r := range t.routes {
		if err := r.resolve(); err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

// checkAcyclic guards the runtime against a cycle. Handles are created
// before their children, so the Add methods cannot build one; this catches
// a bug that would make a task recurse forever.
func checkAcyclic(nodes []*graph.Node) error {
	const (
		unseen = iota
		active
		done
	)
	state := map[*graph.Node]int{}
	var visit func(n *graph.Node) error
	visit = func(n *graph.Node) error {
		switch state[n] {
		case active:
			return fmt.Errorf("processor: cycle through %q", n.Name)
		case done:
			return nil
		}
		state[n] = active
		for _, c := range n.Children {
			if err := visit(c); err != nil {
				return err
			}
		}
		state[n] = done
		return nil
	}
	for _, n := range nodes {
		if err := visit(n); err != nil {
			return err
		}
	}
	return nil
}

// Describe returns a printable description of the topology: its
// sub-topologies, nodes, topics and links.
func (t *Topology) Describe() string { return t.g.Describe() }

// Build validates the topology (see [Topology.Validate]) and returns it,
// so that a *Topology, like a *kstream.Builder, is a weir.Topology. Once
// built, a topology must not change.
func (t *Topology) Build() (*Topology, error) {
	if _, err := t.graph(); err != nil {
		return nil, err
	}
	return t, nil
}

// graph validates the topology and returns its untyped form for weir's
// runtime, which reaches it through the embedded graph.Handle.
func (t *Topology) graph() (*graph.Graph, error) {
	if err := t.Validate(); err != nil {
		return nil, err
	}
	if !t.built { // written once: tasks of a running application read it
		t.built = true
	}
	return &t.g, nil
}
