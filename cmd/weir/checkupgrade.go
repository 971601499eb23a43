package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/weirstream/weir"
)

func checkUpgradeCmd(ctx context.Context, args []string, out, errOut io.Writer) error {
	var c common
	fs := newFlags("check-upgrade", "-app ID -describe new.json", errOut, &c)
	file := fs.String("describe", "", "the new version's topology descriptor: the JSON its -describe flag (or App.Describe) prints (required)")
	if err := parse(fs, args, &c); err != nil {
		return err
	}
	if *file == "" {
		return &usageError{"-describe is required"}
	}
	data, err := os.ReadFile(*file)
	if err != nil {
		return &usageError{err.Error()}
	}
	cur, err := weir.ParseDescriptor(data)
	if err != nil {
		return &usageError{fmt.Sprintf("%s: %v", *file, err)}
	}
	cl, err := connect(c.brokers)
	if err != nil {
		return err
	}
	defer cl.close()
	old, err := weir.ReadDescriptor(cl.client, c.app)
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
	var stores []string
	for _, d := range diffs {
		fmt.Fprintln(out, d)
		if d.Refused {
			stores = append(stores, d.Store)
		}
	}
	if len(stores) > 0 {
		return refused("%d difference(s) would lose or misread state; the start would be refused unless Config.AllowDropState names %v", len(stores), stores)
	}
	fmt.Fprintf(out, "compatible: %d difference(s), none that loses state\n", len(diffs))
	return nil
}
