package kstream

import "github.com/weirstream/weir/processor"

// Branch is one branch of [Stream.Split]: the records its predicate
// accepts, under a name. Create it with [When].
type Branch[K, V any] struct {
	name string
	pred func(key K, value V) bool
}

// When returns the branch named name of the records pred accepts.
func When[K, V any](name string, pred func(key K, value V) bool) Branch[K, V] {
	return Branch[K, V]{name: name, pred: pred}
}

// Branches are the streams a [Stream.Split] divides its records into.
type Branches[K, V any] struct {
	b        *Builder
	split    string
	byName   map[string]*Stream[K, V]
	fallback *Stream[K, V]
}

// Split sends each record to the first branch, in the order given, whose
// predicate accepts it, and a record no branch accepts to the default
// branch ([Branches.Default]); a record goes to exactly one branch. name
// names the split's node; each branch's node is named name+"-"+its name,
// the default branch's name+"-default". Kafka Streams' KStream.split with
// BranchedKStream.branch and defaultBranch.
func (s *Stream[K, V]) Split(name string, branches ...Branch[K, V]) *Branches[K, V] {
	if name == "" {
		s.b.fail("split of %q: a name is required", s.name)
	}
	preds := make([]func(K, V) bool, len(branches))
	// handles[i] is branch i's node, the last one the default branch's;
	// they are filled in below, before any task runs the splitter.
	handles := make([]processor.Child[K, V], len(branches)+1)
	for i, br := range branches {
		if br.pred == nil || br.name == "" {
			s.b.fail("split %q: branch %d needs a name and a predicate (kstream.When)", name, i)
		}
		preds[i] = br.pred
	}
	split := s.b.t.AddProcessor(name, processor.Func(func(ctx processor.Context[K, V], rec processor.Record[K, V]) error {
		for i, pred := range preds {
			if pred(rec.Key, rec.Value) {
				return ctx.ForwardTo(handles[i], rec)
			}
		}
		return ctx.ForwardTo(handles[len(preds)], rec)
	}), s.node)
	out := &Branches[K, V]{b: s.b, split: name, byName: make(map[string]*Stream[K, V], len(branches))}
	pass := processor.Func(func(ctx processor.Context[K, V], rec processor.Record[K, V]) error { return ctx.Forward(rec) })
	branch := func(i int, suffix string) *Stream[K, V] {
		node := name + "-" + suffix
		n := s.b.t.AddProcessor(node, pass, split)
		handles[i] = split.Child(node)
		return derive(s, n, node)
	}
	for i, br := range branches {
		if _, dup := out.byName[br.name]; dup {
			s.b.fail("split %q: two branches named %q", name, br.name)
			continue
		}
		out.byName[br.name] = branch(i, br.name)
	}
	out.fallback = branch(len(branches), "default")
	return out
}

// Branch returns the stream of the branch named name. An unknown name is
// a [Builder.Build] error (and a stream no record reaches).
func (b *Branches[K, V]) Branch(name string) *Stream[K, V] {
	if s, ok := b.byName[name]; ok {
		return s
	}
	b.b.fail("split %q has no branch %q", b.split, name)
	return b.fallback
}

// Default returns the stream of the records no branch accepted. Records
// reaching it go nowhere unless it is used.
func (b *Branches[K, V]) Default() *Stream[K, V] { return b.fallback }
