package integration

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/weirstream/weir/txn"
	"github.com/weirstream/weir/weirtest/kafka"
)

// TestFindDanglingOnKafka runs txn.FindDangling, the check every
// exactly-once thread makes after initialising its producer, against the
// real broker, over a topic and the group offsets' topic: after a commit
// and after an abort the partitions hold no open transaction of the
// producer id, and while a transaction is open the check says it is
// misplaced rather than calling the open records dangling. It also runs
// txn.CommitOver, which ends records a lost commit marker left open: it
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
	cfg := c.SaramaConfig()
	txn.ConfigureProducer(cfg, id)
	cfg.Producer.Partitioner = sarama.NewManualPartitioner
	client, err := sarama.NewClient(c.Brokers, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
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
			err := txn.FindDangling(admin, id, topics)
			var de *txn.DanglingError
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
	err = txn.FindDangling(admin, id, topics)
	var de *txn.DanglingError
	if !errors.Is(err, txn.ErrTxnInProgress) || errors.As(err, &de) || !strings.Contains(err.Error(), "Ongoing") {
		t.Fatalf("with a transaction open: %v, want the check to refuse, naming the open transaction", err)
	}
	// txn.CommitOver, what ends records a lost commit marker left open,
	// refuses to commit over a transaction in progress.
	groupPart := []txn.DanglingPartition{{Topic: topic, Partition: 0}, {Topic: topic, Partition: 1}, {Topic: txn.OffsetsTopic}}
	if err := txn.CommitOver(t.Context(), client, admin, id, group, groupPart); !errors.Is(err, txn.ErrTxnInProgress) {
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
	if err := txn.CommitOver(t.Context(), client, admin, id, group, groupPart); err != nil {
		t.Fatalf("CommitOver: %v", err)
	}
	clean("CommitOver")
	after := kafka.EndOffsets(t, c, topic)
	for part := range int32(2) {
		if after[part] != before[part]+1 {
			t.Errorf("partition %d: end offset %d after CommitOver, %d before; want one marker more", part, after[part], before[part])
		}
	}
	last, err := txn.DescribeLast(admin, id)
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
