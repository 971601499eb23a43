package integration

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/weirtest/kafka"
)

// TestPendingOffsetCommitIsNamed: a transaction of another producer holds
// a transactional offset commit of the application's group open (as one
// whose marker a broker lost does). Every group session of a
// read_committed member then ends with UNSTABLE_OFFSET_COMMIT; weir must
// say so, naming the open transaction (its producer id, its start
// offset on the group's offsets partition) and the command that ends it,
// rather than rebalance in silence. Once the transaction ends, the
// instance processes its input.
func TestPendingOffsetCommitIsNamed(t *testing.T) {
	t.Parallel()
	c := kafka.Cluster(t)
	in, out, app := c.Name(t, "in"), c.Name(t, "out"), c.Name(t, "app")
	c.CreateTopic(t, in, 1, nil)
	c.CreateTopic(t, out, 1, nil)
	kafka.Produce(t, c, &sarama.ProducerMessage{Topic: in, Key: sarama.StringEncoder("k"), Value: sarama.StringEncoder("v")})

	// The holder: a transaction with an offset commit of the group, left
	// open (its timeout is long).
	holderID := c.Name(t, "holder")
	cfg := sarama.NewConfig()
	cfg.Version = sarama.V4_0_0_0
	cfg.Producer.Idempotent = true
	cfg.Producer.RequiredAcks = sarama.WaitForAll
	cfg.Net.MaxOpenRequests = 1
	cfg.Producer.Return.Successes = true
	cfg.Producer.Transaction.ID = holderID
	cfg.Producer.Transaction.Timeout = 2 * time.Minute
	cfg.Producer.Partitioner = sarama.NewManualPartitioner
	cl, err := sarama.NewClient(c.Brokers, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	holder, err := sarama.NewSyncProducerFromClient(cl)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	if err := holder.BeginTxn(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := holder.SendMessage(&sarama.ProducerMessage{Topic: out, Partition: 0, Value: sarama.StringEncoder("held")}); err != nil {
		t.Fatal(err)
	}
	admin := c.Admin(t)
	st, err := admin.(sarama.TransactionClusterAdmin).DescribeTransactions([]string{holderID})
	if err != nil || st[holderID].TransactionState != "Ongoing" {
		t.Fatalf("the holder's transaction: %+v, %v", st[holderID], err)
	}
	pid, epoch := st[holderID].ProducerID, st[holderID].ProducerEpoch
	tc, err := cl.TransactionCoordinator(holderID)
	if err != nil {
		t.Fatal(err)
	}
	if r, err := tc.AddOffsetsToTxn(&sarama.AddOffsetsToTxnRequest{Version: 3, TransactionalID: holderID, ProducerID: pid, ProducerEpoch: epoch, GroupID: app}); err != nil || r.Err != sarama.ErrNoError {
		t.Fatalf("AddOffsetsToTxn: %v, %v", r, err)
	}
	gc, err := cl.Coordinator(app)
	if err != nil {
		t.Fatal(err)
	}
	r, err := gc.TxnOffsetCommit(&sarama.TxnOffsetCommitRequest{Version: 3, TransactionalID: holderID, GroupID: app, ProducerID: pid, ProducerEpoch: epoch,
		GenerationID: -1, Topics: map[string][]*sarama.PartitionOffsetMetadata{in: {{Partition: 0, Offset: 0}}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, ps := range r.Topics {
		for _, p := range ps {
			if p.Err != sarama.ErrNoError {
				t.Fatalf("TxnOffsetCommit: %v", p.Err)
			}
		}
	}

	var mu sync.Mutex
	var logs bytes.Buffer
	wcfg := baseConfig(c, app, t)
	wcfg.Guarantee = weir.ExactlyOnce
	wcfg.Logger = slog.New(slog.NewTextHandler(lockedWriter{&mu, &logs}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	inst := start(t, passthrough(in, out), wcfg)
	want := fmt.Sprintf("producer id %d epoch %d from offset", pid, epoch)
	var warning string
	kafka.Eventually(t, 2*time.Minute, 200*time.Millisecond, func() (bool, string) {
		mu.Lock()
		defer mu.Unlock()
		for _, line := range strings.Split(logs.String(), "\n") {
			if strings.Contains(line, "held by an open transaction") && strings.Contains(line, want) && strings.Contains(line, "kafka-transactions.sh") {
				warning = line
				return true, ""
			}
		}
		return false, "no warning naming " + want + "; weir logged:\n" + lastWarnings(logs.String(), 6)
	})
	t.Logf("weir said: %s", warning)
	if n := len(inst.app.Tasks()); n != 0 {
		t.Errorf("the instance runs %d tasks while the group's offsets are held", n)
	}

	// The transaction ends: the instance takes its task and copies its
	// input.
	if err := holder.AbortTxn(); err != nil {
		t.Fatal(err)
	}
	kafka.Eventually(t, 2*time.Minute, 200*time.Millisecond, func() (bool, string) {
		return len(inst.app.Tasks()) == 1, "the instance does not run its task after the transaction ended"
	})
	got := 0
	kafka.ReadAll(t, c, out, sarama.ReadCommitted, func(recs []*sarama.ConsumerMessage) bool {
		got = len(recs)
		return got >= 1
	})
	if got != 1 {
		t.Errorf("read %d committed output records, want the one input record (the holder's record was aborted)", got)
	}
}
