package main

import (
	"context"
	"fmt"
	"io"
	"slices"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/internal/graph"
	"github.com/weirstream/weir/schema"
)

// renameStoreCmd gives a stopped application's store a new name and keeps
// its state: the changelog is copied (verified as a fork verifies) to the
// new name's, the registry subjects with their history, and the topology
// descriptor then names the store by its new name, so that the next
// version, whose topology calls the store by it, starts with the state
// instead of being refused for a removed store.
func renameStoreCmd(ctx context.Context, args []string, out, errOut io.Writer) error {
	var c common
	fs := newFlags("rename-store", "-app ID -from STORE -to STORE2 [-dry-run]", errOut, &c)
	from := fs.String("from", "", "the store's name now (required)")
	to := fs.String("to", "", "its new name (required): no store of the application has it")
	dryRun := fs.Bool("dry-run", false, "print what the rename would do and change nothing")
	var registry registryFlags
	registry.add(fs, "schema registry URL (default $WEIR_SCHEMA_REGISTRY_URL): the store's subjects are copied to the new name's; required when the store keeps its schemas there")
	if err := parse(fs, args, &c); err != nil {
		return err
	}
	if *from == "" || *to == "" || *from == *to {
		return &usageError{"-from and -to are required and must differ"}
	}
	if !graph.LegalName(*to) {
		return &usageError{fmt.Sprintf("-to %q: a store name has only letters, digits, '.', '_' and '-'", *to)}
	}
	reg, err := registry.client()
	if err != nil {
		return err
	}
	cl, err := connect(c)
	if err != nil {
		return err
	}
	defer cl.close()

	d, err := stopped(cl, c.app, "the rename is of its last commit")
	if err != nil {
		return err
	}
	i := slices.IndexFunc(d.Stores, func(s weir.StoreDescriptor) bool { return s.Name == *from })
	switch {
	case i < 0:
		return refused("%s has no store %q (its stores: %s)", c.app, *from, storeNames(d))
	case slices.ContainsFunc(d.Stores, func(s weir.StoreDescriptor) bool { return s.Name == *to }):
		return refused("%s has a store %q already", c.app, *to)
	case d.Stores[i].Type == "global":
		return refused("store %q is a global store, whose state is its topic: rename it in the topology alone", *from)
	case d.Stores[i].Changelog != graph.ChangelogTopic(c.app, *from):
		return refused("store %q restores from %s, not a changelog of its own: rename it in the topology alone", *from, d.Stores[i].Changelog)
	}
	next := renamedStore(d, *from, *to)
	var subjects []subjectCopy
	old, renamed := d.Stores[i], next.Stores[i]
	for _, pair := range [][2]string{{old.KeySubject, renamed.KeySubject}, {old.ValueSubject, renamed.ValueSubject}} {
		if pair[0] != "" {
			subjects = append(subjects, subjectCopy{store: *from, from: pair[0], to: pair[1]})
		}
	}
	if err := needRegistry(reg, subjects); err != nil {
		return err
	}
	topics, err := cl.admin.ListTopics()
	if err != nil {
		return fmt.Errorf("listing topics: %w", err)
	}
	target := graph.ChangelogTopic(c.app, *to)
	if _, ok := topics[target]; ok {
		return refused("%s exists already: delete it first if it is left from an earlier store of that name", target)
	}
	cp := forkCopy{from: d.Stores[i].Changelog, to: target, kind: "changelog", start: map[int32]int64{}, end: map[int32]int64{}}
	if cp.partitions, err = cl.partitions(cp.from); err != nil {
		return err
	}
	for _, p := range cp.partitions {
		if cp.start[p], cp.end[p], err = cl.offsets(cp.from, p); err != nil {
			return err
		}
	}
	verb := "renames"
	if *dryRun {
		verb = "would rename (dry run: nothing changed)"
	}
	fmt.Fprintf(out, "%s store %s of %s to %s:\n  changelog %s -> %s, %d partitions\n", verb, *from, c.app, *to, cp.from, cp.to, len(cp.partitions))
	printSubjectPlan(out, subjects)
	if *dryRun {
		return nil
	}
	if err := copySubjects(ctx, reg, subjects, out); err != nil {
		return err
	}
	if err := copyTopic(ctx, cl, cp, out); err != nil {
		return err
	}
	if err := cl.writeDescriptor(next); err != nil {
		return err
	}
	fmt.Fprintf(out, "done: start the version whose topology names the store %q; %s is left for you to delete once it runs\n", *to, cp.from)
	return nil
}

// renamedStore returns d with store from named to: its changelog and
// subjects follow the name.
func renamedStore(d *weir.Descriptor, from, to string) *weir.Descriptor {
	n := *d
	n.Stores = slices.Clone(d.Stores)
	n.InternalTopics = slices.Clone(d.InternalTopics)
	oldLog, newLog := graph.ChangelogTopic(d.ApplicationID, from), graph.ChangelogTopic(d.ApplicationID, to)
	for i, s := range n.Stores {
		if s.Name != from {
			continue
		}
		s.Name, s.Changelog = to, newLog
		if s.KeySubject != "" {
			s.KeySubject = schema.StoreSubject(d.ApplicationID, to, schema.Key)
		}
		if s.ValueSubject != "" {
			s.ValueSubject = schema.StoreSubject(d.ApplicationID, to, schema.Value)
		}
		n.Stores[i] = s
	}
	for i, t := range n.InternalTopics {
		if t.Topic == oldLog {
			n.InternalTopics[i].Topic = newLog
		}
	}
	return &n
}

// storeNames lists d's stores for a refusal.
func storeNames(d *weir.Descriptor) string {
	var names []string
	for _, s := range d.Stores {
		names = append(names, s.Name)
	}
	if len(names) == 0 {
		return "none"
	}
	return fmt.Sprint(names)
}
