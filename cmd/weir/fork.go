package main

import (
	"context"
	"fmt"
	"hash/fnv"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/IBM/sarama"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/internal/topics"
)

// forkCopy is one internal topic a fork copies, partition by partition.
type forkCopy struct {
	from, to   string
	kind       string          // "changelog" or "repartition"
	partitions []int32         //
	start      map[int32]int64 // first offset copied per partition
	end        map[int32]int64 // copied up to (not including)
}

func forkCmd(ctx context.Context, args []string, out, errOut io.Writer) error {
	var c common
	fs := newFlagsApp("fork", "-from ID -to ID2 [-dry-run]", "from", "the application to fork (required): it must be stopped", errOut, &c)
	to := fs.String("to", "", "the new application id (required): it must not have run")
	dryRun := fs.Bool("dry-run", false, "print what the fork would copy and change nothing")
	var registry registryFlags
	registry.add(fs, "schema registry URL (default $WEIR_SCHEMA_REGISTRY_URL): the versions of the stores' subjects are copied to the new id's; required when a store keeps its schemas there")
	if err := parse(fs, args, &c); err != nil {
		return err
	}
	if *to == "" || *to == c.app {
		return &usageError{"-to is required and must differ from -from"}
	}
	reg, err := registry.client()
	if err != nil {
		return err
	}
	cl, err := connect(c)
	if err != nil {
		return err
	}
	defer cl.close()

	d, err := stopped(cl, c.app, "the fork is of its last commit")
	if err != nil {
		return err
	}
	if err := checkFresh(cl, *to); err != nil {
		return err
	}
	committed, err := cl.committed(c.app)
	if err != nil {
		return err
	}
	copies, err := planFork(cl, c.app, *to, d, committed)
	if err != nil {
		return err
	}
	next := rename(d, c.app, *to)
	subjects := storeSubjects(d, next)
	if err := needRegistry(reg, subjects); err != nil {
		return err
	}
	printForkPlan(out, c.app, *to, d, committed, copies, *dryRun)
	printSubjectPlan(out, subjects)
	if *dryRun {
		return nil
	}
	if err := copySubjects(ctx, reg, subjects, out); err != nil {
		return err
	}
	for _, cp := range copies {
		if err := copyTopic(ctx, cl, cp, out); err != nil {
			return err
		}
	}
	offsets := map[string]map[int32]int64{}
	for _, s := range d.Sources {
		if len(committed[s.Topic]) > 0 {
			offsets[s.Topic] = committed[s.Topic]
		}
	}
	if err := copyOffsets(cl, c.app, *to, offsets); err != nil {
		return err
	}
	if err := cl.writeDescriptor(next); err != nil {
		return err
	}
	fmt.Fprintln(out, "done: every copy verified (records and checksum per partition)")
	return nil
}

// printForkPlan prints what a fork of from to to copies: the committed
// offsets of d's sources and the topics.
func printForkPlan(out io.Writer, from, to string, d *weir.Descriptor, committed map[string]map[int32]int64, copies []forkCopy, dryRun bool) {
	verb := "forks"
	if dryRun {
		verb = "would fork (dry run: nothing changed)"
	}
	fmt.Fprintf(out, "%s %s to %s:\n", verb, from, to)
	for _, s := range d.Sources {
		for _, p := range sortedKeys(committed[s.Topic]) {
			fmt.Fprintf(out, "  offset %s/%d: %d\n", s.Topic, p, committed[s.Topic][p])
		}
	}
	for _, cp := range copies {
		var n int64
		for _, p := range cp.partitions {
			n += cp.end[p] - cp.start[p]
		}
		fmt.Fprintf(out, "  %s %s -> %s: offsets %d records' worth in %d partitions\n", cp.kind, cp.from, cp.to, n, len(cp.partitions))
	}
}

// checkFresh refuses a target application that has a group with offsets
// or members, or a topology topic.
func checkFresh(cl *cluster, app string) error {
	existing, err := cl.admin.ListTopics()
	if err != nil {
		return fmt.Errorf("listing topics: %w", err)
	}
	if _, ok := existing[topics.DescriptorTopic(app)]; ok {
		return refused("%s already has a topology topic (%s): fork only to an application id that never ran", app, topics.DescriptorTopic(app))
	}
	committed, err := cl.committed(app)
	if err != nil {
		return err
	}
	if len(committed) > 0 {
		return refused("group %s already has committed offsets: fork only to an application id that never ran", app)
	}
	return nil
}

// rename returns d for application to: internal topics renamed.
func rename(d *weir.Descriptor, from, to string) *weir.Descriptor {
	n := *d
	n.ApplicationID = to
	n.ResetEpoch = 0
	n.InternalTopics = nil
	for _, t := range d.InternalTopics {
		t.Topic = renameTopic(t.Topic, from, to)
		n.InternalTopics = append(n.InternalTopics, t)
	}
	n.Stores = nil
	for _, s := range d.Stores {
		if s.Type != "global" {
			s.Changelog = renameTopic(s.Changelog, from, to)
			if s.KeySubject != "" {
				s.KeySubject = renameTopic(s.KeySubject, from, to)
			}
			if s.ValueSubject != "" {
				s.ValueSubject = renameTopic(s.ValueSubject, from, to)
			}
		}
		n.Stores = append(n.Stores, s)
	}
	return &n
}

// renameTopic replaces the application prefix of an internal name.
func renameTopic(name, from, to string) string {
	if rest, ok := strings.CutPrefix(name, from+"-"); ok {
		return to + "-" + rest
	}
	return name
}

// planFork lists the internal topics to copy: changelogs whole (from their
// log start), repartition topics from the group's committed offsets (what
// the source had not consumed yet).
func planFork(cl *cluster, from, to string, d *weir.Descriptor, committed map[string]map[int32]int64) ([]forkCopy, error) {
	var copies []forkCopy
	for _, t := range d.InternalTopics {
		ps, err := cl.partitions(t.Topic)
		if err != nil {
			return nil, err
		}
		cp := forkCopy{from: t.Topic, to: renameTopic(t.Topic, from, to), kind: t.Kind, partitions: ps, start: map[int32]int64{}, end: map[int32]int64{}}
		for _, p := range ps {
			start, end, err := cl.offsets(t.Topic, p)
			if err != nil {
				return nil, err
			}
			if t.Kind == "repartition" {
				if off, ok := committed[t.Topic][p]; ok && off > start {
					start = min(off, end)
				}
			}
			cp.start[p], cp.end[p] = start, end
		}
		copies = append(copies, cp)
	}
	return copies, nil
}

// copyTopic creates cp.to like cp.from and copies the records of each
// partition's range (read_committed: only committed records) into the
// same partition, then reads the copy back and compares record counts and
// checksums.
func copyTopic(ctx context.Context, cl *cluster, cp forkCopy, out io.Writer) error {
	entries, err := cl.admin.DescribeConfig(sarama.ConfigResource{Type: sarama.TopicResource, Name: cp.from})
	if err != nil {
		return fmt.Errorf("configuration of %s: %w", cp.from, err)
	}
	configs := map[string]*string{}
	for _, e := range entries {
		if !e.Default && !e.ReadOnly && e.Source == sarama.SourceTopic {
			configs[e.Name] = &e.Value
		}
	}
	if err := cl.admin.CreateTopic(cp.to, &sarama.TopicDetail{NumPartitions: int32(len(cp.partitions)), ReplicationFactor: -1, ConfigEntries: configs}, false); err != nil {
		return fmt.Errorf("creating %s: %w", cp.to, err)
	}
	pcfg := *cl.cfg
	pcfg.Producer.Return.Successes = true
	pcfg.Producer.RequiredAcks = sarama.WaitForAll
	pcfg.Producer.Idempotent = true
	pcfg.Net.MaxOpenRequests = 1
	pcfg.Producer.Partitioner = sarama.NewManualPartitioner
	producer, err := sarama.NewSyncProducer(cl.brokers, &pcfg)
	if err != nil {
		return fmt.Errorf("producer for %s: %w", cp.to, err)
	}
	defer producer.Close()
	for _, p := range cp.partitions {
		var batch []*sarama.ProducerMessage
		want, err := readRange(ctx, cl, cp.from, p, cp.start[p], cp.end[p], func(m *sarama.ConsumerMessage) error {
			pm := &sarama.ProducerMessage{Topic: cp.to, Partition: p, Timestamp: m.Timestamp}
			if m.Key != nil {
				pm.Key = sarama.ByteEncoder(m.Key)
			}
			if m.Value != nil {
				pm.Value = sarama.ByteEncoder(m.Value)
			}
			for _, h := range m.Headers {
				pm.Headers = append(pm.Headers, sarama.RecordHeader{Key: h.Key, Value: h.Value})
			}
			batch = append(batch, pm)
			if len(batch) == 1000 {
				err := producer.SendMessages(batch)
				batch = batch[:0]
				return err
			}
			return nil
		})
		if err != nil {
			return err
		}
		if len(batch) > 0 {
			if err := producer.SendMessages(batch); err != nil {
				return fmt.Errorf("writing %s/%d: %w", cp.to, p, err)
			}
		}
		_, end, err := cl.offsets(cp.to, p)
		if err != nil {
			return err
		}
		got, err := readRange(ctx, cl, cp.to, p, 0, end, nil)
		if err != nil {
			return err
		}
		if got != want {
			return fmt.Errorf("verifying %s/%d: %d records (checksum %016x) copied from %s, %d (%016x) read back", cp.to, p, want.records, want.sum, cp.from, got.records, got.sum)
		}
		fmt.Fprintf(out, "  copied %s/%d: %d records, checksum %016x\n", cp.to, p, got.records, got.sum)
	}
	return nil
}

// idleEnd is how long readRange waits for a record before it looks at
// what is left of the partition up to its end.
const idleEnd = 200 * time.Millisecond

// onlyMarkersLeft reports whether the log of topic/p from offset from up
// to end holds no record a read_committed reader gets: only transaction
// markers and records of aborted transactions. It fetches the batches
// itself, as the consumer does not say where it stands.
func onlyMarkersLeft(cl *cluster, topic string, p int32, from, end int64) (bool, error) {
	broker, err := cl.client.Leader(topic, p)
	if err != nil {
		return false, fmt.Errorf("leader of %s/%d: %w", topic, p, err)
	}
	for from < end {
		req := &sarama.FetchRequest{Version: 4, MaxWaitTime: 0, MinBytes: 1, MaxBytes: 1 << 20, Isolation: sarama.ReadCommitted}
		req.AddBlock(topic, p, from, 1<<20, -1)
		resp, err := broker.Fetch(req)
		if err != nil {
			return false, fmt.Errorf("reading %s/%d@%d: %w", topic, p, from, err)
		}
		b := resp.GetBlock(topic, p)
		if b == nil {
			return false, fmt.Errorf("reading %s/%d@%d: no answer for the partition", topic, p, from)
		}
		if b.Err != sarama.ErrNoError {
			return false, fmt.Errorf("reading %s/%d@%d: %w", topic, p, from, b.Err)
		}
		if b.LastStableOffset >= 0 && b.LastStableOffset < end {
			return false, nil // a transaction before end is still open
		}
		progressed := false
		for _, rs := range b.RecordsSet {
			rb := rs.RecordBatch
			if rb == nil || rb.PartialTrailingRecord {
				continue // fetched again from its start in the next round
			}
			last := rb.FirstOffset + int64(rb.LastOffsetDelta)
			if last < from {
				continue
			}
			aborted := rb.IsTransactional && slices.ContainsFunc(b.AbortedTransactions, func(a *sarama.AbortedTransaction) bool {
				return a.ProducerID == rb.ProducerID && a.FirstOffset <= rb.FirstOffset
			})
			if !rb.Control && !aborted && rb.FirstOffset < end {
				for _, r := range rb.Records {
					if off := rb.FirstOffset + r.OffsetDelta; off >= from && off < end {
						return false, nil
					}
				}
			}
			from, progressed = last+1, true
		}
		if !progressed {
			return false, nil // nothing readable yet: look again later
		}
	}
	return true, nil
}

// digest counts records and sums them (FNV-64a over key, value and their
// lengths, in order).
type digest struct {
	records int64
	sum     uint64
}

// readRange reads [start, end) of a partition (read_committed), passing
// each record to each when it is not nil, and returns their digest.
func readRange(ctx context.Context, cl *cluster, topic string, p int32, start, end int64, each func(*sarama.ConsumerMessage) error) (digest, error) {
	var d digest
	h := fnv.New64a()
	err := scanRange(ctx, cl, topic, p, start, end, func(m *sarama.ConsumerMessage) error {
		d.records++
		fmt.Fprintf(h, "%d:%d:", len(m.Key), len(m.Value))
		h.Write(m.Key)
		h.Write(m.Value)
		if each != nil {
			if err := each(m); err != nil {
				return fmt.Errorf("copying %s/%d@%d: %w", topic, p, m.Offset, err)
			}
		}
		return nil
	})
	// A range of no record sums to 0, whether empty or of markers only,
	// as an empty copy does.
	if d.records > 0 {
		d.sum = h.Sum64()
	}
	return d, err
}

// scanRange reads [start, end) of a partition (read_committed), passing
// each record to each, in offset order, and returns the first error each
// returns, as it is. It keeps no record itself.
func scanRange(ctx context.Context, cl *cluster, topic string, p int32, start, end int64, each func(*sarama.ConsumerMessage) error) error {
	if start >= end {
		return nil
	}
	consumer, err := sarama.NewConsumerFromClient(cl.client)
	if err != nil {
		return err
	}
	defer consumer.Close()
	pc, err := consumer.ConsumePartition(topic, p, start)
	if err != nil {
		return fmt.Errorf("reading %s/%d@%d: %w", topic, p, start, err)
	}
	defer pc.Close()
	// Under read_committed a partition's last offsets before end may be
	// transaction markers or aborted records, which are never delivered:
	// when nothing came for idleEnd, the log after the last record
	// delivered is looked at, and the partition is read when it holds no
	// committed record before end (onlyMarkersLeft). The timer is not
	// reset for every record (a timer operation per record): a period in
	// which records came starts another, so the wait is idleEnd to twice
	// that.
	idle := time.NewTimer(idleEnd)
	defer idle.Stop()
	next := start // the offset after the last record delivered
	came := false // a record came since the timer was last set
	msgs := pc.Messages()
	record := func(m *sarama.ConsumerMessage) (bool, error) {
		if m.Offset >= end {
			return true, nil
		}
		if err := each(m); err != nil {
			return true, err
		}
		next, came = m.Offset+1, true
		return m.Offset == end-1, nil
	}
	for n := 0; ; n++ {
		// The records the consumer holds already are taken without a
		// select of every case (a lock of each channel per record); the
		// context is looked at every 1024 of them.
		select {
		case m := <-msgs:
			if done, err := record(m); done || err != nil {
				return err
			}
			if n%1024 == 0 {
				if err := ctx.Err(); err != nil {
					return err
				}
			}
			continue
		default:
		}
		select {
		case m := <-msgs:
			if done, err := record(m); done || err != nil {
				return err
			}
		case err := <-pc.Errors():
			return fmt.Errorf("reading %s/%d: %w", topic, p, err.Err)
		case <-idle.C:
			if came {
				came = false
				idle.Reset(idleEnd)
				continue
			}
			done, err := onlyMarkersLeft(cl, topic, p, next, end)
			if err != nil {
				return err
			}
			if done {
				return nil
			}
			// A committed record is still to come: a slow fetch.
			idle.Reset(idleEnd)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// copyOffsets commits the source group's offsets (with their metadata:
// weir keeps stream time and the last table version there) for group to.
func copyOffsets(cl *cluster, from, to string, offsets map[string]map[int32]int64) error {
	parts := map[string][]int32{}
	for topic, ps := range offsets {
		parts[topic] = sortedKeys(ps)
	}
	resp, err := cl.admin.ListConsumerGroupOffsets(from, parts)
	if err != nil {
		return fmt.Errorf("offsets of group %s: %w", from, err)
	}
	copied := map[string]map[int32]int64{}
	metadata := map[string]map[int32]string{}
	for topic, ps := range parts {
		for _, p := range ps {
			b := resp.GetBlock(topic, p)
			if b == nil || b.Offset < 0 {
				continue
			}
			if copied[topic] == nil {
				copied[topic], metadata[topic] = map[int32]int64{}, map[int32]string{}
			}
			copied[topic][p], metadata[topic][p] = b.Offset, b.Metadata
		}
	}
	return commitOffsetsWith(cl, to, copied, func(topic string, p int32) string { return metadata[topic][p] })
}
