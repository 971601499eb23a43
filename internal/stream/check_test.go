package stream

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
	dto "github.com/prometheus/client_model/go"

	"github.com/weirstream/weir/internal/repair"
	"github.com/weirstream/weir/internal/txntest"
	"github.com/weirstream/weir/txn"
)

// checkAdmin is a transaction admin whose answers the test scripts: the
// coordinator's state of the id, and for DescribeProducers a queue of
// answers (the last repeats).
type checkAdmin struct {
	sarama.ClusterAdmin
	mu        sync.Mutex
	state     sarama.TransactionState
	states    []sarama.TransactionState // answered first, one per call, before state
	stateErr  error
	producers []producersAnswer
	described int
	asked     []map[string][]int32 // the partitions of each DescribeProducers
	// offsetsTopic answers DescribeTopics of __consumer_offsets, one per
	// call (the last repeats): its partition count, or an error. Without
	// answers the cluster has no such topic.
	offsetsTopic []offsetsAnswer
	topicCalls   int
}

type offsetsAnswer struct {
	partitions int
	err        error
}

type producersAnswer struct {
	parts map[string]map[int32]sarama.DescribeProducersResponsePartition
	err   error
}

func (a *checkAdmin) DescribeTransactions(ids []string) (map[string]sarama.TransactionState, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.stateErr != nil {
		return nil, a.stateErr
	}
	if len(a.states) > 0 {
		a.state, a.states = a.states[0], a.states[1:]
	}
	return map[string]sarama.TransactionState{ids[0]: a.state}, nil
}

func (a *checkAdmin) DescribeProducers(parts map[string][]int32) (map[string]map[int32]sarama.DescribeProducersResponsePartition, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.described++
	a.asked = append(a.asked, parts)
	ans := a.producers[min(a.described, len(a.producers))-1]
	return ans.parts, ans.err
}

func (a *checkAdmin) ListTransactions([]string, []int64, int64) ([]sarama.ListTransactionsResponseTransactionState, error) {
	return nil, nil
}

func (a *checkAdmin) DescribeTopics(topics []string) ([]*sarama.TopicMetadata, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.topicCalls++
	if len(topics) != 1 || topics[0] != offsetsTopic {
		return nil, errors.New("the checks describe only " + offsetsTopic)
	}
	if len(a.offsetsTopic) == 0 {
		return []*sarama.TopicMetadata{{Name: offsetsTopic, Err: sarama.ErrUnknownTopicOrPartition}}, nil
	}
	ans := a.offsetsTopic[min(a.topicCalls, len(a.offsetsTopic))-1]
	if ans.err != nil {
		return nil, ans.err
	}
	md := &sarama.TopicMetadata{Name: offsetsTopic}
	for p := range ans.partitions {
		md.Partitions = append(md.Partitions, &sarama.PartitionMetadata{ID: int32(p)})
	}
	return []*sarama.TopicMetadata{md}, nil
}

// checkClient is the producer's client as the checks use it: its
// transactional id and the partitions of each topic.
type checkClient struct {
	sarama.Client
	cfg *sarama.Config
}

func (c checkClient) Config() *sarama.Config { return c.cfg }

func (c checkClient) Partitions(string) ([]int32, error) { return []int32{0, 1}, nil }

// checkThread is a failureThread with a transactional id, admin and
// producer's client for the open-transaction checks.
func checkThread(t *testing.T, admin *checkAdmin) *Thread {
	th := failureThread(t, Config{}, txntest.New(true))
	cfg := sarama.NewConfig()
	cfg.Producer.Transaction.ID = "app-p-0"
	th.pclient = checkClient{cfg: cfg}
	th.in.Admin = admin
	return th
}

var (
	clean = producersAnswer{parts: map[string]map[int32]sarama.DescribeProducersResponsePartition{}}
	// notLeader is a partition's old leader answering after a leader
	// move: an error code and no producers.
	notLeader = producersAnswer{parts: map[string]map[int32]sarama.DescribeProducersResponsePartition{
		"out": {0: {ErrorCode: sarama.ErrNotLeaderForPartition}}}}
)

func openOn(topic string, partition int32, pid int64, epoch int32, offset int64) producersAnswer {
	return producersAnswer{parts: map[string]map[int32]sarama.DescribeProducersResponsePartition{
		topic: {partition: {ActiveProducers: []sarama.ProducerState{{ProducerID: pid, ProducerEpoch: epoch, CurrentTxnStartOffset: offset}}}}}}
}

// answeredAll fills every partition the checks ask about (out, compacted
// and the changelog, partitions 0 and 1) that ans leaves out with no
// producers, so that only what ans says is open or unanswered.
func answeredAll(ans producersAnswer) producersAnswer {
	full := map[string]map[int32]sarama.DescribeProducersResponsePartition{}
	for _, topic := range []string{"out", "compacted", "app-s-changelog", offsetsTopic} {
		full[topic] = map[int32]sarama.DescribeProducersResponsePartition{0: {}, 1: {}}
		for p, r := range ans.parts[topic] {
			full[topic][p] = r
		}
	}
	return producersAnswer{parts: full, err: ans.err}
}

// TestCheckFailingForAWhileIsRetriedNotTurnedOff: an open-transaction
// check at producer start that cannot be made for a while (the old
// leader of a partition answering NOT_LEADER_OR_FOLLOWER while a broker
// restarts) is made again until it can, with a dangling_check_failed
// event each time; the records it then finds are ended before the
// producer is used. The check was turned off for the thread's life on
// the first failure, and the records committed by its next commit.
func TestCheckFailingForAWhileIsRetriedNotTurnedOff(t *testing.T) {
	t.Parallel()
	admin := &checkAdmin{
		state: sarama.TransactionState{TransactionState: "CompleteAbort", ProducerID: 7, ProducerEpoch: 4},
		producers: []producersAnswer{
			// repair.FindDangling asks three times per check
			answeredAll(notLeader), answeredAll(notLeader), answeredAll(notLeader),
			answeredAll(notLeader), answeredAll(notLeader), answeredAll(notLeader),
			answeredAll(openOn("out", 0, 7, 3, 41)),
			answeredAll(clean),
		},
	}
	th := checkThread(t, admin)
	fake := txntest.New(true)
	p := txn.Wrap(fake)
	defer p.Close()
	if err := th.checkDangling(p, false, repair.LastTransaction{State: "CompleteAbort", ProducerID: 7, ProducerEpoch: 3}); err != nil {
		t.Fatal(err)
	}
	if th.noDanglingCheck.Load() {
		t.Fatal("the check turned itself off after a failure that passes")
	}
	if fake.Aborted != 1 || len(fake.Sent()) != 1 || fake.Sent()[0].Topic != "out" {
		t.Fatalf("aborted %d transactions over %d records; want the open records of out/0 ended by one abort", fake.Aborted, len(fake.Sent()))
	}
	var m dto.Metric
	if err := th.in.Metrics.ProducerEvents.WithLabelValues("0", "dangling_check_failed").Write(&m); err != nil {
		t.Fatal(err)
	}
	if n := m.GetCounter().GetValue(); n != 2 {
		t.Fatalf("dangling_check_failed counted %v times, want 2", n)
	}
}

// TestCheckThatCanNeverBeMadeTurnsOff: a cluster that refuses the
// check's requests (ACLs, or a broker before Kafka 3.0) turns the check
// off at once, as before, instead of retrying for ever.
func TestCheckThatCanNeverBeMadeTurnsOff(t *testing.T) {
	t.Parallel()
	admin := &checkAdmin{
		state:     sarama.TransactionState{TransactionState: "CompleteAbort", ProducerID: 7, ProducerEpoch: 4},
		producers: []producersAnswer{{err: sarama.ErrClusterAuthorizationFailed}},
	}
	th := checkThread(t, admin)
	p := txn.Wrap(txntest.New(true))
	defer p.Close()
	if err := th.checkDangling(p, false, repair.LastTransaction{}); err != nil {
		t.Fatal(err)
	}
	if !th.noDanglingCheck.Load() {
		t.Fatal("the check still runs on a cluster that refuses it")
	}
}

// TestCheckWaitsForTheOffsetsTopic: the check at producer start looks at
// the partitions of __consumer_offsets too, where the group's offsets of
// an unfinished transaction may be open. When the admin client cannot
// describe that topic (a broker just killed), the check waits and asks
// again, counting dangling_check_failed, instead of passing without it:
// it once passed, and a transaction's offsets left open there could be
// decided against its output. A cluster without the topic is checked
// without it (TestCheckThatCanNeverBeMadeTurnsOff and the rest).
func TestCheckWaitsForTheOffsetsTopic(t *testing.T) {
	t.Parallel()
	refused := errors.New("dial tcp 127.0.0.1:29112: connect: connection refused")
	admin := &checkAdmin{
		state:        sarama.TransactionState{TransactionState: "CompleteAbort", ProducerID: 7, ProducerEpoch: 4},
		producers:    []producersAnswer{answeredAll(clean)},
		offsetsTopic: []offsetsAnswer{{err: refused}, {err: refused}, {partitions: 2}},
	}
	th := checkThread(t, admin)
	p := txn.Wrap(txntest.New(true))
	defer p.Close()
	if err := th.checkDangling(p, false, repair.LastTransaction{}); err != nil {
		t.Fatal(err)
	}
	if n := counterValue(t, th.in.Metrics.ProducerEvents, "0", "dangling_check_failed"); n != 2 {
		t.Fatalf("dangling_check_failed counted %v times, want 2 (one per failed description of %s)", n, offsetsTopic)
	}
	admin.mu.Lock()
	defer admin.mu.Unlock()
	if len(admin.asked) == 0 || !slices.Equal(admin.asked[0][offsetsTopic], []int32{0, 1}) {
		t.Fatalf("the check asked about %v, want %s partitions 0 and 1 among them", admin.asked, offsetsTopic)
	}
	if want := (txn.Partition{Topic: offsetsTopic, Partition: groupPartition("app", 2)}); th.offsetsPart == nil || *th.offsetsPart != want {
		t.Fatalf("the group's offsets partition is %v, want %v", th.offsetsPart, want)
	}
}

// TestCheckAfterCommitWaitsForTheOffsetsPartition: the check after a
// commit that wrote offsets must look at the group's offsets partition;
// while the admin client cannot say which it is, the check waits (a
// dangling_check_failed each time) instead of passing without it.
func TestCheckAfterCommitWaitsForTheOffsetsPartition(t *testing.T) {
	t.Parallel()
	admin := &checkAdmin{
		state:        sarama.TransactionState{TransactionState: "CompleteCommit", ProducerID: 7, ProducerEpoch: 1},
		producers:    []producersAnswer{answeredAll(clean)},
		offsetsTopic: []offsetsAnswer{{err: errors.New("no broker answers")}, {partitions: 2}},
	}
	th := checkThread(t, admin)
	committedOnce(t, th)
	if err := th.ensureCommitted(); err != nil {
		t.Fatal(err)
	}
	if n := counterValue(t, th.in.Metrics.ProducerEvents, "0", "dangling_check_failed"); n != 1 {
		t.Fatalf("dangling_check_failed counted %v times, want 1", n)
	}
	admin.mu.Lock()
	defer admin.mu.Unlock()
	part := groupPartition("app", 2)
	if len(admin.asked) == 0 || !slices.Contains(admin.asked[0][offsetsTopic], part) {
		t.Fatalf("the check after the commit asked about %v, want the group's offsets partition %s/%d among them", admin.asked, offsetsTopic, part)
	}
}

// TestCheckStopsWaitingWhenTheThreadStops: a check retried after an
// abort ends with an error (never nil, which would let the thread
// commit) once the thread stops.
func TestCheckStopsWaitingWhenTheThreadStops(t *testing.T) {
	t.Parallel()
	admin := &checkAdmin{
		state:     sarama.TransactionState{TransactionState: "CompleteAbort", ProducerID: 7, ProducerEpoch: 4},
		producers: []producersAnswer{{err: errors.New("no broker answers")}},
	}
	th := checkThread(t, admin)
	ctx, cancel := context.WithCancel(context.Background())
	th.ctx = ctx
	p := txn.Wrap(txntest.New(true))
	defer p.Close()
	done := make(chan error, 1)
	go func() { done <- th.checkDangling(p, true, repair.LastTransaction{}) }()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		admin.mu.Lock()
		n := admin.described
		admin.mu.Unlock()
		if n >= 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the check asked %d times in 10s", n)
		}
	}
	cancel()
	if err := <-done; err == nil || !errors.Is(err, context.Canceled) {
		t.Fatalf("checkDangling = %v, want the thread's stop", err)
	}
}

// TestLastTransactionIsAskedOnceBeforeTheFirstInit: when a producer's
// check is fenced and the producer initialised again, the check of the
// second producer still gets what the coordinator said before the first
// InitProducerId (a committed transaction whose marker is missing); asked
// again, the coordinator describes the first init's empty transaction of
// the next epoch, and the records of the committed transaction would be
// aborted while their input offsets stay committed.
func TestLastTransactionIsAskedOnceBeforeTheFirstInit(t *testing.T) {
	t.Parallel()
	admin := &checkAdmin{state: sarama.TransactionState{TransactionState: "CompleteCommit", ProducerID: 7, ProducerEpoch: 3}}
	th := checkThread(t, admin)
	inits := 0
	create := func() (*txn.Producer, error) {
		inits++
		admin.mu.Lock() // InitProducerId: a new epoch, nothing open
		admin.state = sarama.TransactionState{TransactionState: "Empty", ProducerID: 7, ProducerEpoch: admin.state.ProducerEpoch + 1}
		admin.mu.Unlock()
		return txn.Wrap(txntest.New(true)), nil
	}
	var seen []repair.LastTransaction
	check := func(_ *txn.Producer, _ bool, last repair.LastTransaction) error {
		seen = append(seen, last)
		if len(seen) == 1 {
			return txn.ErrFenced
		}
		return nil
	}
	p, err := th.buildProducer(create, check)
	if err != nil {
		t.Fatal(err)
	}
	p.Close()
	want := repair.LastTransaction{State: "CompleteCommit", ProducerID: 7, ProducerEpoch: 3}
	if inits != 2 || len(seen) != 2 || seen[0] != want || seen[1] != want {
		t.Fatalf("%d inits, checks given %+v; want 2, each given %+v", inits, seen, want)
	}
	// The next producer built asks again.
	if p, err = th.buildProducer(create, func(_ *txn.Producer, _ bool, last repair.LastTransaction) error {
		seen = append(seen, last)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	p.Close()
	if got := seen[2]; got.State != "Empty" || got.ProducerEpoch != 5 {
		t.Fatalf("the next producer's check was given %+v, want the coordinator's answer before its init (Empty, epoch 5)", got)
	}
}

// TestPrepareCommitCountsAsCommitted: records of a transaction whose
// coordinator is still writing its commit markers are ended with a
// commit: InitProducerId completes a PrepareCommit as a commit.
func TestPrepareCommitCountsAsCommitted(t *testing.T) {
	t.Parallel()
	dp := repair.DanglingPartition{Topic: "out", Partition: 1, StartOffset: 10, ProducerEpoch: 3}
	for state, want := range map[string]bool{"PrepareCommit": true, "CompleteCommit": true, "PrepareAbort": false, "CompleteAbort": false, "Ongoing": false, "Empty": false} {
		if got := (repair.LastTransaction{State: state, ProducerID: 7, ProducerEpoch: 3}).Committed(7, dp); got != want {
			t.Errorf("%s: Committed = %v, want %v", state, got, want)
		}
	}
}

// committedOnce has th's producer commit one record to out/0 at offset
// 40, so that LastCommitted names it.
func committedOnce(t *testing.T, th *Thread) {
	t.Helper()
	if err := th.producer.Send(&sarama.ProducerMessage{Topic: "out", Partition: 0, Offset: 40}); err != nil {
		t.Fatal(err)
	}
	if err := th.producer.Commit(context.Background(), nil, nil); err != nil {
		t.Fatal(err)
	}
}

// TestCheckAfterCommitWaitsForTheMarkers: right after a commit the
// coordinator may still be writing its markers (PrepareCommit), and the
// commit's own records look open. The check after the commit asks again
// a moment later instead of deciding, and passes once they are ended.
func TestCheckAfterCommitWaitsForTheMarkers(t *testing.T) {
	t.Parallel()
	admin := &checkAdmin{
		states: []sarama.TransactionState{{TransactionState: "PrepareCommit", ProducerID: 7, ProducerEpoch: 1}},
		state:  sarama.TransactionState{TransactionState: "CompleteCommit", ProducerID: 7, ProducerEpoch: 1},
		producers: []producersAnswer{
			openOn("out", 0, 7, 1, 40),
			{parts: map[string]map[int32]sarama.DescribeProducersResponsePartition{"out": {0: {}}}},
		},
	}
	th := checkThread(t, admin)
	committedOnce(t, th)
	if err := th.ensureCommitted(); err != nil {
		t.Fatal(err)
	}
	admin.mu.Lock()
	defer admin.mu.Unlock()
	if admin.described != 2 {
		t.Fatalf("asked the partitions %d times, want 2 (once while the markers were written, once after)", admin.described)
	}
}

// TestCheckAfterCommitLeavesOthersRecords: records of the thread's
// producer open on a partition the commit wrote, but in an older epoch,
// are not the commit's: the check after the commit does not end them
// with a commit (they are for the checks of the next producer start or
// abort, which know the older transaction's outcome), and the thread goes
// on. A partition that did not answer is asked again after a
// dangling_check_failed wait, never taken for clean.
func TestCheckAfterCommitLeavesOthersRecords(t *testing.T) {
	t.Parallel()
	admin := &checkAdmin{
		state: sarama.TransactionState{TransactionState: "CompleteCommit", ProducerID: 7, ProducerEpoch: 2},
		producers: []producersAnswer{
			notLeader, notLeader, notLeader, // one check: repair.OpenTransactions asks three times
			openOn("out", 0, 7, 1, 12),
		},
	}
	th := checkThread(t, admin)
	committedOnce(t, th)
	// A commit over the records would need the producer's client, which
	// this thread's is not: the check must not try.
	if err := th.ensureCommitted(); err != nil {
		t.Fatal(err)
	}
	if n := counterValue(t, th.in.Metrics.ProducerEvents, "0", "dangling_check_failed"); n != 1 {
		t.Fatalf("dangling_check_failed counted %v times, want 1", n)
	}
	if n := counterValue(t, th.in.Metrics.ProducerEvents, "0", "dangling_committed"); n != 0 {
		t.Fatalf("records of an older epoch counted as the commit's (%v)", n)
	}
}
