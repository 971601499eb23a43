package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/IBM/sarama"
	"github.com/weirstream/weir"
	"github.com/weirstream/weir/internal/client"
	"github.com/weirstream/weir/internal/task"
	"github.com/weirstream/weir/internal/topics"
)

// cluster is a connection to the brokers.
type cluster struct {
	brokers []string
	cfg     *sarama.Config
	client  sarama.Client
	admin   sarama.ClusterAdmin
}

// config returns the sarama configuration of the command's clients, secured
// as weir secures its own (see connect).
func config(sec *weir.Security) (*sarama.Config, error) {
	o := &client.Options{DialTimeout: 10 * time.Second}
	if sec != nil {
		if sec.TLS != nil {
			t, err := sec.TLS.Load()
			if err != nil {
				return nil, err
			}
			o.TLS = t
		}
		o.SASLMechanism, o.SASLUser, o.SASLPassword = string(sec.SASL.Mechanism), sec.SASL.User, sec.SASL.Password
	}
	cfg := client.Base(o, "weir-cli")
	cfg.Version = sarama.V4_0_0_0
	cfg.Metadata.AllowAutoTopicCreation = false
	cfg.Net.DialTimeout = 10 * time.Second
	cfg.Consumer.IsolationLevel = sarama.ReadCommitted
	cfg.Consumer.MaxWaitTime = 100 * time.Millisecond
	return cfg, nil
}

// connect opens a client and an admin client on the brokers of c.
func connect(c0 common) (*cluster, error) {
	sec, err := c0.security()
	if err != nil {
		return nil, err
	}
	cfg, err := config(sec)
	if err != nil {
		return nil, err
	}
	brokers := c0.brokers
	c := &cluster{brokers: strings.Split(brokers, ","), cfg: cfg}
	client, err := sarama.NewClient(c.brokers, c.cfg)
	if err != nil {
		return nil, fmt.Errorf("connecting to %s: %w", brokers, err)
	}
	admin, err := sarama.NewClusterAdminFromClient(client)
	if err != nil {
		client.Close()
		return nil, fmt.Errorf("admin client on %s: %w", brokers, err)
	}
	c.client, c.admin = client, admin
	return c, nil
}

func (c *cluster) close() { _ = c.admin.Close() } // closes the client too

// group describes the consumer group app.
func (c *cluster) group(app string) (*sarama.GroupDescription, error) {
	gs, err := c.admin.DescribeConsumerGroups([]string{app})
	if err != nil {
		return nil, fmt.Errorf("describing group %s: %w", app, err)
	}
	if len(gs) != 1 {
		return nil, fmt.Errorf("describing group %s: %d answers", app, len(gs))
	}
	if gs[0].Err != sarama.ErrNoError {
		return nil, fmt.Errorf("describing group %s: %w", app, gs[0].Err)
	}
	return gs[0], nil
}

// committed returns the group's committed offsets by topic and partition
// (-1 where none).
func (c *cluster) committed(app string) (map[string]map[int32]int64, error) {
	resp, err := c.admin.ListConsumerGroupOffsets(app, nil)
	if err != nil {
		return nil, fmt.Errorf("offsets of group %s: %w", app, err)
	}
	out := map[string]map[int32]int64{}
	for topic, ps := range resp.Blocks {
		for p, b := range ps {
			if b.Err != sarama.ErrNoError {
				return nil, fmt.Errorf("offset of group %s on %s/%d: %w", app, topic, p, b.Err)
			}
			if out[topic] == nil {
				out[topic] = map[int32]int64{}
			}
			out[topic][p] = b.Offset
		}
	}
	return out, nil
}

// progress returns the furthest progress app's tasks committed with their
// offsets (task.Progress): the largest stream time and the largest
// table version over every partition's offset metadata.
func (c *cluster) progress(app string) (task.Progress, error) {
	var progress task.Progress
	resp, err := c.admin.ListConsumerGroupOffsets(app, nil)
	if err != nil {
		return progress, fmt.Errorf("offsets of group %s: %w", app, err)
	}
	for _, ps := range resp.Blocks {
		for _, b := range ps {
			if pr, ok := task.DecodeProgress(b.Metadata); ok {
				if pr.StreamTime.After(progress.StreamTime) {
					progress.StreamTime = pr.StreamTime
				}
				progress.Version = max(progress.Version, pr.Version)
			}
		}
	}
	return progress, nil
}

// partitions returns topic's partition ids, sorted.
func (c *cluster) partitions(topic string) ([]int32, error) {
	if err := c.client.RefreshMetadata(topic); err != nil {
		return nil, fmt.Errorf("metadata of %s: %w", topic, err)
	}
	ps, err := c.client.Partitions(topic)
	if err != nil {
		return nil, fmt.Errorf("partitions of %s: %w", topic, err)
	}
	return ps, nil
}

// offsets returns a partition's log start and end offsets.
func (c *cluster) offsets(topic string, p int32) (start, end int64, err error) {
	if start, err = c.client.GetOffset(topic, p, sarama.OffsetOldest); err != nil {
		return 0, 0, fmt.Errorf("log start of %s/%d: %w", topic, p, err)
	}
	if end, err = c.client.GetOffset(topic, p, sarama.OffsetNewest); err != nil {
		return 0, 0, fmt.Errorf("log end of %s/%d: %w", topic, p, err)
	}
	return start, end, nil
}

// recordAt returns the timestamp of the first record (read_committed) at
// or after offset, before end; ok is false when there is none.
func (c *cluster) recordAt(topic string, p int32, offset, end int64) (ts time.Time, ok bool, err error) {
	if offset >= end {
		return time.Time{}, false, nil
	}
	consumer, err := sarama.NewConsumerFromClient(c.client)
	if err != nil {
		return time.Time{}, false, err
	}
	defer consumer.Close()
	pc, err := consumer.ConsumePartition(topic, p, offset)
	if err != nil {
		return time.Time{}, false, fmt.Errorf("reading %s/%d@%d: %w", topic, p, offset, err)
	}
	defer pc.Close()
	timeout := time.NewTimer(10 * time.Second)
	defer timeout.Stop()
	select {
	case m := <-pc.Messages():
		return m.Timestamp, true, nil
	case err := <-pc.Errors():
		return time.Time{}, false, fmt.Errorf("reading %s/%d@%d: %w", topic, p, offset, err.Err)
	case <-timeout.C:
		// Only aborted records or markers up to the end.
		return time.Time{}, false, nil
	}
}

// retention returns topic's retention.ms; -1 is forever.
func (c *cluster) retention(topic string) (time.Duration, error) {
	entries, err := c.admin.DescribeConfig(sarama.ConfigResource{Type: sarama.TopicResource, Name: topic, ConfigNames: []string{"retention.ms"}})
	if err != nil {
		return 0, fmt.Errorf("retention of %s: %w", topic, err)
	}
	for _, e := range entries {
		if e.Name == "retention.ms" {
			var ms int64
			if _, err := fmt.Sscan(e.Value, &ms); err != nil {
				return 0, fmt.Errorf("retention of %s: %q", topic, e.Value)
			}
			if ms < 0 {
				return -1, nil
			}
			return time.Duration(ms) * time.Millisecond, nil
		}
	}
	return -1, nil
}

// topicBytes returns the bytes topic takes on the brokers' disks (the
// leaders' logs), or -1 when the brokers do not say.
func (c *cluster) topicBytes(topic string) int64 {
	brokers := c.client.Brokers()
	ids := make([]int32, 0, len(brokers))
	for _, b := range brokers {
		ids = append(ids, b.ID())
	}
	dirs, err := c.admin.DescribeLogDirs(ids)
	if err != nil {
		return -1
	}
	var total int64
	for _, ds := range dirs {
		for _, d := range ds {
			for _, t := range d.Topics {
				if t.Topic != topic {
					continue
				}
				for _, p := range t.Partitions {
					if !p.IsTemporary {
						total += p.Size
					}
				}
			}
		}
	}
	return total
}

// stopped returns the topology descriptor of app, refusing when its group
// has members (why says what waiting for them protects) or when it has no
// descriptor (the commands that change an application need its topics).
func stopped(cl *cluster, app, why string) (*weir.Descriptor, error) {
	g, err := cl.group(app)
	if err != nil {
		return nil, err
	}
	if len(g.Members) > 0 {
		return nil, refused("group %s has %d member(s) (state %s): stop every instance of the application first; %s", app, len(g.Members), g.State, why)
	}
	return described(cl, app)
}

// readDescriptor returns the descriptor app last ran with, nil when none
// was written.
func readDescriptor(cl *cluster, app string) (*weir.Descriptor, error) {
	data, err := topics.ReadDescriptor(cl.client, cl.admin, app)
	if err != nil || data == nil {
		return nil, err
	}
	return weir.ParseDescriptor(data)
}

// writeDescriptor writes d to its application's topology topic, creating
// the topic when it is missing.
func (c *cluster) writeDescriptor(d *weir.Descriptor) error {
	return topics.WriteDescriptor(c.brokers, c.admin, c.cfg, 0, d.ApplicationID, []byte(d.String()))
}

// described returns app's topology descriptor, refusing an application
// without one.
func described(cl *cluster, app string) (*weir.Descriptor, error) {
	d, err := readDescriptor(cl, app)
	if err != nil {
		return nil, err
	}
	if d == nil {
		return nil, refused("%s has no topology descriptor (topic %s): start it once with a weir that writes one, so that its topics are known", app, topics.DescriptorTopic(app))
	}
	return d, nil
}
