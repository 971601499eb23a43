package integration

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/weirstream/weir/internal/repair"
	"github.com/weirstream/weir/txn"
	"github.com/weirstream/weir/weirtest/kafka"
)

// TestFindDanglingOnKafka runs repair.FindDangling, the check every
// exactly-once thread makes after initialising its producer, against the
// real broker, over a topic and the group offsets' topic: after a commit
// and after an abort the partitions hold no open transaction of the
// producer id, and while a transaction is open the check says it is
// misplaced rather than calling the open records dangling. It also runs
// repair.CommitOver, which ends records a lost commit marker left open: it
// refuses while a transaction is open, and otherwise commits a
// transaction of the id over the partitions and the group's offsets that
// writes one marker per partition and no record, after which the
// producer goes on. (Records that Kafka left without their marker, what
// both exist for, are pinned by unit tests: the broker cannot be made to
// drop a marker on purpose.)
func TestFindDanglingOnKafka(t *testing.T) {
	t.Parallel()
	c := kafka.Cluster(t)
	topic := c.Name(t, "dangling")
	c.CreateTopic(t, topic, 2, nil)
	id := c.Name(t, "dangling-txn")
	client := txnClient(t, c, id)
	p, err := sarama.NewAsyncProducerFromClient(client)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	acked := make(chan struct{}, 16)
	go func() {
		for range p.Successes() {
			acked <- struct{}{}
		}
	}()
	go func() {
		for e := range p.Errors() {
			t.Errorf("produce: %v", e.Err)
		}
	}()
	admin := c.Admin(t)
	offsetParts, err := client.Partitions("__consumer_offsets")
	if err != nil {
		t.Fatal(err)
	}
	// The group's offsets go into the transactions too, as weir's do.
	topics := map[string][]int32{topic: {0, 1}, "__consumer_offsets": offsetParts}
	group := c.Name(t, "dangling-group")
	next := int64(0)
	send := func() {
		t.Helper()
		if err := p.BeginTxn(); err != nil {
			t.Fatal(err)
		}
		for part := range int32(2) {
			p.Input() <- &sarama.ProducerMessage{Topic: topic, Partition: part, Value: sarama.StringEncoder("v")}
		}
		next++
		if err := p.AddOffsetsToTxn(map[string][]*sarama.PartitionOffsetMetadata{topic: {{Partition: 0, Offset: next}}}, group); err != nil {
			t.Fatal(err)
		}
		// Both records written: the partitions hold the open transaction.
		for range 2 {
			select {
			case <-acked:
			case <-time.After(30 * time.Second):
				t.Fatal("records not acknowledged within 30 s")
			}
		}
	}

	// The coordinator writes a transaction's markers after EndTxn returns
	// (PrepareCommit, then CompleteCommit); a new producer's
	// InitProducerId, after which weir checks, waits for them.
	clean := func(after string) {
		t.Helper()
		kafka.Eventually(t, 30*time.Second, 50*time.Millisecond, func() (bool, string) {
			err := repair.FindDangling(admin, id, topics)
			var de *repair.DanglingError
			if errors.As(err, &de) {
				t.Fatalf("after %s: %v", after, err)
			}
			return err == nil, fmt.Sprintf("after %s: %v", after, err)
		})
	}
	send()
	if err := p.CommitTxn(); err != nil {
		t.Fatal(err)
	}
	clean("a commit")
	send()
	if err := p.AbortTxn(); err != nil {
		t.Fatal(err)
	}
	clean("an abort")
	send()
	err = repair.FindDangling(admin, id, topics)
	var de *repair.DanglingError
	if !errors.Is(err, repair.ErrTxnInProgress) || errors.As(err, &de) || !strings.Contains(err.Error(), "Ongoing") {
		t.Fatalf("with a transaction open: %v, want the check to refuse, naming the open transaction", err)
	}
	// repair.CommitOver, what ends records a lost commit marker left open,
	// refuses to commit over a transaction in progress.
	groupPart := []repair.DanglingPartition{{Topic: topic, Partition: 0}, {Topic: topic, Partition: 1}, {Topic: repair.OffsetsTopic}}
	if err := repair.CommitOver(t.Context(), client, admin, id, group, groupPart); !errors.Is(err, repair.ErrTxnInProgress) {
		t.Fatalf("CommitOver with a transaction open = %v, want ErrTxnInProgress", err)
	}
	if err := p.AbortTxn(); err != nil {
		t.Fatal(err)
	}
	clean("the second abort")

	// With no transaction open, CommitOver runs one of the id's producer
	// id and epoch over both partitions and the group's offsets partition,
	// writing no record: each partition gets one commit marker, the
	// coordinator completes a commit, and nothing is left open.
	before := kafka.EndOffsets(t, c, topic)
	if err := repair.CommitOver(t.Context(), client, admin, id, group, groupPart); err != nil {
		t.Fatalf("CommitOver: %v", err)
	}
	clean("CommitOver")
	after := kafka.EndOffsets(t, c, topic)
	for part := range int32(2) {
		if after[part] != before[part]+1 {
			t.Errorf("partition %d: end offset %d after CommitOver, %d before; want one marker more", part, after[part], before[part])
		}
	}
	last, err := repair.DescribeLast(admin, id)
	if err != nil || last.State != "CompleteCommit" {
		t.Fatalf("after CommitOver the id's last transaction is %+v (%v), want CompleteCommit", last, err)
	}
	// The producer goes on as before.
	send()
	if err := p.CommitTxn(); err != nil {
		t.Fatalf("a commit after CommitOver: %v", err)
	}
	clean("a commit after CommitOver")
}

// TestEnsureCommittedEndsTheCommitsOpenRecords runs repair.EnsureCommitted,
// the check every exactly-once thread makes after each commit, against the
// real broker. A transaction writes partition 0 and commits; in it, the
// coordinator never hears of partitions 1 and 2, written with the
// transaction's producer id and epoch (missedRecord), so that its commit
// marker reaches neither: the state Kafka's coordinator leaves behind when
// it completes a transaction without the marker of a partition it cannot
// find. The commit wrote partition 1 (the caller says so); the check
// ends that record with a commit, after which read_committed readers see
// it. Partition 2 is not among what the commit wrote as far as the caller
// knows: the check does not touch it, rather than decide a record whose
// transaction it cannot tell. Not parallel, for missedRecord.
func TestEnsureCommittedEndsTheCommitsOpenRecords(t *testing.T) {
	c := kafka.Cluster(t)
	topic := c.Name(t, "ensure")
	c.CreateTopic(t, topic, 3, nil)
	id := c.Name(t, "ensure-txn")
	client := txnClient(t, c, id)
	p, err := txn.New(client)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	admin := c.Admin(t)
	ctx := t.Context()

	if err := p.Send(&sarama.ProducerMessage{Topic: topic, Partition: 0, Value: sarama.StringEncoder("v0")}); err != nil {
		t.Fatal(err)
	}
	if err := p.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	last, err := repair.DescribeLast(admin, id)
	if err != nil || last.State != "Ongoing" {
		t.Fatalf("the open transaction described as %+v, %v", last, err)
	}
	missedRecord(t, client, admin, id, last.ProducerID, last.ProducerEpoch, topic, 1, "k1", "committed")
	missedRecord(t, client, admin, id, last.ProducerID, last.ProducerEpoch, topic, 2, "k2", "unknown")
	if err := p.Commit(ctx, nil, nil); err != nil {
		t.Fatal(err)
	}
	written := p.LastCommitted()
	if _, ok := written[txn.Partition{Topic: topic, Partition: 0}]; !ok || len(written) != 1 {
		t.Fatalf("LastCommitted = %v, want partition 0 of %s", written, topic)
	}
	written[txn.Partition{Topic: topic, Partition: 1}] = 0
	kafka.Eventually(t, 30*time.Second, 50*time.Millisecond, func() (bool, string) {
		open, err := repair.OpenTransactions(admin, map[string][]int32{topic: {1, 2}})
		return err == nil && len(open[topic][1]) == 1 && len(open[topic][2]) == 1,
			fmt.Sprintf("partitions 1 and 2 should hold the records open: %v, %v", open, err)
	})

	// A call may end records and then find the markers of its own
	// commit still being written: what each call ended adds up.
	var ended []repair.DanglingPartition
	ensure := func() {
		t.Helper()
		kafka.Eventually(t, 30*time.Second, 20*time.Millisecond, func() (bool, string) {
			var more []repair.DanglingPartition
			more, err = repair.EnsureCommitted(ctx, client, admin, id, "", written, nil)
			ended = append(ended, more...)
			return !errors.Is(err, repair.ErrTxnInProgress), fmt.Sprintf("the commit's markers still being written: %v", err)
		})
	}
	ensure()
	if err != nil {
		t.Fatalf("EnsureCommitted = %v", err)
	}
	if len(ended) != 1 || ended[0].Partition != 1 {
		t.Fatalf("ended %v, want partition 1 of %s", ended, topic)
	}
	if got := readCommittedValue(t, c, topic, 1); got != "committed" {
		t.Fatalf("partition 1 read committed: %q, want the record the commit marker ended", got)
	}
	open, err := repair.OpenTransactions(admin, map[string][]int32{topic: {2}})
	if err != nil || len(open[topic][2]) != 1 {
		t.Fatalf("partition 2 should still hold its record open: %v, %v", open, err)
	}
	// Told that the commit wrote it, the check ends it too.
	written[txn.Partition{Topic: topic, Partition: 2}] = 0
	ended = nil
	ensure()
	if err != nil || len(ended) != 1 || ended[0].Partition != 2 {
		t.Fatalf("ending partition 2: %v, %v", ended, err)
	}
	if got := readCommittedValue(t, c, topic, 2); got != "unknown" {
		t.Fatalf("partition 2 read committed: %q", got)
	}
	// The producer goes on: its next transaction commits.
	if err := p.Send(&sarama.ProducerMessage{Topic: topic, Partition: 1, Value: sarama.StringEncoder("after")}); err != nil {
		t.Fatal(err)
	}
	if err := p.Commit(ctx, nil, nil); err != nil {
		t.Fatalf("the next transaction: %v", err)
	}
}

// readCommittedValue returns the value of the first record of
// topic/partition a read_committed consumer sees, waiting up to 30 s.
func readCommittedValue(t *testing.T, c *kafka.Env, topic string, partition int32) string {
	t.Helper()
	cfg := c.SaramaConfig()
	cfg.Consumer.IsolationLevel = sarama.ReadCommitted
	cons, err := sarama.NewConsumer(c.Brokers, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	pc, err := cons.ConsumePartition(topic, partition, sarama.OffsetOldest)
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	select {
	case m := <-pc.Messages():
		return string(m.Value)
	case <-time.After(30 * time.Second):
		t.Fatalf("%s/%d: no record read committed within 30 s", topic, partition)
	}
	return ""
}

// txnClient returns a client for a transactional producer of id that
// writes to the partitions its records name, closed when the test ends.
func txnClient(t *testing.T, c *kafka.Env, id string) sarama.Client {
	t.Helper()
	cfg := c.SaramaConfig()
	txn.ConfigureProducer(cfg, id)
	cfg.Producer.Partitioner = sarama.NewManualPartitioner
	client, err := sarama.NewClient(c.Brokers, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	return client
}
