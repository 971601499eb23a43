package weir

import (
	"context"
	"errors"
	"fmt"
	"iter"

	"github.com/hamba/avro/v2"

	"github.com/weirstream/weir/internal/graph"
	"github.com/weirstream/weir/schema"
)

// The start-time schema check (DESIGN §7). Before Run touches anything,
// every schema of a registry serde (serde.Avro) in the topology is checked
// against Config.Registry, then registered:
//
//   - a store's value schema under "<app>-<store>-value", whose
//     compatibility is set to BACKWARD_TRANSITIVE first: state written by
//     every earlier version must stay readable;
//   - a store's key schema under "<app>-<store>-key": it must equal the
//     latest registered one, since keys are compared as bytes;
//   - a sink's schemas under the serde's subject for the topic
//     (TopicNameStrategy by default), under the registry's compatibility
//     level, and the same rule for keys.
//
// Every schema is checked before any is registered, so a refusal registers
// nothing, not even the schemas that passed; and the schemas are
// registered only once the topology check has passed too (App.run), so a
// start refused for any reason leaves the registry as it was.

// schemaUse is one schema of the topology and where it goes.
type schemaUse struct {
	store, topic string // the store, or the sink's real topic
	part         schema.Part
	subject      string
	serde        graph.SchemaSerde
	serdeTopic   string // the topic the serde sees: the store's name or the sink's topic
}

// schemaUses lists the schemas of g's registry serdes.
func schemaUses(app string, g *graph.Graph) []schemaUse {
	var out []schemaUse
	for _, st := range g.Stores {
		for part, sd := range parts(st.Keys, st.Values) {
			if sd != nil {
				out = append(out, schemaUse{store: st.Name, part: part, subject: schema.StoreSubject(app, st.Name, part), serde: sd, serdeTopic: st.Name})
			}
		}
	}
	for _, n := range g.Nodes {
		if n.Kind != graph.KindSink || n.Dynamic {
			// A sink that chooses its topic per record: its subjects are
			// known only at its records, where its serde registers.
			continue
		}
		topic := n.Topic
		if n.Internal {
			topic = graph.InternalTopic(app, n.Topic)
		}
		for part, sd := range parts(n.Keys, n.Values) {
			if sd != nil {
				out = append(out, schemaUse{topic: topic, part: part, subject: sinkSubject(sd, topic, part), serde: sd, serdeTopic: topic})
			}
		}
	}
	return out
}

// sinkSubject returns the subject of a sink's serde for topic: the
// serde's own, except that a key serde left with the default part (value)
// gets the key's subject, "<topic>-key", not the value's.
func sinkSubject(sd graph.SchemaSerde, topic string, part schema.Part) string {
	other := schema.Value
	if part == schema.Value {
		other = schema.Key
	}
	if sub := sd.Subject(topic); sub != schema.TopicSubject(topic, other) {
		return sub
	}
	return schema.TopicSubject(topic, part)
}

// parts yields the key serde, then the value serde.
func parts(keys, values graph.SchemaSerde) iter.Seq2[schema.Part, graph.SchemaSerde] {
	return func(yield func(schema.Part, graph.SchemaSerde) bool) {
		_ = yield(schema.Key, keys) && yield(schema.Value, values)
	}
}

// refuse returns the SchemaError of u.
func (u schemaUse) refuse(reason string, err error) *SchemaError {
	return &SchemaError{Store: u.store, Topic: u.topic, Part: u.part, Subject: u.subject, Reason: reason, Err: err}
}

// where names u in errors.
func (u schemaUse) where() string {
	if u.store != "" {
		return "store " + u.store
	}
	return "sink topic " + u.topic
}

// checkSchemas checks every schema of uses without changing the registry.
// A refusal is a *SchemaError; a registry that cannot be reached is its
// own error, wrapped.
func checkSchemas(ctx context.Context, reg *schema.Client, uses []schemaUse) error {
	for _, u := range uses {
		if err := checkSchema(ctx, reg, u); err != nil {
			return err
		}
	}
	return nil
}

// registerSchemas registers every schema of uses, checked before, and
// gives each serde its id. A store's value subject is set to
// BACKWARD_TRANSITIVE first: state written by every earlier version must
// stay readable.
func registerSchemas(ctx context.Context, reg *schema.Client, uses []schemaUse) error {
	for _, u := range uses {
		if u.store != "" && u.part == schema.Value {
			if err := reg.SetCompatibility(ctx, u.subject, schema.BackwardTransitive); err != nil {
				return fmt.Errorf("weir: %s: set subject %s to %s: %w", u.where(), u.subject, schema.BackwardTransitive, err)
			}
		}
		r, err := reg.Register(ctx, u.subject, u.serde.Schema())
		if inc := (*schema.IncompatibleError)(nil); errors.As(err, &inc) {
			// Another instance registered a schema in between.
			return u.refuse(inc.Reason, err)
		}
		if err != nil {
			return fmt.Errorf("weir: %s: register the %s schema under subject %s: %w", u.where(), u.part, u.subject, err)
		}
		u.serde.UseID(u.serdeTopic, r.ID)
	}
	return nil
}

// checkSchema checks u without registering it.
func checkSchema(ctx context.Context, reg *schema.Client, u schemaUse) error {
	if u.part == schema.Key {
		latest, err := reg.Latest(ctx, u.subject)
		if errors.Is(err, schema.ErrNotFound) {
			return nil // a first key schema
		}
		if err != nil {
			return fmt.Errorf("weir: %s: get the latest key schema of subject %s: %w", u.where(), u.subject, err)
		}
		same, err := sameEncoding(latest.Schema, u.serde.Schema())
		if err != nil {
			return fmt.Errorf("weir: %s: key schema of subject %s: %w", u.where(), u.subject, err)
		}
		if !same {
			return u.refuse(fmt.Sprintf("the key schema differs from the latest registered one (version %d, id %d); keys are compared as bytes, so a changed key encoding would split or merge keys",
				latest.Version, latest.ID), ErrKeySchemaChanged)
		}
		return nil
	}
	// A store's value subject is checked as BACKWARD_TRANSITIVE, the level
	// registerSchemas sets, whatever level it has now (none, on a first
	// start): the check changes nothing in the registry.
	err := reg.CheckAt(ctx, u.subject, u.serde.Schema(), storeLevel(u))
	if inc := (*schema.IncompatibleError)(nil); errors.As(err, &inc) {
		return u.refuse(inc.Reason, err)
	}
	if err != nil {
		return fmt.Errorf("weir: %s: check the value schema against subject %s: %w", u.where(), u.subject, err)
	}
	return nil
}

// storeLevel returns the level a schema use is checked at: a store's value
// subject's BACKWARD_TRANSITIVE, or "" (the subject's own level) for a
// sink's.
func storeLevel(u schemaUse) schema.Compatibility {
	if u.store != "" {
		return schema.BackwardTransitive
	}
	return ""
}

// sameEncoding reports whether two Avro schemas have the same parsing
// canonical form: the same binary encoding, whatever their docs, defaults
// or layout.
func sameEncoding(a, b string) (bool, error) {
	sa, err := avro.ParseWithCache(a, "", &avro.SchemaCache{})
	if err != nil {
		return false, fmt.Errorf("the registered schema does not parse: %w", err)
	}
	sb, err := avro.ParseWithCache(b, "", &avro.SchemaCache{})
	if err != nil {
		return false, fmt.Errorf("the schema does not parse: %w", err)
	}
	return sa.Fingerprint() == sb.Fingerprint(), nil
}
