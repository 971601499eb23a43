package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/hamba/avro/v2"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/schema"
)

// subjectCopy is one registry subject of a store that a fork or rescale
// copies to the new application id.
type subjectCopy struct {
	store, from, to string
}

// storeSubjects pairs the registry subjects of from's stores with those of
// to, the same stores under the new application id (global stores keep
// their topic's subjects and are left out).
func storeSubjects(from, to *weir.Descriptor) []subjectCopy {
	renamed := map[string]weir.StoreDescriptor{}
	for _, s := range to.Stores {
		renamed[s.Name] = s
	}
	var out []subjectCopy
	for _, s := range from.Stores {
		if s.Type == "global" {
			continue
		}
		n := renamed[s.Name]
		for _, pair := range [][2]string{{s.KeySubject, n.KeySubject}, {s.ValueSubject, n.ValueSubject}} {
			if pair[0] != "" && pair[1] != "" && pair[0] != pair[1] {
				out = append(out, subjectCopy{store: s.Name, from: pair[0], to: pair[1]})
			}
		}
	}
	return out
}

// needRegistry refuses a fork or rescale of an application with registry
// subjects when no registry is given: without the subjects' history, the
// new id would accept, at its first start, a schema that cannot read the
// state it copied.
func needRegistry(reg *schema.Client, subjects []subjectCopy) error {
	if reg == nil && len(subjects) > 0 {
		return &usageError{fmt.Sprintf("store %s keeps its schemas in the registry (subject %s): give -registry (or $WEIR_SCHEMA_REGISTRY_URL) so that their history is copied to the new id",
			subjects[0].store, subjects[0].from)}
	}
	return nil
}

// copySubjects gives each new subject the history of its old one before
// anything reads the copied state: the old subject's compatibility level,
// then every version in order, so that the new id's start-time check
// compares a new schema with every schema its copied changelogs were
// written with (weir sets store subjects to BACKWARD_TRANSITIVE). It then
// reads the new subject back: it must hold exactly the old versions'
// schemas, in order. A new subject that held other versions already fails
// that check: fork and rescale go only to ids that never ran.
func copySubjects(ctx context.Context, reg *schema.Client, subjects []subjectCopy, out io.Writer) error {
	for _, sc := range subjects {
		versions, err := reg.Versions(ctx, sc.from)
		if errors.Is(err, schema.ErrNotFound) {
			fmt.Fprintf(out, "  subject %s: no versions, nothing to copy\n", sc.from)
			continue
		}
		if err != nil {
			return fmt.Errorf("store %s: versions of subject %s: %w", sc.store, sc.from, err)
		}
		level, err := reg.Compatibility(ctx, sc.from)
		if err != nil {
			return fmt.Errorf("store %s: compatibility of subject %s: %w", sc.store, sc.from, err)
		}
		if err := reg.SetCompatibility(ctx, sc.to, level); err != nil {
			return fmt.Errorf("store %s: set subject %s to %s: %w", sc.store, sc.to, level, err)
		}
		var want []string
		for _, v := range versions {
			r, err := reg.Version(ctx, sc.from, v)
			if err != nil {
				return fmt.Errorf("store %s: version %d of subject %s: %w", sc.store, v, sc.from, err)
			}
			if _, err := reg.Register(ctx, sc.to, r.Schema); err != nil {
				return fmt.Errorf("store %s: register version %d of subject %s under %s: %w", sc.store, v, sc.from, sc.to, err)
			}
			want = append(want, r.Schema)
		}
		got, err := reg.Versions(ctx, sc.to)
		if err != nil {
			return fmt.Errorf("store %s: versions of subject %s after the copy: %w", sc.store, sc.to, err)
		}
		if len(got) != len(want) {
			return fmt.Errorf("verifying subject %s: %d versions after the copy of %s's %d (did the new id run before?)", sc.to, len(got), sc.from, len(want))
		}
		for i, v := range got {
			r, err := reg.Version(ctx, sc.to, v)
			if err != nil {
				return fmt.Errorf("verifying subject %s: version %d: %w", sc.to, v, err)
			}
			if same, err := sameSchema(r.Schema, want[i]); err != nil || !same {
				return fmt.Errorf("verifying subject %s: version %d differs from version %d of %s", sc.to, v, versions[i], sc.from)
			}
		}
		fmt.Fprintf(out, "  copied subject %s -> %s: %d version(s), %s\n", sc.from, sc.to, len(got), level)
	}
	return nil
}

// printSubjectPlan lists the subjects a fork or rescale copies.
func printSubjectPlan(out io.Writer, subjects []subjectCopy) {
	for _, sc := range subjects {
		fmt.Fprintf(out, "  subject %s -> %s: every version and the compatibility level\n", sc.from, sc.to)
	}
}

// sameSchema reports whether two Avro schemas have the same parsing
// canonical form (a registry may give back a schema's text reformatted).
func sameSchema(a, b string) (bool, error) {
	sa, err := avro.ParseWithCache(a, "", &avro.SchemaCache{})
	if err != nil {
		return false, err
	}
	sb, err := avro.ParseWithCache(b, "", &avro.SchemaCache{})
	if err != nil {
		return false, err
	}
	return sa.Fingerprint() == sb.Fingerprint(), nil
}
