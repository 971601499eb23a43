package graph

import (
	"fmt"
	"slices"
	"strings"
)

// Subtopology is a connected part of a graph. Repartition topics are the
// only links between sub-topologies: a sink writes one and a source of
// another sub-topology reads it.
type Subtopology struct {
	ID    int
	Nodes []*Node // in the graph's order
}

// Sources returns the sub-topology's source nodes.
func (s *Subtopology) Sources() []*Node {
	var out []*Node
	for _, n := range s.Nodes {
		if n.Kind == KindSource {
			out = append(out, n)
		}
	}
	return out
}

// Subtopologies splits g into its connected components, numbered in the
// order of their first node. Nodes are connected by parent links and by
// sharing a state store (a store belongs to exactly one task); a global
// store connects nothing.
func (g *Graph) Subtopologies() []*Subtopology {
	parent := make(map[*Node]*Node, len(g.Nodes))
	var find func(n *Node) *Node
	find = func(n *Node) *Node {
		for parent[n] != n {
			parent[n] = parent[parent[n]]
			n = parent[n]
		}
		return n
	}
	union := func(a, b *Node) {
		ra, rb := find(a), find(b)
		if ra != rb {
			parent[rb] = ra
		}
	}
	for _, n := range g.Nodes {
		parent[n] = n
	}
	storeOwner := map[string]*Node{}
	for _, n := range g.Nodes {
		for _, p := range n.Parents {
			union(p, n)
		}
		for _, s := range n.Stores {
			if g.Global(s) != nil {
				continue // every task reads a global store
			}
			if o, ok := storeOwner[s]; ok {
				union(o, n)
			} else {
				storeOwner[s] = n
			}
		}
	}
	var subs []*Subtopology
	byRoot := map[*Node]*Subtopology{}
	for _, n := range g.Nodes {
		r := find(n)
		s, ok := byRoot[r]
		if !ok {
			s = &Subtopology{ID: len(subs)}
			byRoot[r] = s
			subs = append(subs, s)
		}
		s.Nodes = append(s.Nodes, n)
	}
	return subs
}

// Describe prints g the way an operator reads it: one block per
// sub-topology, each node with its topic or stores and its children.
func (g *Graph) Describe() string {
	var b strings.Builder
	b.WriteString("Topology\n")
	for _, s := range g.Subtopologies() {
		fmt.Fprintf(&b, "  Sub-topology %d\n", s.ID)
		for _, n := range s.Nodes {
			fmt.Fprintf(&b, "    %s %q", n.Kind, n.Name)
			switch n.Kind {
			case KindSource:
				fmt.Fprintf(&b, " reads %s", describeTopic(n))
			case KindSink:
				fmt.Fprintf(&b, " writes %s", describeTopic(n))
			}
			if len(n.Stores) > 0 {
				fmt.Fprintf(&b, " stores %s", strings.Join(quoteAll(n.Stores), ", "))
			}
			if len(n.Children) > 0 {
				names := make([]string, len(n.Children))
				for i, c := range n.Children {
					names[i] = c.Name
				}
				fmt.Fprintf(&b, " -> %s", strings.Join(quoteAll(names), ", "))
			}
			b.WriteByte('\n')
		}
	}
	return b.String()
}

func describeTopic(n *Node) string {
	if n.Internal {
		return fmt.Sprintf("repartition topic %q (<app>-%s%s)", n.Topic, n.Topic, RepartitionSuffix)
	}
	if n.Dynamic {
		return "a topic chosen per record"
	}
	return fmt.Sprintf("topic %q", n.Topic)
}

func quoteAll(ss []string) []string {
	out := slices.Clone(ss)
	for i, s := range out {
		out[i] = fmt.Sprintf("%q", s)
	}
	return out
}
