// Package topics checks the topics an application reads and writes at
// start, creates its internal topics (repartition topics and changelogs)
// from one spec, and records what the runtime needs of them: partition
// counts, and the limits records are checked against before they are sent.
package topics

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/IBM/sarama"

	"github.com/weirstream/weir/internal/assign"
	"github.com/weirstream/weir/internal/graph"
)

// Layout is the topology as it runs against one cluster: each
// sub-topology's source topics (real names) and partition count.
type Layout struct {
	Subs       []*graph.Subtopology
	Topics     [][]string       // per sub-topology: its source topics
	Partitions []int32          // per sub-topology
	Counts     map[string]int32 // topic -> partitions, for every source, sink and internal topic
	Internal   map[string]bool  // real topic names of repartition topics
	BySource   map[string]int   // source topic -> sub-topology
	SourceNode map[string]*graph.Node
	// limits of every topic weir writes that existed at start (sinks,
	// repartition topics, changelogs), checked before a record is sent.
	Limits map[string]Limit
	// DeleteRetention is each changelog topic's delete.retention.ms (a
	// global store's topic's too): how long its tombstones are sure to
	// stay once compaction reaches them. A restore trusts a checkpoint
	// that is younger (see statelog.CheckpointTooOld).
	DeleteRetention map[string]time.Duration
	// SourceChangelog names the stores whose changelog is their input
	// topic (graph.Store.Source, when the topic is compacted): store ->
	// topic. No changelog topic exists for them.
	SourceChangelog map[string]string
}

// Limit is what a topic refuses, as configured at start.
type Limit struct {
	MaxBytes  int  // max.message.bytes; 0 unknown
	Compacted bool // cleanup.policy includes compact: a record needs a key
}

// topicName is a node's real topic for application app.
func TopicName(app string, n *graph.Node) string {
	if n.Internal {
		return graph.InternalTopic(app, n.Topic)
	}
	return n.Topic
}

// Options are the parts of weir.Config that the topics depend on.
type Options struct {
	ApplicationID     string
	ReplicationFactor int16 // 0: the broker's default
	// DeadLetter are the dead-letter topics of the error policies: they
	// must exist, like sink topics, and their limits are read.
	DeadLetter []string
	Logger     *slog.Logger
	// RawRestore reports whether a store may follow its input topic
	// (graph.Store.Source): only when every record of the topic is in
	// the store, that is when a record that cannot be decoded stops the
	// application instead of being skipped. nil means never.
	RawRestore func(topic string) bool
}

// MissingError reports source and sink topics that do not exist.
type MissingError struct{ Topics []string }

func (e *MissingError) Error() string {
	return fmt.Sprintf("weir: topics the topology reads or writes do not exist: %v", e.Topics)
}

// CopartitionError reports the source topics of a sub-topology with
// different partition counts.
type CopartitionError struct {
	Subtopology int
	Partitions  map[string]int32
}

func (e *CopartitionError) Error() string {
	return fmt.Sprintf("weir: sub-topology %d reads topics that are not co-partitioned: %v", e.Subtopology, e.Partitions)
}

// Prepare checks that the source and sink topics exist, creates missing
// repartition topics and changelogs and checks co-partitioning, so that a
// bad deployment fails at start with every topic and count named, before it
// creates anything.
func Prepare(client sarama.Client, admin sarama.ClusterAdmin, c *Options, g *graph.Graph) (*Layout, error) {
	l := &Layout{
		Subs:       g.Subtopologies(),
		Counts:     map[string]int32{},
		Internal:   map[string]bool{},
		BySource:   map[string]int{},
		SourceNode: map[string]*graph.Node{},

		DeleteRetention: map[string]time.Duration{},
		SourceChangelog: map[string]string{},
	}
	if err := client.RefreshMetadata(); err != nil {
		return nil, fmt.Errorf("weir: reading cluster metadata: %w", err)
	}
	existing, err := client.Topics()
	if err != nil {
		return nil, fmt.Errorf("weir: listing topics: %w", err)
	}
	exists := map[string]bool{}
	for _, t := range existing {
		exists[t] = true
	}
	if err := l.checkExisting(client, admin, c, g, exists); err != nil {
		return nil, err
	}
	subOf := map[*graph.Node]int{}
	for i, s := range l.Subs {
		for _, n := range s.Nodes {
			subOf[n] = i
		}
	}
	if err := l.countRepartitions(c.ApplicationID, g, subOf); err != nil {
		return nil, err
	}
	for _, r := range g.Repartitions {
		name := graph.InternalTopic(c.ApplicationID, r.Name)
		if _, err := ensure(client, admin, c, repartitionSpec(name, l.Counts[name]), exists[name]); err != nil {
			return nil, err
		}
	}
	if err := l.copartition(c.ApplicationID); err != nil {
		return nil, err
	}
	if err := l.prepareChangelogs(client, admin, c, g, subOf, exists); err != nil {
		return nil, err
	}
	if l.Limits, err = readLimits(admin, l.written(client, c, g)); err != nil {
		return nil, err
	}
	return l, nil
}

// checkExisting refuses a topology whose topics do not all exist (the
// topics it reads and writes, its dead-letter topics and its global
// stores' topics: a *MissingError naming every one), notes its internal
// topics and source nodes, counts its input topics' partitions and reads
// the global topics' delete retention.
func (l *Layout) checkExisting(client sarama.Client, admin sarama.ClusterAdmin, c *Options, g *graph.Graph, exists map[string]bool) error {
	var missing []string
	for _, n := range g.Nodes {
		name := TopicName(c.ApplicationID, n)
		if n.Internal {
			l.Internal[name] = true
		}
		if n.Kind == graph.KindSource {
			l.SourceNode[name] = n
		}
		if n.Internal || n.Kind == graph.KindProcessor || n.Dynamic {
			continue
		}
		if !exists[name] {
			// A sink topic must exist too: weir does not create the
			// topics it writes, and a record for a missing topic would
			// fail every transaction.
			if !slices.Contains(missing, name) {
				missing = append(missing, name)
			}
			continue
		}
		if n.Kind != graph.KindSource {
			continue
		}
		ps, err := client.Partitions(name)
		if err != nil {
			return fmt.Errorf("weir: partitions of %s: %w", name, err)
		}
		l.Counts[name] = int32(len(ps))
	}
	for _, name := range c.DeadLetter {
		if !exists[name] && !slices.Contains(missing, name) {
			missing = append(missing, name)
		}
	}
	for _, gs := range g.Globals {
		if !exists[gs.Topic] && !slices.Contains(missing, gs.Topic) {
			missing = append(missing, gs.Topic)
		}
	}
	if len(missing) > 0 {
		slices.Sort(missing)
		return &MissingError{Topics: missing}
	}
	for _, gs := range g.Globals {
		dr, _, err := sourceChangelog(admin, gs.Topic)
		if err != nil {
			return err
		}
		l.DeleteRetention[gs.Topic] = dr
	}
	return nil
}

// countRepartitions gives each repartition topic its partition count:
// its own, or the largest of the sub-topology that writes it, which may
// itself read a repartition topic: resolved in rounds.
func (l *Layout) countRepartitions(app string, g *graph.Graph, subOf map[*graph.Node]int) error {
	writer := map[string]*graph.Node{}
	for _, n := range g.Nodes {
		if n.Kind == graph.KindSink && n.Internal {
			writer[n.Topic] = n
		}
	}
	// A cycle (a foreign-key join's subscription and response topics each
	// written by the sub-topology reading the other) cannot be resolved in
	// full: then a topic takes the largest count of the writer's sources
	// known so far, which the co-partitioning check confirms.
	pending := slices.Clone(g.Repartitions)
	partial := false
	for len(pending) > 0 {
		progress := false
		for i := 0; i < len(pending); i++ {
			r := pending[i]
			name := graph.InternalTopic(app, r.Name)
			count := r.Partitions
			if count == 0 {
				sub := l.Subs[subOf[writer[r.Name]]]
				known := true
				for _, src := range sub.Sources() {
					n, ok := l.Counts[TopicName(app, src)]
					if !ok {
						known = false
						continue
					}
					count = max(count, n)
				}
				if !known && (!partial || count == 0) {
					continue
				}
			}
			l.Counts[name] = count
			pending = slices.Delete(pending, i, i+1)
			i--
			progress = true
		}
		switch {
		case progress:
			partial = false
		case !partial:
			partial = true
		default:
			return errors.New("weir: cannot resolve the partition counts of repartition topics")
		}
	}
	return nil
}

// copartition records each sub-topology's source topics and partition
// count, and refuses sources of one sub-topology with different counts
// (a *CopartitionError).
func (l *Layout) copartition(app string) error {
	for i, s := range l.Subs {
		var topics []string
		counts := map[string]int32{}
		for _, src := range s.Sources() {
			name := TopicName(app, src)
			topics = append(topics, name)
			counts[name] = l.Counts[name]
			l.BySource[name] = i
		}
		l.Topics = append(l.Topics, topics)
		var n int32 = -1
		for _, c := range counts {
			if n >= 0 && c != n {
				return &CopartitionError{Subtopology: s.ID, Partitions: counts}
			}
			n = c
		}
		l.Partitions = append(l.Partitions, max(n, 0))
	}
	return nil
}

// prepareChangelogs creates or checks each used store's changelog topic,
// or takes the store's compacted input topic as its changelog when the
// store restores raw from it (Options.RawRestore).
func (l *Layout) prepareChangelogs(client sarama.Client, admin sarama.ClusterAdmin, c *Options, g *graph.Graph, subOf map[*graph.Node]int, exists map[string]bool) error {
	for _, st := range g.Stores {
		if len(st.Users) == 0 {
			continue
		}
		if st.Source != "" && c.RawRestore != nil && c.RawRestore(st.Source) {
			dr, compacted, err := sourceChangelog(admin, st.Source)
			if err != nil {
				return err
			}
			if compacted {
				l.SourceChangelog[st.Name] = st.Source
				l.DeleteRetention[st.Source] = dr
				continue
			}
			if c.Logger != nil {
				c.Logger.Info("the input topic of a store is not compacted; the store keeps a changelog of its own",
					"store", st.Name, "topic", st.Source)
			}
		}
		name := graph.ChangelogTopic(c.ApplicationID, st.Name)
		dr, err := ensureChangelog(client, admin, c, name, st, l.Partitions[subOf[st.Users[0]]], exists[name])
		if err != nil {
			return err
		}
		l.DeleteRetention[name] = dr
	}
	return nil
}

// written lists the topics the application writes (its sinks', its
// changelogs and its dead-letter topics), counting the partitions of
// those it does not create.
func (l *Layout) written(client sarama.Client, c *Options, g *graph.Graph) []string {
	var written []string
	for _, n := range g.Nodes {
		if n.Kind == graph.KindSink && !n.Dynamic {
			name := TopicName(c.ApplicationID, n)
			if ps, err := client.Partitions(name); err == nil {
				l.Counts[name] = int32(len(ps))
				written = append(written, name)
			}
		}
	}
	for _, st := range g.Stores {
		if _, ok := l.SourceChangelog[st.Name]; len(st.Users) > 0 && !ok {
			written = append(written, graph.ChangelogTopic(c.ApplicationID, st.Name))
		}
	}
	for _, name := range c.DeadLetter {
		if ps, err := client.Partitions(name); err == nil && !slices.Contains(written, name) {
			l.Counts[name] = int32(len(ps))
			written = append(written, name)
		}
	}
	return written
}

// readLimits reads max.message.bytes and cleanup.policy of topics.
func readLimits(admin sarama.ClusterAdmin, topics []string) (map[string]Limit, error) {
	out := make(map[string]Limit, len(topics))
	for _, topic := range topics {
		if _, ok := out[topic]; ok {
			continue
		}
		entries, err := describe(admin, sarama.ConfigResource{
			Type: sarama.TopicResource, Name: topic, ConfigNames: []string{"max.message.bytes", "cleanup.policy"},
		})
		if err != nil {
			return nil, fmt.Errorf("weir: describing %s: %w", topic, err)
		}
		var lim Limit
		for _, e := range entries {
			switch e.Name {
			case "max.message.bytes":
				lim.MaxBytes, _ = strconv.Atoi(e.Value)
			case "cleanup.policy":
				lim.Compacted = strings.Contains(e.Value, "compact")
			}
		}
		out[topic] = lim
	}
	return out, nil
}

// spec describes an internal topic weir creates, or checks when it
// exists.
type spec struct {
	name       string
	what       string // for messages: "internal topic", "changelog topic of store s"
	partitions int32
	configs    map[string]string // set at creation
	// describe names the configurations to read of an existing topic.
	describe []string
}

// ensure creates the internal topic s, or checks the partition count of
// the one that exists and returns the configurations s.describe names
// (nil for a topic it created).
func ensure(client sarama.Client, admin sarama.ClusterAdmin, c *Options, s spec, exists bool) (map[string]string, error) {
	if !exists {
		rf := c.ReplicationFactor
		if rf == 0 {
			rf = -1 // the broker's default.replication.factor
		}
		configs := make(map[string]*string, len(s.configs))
		for k, v := range s.configs {
			configs[k] = &v
		}
		err := admin.CreateTopic(s.name, &sarama.TopicDetail{NumPartitions: s.partitions, ReplicationFactor: rf, ConfigEntries: configs}, false)
		if err != nil && !errors.Is(err, sarama.ErrTopicAlreadyExists) {
			return nil, fmt.Errorf("weir: creating %s %s: %w", s.what, s.name, err)
		}
		c.Logger.Info("created "+s.what, "topic", s.name, "partitions", s.partitions, "cleanup.policy", s.configs["cleanup.policy"])
		return nil, nil
	}
	ps, err := client.Partitions(s.name)
	if err != nil {
		return nil, fmt.Errorf("weir: partitions of %s: %w", s.name, err)
	}
	if int32(len(ps)) != s.partitions {
		return nil, fmt.Errorf("weir: %s %s has %d partitions, the topology needs %d", s.what, s.name, len(ps), s.partitions)
	}
	if len(s.describe) == 0 {
		return nil, nil
	}
	entries, err := describe(admin, sarama.ConfigResource{Type: sarama.TopicResource, Name: s.name, ConfigNames: s.describe})
	if err != nil {
		return nil, fmt.Errorf("weir: describing %s: %w", s.name, err)
	}
	out := make(map[string]string, len(entries))
	for _, e := range entries {
		out[e.Name] = e.Value
	}
	return out, nil
}

// repartitionSpec is a repartition topic: deleted, never compacted, kept
// without time limit since weir purges what it committed.
func repartitionSpec(name string, partitions int32) spec {
	return spec{name: name, what: "internal topic", partitions: partitions,
		configs: map[string]string{"cleanup.policy": "delete", "retention.ms": "-1"}}
}

// changelogRetentionMargin is added to a window or session store's
// retention for its changelog, so records are not deleted from the topic
// before the store expires them.
const changelogRetentionMargin = 24 * time.Hour

// DefaultDeleteRetention is Kafka's default delete.retention.ms
// (log.cleaner.delete.retention.ms).
const DefaultDeleteRetention = 24 * time.Hour

// ensureChangelog creates a store's changelog topic, or checks the one that
// exists: its partition count must match the store's tasks and it must be
// compacted, or restores would be wrong. It returns the topic's
// delete.retention.ms; for a topic it created, Kafka's default (24 h),
// since weir sets none and describing a topic just created can race its
// creation.
func ensureChangelog(client sarama.Client, admin sarama.ClusterAdmin, c *Options, name string, st *graph.Store, partitions int32, exists bool) (time.Duration, error) {
	s := spec{name: name, what: "changelog topic of store " + st.Name, partitions: partitions,
		configs: map[string]string{"cleanup.policy": "compact"}, describe: []string{"cleanup.policy", "delete.retention.ms"}}
	// A TTL store's changelog stays compact only: its expiry is by stream
	// time, which the wall-clock retention.ms cannot follow, and sends a
	// tombstone per expired entry.
	if st.Kind == graph.WindowStore || st.Kind == graph.SessionStore {
		s.configs["cleanup.policy"] = "compact,delete"
		s.configs["retention.ms"] = strconv.FormatInt((st.Retention + changelogRetentionMargin).Milliseconds(), 10)
	}
	configs, err := ensure(client, admin, c, s, exists)
	if err != nil || configs == nil {
		return DefaultDeleteRetention, err
	}
	if policy := configs["cleanup.policy"]; !strings.Contains(policy, "compact") {
		return 0, fmt.Errorf("weir: changelog topic %s has cleanup.policy=%s; it must be compacted", name, policy)
	}
	deleteRetention := DefaultDeleteRetention
	if v, ok := configs["delete.retention.ms"]; ok {
		ms, err := strconv.ParseInt(v, 10, 64)
		if err != nil || ms < 0 {
			return 0, fmt.Errorf("weir: changelog topic %s has delete.retention.ms=%q; want milliseconds", name, v)
		}
		deleteRetention = time.Duration(ms) * time.Millisecond
	}
	return deleteRetention, nil
}

// sourceChangelog reports whether the input topic can serve as a store's
// changelog (its cleanup.policy includes compact), with its
// delete.retention.ms.
func sourceChangelog(admin sarama.ClusterAdmin, topic string) (time.Duration, bool, error) {
	entries, err := describe(admin, sarama.ConfigResource{Type: sarama.TopicResource, Name: topic,
		ConfigNames: []string{"cleanup.policy", "delete.retention.ms"}})
	if err != nil {
		return 0, false, fmt.Errorf("weir: describing topic %s: %w", topic, err)
	}
	dr, compacted := DefaultDeleteRetention, false
	for _, e := range entries {
		switch e.Name {
		case "cleanup.policy":
			compacted = strings.Contains(e.Value, "compact")
		case "delete.retention.ms":
			if ms, err := strconv.ParseInt(e.Value, 10, 64); err == nil && ms >= 0 {
				dr = time.Duration(ms) * time.Millisecond
			}
		}
	}
	return dr, compacted, nil
}

// ConfigResource names a topic's retention.ms, for describing it.
func ConfigResource(topic string) sarama.ConfigResource {
	return sarama.ConfigResource{Type: sarama.TopicResource, Name: topic, ConfigNames: []string{"retention.ms"}}
}

// AssignSubtopologies describes the layout to the assignor; stores are
// the topology's (graph.Graph.Stores): a sub-topology using one is
// stateful.
func (l *Layout) AssignSubtopologies(stores []*graph.Store) []assign.Subtopology {
	out := make([]assign.Subtopology, len(l.Subs))
	for i, s := range l.Subs {
		stateful := false
		for _, st := range stores {
			if len(st.Users) > 0 && slices.Contains(s.Nodes, st.Users[0]) {
				stateful = true
			}
		}
		out[i] = assign.Subtopology{ID: s.ID, Topics: slices.Clone(l.Topics[i]), Stateful: stateful}
	}
	return out
}

// AllTopics returns every source topic, the group's subscription.
func (l *Layout) AllTopics() []string {
	var out []string
	for _, ts := range l.Topics {
		out = append(out, ts...)
	}
	slices.Sort(out)
	return out
}

// describeWait bounds how long describe waits for a broker to know a topic
// that the cluster's metadata already lists.
const describeWait = 15 * time.Second

// describe reads a topic's configurations. A topic just created, by this
// instance or by another one starting at the same time, can be listed in
// the metadata before the broker answering knows it
// (UNKNOWN_TOPIC_OR_PARTITION): describe retries that for up to
// describeWait.
func describe(admin sarama.ClusterAdmin, r sarama.ConfigResource) ([]sarama.ConfigEntry, error) {
	deadline := time.Now().Add(describeWait)
	for backoff := 50 * time.Millisecond; ; backoff = min(2*backoff, time.Second) {
		entries, err := admin.DescribeConfig(r)
		if err == nil || !errors.Is(err, sarama.ErrUnknownTopicOrPartition) || time.Now().After(deadline) {
			return entries, err
		}
		time.Sleep(backoff)
	}
}
