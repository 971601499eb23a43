package kstream

import (
	"errors"
	"fmt"

	"github.com/weirstream/weir/processor"
	"github.com/weirstream/weir/serde"
)

// Builder collects a DSL program and compiles it to a
// [processor.Topology]. Create one with [NewBuilder], start streams with
// [Builder.Stream], chain operations on them, then call [Builder.Build],
// or hand the Builder itself to weir.New.
//
// A Builder is not safe for concurrent use while it is being built, and
// must not change once an application runs it.
type Builder struct {
	t    *processor.Topology
	errs []error
}

// NewBuilder returns an empty Builder.
func NewBuilder() *Builder {
	return &Builder{t: processor.NewTopology()}
}

// Option configures a stateless operation. The only option is [Named].
type Option struct{ name string }

// Named gives a stateless operation's node an explicit name instead of
// the one derived from its input stream's name (see "Names" in the
// package documentation). Kafka Streams' Named.as.
func Named(name string) Option { return Option{name: name} }

// nameOf returns the name of a stateless step on a stream named parent:
// the last Named option, else parent + "-" + op.
func nameOf(parent, op string, opts []Option) string {
	name := parent + "-" + op
	for _, o := range opts {
		if o.name != "" {
			name = o.name
		}
	}
	return name
}

func (b *Builder) fail(format string, args ...any) {
	b.errs = append(b.errs, fmt.Errorf("kstream: "+format, args...))
}

// Stream starts a stream reading topic with the given serdes. name names
// the source node, and the stateless steps that follow derive their names
// from it. A topic may be read by one Stream only. A record whose value
// is null is a tombstone of the stream (see [Stream]), not given to the
// value serde: Kafka Streams' null value, which its aggregations and
// joins skip too. Kafka Streams' StreamsBuilder.stream.
func (b *Builder) Stream[K, V any](name, topic string, keys serde.Serde[K], values serde.Serde[V]) *Stream[K, V] {
	n := b.t.AddSource(name, topic, keys, values, processor.WithTombstones[K, V]())
	return &Stream[K, V]{b: b, node: n, name: name, keys: keys}
}

// Build checks the program and returns its topology. It reports every
// problem at once (errors.Join): missing and duplicate names, a grouping
// of a re-keyed stream without a repartition, nil functions and serdes,
// and whatever [processor.Topology.Validate] finds. Build may be called
// more than once; it returns the same topology.
func (b *Builder) Build() (*processor.Topology, error) {
	errs := append([]error(nil), b.errs...)
	if err := b.t.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return b.t, nil
}

// Describe returns a printable description of the compiled topology (see
// [processor.Topology.Describe]).
func (b *Builder) Describe() string { return b.t.Describe() }
