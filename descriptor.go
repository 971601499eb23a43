package weir

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/weirstream/weir/internal/graph"
	"github.com/weirstream/weir/internal/topics"
	"github.com/weirstream/weir/schema"
)

// DescriptorVersion is the version of the descriptor format this weir
// writes. A descriptor of a later version is not compared (its start is
// refused: a rollback across a descriptor format goes through the CLI).
const DescriptorVersion = 1

// Descriptor is a stable, versioned description of an application's
// topology: what an upgrade must keep to find its state again. Run writes
// it to the compacted topic "<application id>-topology" and compares it
// with the one found there (see [CompareDescriptors]); `weir
// check-upgrade` runs the same comparison before a deploy. Its JSON form
// is the contract: fields are added, never renamed.
type Descriptor struct {
	Version       int    `json:"version"`
	ApplicationID string `json:"application_id"`
	Guarantee     string `json:"guarantee"`
	// Sources and Sinks are the topics the topology reads and writes
	// (repartition topics are under InternalTopics).
	Sources []TopicDescriptor `json:"sources"`
	Sinks   []TopicDescriptor `json:"sinks"`
	// Stores are the state stores, global ones included, by name.
	Stores []StoreDescriptor `json:"stores"`
	// InternalTopics are the repartition and changelog topics weir
	// creates, by name.
	InternalTopics []TopicDescriptor `json:"internal_topics"`
	// ResetEpoch counts the resets of the application (`weir reset`). An
	// instance whose local state is of an earlier epoch deletes it at
	// start, by itself: its stores restore from their (new) changelogs.
	ResetEpoch int64 `json:"reset_epoch,omitempty"`
}

// TopicDescriptor is a topic of the topology.
type TopicDescriptor struct {
	Topic string `json:"topic"`
	// Node is the source or sink node; empty for internal topics.
	Node string `json:"node,omitempty"`
	// Kind is "repartition" or "changelog" for internal topics.
	Kind string `json:"kind,omitempty"`
	// Partitions is the partition count; 0 when not known (a descriptor
	// made before Run looked at the cluster).
	Partitions int32 `json:"partitions,omitempty"`
	// Dynamic marks a sink that chooses its topic per record.
	Dynamic bool `json:"dynamic,omitempty"`
	// Subtopology is the sub-topology that reads the topic (sources and
	// repartition topics): partition p of it is read by task
	// "<subtopology>_<p>".
	Subtopology *int `json:"subtopology,omitempty"`
}

// StoreDescriptor is a state store of the topology.
type StoreDescriptor struct {
	Name string `json:"name"`
	// Type is "key-value", "window", "session", "ttl", "versioned" or
	// "global" (a global key-value store).
	Type string `json:"type"`
	// KeySerde and ValueSerde identify the serdes by their Go type (a
	// registry serde's schemas are checked by the registry instead). A
	// changed KeySerde means the stored keys are not found again.
	KeySerde   string `json:"key_serde"`
	ValueSerde string `json:"value_serde"`
	// KeySubject and ValueSubject are the schema registry subjects of a
	// registry serde's schemas; empty otherwise.
	KeySubject   string `json:"key_subject,omitempty"`
	ValueSubject string `json:"value_subject,omitempty"`
	// KeySchema and ValueSchema are a registry serde's schemas, for
	// `weir check-upgrade` to check with the registry before a deploy;
	// CompareDescriptors leaves them to the registry.
	KeySchema   string `json:"key_schema,omitempty"`
	ValueSchema string `json:"value_schema,omitempty"`
	// Changelog is the topic the store is restored from: its changelog,
	// its input topic (a table read from a compacted topic) or, for a
	// global store, its topic.
	Changelog string `json:"changelog"`
	// Partitions is the store's partition count (its sub-topology's);
	// 0 when not known.
	Partitions int32 `json:"partitions,omitempty"`
	// PartitionKeyed reports that the store's keys are the keys its
	// input is partitioned by (processor.Topology.KeyedByPartition):
	// `weir rescale` can move its entries to a new partition count.
	PartitionKeyed bool `json:"partition_keyed,omitempty"`
	// KeyLayout, for a key-value store of the DSL's own whose stored keys
	// embed the partitioning key, says where it sits: comma-separated
	// "skip:N" (N bytes before it), "uvarint" (it is a uvarint length and
	// that many bytes, other bytes after), "shared:<hex>" (stored keys
	// with that prefix belong to the task, not to a key: a rescale gives
	// each new partition the one with the largest value). Empty: the
	// stored key (for window, session and versioned stores, its key part)
	// is the partitioning key.
	KeyLayout string `json:"key_layout,omitempty"`
}

// String returns the descriptor as indented JSON.
func (d *Descriptor) String() string {
	b, err := json.MarshalIndent(d, "", "  ")
	if err != nil {
		return fmt.Sprintf("weir: descriptor: %v", err)
	}
	return string(b)
}

// ParseDescriptor reads a descriptor's JSON.
func ParseDescriptor(data []byte) (*Descriptor, error) {
	var d Descriptor
	if err := json.Unmarshal(data, &d); err != nil {
		return nil, fmt.Errorf("weir: topology descriptor: %w", err)
	}
	if d.Version < 1 {
		return nil, fmt.Errorf("weir: topology descriptor: version %d", d.Version)
	}
	return &d, nil
}

// describe builds the descriptor of g for c; lay, when not nil, gives the
// partition counts and which stores follow their input topic.
func describe(c *Config, g *graph.Graph, lay *topics.Layout) *Descriptor {
	app := c.ApplicationID
	d := &Descriptor{Version: DescriptorVersion, ApplicationID: app, Guarantee: c.Guarantee.String()}
	count := func(topic string) int32 {
		if lay == nil {
			return 0
		}
		return lay.Counts[topic]
	}
	readBy := map[*graph.Node]int{}
	for _, sub := range g.Subtopologies() {
		for _, n := range sub.Sources() {
			readBy[n] = sub.ID
		}
	}
	subOf := func(n *graph.Node) *int {
		if id, ok := readBy[n]; ok {
			return &id
		}
		return nil
	}
	for _, n := range g.Nodes {
		switch {
		case n.Kind == graph.KindSource && !n.Internal:
			d.Sources = append(d.Sources, TopicDescriptor{Topic: n.Topic, Node: n.Name, Partitions: count(n.Topic), Subtopology: subOf(n)})
		case n.Kind == graph.KindSink && !n.Internal:
			d.Sinks = append(d.Sinks, TopicDescriptor{Topic: n.Topic, Node: n.Name, Partitions: count(n.Topic), Dynamic: n.Dynamic})
		}
	}
	for _, r := range g.Repartitions {
		t := graph.InternalTopic(app, r.Name)
		td := TopicDescriptor{Topic: t, Kind: "repartition", Partitions: count(t)}
		for n := range readBy {
			if n.Internal && n.Topic == r.Name {
				td.Subtopology = subOf(n)
			}
		}
		d.InternalTopics = append(d.InternalTopics, td)
	}
	d.describeStores(app, g, lay, count)
	byTopic := func(a, b TopicDescriptor) int { return strings.Compare(a.Topic+"\x00"+a.Node, b.Topic+"\x00"+b.Node) }
	slices.SortFunc(d.Sources, byTopic)
	slices.SortFunc(d.Sinks, byTopic)
	slices.SortFunc(d.InternalTopics, byTopic)
	slices.SortFunc(d.Stores, func(a, b StoreDescriptor) int { return strings.Compare(a.Name, b.Name) })
	return d
}

// describeStores adds g's stores, global ones included, and their
// changelog topics to d; count gives a topic's partition count.
func (d *Descriptor) describeStores(app string, g *graph.Graph, lay *topics.Layout, count func(string) int32) {
	// A store has its sub-topology's partition count.
	storeParts := map[string]int32{}
	if lay != nil {
		for i, sub := range lay.Subs {
			for _, n := range sub.Nodes {
				for _, st := range n.Stores {
					storeParts[st] = lay.Partitions[i]
				}
			}
		}
	}
	for _, s := range g.Stores {
		sd := StoreDescriptor{Name: s.Name, Type: string(s.Kind), KeySerde: s.KeyFormat, ValueSerde: s.ValueFormat,
			Changelog: graph.ChangelogTopic(app, s.Name), Partitions: storeParts[s.Name], PartitionKeyed: s.PartitionKeyed,
			KeyLayout: s.KeyLayout.String()}
		if src, ok := sourceChangelog(lay, s.Name); ok {
			sd.Changelog = src
		} else {
			d.InternalTopics = append(d.InternalTopics, TopicDescriptor{Topic: sd.Changelog, Kind: "changelog", Partitions: sd.Partitions})
		}
		sd.KeySubject, sd.ValueSubject = storeSubjects(app, s.Name, s.Keys, s.Values)
		if s.Keys != nil {
			sd.KeySchema = s.Keys.Schema()
		}
		if s.Values != nil {
			sd.ValueSchema = s.Values.Schema()
		}
		d.Stores = append(d.Stores, sd)
	}
	for _, s := range g.Globals {
		sd := StoreDescriptor{Name: s.Name, Type: "global", KeySerde: s.KeyFormat, ValueSerde: s.ValueFormat,
			Changelog: s.Topic, Partitions: count(s.Topic)}
		if s.Keys != nil {
			sd.KeySubject = s.Keys.Subject(s.Topic)
		}
		if s.Values != nil {
			sd.ValueSubject = s.Values.Subject(s.Topic)
		}
		d.Stores = append(d.Stores, sd)
	}
}

// sourceChangelog returns the input topic a store follows instead of a
// changelog, when the layout says it does.
func sourceChangelog(lay *topics.Layout, store string) (string, bool) {
	if lay == nil {
		return "", false
	}
	t, ok := lay.SourceChangelog[store]
	return t, ok
}

// storeSubjects returns the registry subjects of a store's registry
// serdes, as the start-time schema check registers them.
func storeSubjects(app, store string, keys, values graph.SchemaSerde) (key, value string) {
	if keys != nil {
		key = schema.StoreSubject(app, store, schema.Key)
	}
	if values != nil {
		value = schema.StoreSubject(app, store, schema.Value)
	}
	return key, value
}

// Difference is one way a topology differs from the one its application
// ran with before.
type Difference struct {
	// Store is the store it is about; empty for the application as a
	// whole.
	Store string `json:"store,omitempty"`
	// What says what changed, for an operator.
	What string `json:"what"`
	// Refused reports a change that would lose or misread state: the
	// start stops unless the store is allowed to drop its state
	// (Config.AllowDropState), and then the store starts empty.
	Refused bool `json:"refused"`
}

func (d Difference) String() string {
	s := d.What
	if d.Store != "" {
		s = fmt.Sprintf("store %q: %s", d.Store, s)
	}
	if d.Refused {
		s += " (refused)"
	}
	return s
}

// CompareDescriptors lists how cur differs from old, the descriptor the
// application last ran with. Refused: a store removed, a store whose type
// or key serde changed, a store whose partition count changed (both
// counts known): its state would be left behind or read wrongly. Not
// refused: a new store (it starts empty), a changed value serde (the new
// one must read the old values; a registry serde's schemas are checked by
// the registry), a changed guarantee, changed sources and sinks.
func CompareDescriptors(old, cur *Descriptor) []Difference {
	var diffs []Difference
	if old.Version > DescriptorVersion {
		return []Difference{{What: fmt.Sprintf("the application last ran with a descriptor of version %d, written by a later weir (this one writes %d)", old.Version, DescriptorVersion), Refused: true}}
	}
	if old.Guarantee != cur.Guarantee {
		diffs = append(diffs, Difference{What: fmt.Sprintf("guarantee %s, was %s", cur.Guarantee, old.Guarantee)})
	}
	before := map[string]StoreDescriptor{}
	for _, s := range old.Stores {
		before[s.Name] = s
	}
	for _, s := range cur.Stores {
		o, ok := before[s.Name]
		delete(before, s.Name)
		switch {
		case !ok:
			diffs = append(diffs, Difference{Store: s.Name, What: "new: it starts empty"})
			continue
		case o.Type != s.Type:
			diffs = append(diffs, Difference{Store: s.Name, What: fmt.Sprintf("type %s, was %s: the stored state cannot be read as the new type", s.Type, o.Type), Refused: true})
		case o.KeySerde != s.KeySerde:
			diffs = append(diffs, Difference{Store: s.Name, What: fmt.Sprintf("key serde %s, was %s: stored keys would not be found again", s.KeySerde, o.KeySerde), Refused: true})
		}
		if o.Partitions != 0 && s.Partitions != 0 && o.Partitions != s.Partitions {
			diffs = append(diffs, Difference{Store: s.Name, What: fmt.Sprintf("%d partitions, was %d: keys would be in the wrong partitions (rescale instead)", s.Partitions, o.Partitions), Refused: true})
		}
		if o.ValueSerde != s.ValueSerde {
			diffs = append(diffs, Difference{Store: s.Name, What: fmt.Sprintf("value serde %s, was %s: the new serde must read the stored values", s.ValueSerde, o.ValueSerde)})
		}
		if o.Changelog != s.Changelog {
			diffs = append(diffs, Difference{Store: s.Name, What: fmt.Sprintf("restores from %s, was %s: it restores in full", s.Changelog, o.Changelog)})
		}
	}
	gone := slices.Sorted(maps.Keys(before))
	for _, name := range gone {
		diffs = append(diffs, Difference{Store: name, What: fmt.Sprintf("removed: its state and changelog %s would be left behind", before[name].Changelog), Refused: true})
	}
	topicsOf := func(ts []TopicDescriptor) []string {
		out := make([]string, 0, len(ts))
		for _, t := range ts {
			out = append(out, t.Topic)
		}
		return out
	}
	if a, b := topicsOf(old.Sources), topicsOf(cur.Sources); !slices.Equal(a, b) {
		diffs = append(diffs, Difference{What: fmt.Sprintf("input topics %v, were %v", b, a)})
	}
	if a, b := topicsOf(old.Sinks), topicsOf(cur.Sinks); !slices.Equal(a, b) {
		diffs = append(diffs, Difference{What: fmt.Sprintf("output topics %v, were %v", b, a)})
	}
	return diffs
}
