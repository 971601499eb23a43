package weir

import (
	"errors"
	"fmt"
	"slices"

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
	for _, n := range g.Nodes {
		if n.Kind == graph.KindSink && !n.Internal {
			if ps, err := client.Partitions(n.Topic); err == nil {
				l.counts[n.Topic] = int32(len(ps))
			}
		}
	}
	return l, nil
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
