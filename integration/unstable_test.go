package integration

import (
	"bytes"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
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
	cl, holder := txnHolder(t, c, holderID, 2*time.Minute)
	admin := c.Admin(t)
	pid, epoch := beginHeld(t, holder, admin, holderID, &sarama.ProducerMessage{Topic: out, Partition: 0, Value: sarama.StringEncoder("held")})
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

// TestAbandonedOffsetCommitIsEnded: a thread of another process of the
// application committed a transaction whose offset commit never got its
// marker (as when a broker loses one), and that process is gone. Every
// session of the group then ends with UNSTABLE_OFFSET_COMMIT, and no
// producer of the transaction will ever end it. weir must end it as the
// coordinator recorded it, with a commit: the output of that transaction
// is committed, so its offsets must be too, or the group would process
// the input again and write the output twice.
//
// The broker cannot be made to lose a marker, but it can be made to miss
// one: the holder writes its offset commit (TxnOffsetCommit) without
// adding the group's offsets partition to its transaction first
// (AddOffsetsToTxn), so the coordinator, which writes markers to the
// partitions it knows, never writes one there. The broker refuses such a
// write unless transaction.partition.verification.enable is off, which
// the test sets for the holder's transaction only, as a dynamic config of
// the broker. So the test does not run in parallel: Go runs the parallel
// tests of the package after it, never beside it.
//
// The holder's transaction also left a record open on out/1 the same way
// (missedRecord): the take-over must end every partition the abandoned
// transactional id holds open, not only the one its group's sessions
// trip over, or out/1's last stable offset stays below that record for
// good and read_committed consumers of out/1 read nothing after it.
func TestAbandonedOffsetCommitIsEnded(t *testing.T) {
	c := kafka.Cluster(t)
	in, out, app := c.Name(t, "in"), c.Name(t, "out"), c.Name(t, "app")
	c.CreateTopic(t, in, 1, nil)
	c.CreateTopic(t, out, 2, nil)
	kafka.Produce(t, c, &sarama.ProducerMessage{Topic: in, Key: sarama.StringEncoder("k"), Value: sarama.StringEncoder("v1")})

	// The holder is thread 0 of a process of the application that is not
	// running: it copied v1 to "out" and committed, but its offset commit
	// (in/0 at 1) is left open.
	holderID := app + "-0123456789abcdef0123456789abcdef-0"
	cl, holder := txnHolder(t, c, holderID, 0)
	admin := c.Admin(t)
	pid, epoch := beginHeld(t, holder, admin, holderID, &sarama.ProducerMessage{Topic: out, Partition: 0, Key: sarama.StringEncoder("k"), Value: sarama.StringEncoder("v1")})
	missedOffsetCommit(t, cl, admin, holderID, pid, epoch, app, map[string][]*sarama.PartitionOffsetMetadata{in: {{Partition: 0, Offset: 1}}})
	missedRecord(t, cl, admin, holderID, pid, epoch, out, 1, "k1", "v1-side")
	if err := holder.CommitTxn(); err != nil {
		t.Fatal(err)
	}
	kafka.Eventually(t, 30*time.Second, 50*time.Millisecond, func() (bool, string) {
		st, err := admin.(sarama.TransactionClusterAdmin).DescribeTransactions([]string{holderID})
		return err == nil && st[holderID].TransactionState == "CompleteCommit", fmt.Sprintf("the holder's transaction after its commit: %+v, %v", st[holderID], err)
	})
	part := txnOffsetsPartition(t, admin, app)
	ps, err := admin.(sarama.TransactionClusterAdmin).DescribeProducers(map[string][]int32{"__consumer_offsets": {part}})
	if err != nil {
		t.Fatal(err)
	}
	held := false
	for _, ap := range ps["__consumer_offsets"][part].ActiveProducers {
		held = held || (ap.ProducerID == pid && ap.CurrentTxnStartOffset >= 0)
	}
	if !held {
		t.Fatalf("the holder's offset commit is not left open on __consumer_offsets/%d: %+v", part, ps["__consumer_offsets"][part])
	}

	var mu sync.Mutex
	var logs bytes.Buffer
	wcfg := baseConfig(c, app, t)
	wcfg.Guarantee = weir.ExactlyOnce
	wcfg.Logger = slog.New(slog.NewTextHandler(lockedWriter{&mu, &logs}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	inst := start(t, passthrough(in, out), wcfg)
	kafka.Eventually(t, 4*time.Minute, 200*time.Millisecond, func() (bool, string) {
		return len(inst.app.Tasks()) == 1, "the instance does not run its task; weir logged:\n" + func() string {
			mu.Lock()
			defer mu.Unlock()
			return lastWarnings(logs.String(), 6)
		}()
	})
	mu.Lock()
	said := strings.Contains(logs.String(), "taking its transactional id over to end them with a commit") && strings.Contains(logs.String(), holderID)
	mu.Unlock()
	if !said {
		t.Errorf("weir did not say it took %s over to commit its records", holderID)
	}
	// v1 was copied by the holder; weir copies v2, and v1 not again. The
	// holder's record on out/1, of the same committed transaction, was
	// ended with the same commit: read_committed sees it.
	kafka.Produce(t, c, &sarama.ProducerMessage{Topic: in, Key: sarama.StringEncoder("k"), Value: sarama.StringEncoder("v2")})
	var got []string
	kafka.ReadAll(t, c, out, sarama.ReadCommitted, func(recs []*sarama.ConsumerMessage) bool {
		got = got[:0]
		for _, m := range recs {
			got = append(got, fmt.Sprintf("%s@%d", m.Value, m.Partition))
		}
		slices.Sort(got)
		return len(got) >= 3
	})
	if len(got) != 3 || got[0] != "v1-side@1" || got[1] != "v1@0" || !strings.HasPrefix(got[2], "v2@") {
		t.Errorf("committed output %v, want v1 once on out/0 (the holder's), its record on out/1 (committed by the take-over), and v2 once (weir's)", got)
	}
	// The holder's producer was fenced by the takeover.
	if err := holder.BeginTxn(); err == nil {
		if _, _, err = holder.SendMessage(&sarama.ProducerMessage{Topic: out, Partition: 0, Value: sarama.StringEncoder("late")}); err == nil {
			err = holder.CommitTxn()
		}
		if err == nil {
			t.Errorf("the holder committed after weir took its transactional id over")
		}
	}
}

// txnHolder returns a client and a transactional producer of id, with
// transaction timeout timeout (sarama's default when 0), both closed when
// the test ends.
func txnHolder(t *testing.T, c *kafka.Env, id string, timeout time.Duration) (sarama.Client, sarama.SyncProducer) {
	t.Helper()
	cfg := sarama.NewConfig()
	cfg.Version = sarama.V4_0_0_0
	cfg.Producer.Idempotent = true
	cfg.Producer.RequiredAcks = sarama.WaitForAll
	cfg.Net.MaxOpenRequests = 1
	cfg.Producer.Return.Successes = true
	cfg.Producer.Transaction.ID = id
	if timeout > 0 {
		cfg.Producer.Transaction.Timeout = timeout
	}
	cfg.Producer.Partitioner = sarama.NewManualPartitioner
	cl, err := sarama.NewClient(c.Brokers, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	p, err := sarama.NewSyncProducerFromClient(cl)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return cl, p
}

// beginHeld begins a transaction of holder (transactional id id), sends
// msg in it, and returns the producer id and epoch its coordinator gives
// the transaction, which is then ongoing.
func beginHeld(t *testing.T, holder sarama.SyncProducer, admin sarama.ClusterAdmin, id string, msg *sarama.ProducerMessage) (pid int64, epoch int16) {
	t.Helper()
	if err := holder.BeginTxn(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := holder.SendMessage(msg); err != nil {
		t.Fatal(err)
	}
	st, err := admin.(sarama.TransactionClusterAdmin).DescribeTransactions([]string{id})
	if err != nil || st[id].TransactionState != "Ongoing" {
		t.Fatalf("the holder's transaction: %+v, %v", st[id], err)
	}
	return st[id].ProducerID, st[id].ProducerEpoch
}

// txnOffsetsPartition is the partition of __consumer_offsets holding
// group's offsets: abs(Java hashCode) % partitions.
func txnOffsetsPartition(t *testing.T, admin sarama.ClusterAdmin, group string) int32 {
	t.Helper()
	ds, err := admin.DescribeTopics([]string{"__consumer_offsets"})
	if err != nil || len(ds) != 1 {
		t.Fatalf("describing __consumer_offsets: %v", err)
	}
	var h int32
	for _, r := range group {
		h = 31*h + int32(r)
	}
	if h < 0 {
		h = -h
	}
	return h % int32(len(ds[0].Partitions))
}

// verification turns transaction.partition.verification.enable on or off
// on the test broker (node 1), as a dynamic config; on again when the test
// ends, whatever happened.
func verification(t *testing.T, admin sarama.ClusterAdmin, on bool) {
	t.Helper()
	op := sarama.IncrementalAlterConfigsOperationSet
	value := "false"
	if on {
		op, value = sarama.IncrementalAlterConfigsOperationDelete, ""
	} else {
		t.Cleanup(func() { verification(t, admin, true) })
	}
	err := admin.IncrementalAlterConfig(sarama.BrokerResource, "1", map[string]sarama.IncrementalAlterConfigsEntry{
		"transaction.partition.verification.enable": {Operation: op, Value: &value}}, false)
	if err != nil {
		t.Fatalf("setting transaction.partition.verification.enable=%t on the broker: %v", on, err)
	}
}

// missedOffsetCommit writes a transactional offset commit of group for
// transactional id id (producer id pid, epoch epoch) that the id's
// coordinator does not know of: no AddOffsetsToTxn comes first, so no
// marker of the id's transactions will ever reach it, as when a broker
// loses one. The broker takes it only with
// transaction.partition.verification.enable off, which it is for this
// call alone; a test calling it must not run in parallel.
func missedOffsetCommit(t *testing.T, cl sarama.Client, admin sarama.ClusterAdmin, id string, pid int64, epoch int16, group string, offsets map[string][]*sarama.PartitionOffsetMetadata) {
	t.Helper()
	gc, err := cl.Coordinator(group)
	if err != nil {
		t.Fatal(err)
	}
	verification(t, admin, false)
	defer verification(t, admin, true)
	kafka.Eventually(t, 30*time.Second, 100*time.Millisecond, func() (bool, string) {
		r, err := gc.TxnOffsetCommit(&sarama.TxnOffsetCommitRequest{Version: 3, TransactionalID: id, GroupID: group, ProducerID: pid, ProducerEpoch: epoch,
			GenerationID: -1, Topics: offsets})
		if err != nil {
			t.Fatal(err)
		}
		for _, ps := range r.Topics {
			for _, p := range ps {
				if p.Err != sarama.ErrNoError {
					return false, fmt.Sprintf("TxnOffsetCommit without AddOffsetsToTxn: %v", p.Err)
				}
			}
		}
		return true, ""
	})
}

// missedRecord writes, in the open transaction of transactional id id
// (producer id pid, epoch epoch), a record to topic/partition that the
// id's coordinator does not know of: no AddPartitionsToTxn comes first,
// so no marker of the transaction will reach it, as when a broker loses
// one. Like missedOffsetCommit it needs
// transaction.partition.verification.enable off, for this call alone,
// and the record must be the producer's first on the partition.
func missedRecord(t *testing.T, cl sarama.Client, admin sarama.ClusterAdmin, id string, pid int64, epoch int16, topic string, partition int32, key, value string) {
	t.Helper()
	leader, err := cl.Leader(topic, partition)
	if err != nil {
		t.Fatal(err)
	}
	verification(t, admin, false)
	defer verification(t, admin, true)
	now := time.Now()
	kafka.Eventually(t, 30*time.Second, 100*time.Millisecond, func() (bool, string) {
		req := &sarama.ProduceRequest{TransactionalID: &id, RequiredAcks: sarama.WaitForAll, Timeout: 10_000, Version: 7}
		req.AddBatch(topic, partition, &sarama.RecordBatch{Version: 2, IsTransactional: true, ProducerID: pid, ProducerEpoch: epoch,
			FirstSequence: 0, FirstTimestamp: now, MaxTimestamp: now,
			Records: []*sarama.Record{{Key: []byte(key), Value: []byte(value)}}})
		r, err := leader.Produce(req)
		if err != nil {
			t.Fatal(err)
		}
		if b := r.GetBlock(topic, partition); b == nil || b.Err != sarama.ErrNoError {
			return false, fmt.Sprintf("a transactional record without AddPartitionsToTxn: %+v", b)
		}
		return true, ""
	})
}

// TestOwnMissedCommitMarkerIsCommitted: a thread's own transaction
// committed, but its offset commit was left without its marker (made as
// in TestAbandonedOffsetCommitIsEnded). The thread must end it with a
// commit, as its coordinator recorded the transaction, and not with an
// abort, which would drop committed offsets: both when the group's
// sessions end on it while the thread runs (a second instance joins; the
// thread keeps a task, so its own sessions do not end), and when the
// thread's instance starts again. Not parallel, for missedOffsetCommit.
func TestOwnMissedCommitMarkerIsCommitted(t *testing.T) {
	c := kafka.Cluster(t)
	in, out, app := c.Name(t, "in"), c.Name(t, "out"), c.Name(t, "app")
	c.CreateTopic(t, in, 2, nil)
	c.CreateTopic(t, out, 2, nil)
	admin := c.Admin(t)
	ta := admin.(sarama.TransactionClusterAdmin)
	cl, err := sarama.NewClient(c.Brokers, c.SaramaConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()

	var mu sync.Mutex
	var logs bytes.Buffer
	logged := func(s string) int {
		mu.Lock()
		defer mu.Unlock()
		return strings.Count(logs.String(), s)
	}
	const committedOver = "which its coordinator committed, without their commit marker; ending them with a commit"
	const abortedOver = "ending them with an abort"
	cfgA := baseConfig(c, app, t)
	cfgA.Guarantee = weir.ExactlyOnce
	cfgA.Logger = slog.New(slog.NewTextHandler(lockedWriter{&mu, &logs}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	t.Cleanup(func() {
		if t.Failed() {
			mu.Lock()
			defer mu.Unlock()
			t.Logf("weir logs: %s", saveLog(t, logs.Bytes()))
		}
	})
	cfgB := cfgA
	cfgB.StateDir = t.TempDir()
	cfgA.Logger = cfgA.Logger.With("instance", "A")
	cfgB.Logger = cfgB.Logger.With("instance", "B")

	produced := 0
	produce := func() {
		t.Helper()
		kafka.Produce(t, c, records(in, 20, 1, produced)...)
		produced += 20
	}
	copied := func() {
		t.Helper()
		recs := kafka.ReadAll(t, c, out, sarama.ReadCommitted, func(recs []*sarama.ConsumerMessage) bool { return len(recs) >= produced })
		distinct := map[string]bool{}
		for _, r := range recs {
			distinct[string(r.Key)+"="+string(r.Value)] = true
		}
		if len(recs) != produced || len(distinct) != produced {
			t.Fatalf("%d committed output records (%d distinct) for %d input records", len(recs), len(distinct), produced)
		}
	}
	// missed leaves an offset commit of A's thread 0 without its marker,
	// A's last transaction being a commit.
	missed := func() {
		t.Helper()
		proc, err := os.ReadFile(filepath.Join(cfgA.StateDir, app, "process-id"))
		if err != nil {
			t.Fatal(err)
		}
		id := app + "-" + strings.TrimSpace(string(proc)) + "-0"
		kafka.Eventually(t, 30*time.Second, 100*time.Millisecond, func() (bool, string) {
			st, err := ta.DescribeTransactions([]string{id})
			return err == nil && st[id].TransactionState == "CompleteCommit", fmt.Sprintf("A's last transaction: %+v, %v", st[id], err)
		})
		st, err := ta.DescribeTransactions([]string{id})
		if err != nil {
			t.Fatal(err)
		}
		ends := kafka.EndOffsets(t, c, in)
		missedOffsetCommit(t, cl, admin, id, st[id].ProducerID, st[id].ProducerEpoch, app, map[string][]*sarama.PartitionOffsetMetadata{
			in: {{Partition: 0, Offset: ends[0]}, {Partition: 1, Offset: ends[1]}}})
	}

	produce()
	a := start(t, passthrough(in, out), cfgA)
	copied()
	missed()
	// B joins and takes a partition of the open offset commit: its offset
	// fetch fails as unstable while A, which keeps its partition, fetches
	// nothing. A's thread looks after the assignment, finds its own
	// records and commits over them.
	b := start(t, passthrough(in, out), cfgB)
	kafka.Eventually(t, 3*time.Minute, 200*time.Millisecond, func() (bool, string) {
		if n := logged(abortedOver); n > 0 {
			t.Fatalf("%d aborts over records of a committed transaction", n)
		}
		return logged(committedOver) == 1 && len(a.app.Tasks())+len(b.app.Tasks()) == 2,
			"A did not commit over its open offset commit and the group did not go on"
	})
	produce()
	copied()

	// A starts again with its records left open the same way: it commits
	// over them when it initialises its producer.
	if err := b.stop(t); err != nil {
		t.Fatalf("B: %v", err)
	}
	if err := a.stop(t); err != nil {
		t.Fatalf("A: %v", err)
	}
	missed()
	a = start(t, passthrough(in, out), cfgA)
	kafka.Eventually(t, 3*time.Minute, 200*time.Millisecond, func() (bool, string) {
		if n := logged(abortedOver); n > 0 {
			t.Fatalf("%d aborts over records of a committed transaction", n)
		}
		return logged(committedOver) == 2 && len(a.app.Tasks()) == 2,
			"A did not commit over its open offset commit when it started again"
	})
	produce()
	copied()
	if n := logged(abortedOver); n != 0 {
		t.Errorf("%d aborts over records of a committed transaction", n)
	}
	if err := a.stop(t); err != nil {
		t.Fatalf("A: %v", err)
	}
}
