package main

// The copy of a store by weir rescale, streamed: what it holds is one
// source partition's key hashes, not the store.

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/internal/graph"
)

// keyHash is a 128-bit hash of a changelog key (see keyHasher).
type keyHash [2]uint64

// keyHasher hashes changelog keys with two maphash seeds made once per
// run: two keys of a partition share a keyHash with a probability of
// about n²/2¹²⁹ for n keys.
type keyHasher struct{ a, b maphash.Seed }

func newKeyHasher() keyHasher { return keyHasher{maphash.MakeSeed(), maphash.MakeSeed()} }

func (h keyHasher) sum(k []byte) keyHash {
	return keyHash{maphash.Bytes(h.a, k), maphash.Bytes(h.b, k)}
}

// entrySum is the hash of one entry of a store that a rescale's checksum
// sums, in any order: FNV-64a of the key's and the value's lengths (8
// bytes each, big-endian), the key and the value.
func entrySum(key, value []byte) uint64 {
	const offset64, prime64 = 14695981039346656037, 1099511628211
	var lens [16]byte
	binary.BigEndian.PutUint64(lens[:8], uint64(len(key)))
	binary.BigEndian.PutUint64(lens[8:], uint64(len(value)))
	h := uint64(offset64)
	for _, c := range lens {
		h = (h ^ uint64(c)) * prime64
	}
	for _, c := range key {
		h = (h ^ uint64(c)) * prime64
	}
	for _, c := range value {
		h = (h ^ uint64(c)) * prime64
	}
	return h
}

// add counts a store's entry into d: a rescale's count and checksum.
func (d *digest) add(key, value []byte) {
	d.records++
	d.sum += entrySum(key, value)
}

// copyInFlight bounds the records of a copy sent and not answered yet
// (acknowledged or failed). The producer's own bounds do not: it buffers
// every record that comes while it retries a batch.
const copyInFlight = 1 << 16

// copyProducer writes the entries of a store's copy with an idempotent
// AsyncProducer; its successes and errors are drained as they come. The
// first error fails the copy.
type copyProducer struct {
	topic  string
	p      sarama.AsyncProducer
	slots  chan struct{} // one per record in flight
	sent   int64
	acked  atomic.Int64
	failed chan struct{} // closed at the first error
	once   sync.Once
	err    error // the first error, set before failed is closed
	drain  sync.WaitGroup
	closed bool
}

func newCopyProducer(cl *cluster, topic string) (*copyProducer, error) {
	cfg := *cl.cfg
	cfg.Producer.Return.Successes = true
	cfg.Producer.Return.Errors = true
	cfg.Producer.RequiredAcks = sarama.WaitForAll
	cfg.Producer.Idempotent = true
	cfg.Net.MaxOpenRequests = 1
	cfg.Producer.Partitioner = sarama.NewManualPartitioner
	// Large batches: one request is in flight (idempotence keeps the
	// order with one), the next one fills meanwhile.
	cfg.Producer.Flush.Bytes = 1 << 20
	cfg.Producer.Flush.Frequency = 5 * time.Millisecond
	cfg.Producer.Retry.Max = 10
	cfg.Producer.Retry.Backoff = 200 * time.Millisecond
	cfg.ChannelBufferSize = 4096
	p, err := sarama.NewAsyncProducer(cl.brokers, &cfg)
	if err != nil {
		return nil, fmt.Errorf("producer for %s: %w", topic, err)
	}
	c := &copyProducer{topic: topic, p: p, slots: make(chan struct{}, copyInFlight), failed: make(chan struct{})}
	c.drain.Add(2)
	go func() {
		defer c.drain.Done()
		for range p.Successes() {
			c.acked.Add(1)
			<-c.slots
		}
	}()
	go func() {
		defer c.drain.Done()
		for e := range p.Errors() {
			c.fail(fmt.Errorf("writing %s/%d: %w", topic, e.Msg.Partition, e.Err))
			<-c.slots
		}
	}()
	return c, nil
}

func (c *copyProducer) fail(err error) {
	c.once.Do(func() {
		c.err = err
		close(c.failed)
	})
}

// send hands m to the producer; it blocks while copyInFlight records wait
// for their answer, and fails once a record failed.
func (c *copyProducer) send(ctx context.Context, m *sarama.ProducerMessage) error {
	select {
	case <-c.failed:
		return c.err
	default:
	}
	select {
	case c.slots <- struct{}{}:
	case <-c.failed:
		return c.err
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case c.p.Input() <- m:
		c.sent++
		return nil
	case <-ctx.Done():
		<-c.slots
		return ctx.Err()
	}
}

// close flushes the producer and waits for the answer to every record
// sent: it fails unless every one was acknowledged.
func (c *copyProducer) close() error {
	if !c.closed {
		c.closed = true
		c.p.AsyncClose()
		c.drain.Wait()
	}
	select {
	case <-c.failed:
		return c.err
	default:
	}
	if got := c.acked.Load(); got != c.sent {
		return fmt.Errorf("writing %s: %d records sent, %d acknowledged", c.topic, c.sent, got)
	}
	return nil
}

// copyReader returns a cluster for the reads of a copy: cl's brokers and
// admin client, with a client of its own whose consumers fetch 2 MiB of a
// partition at once and hold up to two fetches of records: sarama fetches
// again only once the records of the last fetch are handed on, so the
// next fetch overlaps the work on the last one. close closes its client.
func copyReader(cl *cluster) (*cluster, error) {
	cfg := *cl.cfg
	cfg.Consumer.Fetch.Default = 2 << 20
	cfg.ChannelBufferSize = 1 << 15
	client, err := sarama.NewClient(cl.brokers, &cfg)
	if err != nil {
		return nil, fmt.Errorf("connecting to %s: %w", strings.Join(cl.brokers, ","), err)
	}
	return &cluster{brokers: cl.brokers, cfg: &cfg, client: client, admin: cl.admin}, nil
}

// storeCopy is the copy of one store into its new changelog.
type storeCopy struct {
	s        weir.StoreDescriptor
	layout   graph.KeyLayout
	target   string
	n        int32
	hash     keyHasher
	producer *copyProducer
	stamp    []sarama.RecordHeader // statelog.TimeHeader, shared by the records that carry it
	// shared are the task entries (graph.KeyLayout.IsShared): of each
	// key, the one with the largest value among the old partitions'.
	shared map[string]raw
	// want is the digest of what was sent; keys the entries of keys
	// (task entries left out).
	want digest
	keys int64
}

// copyPartition copies the current entries of source partition p of the
// store's changelog, read twice from its log start to its end: the first
// read finds the offset of each key's last record (a key whose last
// record is a tombstone has none), the second sends the records at those
// offsets. What it holds is a map of the partition's live keys' hashes to
// offsets (a 24-byte slot, 35 to 56 bytes a key with the map's room, as
// it fills), and the partition's task entries.
func (c *storeCopy) copyPartition(ctx context.Context, cl *cluster, p int32) error {
	changelog := c.s.Changelog
	start, end, err := cl.offsets(changelog, p)
	if err != nil {
		return err
	}
	latest := map[keyHash]int64{}
	tasks := map[string]raw{} // the partition's task entries, by key
	if err := scanRange(ctx, cl, changelog, p, start, end, func(m *sarama.ConsumerMessage) error {
		if c.layout.IsShared(m.Key) {
			if m.Value == nil {
				delete(tasks, string(m.Key))
			} else {
				tasks[string(m.Key)] = raw{partition: p, offset: m.Offset, ts: m.Timestamp, key: bytes.Clone(m.Key), value: bytes.Clone(m.Value), stamped: stampedRecord(m)}
			}
			return nil
		}
		if h := c.hash.sum(m.Key); m.Value == nil {
			delete(latest, h)
		} else {
			latest[h] = m.Offset
		}
		return nil
	}); err != nil {
		return err
	}
	for k, e := range tasks {
		if l, ok := c.shared[k]; !ok || bytes.Compare(e.value, l.value) > 0 {
			c.shared[k] = e
		}
	}
	live := len(latest)
	copied := 0
	if err := scanRange(ctx, cl, changelog, p, start, end, func(m *sarama.ConsumerMessage) error {
		if m.Value == nil || c.layout.IsShared(m.Key) {
			return nil
		}
		if off, ok := latest[c.hash.sum(m.Key)]; !ok || off != m.Offset {
			return nil // a version its key's last record replaces
		}
		part, err := rescalePartition(c.s.Type, c.layout, m.Key, c.n)
		if err != nil {
			return fmt.Errorf("store %q, %s/%d@%d: %w", c.s.Name, changelog, p, m.Offset, err)
		}
		pm := &sarama.ProducerMessage{Topic: c.target, Partition: part, Key: sarama.ByteEncoder(m.Key), Value: sarama.ByteEncoder(m.Value), Timestamp: m.Timestamp}
		if stampedRecord(m) {
			// The value's own timestamp: the copy's restore must know it.
			pm.Headers = c.stamp
		}
		c.want.add(m.Key, m.Value)
		copied++
		return c.producer.send(ctx, pm)
	}); err != nil {
		return err
	}
	if copied != live {
		return fmt.Errorf("store %q: %s/%d changed while it was copied (%d current entries on the first read, %d on the second): is every instance of the application stopped? Run the rescale again", c.s.Name, changelog, p, live, copied)
	}
	c.keys += int64(copied)
	return nil
}

// sendShared sends each task entry to every new partition: of each key,
// the one with the largest value among the old partitions'.
func (c *storeCopy) sendShared(ctx context.Context) error {
	for _, k := range sortedKeys(c.shared) {
		e := c.shared[k]
		for q := range c.n {
			pm := &sarama.ProducerMessage{Topic: c.target, Partition: q, Key: sarama.ByteEncoder(e.key), Value: sarama.ByteEncoder(e.value), Timestamp: e.ts}
			if e.stamped {
				pm.Headers = c.stamp
			}
			c.want.add(e.key, e.value)
			if err := c.producer.send(ctx, pm); err != nil {
				return err
			}
		}
	}
	return nil
}

// verify reads the copy back, partition by partition, and returns the
// digest of its records; it fails at a key of a key's entry that is not
// in the partition of its key.
func (c *storeCopy) verify(ctx context.Context, cl *cluster) (digest, error) {
	var got digest
	ps, err := cl.partitions(c.target)
	if err != nil {
		return got, err
	}
	if int32(len(ps)) != c.n {
		return got, fmt.Errorf("verifying %s: %d partitions, not %d", c.target, len(ps), c.n)
	}
	for _, q := range ps {
		start, end, err := cl.offsets(c.target, q)
		if err != nil {
			return got, err
		}
		if err := scanRange(ctx, cl, c.target, q, start, end, func(m *sarama.ConsumerMessage) error {
			if !c.layout.IsShared(m.Key) {
				// A task entry is in every partition, and counted in each.
				if part, err := rescalePartition(c.s.Type, c.layout, m.Key, c.n); err != nil || part != q {
					return fmt.Errorf("verifying %s: a key of %s/%d belongs in partition %d (%v)", c.target, c.target, q, part, err)
				}
			}
			got.add(m.Key, m.Value)
			return nil
		}); err != nil {
			return got, err
		}
	}
	return got, nil
}

// recreateTimeout bounds the wait for a deleted topic to be created again
// (Kafka deletes a topic asynchronously).
const recreateTimeout = time.Minute

// createCopyChangelog creates target, the changelog of a store's copy,
// with n partitions and configs, and waits until every partition has a
// leader. A target that exists already is what a rescale stopped before
// its end left (rescaleCmd found no descriptor of the new id, and no
// offsets but the ones of the same rescale): it is deleted and created
// again.
func createCopyChangelog(cl *cluster, target string, n int32, configs map[string]*string, out io.Writer) error {
	detail := &sarama.TopicDetail{NumPartitions: n, ReplicationFactor: -1, ConfigEntries: configs}
	md, err := cl.admin.DescribeTopics([]string{target})
	if err != nil {
		return fmt.Errorf("describing %s: %w", target, err)
	}
	exists := len(md) == 1 && md[0].Err == sarama.ErrNoError
	if exists {
		fmt.Fprintf(out, "  %s exists: a partial copy of an interrupted rescale, deleted and written again\n", target)
		if err := cl.admin.DeleteTopic(target); err != nil && !errors.Is(err, sarama.ErrUnknownTopicOrPartition) {
			return fmt.Errorf("deleting %s, the partial copy of an interrupted rescale: %w", target, err)
		}
	}
	deadline := time.Now().Add(recreateTimeout)
	for {
		err := cl.admin.CreateTopic(target, detail, false)
		if err == nil {
			break
		}
		// While Kafka deletes it, the topic still exists ("marked for
		// deletion").
		deleting := exists || strings.Contains(err.Error(), "marked for deletion")
		if !errors.Is(err, sarama.ErrTopicAlreadyExists) || !deleting || time.Now().After(deadline) {
			return fmt.Errorf("creating %s: %w", target, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	// A partition the metadata shows may not be served by its leader yet
	// (NOT_LEADER_OR_FOLLOWER): wait until each one answers for its end
	// offset.
	for {
		err := servesPartitions(cl, target, n)
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("creating %s: %w", target, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// servesPartitions returns nil once the metadata shows n partitions of
// topic and each one's leader answers for its end offset.
func servesPartitions(cl *cluster, topic string, n int32) error {
	ps, err := cl.partitions(topic)
	if err != nil {
		return err
	}
	if int32(len(ps)) != n {
		return fmt.Errorf("the metadata shows %d partitions, not %d", len(ps), n)
	}
	for _, p := range ps {
		if _, err := cl.client.GetOffset(topic, p, sarama.OffsetNewest); err != nil {
			return fmt.Errorf("partition %d: %w", p, err)
		}
	}
	return nil
}
