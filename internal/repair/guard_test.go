package repair

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"

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
	// OffsetsTopic answers DescribeTopics of __consumer_offsets, one per
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
	if len(topics) != 1 || topics[0] != OffsetsTopic {
		return nil, errors.New("the checks describe only " + OffsetsTopic)
	}
	if len(a.offsetsTopic) == 0 {
		return []*sarama.TopicMetadata{{Name: OffsetsTopic, Err: sarama.ErrUnknownTopicOrPartition}}, nil
	}
	ans := a.offsetsTopic[min(a.topicCalls, len(a.offsetsTopic))-1]
	if ans.err != nil {
		return nil, ans.err
	}
	md := &sarama.TopicMetadata{Name: OffsetsTopic}
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

// checkThread is the thread a guard under test serves: it writes out,
// compacted and the changelog, and counts the guard's events.
type checkThread struct {
	mu     sync.Mutex
	events map[string]int
}

func (*checkThread) WrittenTopics() []string { return []string{"app-s-changelog", "compacted", "out"} }

func (*checkThread) Generation() int32 { return 1 }

func (c *checkThread) Event(reason string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.events[reason]++
}

func (c *checkThread) count(reason string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.events[reason]
}

// checkGuard is the guard of a thread with transactional id app-p-0,
// the producer's client (checkClient) and admin, stopped by ctx.
func checkGuard(ctx context.Context, admin *checkAdmin) (*Guard, *checkThread) {
	cfg := sarama.NewConfig()
	cfg.Producer.Transaction.ID = "app-p-0"
	th := &checkThread{events: map[string]int{}}
	return NewGuard(GuardConfig{Ctx: ctx, Name: "thread 0", Client: checkClient{cfg: cfg}, Admin: admin, Group: "app", Process: "p",
		Spare: txn.Partition{Topic: "app-s-changelog"}, Log: slog.New(slog.DiscardHandler), Thread: th}), th
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
	for _, topic := range []string{"out", "compacted", "app-s-changelog", OffsetsTopic} {
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
			// FindDangling asks three times per check
			answeredAll(notLeader), answeredAll(notLeader), answeredAll(notLeader),
			answeredAll(notLeader), answeredAll(notLeader), answeredAll(notLeader),
			answeredAll(openOn("out", 0, 7, 3, 41)),
			answeredAll(clean),
		},
	}
	g, th := checkGuard(context.Background(), admin)
	fake := txntest.New(true)
	p := txn.Wrap(fake)
	defer p.Close()
	if err := g.check(p, false, LastTransaction{State: "CompleteAbort", ProducerID: 7, ProducerEpoch: 3}); err != nil {
		t.Fatal(err)
	}
	if g.Off() {
		t.Fatal("the check turned itself off after a failure that passes")
	}
	if fake.Aborted != 1 || len(fake.Sent()) != 1 || fake.Sent()[0].Topic != "out" {
		t.Fatalf("aborted %d transactions over %d records; want the open records of out/0 ended by one abort", fake.Aborted, len(fake.Sent()))
	}
	if n := th.count("dangling_check_failed"); n != 2 {
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
	g, _ := checkGuard(context.Background(), admin)
	p := txn.Wrap(txntest.New(true))
	defer p.Close()
	if err := g.check(p, false, LastTransaction{}); err != nil {
		t.Fatal(err)
	}
	if !g.Off() {
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
	g, th := checkGuard(context.Background(), admin)
	p := txn.Wrap(txntest.New(true))
	defer p.Close()
	if err := g.check(p, false, LastTransaction{}); err != nil {
		t.Fatal(err)
	}
	if n := th.count("dangling_check_failed"); n != 2 {
		t.Fatalf("dangling_check_failed counted %v times, want 2 (one per failed description of %s)", n, OffsetsTopic)
	}
	admin.mu.Lock()
	defer admin.mu.Unlock()
	if len(admin.asked) == 0 || !slices.Equal(admin.asked[0][OffsetsTopic], []int32{0, 1}) {
		t.Fatalf("the check asked about %v, want %s partitions 0 and 1 among them", admin.asked, OffsetsTopic)
	}
	if want := (txn.Partition{Topic: OffsetsTopic, Partition: groupPartition("app", 2)}); g.offsetsPart == nil || *g.offsetsPart != want {
		t.Fatalf("the group's offsets partition is %v, want %v", g.offsetsPart, want)
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
	g, th := checkGuard(context.Background(), admin)
	if err := g.AfterCommit(committedOnce(t)); err != nil {
		t.Fatal(err)
	}
	if n := th.count("dangling_check_failed"); n != 1 {
		t.Fatalf("dangling_check_failed counted %v times, want 1", n)
	}
	admin.mu.Lock()
	defer admin.mu.Unlock()
	part := groupPartition("app", 2)
	if len(admin.asked) == 0 || !slices.Contains(admin.asked[0][OffsetsTopic], part) {
		t.Fatalf("the check after the commit asked about %v, want the group's offsets partition %s/%d among them", admin.asked, OffsetsTopic, part)
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
	ctx, cancel := context.WithCancel(context.Background())
	g, _ := checkGuard(ctx, admin)
	p := txn.Wrap(txntest.New(true))
	defer p.Close()
	done := make(chan error, 1)
	go func() { done <- g.AfterAbort(p) }()
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
		t.Fatalf("AfterAbort = %v, want the thread's stop", err)
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
	g, _ := checkGuard(context.Background(), admin)
	inits := 0
	create := func() (*txn.Producer, error) {
		inits++
		admin.mu.Lock() // InitProducerId: a new epoch, nothing open
		admin.state = sarama.TransactionState{TransactionState: "Empty", ProducerID: 7, ProducerEpoch: admin.state.ProducerEpoch + 1}
		admin.mu.Unlock()
		return txn.Wrap(txntest.New(true)), nil
	}
	var seen []LastTransaction
	check := func(_ *txn.Producer, _ bool, last LastTransaction) error {
		seen = append(seen, last)
		if len(seen) == 1 {
			return txn.ErrFenced
		}
		return nil
	}
	p, err := g.build(create, check)
	if err != nil {
		t.Fatal(err)
	}
	p.Close()
	want := LastTransaction{State: "CompleteCommit", ProducerID: 7, ProducerEpoch: 3}
	if inits != 2 || len(seen) != 2 || seen[0] != want || seen[1] != want {
		t.Fatalf("%d inits, checks given %+v; want 2, each given %+v", inits, seen, want)
	}
	// The next producer built asks again.
	if p, err = g.build(create, func(_ *txn.Producer, _ bool, last LastTransaction) error {
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
	dp := DanglingPartition{Topic: "out", Partition: 1, StartOffset: 10, ProducerEpoch: 3}
	for state, want := range map[string]bool{"PrepareCommit": true, "CompleteCommit": true, "PrepareAbort": false, "CompleteAbort": false, "Ongoing": false, "Empty": false} {
		if got := (LastTransaction{State: state, ProducerID: 7, ProducerEpoch: 3}).Committed(7, dp); got != want {
			t.Errorf("%s: Committed = %v, want %v", state, got, want)
		}
	}
}

// committedOnce returns a producer that committed one record to out/0
// at offset 40, so that LastCommitted names it.
func committedOnce(t *testing.T) *txn.Producer {
	t.Helper()
	p := txn.Wrap(txntest.New(true))
	t.Cleanup(func() { p.Close() })
	if err := p.Send(&sarama.ProducerMessage{Topic: "out", Partition: 0, Offset: 40}); err != nil {
		t.Fatal(err)
	}
	if err := p.Commit(context.Background(), nil, nil); err != nil {
		t.Fatal(err)
	}
	return p
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
	g, _ := checkGuard(context.Background(), admin)
	if err := g.AfterCommit(committedOnce(t)); err != nil {
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
			notLeader, notLeader, notLeader, // one check: OpenTransactions asks three times
			openOn("out", 0, 7, 1, 12),
		},
	}
	g, th := checkGuard(context.Background(), admin)
	// A commit over the records would need the producer's client, which
	// this thread's is not: the check must not try.
	if err := g.AfterCommit(committedOnce(t)); err != nil {
		t.Fatal(err)
	}
	if n := th.count("dangling_check_failed"); n != 1 {
		t.Fatalf("dangling_check_failed counted %v times, want 1", n)
	}
	if n := th.count("dangling_committed"); n != 0 {
		t.Fatalf("records of an older epoch counted as the commit's (%v)", n)
	}
}

// TestCannotEverCheck: only an admin client without the calls, a broker
// before Kafka 3.0, refusals by ACLs and an invalid request turn the
// open-transaction checks off; a failure that passes (a leader moving,
// a broker restarting, no answer) does not.
func TestCannotEverCheck(t *testing.T) {
	t.Parallel()
	never := []error{
		ErrCannotDescribe,
		fmt.Errorf("weir: %w", ErrCannotDescribe),
		sarama.ErrUnsupportedVersion, sarama.ErrClusterAuthorizationFailed, sarama.ErrTransactionalIDAuthorizationFailed,
		sarama.ErrTopicAuthorizationFailed, sarama.ErrInvalidRequest,
		fmt.Errorf("txn: describing transactional id app-p-0: %w", sarama.ErrTransactionalIDAuthorizationFailed),
		fmt.Errorf("txn: describing the producers of 2 topic(s): %w", &UnansweredError{Partitions: []PartitionError{
			{Topic: "out", Partition: 0, Err: sarama.ErrTopicAuthorizationFailed}}}),
	}
	for _, err := range never {
		if !cannotEverCheck(err) {
			t.Errorf("cannotEverCheck(%v) = false, want true", err)
		}
	}
	passes := []error{
		sarama.ErrNotLeaderForPartition, sarama.ErrLeaderNotAvailable, sarama.ErrRequestTimedOut, sarama.ErrOutOfBrokers,
		sarama.ErrNotCoordinatorForConsumer, sarama.ErrConcurrentTransactions,
		ErrTxnInProgress,
		fmt.Errorf("%w: app-p-0 is Ongoing", ErrTxnInProgress),
		&UnansweredError{Partitions: []PartitionError{{Topic: "out", Partition: 1, Err: sarama.ErrNotLeaderForPartition}}},
		&DanglingError{TransactionalID: "app-p-0", ProducerID: 7},
		errors.New("weir: no answer to describing transactions and producers within 5s"),
		io.EOF,
	}
	for _, err := range passes {
		if cannotEverCheck(err) {
			t.Errorf("cannotEverCheck(%v) = true, want false", err)
		}
	}
}

// TestSplitDanglingKeepsOrder: splitDangling keeps the order of the
// partitions it is given (FindDangling sorts them) within each half, and
// puts each partition in exactly one of them.
func TestSplitDanglingKeepsOrder(t *testing.T) {
	t.Parallel()
	parts := []DanglingPartition{
		{Topic: OffsetsTopic, Partition: 12, StartOffset: 3, ProducerEpoch: 5},
		{Topic: "a", Partition: 0, StartOffset: 1, ProducerEpoch: 4},
		{Topic: "a", Partition: 1, StartOffset: 10, ProducerEpoch: 5},
		{Topic: "b", Partition: 3, StartOffset: 7, ProducerEpoch: 5},
		{Topic: "b", Partition: 4, StartOffset: 8, ProducerEpoch: 6},
	}
	de := &DanglingError{TransactionalID: "app-p-1", ProducerID: 9, Partitions: parts}
	committed, aborted := splitDangling(de, LastTransaction{State: "PrepareCommit", ProducerID: 9, ProducerEpoch: 5})
	wantCommitted := []DanglingPartition{parts[0], parts[2], parts[3]}
	wantAborted := []DanglingPartition{parts[1], parts[4]}
	if !slices.Equal(committed, wantCommitted) || !slices.Equal(aborted, wantAborted) {
		t.Errorf("splitDangling = %v, %v; want %v, %v", committed, aborted, wantCommitted, wantAborted)
	}
	if c, a := splitDangling(&DanglingError{ProducerID: 9}, LastTransaction{State: "CompleteCommit", ProducerID: 9}); c != nil || a != nil {
		t.Errorf("splitDangling of no partitions = %v, %v; want nothing", c, a)
	}
}

// TestDanglingNames: the partitions a log line names are
// "topic/partition@offset", in the order given.
func TestDanglingNames(t *testing.T) {
	t.Parallel()
	got := danglingNames([]DanglingPartition{
		{Topic: "out", Partition: 3, StartOffset: 1752, ProducerEpoch: 4},
		{Topic: OffsetsTopic, Partition: 0, StartOffset: 0},
		{Topic: "app-agg-changelog", Partition: 11, StartOffset: -1},
	})
	want := []string{"out/3@1752", "__consumer_offsets/0@0", "app-agg-changelog/11@-1"}
	if !slices.Equal(got, want) {
		t.Errorf("danglingNames = %q, want %q", got, want)
	}
	if got := danglingNames(nil); got == nil || len(got) != 0 {
		t.Errorf("danglingNames(nil) = %#v, want an empty list", got)
	}
}
