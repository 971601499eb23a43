package weirtest

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/hamba/avro/v2"

	"github.com/weirstream/weir/schema"
	"github.com/weirstream/weir/serde"
)

// Registry is an in-memory schema registry for unit tests of topologies
// with Avro serdes: give it as serde.AvroConfig.Registry, so that a test
// needs no registry server.
//
// It behaves as a Confluent-compatible registry does for what a serde
// asks: ids start at 1 and are shared by equal schemas across subjects;
// registering a schema a subject holds already (the same parsing canonical
// form) returns its version; a new one is checked against the subject's
// compatibility level ([Registry.SetCompatibility]; BACKWARD by default,
// as a registry's global default) with weir's Avro rules, and refused with
// a *schema.IncompatibleError. The zero value is not usable: call
// [NewRegistry]. Safe for concurrent use.
type Registry struct {
	mu       sync.Mutex
	ids      map[string]int // fingerprint of the canonical form -> id
	schemas  map[int]string // id -> schema text, as first registered
	subjects map[string][]int
	levels   map[string]schema.Compatibility
}

var _ serde.Registry = (*Registry)(nil)

// NewRegistry returns an empty Registry.
func NewRegistry() *Registry {
	return &Registry{ids: map[string]int{}, schemas: map[int]string{}, subjects: map[string][]int{}, levels: map[string]schema.Compatibility{}}
}

// SetCompatibility sets subject's compatibility level: schema.None,
// Backward, BackwardTransitive, Forward, ForwardTransitive, Full or
// FullTransitive.
func (r *Registry) SetCompatibility(subject string, level schema.Compatibility) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.levels[subject] = level
}

// Versions returns the ids of subject's versions, oldest first (version
// n is the n-th).
func (r *Registry) Versions(subject string) []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.subjects[subject])
}

// Register implements serde.Registry.
func (r *Registry) Register(_ context.Context, subject, text string) (schema.Registered, error) {
	s, err := avro.ParseWithCache(text, "", &avro.SchemaCache{})
	if err != nil {
		return schema.Registered{}, &schema.IncompatibleError{Subject: subject, Reason: "not a valid Avro schema: " + err.Error()}
	}
	fp := s.Fingerprint()
	canonical := string(fp[:])
	r.mu.Lock()
	defer r.mu.Unlock()
	versions := r.subjects[subject]
	if id, ok := r.ids[canonical]; ok {
		if i := slices.Index(versions, id); i >= 0 {
			return schema.Registered{ID: id, Version: i + 1, Schema: r.schemas[id]}, nil
		}
	}
	if err := r.compatible(subject, s, versions); err != nil {
		return schema.Registered{}, err
	}
	id, ok := r.ids[canonical]
	if !ok {
		id = len(r.schemas) + 1
		r.ids[canonical], r.schemas[id] = id, text
	}
	r.subjects[subject] = append(versions, id)
	return schema.Registered{ID: id, Version: len(versions) + 1, Schema: r.schemas[id]}, nil
}

// compatible checks s against the versions its subject's level covers.
func (r *Registry) compatible(subject string, s avro.Schema, versions []int) error {
	level, ok := r.levels[subject]
	if !ok {
		level = schema.Backward
	}
	var against []int
	switch level {
	case schema.None:
	case schema.Backward, schema.Forward, schema.Full:
		if len(versions) > 0 {
			against = versions[len(versions)-1:]
		}
	default: // the _TRANSITIVE levels
		against = versions
	}
	check := avro.NewSchemaCompatibility()
	for _, id := range slices.Backward(against) {
		old, err := avro.ParseWithCache(r.schemas[id], "", &avro.SchemaCache{})
		if err != nil {
			return err
		}
		var errs []error
		switch level {
		case schema.Backward, schema.BackwardTransitive:
			errs = append(errs, check.Compatible(s, old))
		case schema.Forward, schema.ForwardTransitive:
			errs = append(errs, check.Compatible(old, s))
		default:
			errs = append(errs, check.Compatible(s, old), check.Compatible(old, s))
		}
		for _, err := range errs {
			if err != nil {
				return &schema.IncompatibleError{Subject: subject, Reason: fmt.Sprintf("incompatible with id %d under %s: %v", id, level, err)}
			}
		}
	}
	return nil
}

// SchemaByID implements serde.Registry.
func (r *Registry) SchemaByID(_ context.Context, id int) (string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s, ok := r.schemas[id]
	if !ok {
		return "", fmt.Errorf("weirtest: registry: schema id %d: %w", id, schema.ErrNotFound)
	}
	return s, nil
}
