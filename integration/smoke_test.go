package integration

// Smoke tests of the test cluster itself: each checks one broker or registry
// behaviour that weir relies on, and fails if the stack does not provide it.

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/riferrei/srclient"

	"github.com/weirstream/weir/weirtest/kafka"
)

func TestMain(m *testing.M) {
	switch {
	case os.Getenv(childEnv) != "":
		os.Exit(runChild())
	case os.Getenv(eosChildEnv) != "":
		os.Exit(runEOSChild())
	case os.Getenv(dslChildEnv) != "":
		os.Exit(runDSLChild())
	case os.Getenv(standbyChildEnv) != "":
		os.Exit(runStandbyChild())
	case os.Getenv(consoleChildEnv) != "":
		os.Exit(runConsoleChild())
	}
	kafka.Main(m)
}

// newTxnProducer returns a transactional sync producer with the settings
// weir uses, closed when the test ends. It is closed in exactly
// one place: sarama panics in a background goroutine on a second Close.
func newTxnProducer(t *testing.T, c *kafka.Env, txnID string) sarama.SyncProducer {
	t.Helper()
	cfg := c.SaramaConfig()
	cfg.Producer.Idempotent = true
	cfg.Producer.RequiredAcks = sarama.WaitForAll
	cfg.Net.MaxOpenRequests = 1
	cfg.Producer.Transaction.ID = txnID
	// A test that dies inside a transaction leaves it open; a short timeout
	// lets the broker abort it soon instead of after sarama's default 1 min.
	cfg.Producer.Transaction.Timeout = 15 * time.Second
	p, err := sarama.NewSyncProducer(c.Brokers, cfg)
	if err != nil {
		t.Fatalf("transactional producer %q: %v", txnID, err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// keyed builds n records for topic with keys prefix-00, prefix-01, ... and
// values val-00, val-01, ...
func keyed(topic, prefix, val string, n int) []*sarama.ProducerMessage {
	msgs := make([]*sarama.ProducerMessage, n)
	for i := range msgs {
		msgs[i] = &sarama.ProducerMessage{
			Topic: topic,
			Key:   sarama.StringEncoder(fmt.Sprintf("%s-%02d", prefix, i)),
			Value: sarama.StringEncoder(fmt.Sprintf("%s-%02d", val, i)),
		}
	}
	return msgs
}

// sawKey returns an until function for kafka.ReadAll that stops at the
// first record with the given key.
func sawKey(key string) func([]*sarama.ConsumerMessage) bool {
	return func(got []*sarama.ConsumerMessage) bool {
		return len(got) > 0 && string(got[len(got)-1].Key) == key
	}
}

// copyHandler is a consume→produce loop in the shape of a weir stream
// thread: for each claimed input partition it reads up to the partition's
// end offset, then, in one transaction, writes every record upper-cased to
// the output topic and commits the input offsets with the group's metadata.
type copyHandler struct {
	in, out, group string
	ends           map[int32]int64 // input end offsets, read-only
	producer       sarama.SyncProducer

	// mu serialises transactions on the shared producer (claims run in
	// their own goroutines) and guards the fields below.
	mu         sync.Mutex
	committed  map[int32]bool
	generation int32
	memberID   string
	err        error
}

func (h *copyHandler) Setup(sarama.ConsumerGroupSession) error   { return nil }
func (h *copyHandler) Cleanup(sarama.ConsumerGroupSession) error { return nil }

func (h *copyHandler) ConsumeClaim(sess sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	end := h.ends[claim.Partition()]
	var batch []*sarama.ConsumerMessage
	for end > 0 {
		select {
		case m, ok := <-claim.Messages():
			if !ok {
				return nil
			}
			batch = append(batch, m)
			if m.Offset+1 >= end {
				h.commit(sess, claim.Partition(), batch)
				end = 0
			}
		case <-sess.Context().Done():
			return nil
		}
	}
	// Returning would end the session for every claim; hold the claim
	// until the test cancels the session.
	<-sess.Context().Done()
	return nil
}

// commit runs one transaction: outputs, then input offsets, then commit.
func (h *copyHandler) commit(sess sarama.ConsumerGroupSession, partition int32, batch []*sarama.ConsumerMessage) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.txn(sess, partition, batch); err != nil {
		h.err = errors.Join(h.err, err)
		if abortErr := h.producer.AbortTxn(); abortErr != nil {
			h.err = errors.Join(h.err, fmt.Errorf("abort: %w", abortErr))
		}
		return
	}
	h.committed[partition] = true
	h.generation, h.memberID = sess.GenerationID(), sess.MemberID()
}

func (h *copyHandler) txn(sess sarama.ConsumerGroupSession, partition int32, batch []*sarama.ConsumerMessage) error {
	if err := h.producer.BeginTxn(); err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	out := make([]*sarama.ProducerMessage, len(batch))
	for i, m := range batch {
		out[i] = &sarama.ProducerMessage{
			Topic: h.out,
			Key:   sarama.ByteEncoder(m.Key),
			Value: sarama.StringEncoder(strings.ToUpper(string(m.Value))),
		}
	}
	if err := h.producer.SendMessages(out); err != nil {
		return fmt.Errorf("send %d records: %w", len(out), err)
	}
	offsets := map[string][]*sarama.PartitionOffsetMetadata{
		h.in: {{Partition: partition, Offset: batch[len(batch)-1].Offset + 1, LeaderEpoch: -1}},
	}
	// KIP-447: the offsets carry the member id and generation, so that the
	// group coordinator fences a zombie from an older generation.
	meta := sarama.NewConsumerGroupMetadataFromSession(sess, h.group, nil)
	if err := h.producer.AddOffsetsToTxnWithGroupMetadata(offsets, meta); err != nil {
		return fmt.Errorf("add offsets: %w", err)
	}
	if err := h.producer.CommitTxn(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// A consume→transform→produce loop commits its output records and its input
// offsets atomically: the output is visible to read_committed readers
// exactly once, and the group's committed offsets are the consumed ends.
func TestTransactionCommitsRecordsAndOffsets(t *testing.T) {
	c := kafka.Cluster(t)
	t.Parallel()
	in, out := c.Name(t, "in"), c.Name(t, "out")
	group := c.Name(t, "group")
	const partitions, n = 2, 40
	c.CreateTopic(t, in, partitions, nil)
	c.CreateTopic(t, out, partitions, nil)

	input := keyed(in, "k", "v", n)
	kafka.Produce(t, c, input...)
	ends := kafka.EndOffsets(t, c, in)
	for p, end := range ends {
		if end == 0 {
			// murmur2 spreads 40 keys over both partitions; an empty one
			// would leave that partition's transaction untested.
			t.Fatalf("input partition %d is empty (ends %v)", p, ends)
		}
	}

	h := &copyHandler{
		in: in, out: out, group: group, ends: ends,
		producer:  newTxnProducer(t, c, c.Name(t, "txn")),
		committed: map[int32]bool{},
	}
	cfg := c.SaramaConfig()
	cfg.Consumer.IsolationLevel = sarama.ReadCommitted
	cfg.Consumer.Offsets.Initial = sarama.OffsetOldest
	cfg.Consumer.Offsets.AutoCommit.Enable = false
	g, err := sarama.NewConsumerGroup(c.Brokers, group, cfg)
	if err != nil {
		t.Fatalf("consumer group: %v", err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	loopDone := make(chan error, 1)
	go func() {
		for {
			// An eager rebalance ends Consume with nil; join again.
			err := g.Consume(ctx, []string{in}, h)
			if ctx.Err() != nil {
				loopDone <- nil
				return
			}
			if err != nil {
				loopDone <- err
				return
			}
		}
	}()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		kafka.Eventually(t, 30*time.Second, 10*time.Millisecond, func() (bool, string) {
			select {
			case err := <-loopDone:
				if err != nil {
					t.Errorf("consume loop: %v", err)
				}
				return true, ""
			default:
				return false, "the consume loop did not return after cancel"
			}
		})
		if err := g.Close(); err != nil {
			t.Errorf("close consumer group: %v", err)
		}
	}
	t.Cleanup(stop)

	kafka.Eventually(t, 30*time.Second, 20*time.Millisecond, func() (bool, string) {
		h.mu.Lock()
		defer h.mu.Unlock()
		if h.err != nil {
			t.Fatalf("transaction failed: %v", h.err)
		}
		select {
		case err := <-loopDone:
			t.Fatalf("consume loop ended early: %v", err)
		default:
		}
		return len(h.committed) == partitions, fmt.Sprintf("committed partitions %v of %d", h.committed, partitions)
	})
	stop()
	h.mu.Lock()
	generation, member := h.generation, h.memberID
	h.mu.Unlock()
	if generation < 1 || member == "" {
		t.Errorf("offsets were committed without group metadata: generation %d, member %q", generation, member)
	}

	// The output, read_committed, holds every input record exactly once,
	// transformed, on the partition its input came from (same key, same
	// partitioner, same partition count).
	got := kafka.ReadAll(t, c, out, sarama.ReadCommitted, func(got []*sarama.ConsumerMessage) bool { return len(got) >= n })
	want := map[string]string{}
	inPartition := map[string]int32{}
	for _, m := range input {
		k, _ := m.Key.Encode()
		v, _ := m.Value.Encode()
		want[string(k)] = strings.ToUpper(string(v))
		inPartition[string(k)] = m.Partition
	}
	seen := map[string]string{}
	for _, m := range got {
		k := string(m.Key)
		if prev, dup := seen[k]; dup {
			t.Errorf("key %q read twice (values %q and %q)", k, prev, m.Value)
		}
		seen[k] = string(m.Value)
		if m.Partition != inPartition[k] {
			t.Errorf("key %q: output partition %d, input partition %d", k, m.Partition, inPartition[k])
		}
	}
	if !maps.Equal(seen, want) {
		t.Errorf("read_committed output:\n got %v\nwant %v", seen, want)
	}
	// Each output partition holds its records plus exactly one commit
	// marker: one transaction per input partition, nothing else written.
	outEnds := kafka.EndOffsets(t, c, out)
	for p, end := range ends {
		if outEnds[p] != end+1 {
			t.Errorf("output partition %d ends at %d, want %d records + 1 commit marker = %d", p, outEnds[p], end, end+1)
		}
	}

	// The input offsets were committed in the same transactions. Offsets
	// become readable once the coordinator has written the commit markers,
	// which happens after CommitTxn returns: poll.
	admin := c.Admin(t)
	kafka.Eventually(t, 15*time.Second, 50*time.Millisecond, func() (bool, string) {
		res, err := admin.ListConsumerGroupOffsets(group, map[string][]int32{in: slices.Sorted(maps.Keys(ends))})
		if err != nil {
			return false, fmt.Sprintf("list group offsets: %v", err)
		}
		committed := map[int32]int64{}
		for p := range ends {
			b := res.GetBlock(in, p)
			if b == nil {
				return false, fmt.Sprintf("no offset block for %s/%d", in, p)
			}
			if b.Err != sarama.ErrNoError {
				return false, fmt.Sprintf("offset of %s/%d: %v", in, p, b.Err)
			}
			committed[p] = b.Offset
		}
		return maps.Equal(committed, ends), fmt.Sprintf("committed offsets %v, want the input end offsets %v", committed, ends)
	})
}

// Records of an aborted transaction are never delivered to read_committed
// readers, while read_uncommitted readers see them: the broker really
// isolates transactions.
func TestAbortedTransactionInvisibleToReadCommitted(t *testing.T) {
	c := kafka.Cluster(t)
	t.Parallel()
	topic := c.Name(t, "txn-isolation")
	c.CreateTopic(t, topic, 1, nil)
	p := newTxnProducer(t, c, c.Name(t, "txn"))
	const aborted, committed = 5, 7

	if err := p.BeginTxn(); err != nil {
		t.Fatalf("begin: %v", err)
	}
	if err := p.SendMessages(keyed(topic, "aborted", "a", aborted)); err != nil {
		t.Fatalf("send in the aborted transaction: %v", err)
	}
	if err := p.AbortTxn(); err != nil {
		t.Fatalf("abort: %v", err)
	}
	if err := p.BeginTxn(); err != nil {
		t.Fatalf("begin: %v", err)
	}
	if err := p.SendMessages(keyed(topic, "committed", "c", committed)); err != nil {
		t.Fatalf("send in the committed transaction: %v", err)
	}
	if err := p.CommitTxn(); err != nil {
		t.Fatalf("commit: %v", err)
	}

	// One partition is read in offset order and the committed transaction
	// came last, so once its last record is read everything is.
	last := fmt.Sprintf("committed-%02d", committed-1)
	keys := func(ms []*sarama.ConsumerMessage) []string {
		out := make([]string, len(ms))
		for i, m := range ms {
			out[i] = string(m.Key)
		}
		return out
	}
	var wantCommitted, wantAll []string
	for i := range aborted {
		wantAll = append(wantAll, fmt.Sprintf("aborted-%02d", i))
	}
	for i := range committed {
		wantCommitted = append(wantCommitted, fmt.Sprintf("committed-%02d", i))
	}
	wantAll = append(wantAll, wantCommitted...)

	if got := keys(kafka.ReadAll(t, c, topic, sarama.ReadCommitted, sawKey(last))); !slices.Equal(got, wantCommitted) {
		t.Errorf("read_committed read %d records %v, want the %d committed %v", len(got), got, committed, wantCommitted)
	}
	if got := keys(kafka.ReadAll(t, c, topic, sarama.ReadUncommitted, sawKey(last))); !slices.Equal(got, wantAll) {
		t.Errorf("read_uncommitted read %d records %v, want all %d %v", len(got), got, aborted+committed, wantAll)
	}
	// The log holds both transactions' records and their two markers.
	if end, want := kafka.EndOffsets(t, c, topic)[0], int64(aborted+committed+2); end != want {
		t.Errorf("end offset %d, want %d (%d aborted + %d committed records + 2 markers)", end, want, aborted, committed)
	}
}

// The log cleaner compacts a topic within seconds: overwritten records
// disappear and the latest value of every key stays, at its offset.
func TestCompactionRuns(t *testing.T) {
	c := kafka.Cluster(t)
	t.Parallel()
	topic := c.Name(t, "compacted")
	// Kafka 4 rejects segment.bytes below 1 MiB (KIP-1030), so segments
	// roll by time: segment.ms is accepted down to 1 ms, and a segment
	// rolls at the first append after it.
	c.CreateTopic(t, topic, 1, map[string]string{
		"cleanup.policy":            "compact",
		"segment.ms":                "100",
		"min.cleanable.dirty.ratio": "0.01",
		"delete.retention.ms":       "100",
		"min.compaction.lag.ms":     "0",
	})

	const keys, updates = 5, 40
	var msgs []*sarama.ProducerMessage
	for u := range updates {
		for k := range keys {
			msgs = append(msgs, &sarama.ProducerMessage{
				Topic: topic,
				Key:   sarama.StringEncoder(fmt.Sprintf("key-%d", k)),
				Value: sarama.StringEncoder(fmt.Sprintf("update-%02d", u)),
			})
		}
	}
	kafka.Produce(t, c, msgs...)
	// SendMessages fills in each record's offset: remember the last one
	// per key, where compaction must keep it.
	latest := map[string]int64{}
	for _, m := range msgs {
		k, _ := m.Key.Encode()
		latest[string(k)] = m.Offset
	}
	produced := len(msgs)

	// Keep appending a filler record: each one rolls the segment once
	// segment.ms has passed, making the updates cleanable.
	fillers := 0
	var left []*sarama.ConsumerMessage
	kafka.Eventually(t, 60*time.Second, 300*time.Millisecond, func() (bool, string) {
		fillers++
		kafka.Produce(t, c, &sarama.ProducerMessage{
			Topic: topic, Key: sarama.StringEncoder("filler"), Value: sarama.StringEncoder(fmt.Sprint(fillers)),
		})
		end := kafka.EndOffsets(t, c, topic)[0]
		// The record at end-1 is in the active segment, which the cleaner
		// never touches, so it is always there to stop at.
		all := kafka.ReadAll(t, c, topic, sarama.ReadUncommitted, func(got []*sarama.ConsumerMessage) bool {
			return len(got) > 0 && got[len(got)-1].Offset >= end-1
		})
		left = left[:0]
		perKey := map[string]int{}
		for _, m := range all {
			if k := string(m.Key); k != "filler" {
				left = append(left, m)
				perKey[k]++
			}
		}
		for k := range latest {
			if perKey[k] != 1 {
				return false, fmt.Sprintf("after %d fillers, %d of %d updates left; records per key %v", fillers, len(left), produced, perKey)
			}
		}
		return true, ""
	})
	t.Logf("compacted after %d filler records: %d of %d updates left", fillers, len(left), produced)

	if len(left) != keys || len(left) >= produced {
		t.Errorf("%d updates left of %d produced, want %d (one per key)", len(left), produced, keys)
	}
	for _, m := range left {
		k := string(m.Key)
		if want := fmt.Sprintf("update-%02d", updates-1); string(m.Value) != want {
			t.Errorf("key %q kept value %q, want the latest %q", k, m.Value, want)
		}
		if m.Offset != latest[k] {
			t.Errorf("key %q kept offset %d, want the latest write's offset %d", k, m.Offset, latest[k])
		}
	}
}

// The registry assigns stable ids, accepts a backward-compatible change and
// rejects an incompatible one with its reason.
func TestRegistryAvroCompatibility(t *testing.T) {
	c := kafka.Cluster(t)
	t.Parallel()
	client := srclient.NewSchemaRegistryClient(c.RegistryURL, srclient.WithClient(&http.Client{Timeout: 10 * time.Second}))
	subject := c.Name(t, "it") + "-value"
	t.Cleanup(func() {
		// Soft delete first: registries refuse a hard delete of a live subject.
		_ = client.DeleteSubject(subject, false)
		_ = client.DeleteSubject(subject, true)
	})

	const (
		v1 = `{"type":"record","name":"Login","namespace":"weir.it","fields":[
			{"name":"user","type":"string"}]}`
		// Adds a field with a default: readers of v2 read v1 data.
		v2 = `{"type":"record","name":"Login","namespace":"weir.it","fields":[
			{"name":"user","type":"string"},
			{"name":"ok","type":"boolean","default":true}]}`
	)
	incompatible := map[string]string{
		"field type string to int": `{"type":"record","name":"Login","namespace":"weir.it","fields":[
			{"name":"user","type":"int"},
			{"name":"ok","type":"boolean","default":true}]}`,
		"new field without default": `{"type":"record","name":"Login","namespace":"weir.it","fields":[
			{"name":"user","type":"string"},
			{"name":"ok","type":"boolean","default":true},
			{"name":"country","type":"string"}]}`,
	}

	s1, err := client.CreateSchema(subject, v1, srclient.Avro)
	if err != nil {
		t.Fatalf("register v1: %v", err)
	}
	again, err := client.CreateSchema(subject, v1, srclient.Avro)
	if err != nil {
		t.Fatalf("register v1 again: %v", err)
	}
	if again.ID() != s1.ID() {
		t.Errorf("registering the same schema twice gave ids %d and %d", s1.ID(), again.ID())
	}

	if _, err := client.ChangeSubjectCompatibilityLevel(subject, srclient.Backward); err != nil {
		t.Fatalf("set compatibility of %q to BACKWARD: %v", subject, err)
	}
	level, err := client.GetCompatibilityLevel(subject, false)
	if err != nil {
		t.Fatalf("get compatibility of %q: %v", subject, err)
	}
	if *level != srclient.Backward {
		t.Errorf("compatibility of %q is %s, want %s", subject, *level, srclient.Backward)
	}

	s2, err := client.CreateSchema(subject, v2, srclient.Avro)
	if err != nil {
		t.Fatalf("register backward-compatible v2: %v", err)
	}
	if s2.ID() == s1.ID() {
		t.Errorf("v2 got v1's id %d", s1.ID())
	}

	for name, schema := range incompatible {
		_, err := client.CreateSchema(subject, schema, srclient.Avro)
		if err == nil {
			t.Errorf("%s: registered, want rejected as incompatible", name)
			continue
		}
		t.Logf("%s: rejected: %v", name, err)
		var regErr srclient.Error
		if !errors.As(err, &regErr) {
			t.Errorf("%s: error %T %v is not the registry's answer", name, err, err)
			continue
		}
		if regErr.Code != http.StatusConflict {
			t.Errorf("%s: error code %d, want %d (incompatible schema)", name, regErr.Code, http.StatusConflict)
		}
		if !strings.Contains(strings.ToLower(regErr.Message), "incompatible") {
			t.Errorf("%s: message %q does not give an incompatibility as the reason", name, regErr.Message)
		}
	}

	versions, err := client.GetSchemaVersions(subject)
	if err != nil {
		t.Fatalf("versions of %q: %v", subject, err)
	}
	if !slices.Equal(versions, []int{1, 2}) {
		t.Errorf("versions of %q are %v, want [1 2]: a rejected schema must not be registered", subject, versions)
	}
}
