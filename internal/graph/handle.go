package graph

import "errors"

// Handle hands a topology's graph to the runtime without an exported
// method. processor.Topology embeds it under an unexported name, which
// promotes its unexported method into the topology, and only this package
// can call that method (through Of). So no exported signature of weir
// names a Graph.
type Handle struct{ build func() (*Graph, error) }

// NewHandle returns a Handle whose graph is the one build returns.
func NewHandle(build func() (*Graph, error)) Handle { return Handle{build: build} }

func (h Handle) graphOf() (*Graph, error) {
	if h.build == nil {
		return nil, errNoGraph
	}
	return h.build()
}

var errNoGraph = errors.New("not a topology made by processor.NewTopology or kstream.NewBuilder")

// Of returns the validated graph of v, a *processor.Topology (or anything
// that embeds the Handle of one).
func Of(v any) (*Graph, error) {
	h, ok := v.(interface{ graphOf() (*Graph, error) })
	if !ok {
		return nil, errNoGraph
	}
	return h.graphOf()
}
