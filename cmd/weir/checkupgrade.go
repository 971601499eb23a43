package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/schema"
)

func checkUpgradeCmd(ctx context.Context, args []string, out, errOut io.Writer) error {
	var c common
	fs := newFlags("check-upgrade", "-app ID -describe new.json", errOut, &c)
	file := fs.String("describe", "", "the new version's topology descriptor: the JSON its -describe flag (or App.Describe) prints (required)")
	var registry registryFlags
	registry.add(fs, "schema registry URL: the new version's Avro store schemas are checked for compatibility with what it holds (default $WEIR_SCHEMA_REGISTRY_URL; empty: not checked)")
	if err := parse(fs, args, &c); err != nil {
		return err
	}
	if *file == "" {
		return &usageError{"-describe is required"}
	}
	reg, err := registry.client()
	if err != nil {
		return err
	}
	data, err := os.ReadFile(*file)
	if err != nil {
		return &usageError{err.Error()}
	}
	cur, err := weir.ParseDescriptor(data)
	if err != nil {
		return &usageError{fmt.Sprintf("%s: %v", *file, err)}
	}
	cl, err := connect(c)
	if err != nil {
		return err
	}
	defer cl.close()
	old, err := readDescriptor(cl, c.app)
	if err != nil {
		return err
	}
	if old == nil {
		fmt.Fprintf(out, "%s has no topology descriptor yet (first start, or it last ran on a weir without one): nothing to compare\n", c.app)
		return nil
	}
	if cur.ApplicationID != c.app {
		fmt.Fprintf(out, "note: the descriptor is of application %q; comparing it with %q\n", cur.ApplicationID, c.app)
	}
	diffs := weir.CompareDescriptors(old, cur)
	stores := printDifferences(out, diffs)
	var incompatible []string
	if reg != nil {
		if incompatible, err = checkSchemas(ctx, reg, c.app, cur, out); err != nil {
			return err
		}
	}
	switch {
	case len(stores) > 0 && len(incompatible) > 0:
		return refused("the start would be refused: %d difference(s) would lose or misread state (stores %v: Config.AllowDropState lets the start drop their state), and the registry refuses the schemas of stores %v (%s)", len(stores), stores, incompatible, schemaAdvice)
	case len(stores) > 0:
		return refused("%d difference(s) would lose or misread state; the start would be refused unless Config.AllowDropState names %v", len(stores), stores)
	case len(incompatible) > 0:
		return refused("the registry refuses the schemas of stores %v: the start would be refused (%s)", incompatible, schemaAdvice)
	}
	fmt.Fprintf(out, "compatible: %d difference(s), none that loses state\n", len(diffs))
	return nil
}

// schemaAdvice says what to do about a store schema the registry refuses;
// Config.AllowDropState does not lift that refusal.
const schemaAdvice = "Config.AllowDropState does not lift it: make the schema readable with every version of the subject (a new field needs a default, and only a field with a default may go), or run the change under a new application id and rebuild its state from the input"

// printDifferences prints diffs, one per line, and returns the stores
// of the refused ones.
func printDifferences(out io.Writer, diffs []weir.Difference) (refused []string) {
	for _, d := range diffs {
		fmt.Fprintln(out, d)
		if d.Refused {
			refused = append(refused, d.Store)
		}
	}
	return refused
}

// checkSchemas checks each registry schema of cur's stores with the
// registry, under the subject the application (app) registers it at
// start, and returns the stores whose schema the registry refuses.
func checkSchemas(ctx context.Context, reg *schema.Client, app string, cur *weir.Descriptor, out io.Writer) ([]string, error) {
	var refused []string
	for _, s := range cur.Stores {
		for _, part := range []struct {
			subject, text string
		}{{renameTopic(s.KeySubject, cur.ApplicationID, app), s.KeySchema}, {renameTopic(s.ValueSubject, cur.ApplicationID, app), s.ValueSchema}} {
			if part.subject == "" || part.text == "" {
				continue
			}
			err := reg.Check(ctx, part.subject, part.text)
			var incompatible *schema.IncompatibleError
			switch {
			case errors.As(err, &incompatible):
				fmt.Fprintf(out, "store %q: schema refused under %s: %v (refused)\n", s.Name, part.subject, err)
				refused = append(refused, s.Name)
			case errors.Is(err, schema.ErrNotFound):
				fmt.Fprintf(out, "store %q: %s has no schema yet: registered at start\n", s.Name, part.subject)
			case err != nil:
				return nil, fmt.Errorf("checking %s: %w", part.subject, err)
			default:
				fmt.Fprintf(out, "store %q: schema compatible under %s\n", s.Name, part.subject)
			}
		}
	}
	return refused, nil
}
