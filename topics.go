package weir

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/IBM/sarama"

	"github.com/weirstream/weir/internal/assign"
	"github.com/weirstream/weir/internal/graph"
)

// layout is the topology as it runs against one cluster: each
// sub-topology's source topics (real names) and partition count.
type layout struct {
	subs       []*graph.Subtopology
	topics     [][]string       // per sub-topology: its source topics
	partitions []int32          // per sub-topology
	counts     map[string]int32 // topic -> partitions, for every source, sink and internal topic
	internal   map[string]bool  // real topic names of repartition topics
	bySource   map[string]int   // source topic -> sub-topology
	sourceNode map[string]*graph.Node
	// limits of every topic weir writes that existed at start (sinks,
	// repartition topics, changelogs), checked before a record is sent.
	limits map[string]topicLimit
	// deleteRetention is each changelog topic's delete.retention.ms: how
	// long its tombstones are sure to stay once compaction reaches them.
	// A restore trusts a checkpoint that is younger (see restoreStore).
	deleteRetention map[string]time.Duration
}

// topicLimit is what a topic refuses, as configured at start.
type topicLimit struct {
	maxBytes  int  // max.message.bytes; 0 unknown
	compacted bool // cleanup.policy includes compact: a record needs a key
}

// topicName is a node's real topic for application app.
func topicName(app string, n *graph.Node) string {
	if n.Internal {
		return graph.InternalTopic(app, n.Topic)
	}
	return n.Topic
}

// prepareTopics checks the source topics, creates missing repartition
// topics and checks co-partitioning, so that a bad deployment fails at
// start with every topic and count named.
func prepareTopics(client sarama.Client, admin sarama.ClusterAdmin, c *Config, g *graph.Graph) (*layout, error) {
	app := c.ApplicationID
	l := &layout{
		subs:       g.Subtopologies(),
		counts:     map[string]int32{},
		internal:   map[string]bool{},
		bySource:   map[string]int{},
		sourceNode: map[string]*graph.Node{},

		deleteRetention: map[string]time.Duration{},
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
	var missing []string
	for _, n := range g.Nodes {
		name := topicName(app, n)
		if n.Internal {
			l.internal[name] = true
		}
		if n.Kind == graph.KindSource {
			l.sourceNode[name] = n
		}
		if n.Kind != graph.KindSource || n.Internal {
			continue
		}
		if !exists[name] {
			missing = append(missing, name)
			continue
		}
		ps, err := client.Partitions(name)
		if err != nil {
			return nil, fmt.Errorf("weir: partitions of %s: %w", name, err)
		}
		l.counts[name] = int32(len(ps))
	}
	if len(missing) > 0 {
		slices.Sort(missing)
		return nil, &MissingTopicError{Topics: missing}
	}

	// Repartition topics take their count from the sub-topology that writes
	// them, which may itself read a repartition topic: resolve in rounds.
	subOf := map[*graph.Node]int{}
	for i, s := range l.subs {
		for _, n := range s.Nodes {
			subOf[n] = i
		}
	}
	writer := map[string]*graph.Node{}
	for _, n := range g.Nodes {
		if n.Kind == graph.KindSink && n.Internal {
			writer[n.Topic] = n
		}
	}
	pending := slices.Clone(g.Repartitions)
	for len(pending) > 0 {
		progress := false
		for i := 0; i < len(pending); i++ {
			r := pending[i]
			name := graph.InternalTopic(app, r.Name)
			count := r.Partitions
			if count == 0 {
				sub := l.subs[subOf[writer[r.Name]]]
				known := true
				for _, src := range sub.Sources() {
					n, ok := l.counts[topicName(app, src)]
					if !ok {
						known = false
						break
					}
					count = max(count, n)
				}
				if !known {
					continue
				}
			}
			l.counts[name] = count
			pending = slices.Delete(pending, i, i+1)
			i--
			progress = true
		}
		if !progress {
			return nil, errors.New("weir: cannot resolve the partition counts of repartition topics")
		}
	}
	for _, r := range g.Repartitions {
		name := graph.InternalTopic(app, r.Name)
		if err := ensureTopic(client, admin, c, name, l.counts[name], exists[name]); err != nil {
			return nil, err
		}
	}

	for i, s := range l.subs {
		var topics []string
		counts := map[string]int32{}
		for _, src := range s.Sources() {
			name := topicName(app, src)
			topics = append(topics, name)
			counts[name] = l.counts[name]
			l.bySource[name] = i
		}
		l.topics = append(l.topics, topics)
		var n int32 = -1
		for _, c := range counts {
			if n >= 0 && c != n {
				return nil, &CopartitionError{Subtopology: s.ID, Partitions: counts}
			}
			n = c
		}
		l.partitions = append(l.partitions, max(n, 0))
	}
	for _, st := range g.Stores {
		if len(st.Users) == 0 {
			continue
		}
		name := graph.ChangelogTopic(app, st.Name)
		dr, err := ensureChangelog(client, admin, c, name, st, l.partitions[subOf[st.Users[0]]], exists[name])
		if err != nil {
			return nil, err
		}
		l.deleteRetention[name] = dr
	}
	var written []string
	for _, n := range g.Nodes {
		if n.Kind == graph.KindSink {
			name := topicName(app, n)
			if ps, err := client.Partitions(name); err == nil {
				l.counts[name] = int32(len(ps))
				written = append(written, name)
			}
		}
	}
	for _, st := range g.Stores {
		if len(st.Users) > 0 {
			written = append(written, graph.ChangelogTopic(app, st.Name))
		}
	}
	if l.limits, err = readLimits(admin, written); err != nil {
		return nil, err
	}
	return l, nil
}

// readLimits reads max.message.bytes and cleanup.policy of topics.
func readLimits(admin sarama.ClusterAdmin, topics []string) (map[string]topicLimit, error) {
	out := make(map[string]topicLimit, len(topics))
	for _, topic := range topics {
		if _, ok := out[topic]; ok {
			continue
		}
		entries, err := admin.DescribeConfig(sarama.ConfigResource{
			Type: sarama.TopicResource, Name: topic, ConfigNames: []string{"max.message.bytes", "cleanup.policy"},
		})
		if err != nil {
			return nil, fmt.Errorf("weir: describing %s: %w", topic, err)
		}
		var lim topicLimit
		for _, e := range entries {
			switch e.Name {
			case "max.message.bytes":
				lim.maxBytes, _ = strconv.Atoi(e.Value)
			case "cleanup.policy":
				lim.compacted = strings.Contains(e.Value, "compact")
			}
		}
		out[topic] = lim
	}
	return out, nil
}

// ensureTopic creates an internal topic, or checks the partition count of
// one that exists.
func ensureTopic(client sarama.Client, admin sarama.ClusterAdmin, c *Config, name string, partitions int32, exists bool) error {
	if exists {
		ps, err := client.Partitions(name)
		if err != nil {
			return fmt.Errorf("weir: partitions of %s: %w", name, err)
		}
		if int32(len(ps)) != partitions {
			return fmt.Errorf("weir: internal topic %s has %d partitions, the topology needs %d", name, len(ps), partitions)
		}
		return nil
	}
	rf := c.Topics.ReplicationFactor
	if rf == 0 {
		rf = -1 // the broker's default.replication.factor
	}
	retention := "-1" // records are purged once committed
	err := admin.CreateTopic(name, &sarama.TopicDetail{
		NumPartitions:     partitions,
		ReplicationFactor: rf,
		ConfigEntries: map[string]*string{
			"cleanup.policy": new("delete"),
			"retention.ms":   &retention,
		},
	}, false)
	if err != nil && !errors.Is(err, sarama.ErrTopicAlreadyExists) {
		return fmt.Errorf("weir: creating internal topic %s: %w", name, err)
	}
	c.Logger.Info("created internal topic", "topic", name, "partitions", partitions)
	return nil
}

// changelogRetentionMargin is added to a window or session store's
// retention for its changelog, so records are not deleted from the topic
// before the store expires them.
const changelogRetentionMargin = 24 * time.Hour

// defaultDeleteRetention is Kafka's default delete.retention.ms
// (log.cleaner.delete.retention.ms).
const defaultDeleteRetention = 24 * time.Hour

// ensureChangelog creates a store's changelog topic, or checks the one that
// exists: its partition count must match the store's tasks and it must be
// compacted, or restores would be wrong. It returns the topic's
// delete.retention.ms; for a topic it created, Kafka's default (24 h),
// since weir sets none and describing a topic just created can race its
// creation.
func ensureChangelog(client sarama.Client, admin sarama.ClusterAdmin, c *Config, name string, st *graph.Store, partitions int32, exists bool) (time.Duration, error) {
	policy := "compact"
	configs := map[string]*string{"cleanup.policy": &policy}
	if st.Kind != graph.KeyValueStore {
		policy = "compact,delete"
		retention := strconv.FormatInt((st.Retention + changelogRetentionMargin).Milliseconds(), 10)
		configs["retention.ms"] = &retention
	}
	if !exists {
		rf := c.Topics.ReplicationFactor
		if rf == 0 {
			rf = -1
		}
		err := admin.CreateTopic(name, &sarama.TopicDetail{NumPartitions: partitions, ReplicationFactor: rf, ConfigEntries: configs}, false)
		if err != nil && !errors.Is(err, sarama.ErrTopicAlreadyExists) {
			return 0, fmt.Errorf("weir: creating changelog topic %s: %w", name, err)
		}
		c.Logger.Info("created changelog topic", "topic", name, "partitions", partitions, "cleanup.policy", policy)
		return defaultDeleteRetention, nil
	}
	ps, err := client.Partitions(name)
	if err != nil {
		return 0, fmt.Errorf("weir: partitions of %s: %w", name, err)
	}
	if int32(len(ps)) != partitions {
		return 0, fmt.Errorf("weir: changelog topic %s has %d partitions, store %s needs %d", name, len(ps), st.Name, partitions)
	}
	entries, err := admin.DescribeConfig(sarama.ConfigResource{Type: sarama.TopicResource, Name: name, ConfigNames: []string{"cleanup.policy", "delete.retention.ms"}})
	if err != nil {
		return 0, fmt.Errorf("weir: describing %s: %w", name, err)
	}
	deleteRetention := defaultDeleteRetention
	for _, e := range entries {
		switch e.Name {
		case "cleanup.policy":
			if !strings.Contains(e.Value, "compact") {
				return 0, fmt.Errorf("weir: changelog topic %s has cleanup.policy=%s; it must be compacted", name, e.Value)
			}
		case "delete.retention.ms":
			ms, err := strconv.ParseInt(e.Value, 10, 64)
			if err != nil || ms < 0 {
				return 0, fmt.Errorf("weir: changelog topic %s has delete.retention.ms=%q; want milliseconds", name, e.Value)
			}
			deleteRetention = time.Duration(ms) * time.Millisecond
		}
	}
	return deleteRetention, nil
}

func configResource(topic string) sarama.ConfigResource {
	return sarama.ConfigResource{Type: sarama.TopicResource, Name: topic, ConfigNames: []string{"retention.ms"}}
}

// assignSubtopologies describes the layout to the assignor.
func (l *layout) assignSubtopologies() []assign.Subtopology {
	out := make([]assign.Subtopology, len(l.subs))
	for i, s := range l.subs {
		out[i] = assign.Subtopology{ID: s.ID, Topics: slices.Clone(l.topics[i])}
	}
	return out
}

// allTopics returns every source topic, the group's subscription.
func (l *layout) allTopics() []string {
	var out []string
	for _, ts := range l.topics {
		out = append(out, ts...)
	}
	slices.Sort(out)
	return out
}
