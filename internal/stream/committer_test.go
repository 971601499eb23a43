package stream

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/weirstream/weir/changelog"
	"github.com/weirstream/weir/internal/assign"
	"github.com/weirstream/weir/internal/client"
	"github.com/weirstream/weir/internal/statelog"
	"github.com/weirstream/weir/internal/txntest"
	"github.com/weirstream/weir/txn"
)

// fakeSession is the group session of a member in generation gen.
type fakeSession struct {
	sarama.ConsumerGroupSession // calls the tests do not expect panic
	gen                         int32
}

func (s *fakeSession) GenerationID() int32 { return s.gen }
func (s *fakeSession) MemberID() string    { return "member-1" }

// committerThread is a failureThread with a state database and a group
// session in generation 1, so that commits reach the committer.
func committerThread(t *testing.T, cfg Config, fake *txntest.Fake) *Thread {
	t.Helper()
	th := failureThread(t, cfg, fake)
	db, err := statelog.Open(t.TempDir(), changelog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	th.in.DB = db
	th.sess = &fakeSession{gen: 1}
	return th
}

func counterValue(t *testing.T, c *prometheus.CounterVec, labels ...string) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.WithLabelValues(labels...).Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

func gaugeValue(t *testing.T, g *prometheus.GaugeVec, labels ...string) float64 {
	t.Helper()
	var m dto.Metric
	if err := g.WithLabelValues(labels...).Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetGauge().GetValue()
}

// TestCommitOutcomes: every way an exactly-once commit can end reaches the
// thread as its named outcome, and the thread acts on it: a committed
// transaction ends the abort streak; an aborted one rewinds the tasks in
// place; a fenced or ambiguous one rebuilds the producer; a transaction
// that cannot commit for want of a session is aborted, never committed.
func TestCommitOutcomes(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name      string
		commitErr error
		status    sarama.ProducerTxnStatusFlag
		noSession bool
		want      outcome
		rebuilt   bool
		slow      bool // the commit takes longer than the request timeout
	}{
		{name: "committed", want: committed},
		// sarama may have sent a request of it twice: the late copy must
		// not reach the next transaction.
		{name: "committed slowly", slow: true, want: committed, rebuilt: true},
		{name: "aborted", commitErr: sarama.ErrOutOfOrderSequenceNumber, status: sarama.ProducerTxnFlagAbortableError, want: aborted},
		{name: "fenced", commitErr: sarama.ErrProducerFenced, status: sarama.ProducerTxnFlagFatalError, want: fenced, rebuilt: true},
		{name: "ambiguous", commitErr: sarama.ErrRequestTimedOut, status: sarama.ProducerTxnFlagInTransaction, want: ambiguous, rebuilt: true},
		{name: "no session", noSession: true, want: aborted},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			fake := txntest.New(true)
			th := committerThread(t, Config{}, fake)
			// A fencing of an old transaction is healed by a rebuild; a
			// young one means a twin instance, which the thread stops for.
			th.in.TransactionTimeout = time.Nanosecond
			fake.CommitErr, fake.CommitStatus = c.commitErr, c.status
			th.in.Client = &client.Options{RequestTimeout: time.Hour}
			if c.slow {
				th.in.Client.RequestTimeout, fake.CommitDelay = 10*time.Millisecond, 20*time.Millisecond
			}
			if c.noSession {
				th.sess = nil
			}
			// A streak of one abort, which a commit must end.
			if _, err := th.act(fmt.Errorf("%w: earlier", txn.ErrAborted)); err != nil {
				t.Fatal(err)
			}
			if err := th.Send(msgFrom("in", 1, "out", []byte("k"), 10)); err != nil {
				t.Fatal(err)
			}
			old := th.producer
			o, err := th.commit()
			if err != nil {
				t.Fatalf("commit = %v, %v; want the thread to go on", o, err)
			}
			if o != c.want {
				t.Fatalf("commit outcome = %v, want %v", o, c.want)
			}
			if got := th.producer != old; got != c.rebuilt {
				t.Fatalf("producer rebuilt = %v, want %v", got, c.rebuilt)
			}
			if c.want == committed {
				if fake.Committed != 1 || th.aborts.Load() != 0 || th.firstAbort != nil {
					t.Fatalf("committed %d times, abort streak %d; want 1 and 0", fake.Committed, th.aborts.Load())
				}
				if n := counterValue(t, th.in.Metrics.Transactions, "0", "committed"); n != 1 {
					t.Fatalf("committed transactions counted: %v, want 1", n)
				}
				return
			}
			if th.aborts.Load() != 2 {
				t.Fatalf("abort streak = %d after a failed commit, want 2", th.aborts.Load())
			}
			if n := counterValue(t, th.in.Metrics.Transactions, "0", "committed"); n != 0 {
				t.Fatalf("a failed commit was counted as committed (%v)", n)
			}
			if c.want == aborted {
				if n := counterValue(t, th.in.Metrics.Rewinds, "0", "in_place"); n != 2 {
					t.Fatalf("in-place rewinds = %v, want 2 (the earlier abort and this one)", n)
				}
			}
		})
	}
}

// TestSwallowedDeliveryFailureIsSettled: a processor that drops the error
// of a record the producer could not deliver cannot hide it. The thread
// asks the producer after the record whatever the processor returned,
// aborts the transaction and rewinds, and no commit follows the lost
// record.
func TestSwallowedDeliveryFailureIsSettled(t *testing.T) {
	t.Parallel()
	fake := txntest.New(true)
	th := committerThread(t, Config{}, fake)
	fake.SendErr = sarama.ErrNotEnoughReplicas
	fake.Status = sarama.ProducerTxnFlagInTransaction | sarama.ProducerTxnFlagAbortableError
	if err := th.Send(msgFrom("in", 3, "out", []byte("k"), 10)); err != nil {
		t.Fatal(err)
	}
	waitFailed(t, th)
	// The processor returned nil: it swallowed the failure.
	if o, err := th.afterWork(nil); err != nil || o != aborted {
		t.Fatalf("afterWork(nil) after a lost record = %v, %v; want aborted, nil", o, err)
	}
	if fake.Aborted != 1 || fake.Committed != 0 {
		t.Fatalf("aborted %d, committed %d times; want 1 and 0", fake.Aborted, fake.Committed)
	}
	if n := counterValue(t, th.in.Metrics.Rewinds, "0", "in_place"); n != 1 {
		t.Fatalf("in-place rewinds = %v, want 1", n)
	}
}

// TestIdleCommitsKeepTheAbortStreak: a commit with nothing to commit does
// not end a streak of aborted transactions. After an abort that closed its
// tasks (to come back after a rejoin) a thread has nothing to commit while
// it waits for them; if that reset the streak, an abort-and-rejoin loop
// would never reach MaxConsecutiveAborts. Nor does the last-commit gauge
// advance for it.
func TestIdleCommitsKeepTheAbortStreak(t *testing.T) {
	t.Parallel()
	th := committerThread(t, Config{MaxConsecutiveAborts: 2}, txntest.New(true))
	abort := func() error {
		_, err := th.act(fmt.Errorf("%w: UNKNOWN_TOPIC_OR_PARTITION", txn.ErrAborted))
		return err
	}
	if _, err := th.commit(); err != nil {
		t.Fatal(err)
	}
	idleAt := gaugeValue(t, th.in.Metrics.LastCommit, "0")
	if idleAt == 0 {
		t.Fatal("an idle thread with no aborts did not advance the last-commit gauge")
	}
	for i := range 2 {
		if err := abort(); err != nil {
			t.Fatalf("abort %d: %v", i+1, err)
		}
		if o, err := th.commit(); err != nil || o != committed {
			t.Fatalf("idle commit = %v, %v", o, err)
		}
	}
	if got := gaugeValue(t, th.in.Metrics.LastCommit, "0"); got != idleAt {
		t.Fatalf("the last-commit gauge moved from %v to %v while transactions aborted and nothing committed", idleAt, got)
	}
	if err := abort(); err == nil || !errors.Is(err, txn.ErrAborted) {
		t.Fatalf("third abort in a row with idle commits between = %v, want the thread to fail", err)
	}
}

// TestKeptRecordsPastTheBoundRewindByRejoining: records kept for a rewind
// in place are bounded by MaxBufferBytes; past it they are let go, and the
// next abort rewinds by rejoining the group (counted) instead of replaying
// what the thread no longer has. A commit starts the count again.
func TestKeptRecordsPastTheBoundRewindByRejoining(t *testing.T) {
	t.Parallel()
	th := committerThread(t, Config{}, txntest.New(true))
	th.in.MaxBufferBytes = 10
	abort := func() {
		t.Helper()
		if o, err := th.act(fmt.Errorf("%w: test", txn.ErrAborted)); err != nil || o != aborted {
			t.Fatalf("act = %v, %v", o, err)
		}
	}
	if !th.Keep(6) {
		t.Fatal("a record within the bound was not kept")
	}
	abort()
	if n := counterValue(t, th.in.Metrics.Rewinds, "0", "in_place"); n != 1 {
		t.Fatalf("in-place rewinds = %v, want 1", n)
	}
	if !th.Keep(6) || th.Keep(6) {
		t.Fatal("want the first record kept and the second, past 10 bytes, let go")
	}
	if th.Keep(1) {
		t.Fatal("a record was kept after the kept records were let go")
	}
	abort()
	if n := counterValue(t, th.in.Metrics.Rewinds, "0", "rejoin"); n != 1 {
		t.Fatalf("rewinds by rejoining = %v, want 1", n)
	}
	if !th.Keep(6) {
		t.Fatal("the rejoin did not start the kept records over")
	}
}

// TestCommitsRefusedByTheGroupRewindByRejoining: a transaction aborted
// because the group refused its offsets for this member's generation
// rewinds by rejoining, not in place: every commit of the old generation
// would abort again, and at 100 ms a streak of them reached
// MaxConsecutiveAborts before the session ended (found by the chaos
// test's partitioned instance). Other aborts still rewind in place.
func TestCommitsRefusedByTheGroupRewindByRejoining(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		cause error
		mode  string
	}{
		{sarama.ErrIllegalGeneration, "rejoin"},
		{sarama.ErrRebalanceInProgress, "rejoin"},
		{sarama.ErrUnknownMemberId, "rejoin"},
		{sarama.ErrFencedInstancedId, "rejoin"},
		{sarama.ErrUnknownTopicOrPartition, "in_place"},
	} {
		th := committerThread(t, Config{}, txntest.New(true))
		if o, err := th.act(fmt.Errorf("%w: commit: %w", txn.ErrAborted, tc.cause)); err != nil || o != aborted {
			t.Fatalf("%v: act = %v, %v", tc.cause, o, err)
		}
		if n := counterValue(t, th.in.Metrics.Rewinds, "0", tc.mode); n != 1 {
			t.Errorf("%v: rewinds %s = %v, want 1", tc.cause, tc.mode, n)
		}
	}
}

// TestCommitWindowClosesWithTheNewGeneration: after this member's
// JoinGroup, a commit waits until the session runs in the generation of
// the new assignment, not only until the assignment arrives: sarama hands
// over the assignment before it stores the generation, and a commit in
// between would carry the old one and abort.
func TestCommitWindowClosesWithTheNewGeneration(t *testing.T) {
	t.Parallel()
	th := committerThread(t, Config{}, txntest.New(true))
	sess := &fakeSession{gen: 4}
	th.sess = sess
	th.markRebalance()
	if !th.inRebalance() {
		t.Fatal("not in a rebalance after JoinGroup")
	}
	th.onAssignment(nil, assign.Assignment{}, 5)
	if !th.inRebalance() {
		t.Fatal("the commit window closed with the assignment, while the session still runs generation 4")
	}
	if done, err := th.commitDue(); done || err != nil {
		t.Fatalf("commitDue in the old generation = %v, %v; want it to wait", done, err)
	}
	th.mu.Lock()
	sess.gen = 5
	th.mu.Unlock()
	if th.inRebalance() {
		t.Fatal("the commit window stayed open in the new generation")
	}
	if done, err := th.commitDue(); !done || err != nil {
		t.Fatalf("commitDue in the new generation = %v, %v; want a commit", done, err)
	}
}

// liveSession is a group session whose generation another goroutine
// changes, as sarama's does.
type liveSession struct {
	sarama.ConsumerGroupSession
	gen atomic.Int32
}

func (s *liveSession) GenerationID() int32 { return s.gen.Load() }
func (s *liveSession) MemberID() string    { return "member-1" }

// TestRevocationCommitWaitsForTheNewGeneration: the commit before a
// revocation runs right after the new assignment arrives, which sarama
// hands over before it stores the new generation in the session. The
// commit must wait for the new generation, or it carries the old one and
// the group refuses it (ILLEGAL_GENERATION, an aborted transaction,
// seen in TestCommitsDoNotRaceRebalances). The wait is bounded.
func TestRevocationCommitWaitsForTheNewGeneration(t *testing.T) {
	t.Parallel()
	th := committerThread(t, Config{TransactionTimeout: 10 * time.Second}, txntest.New(true))
	sess := &liveSession{}
	sess.gen.Store(4)
	th.sess = sess
	th.markRebalance()
	th.onAssignment(nil, assign.Assignment{}, 5)
	go func() {
		time.Sleep(50 * time.Millisecond) // sarama storing the generation
		sess.gen.Store(5)
	}()
	th.awaitAssigned()
	if got := sess.GenerationID(); got != 5 {
		t.Fatalf("awaitAssigned returned with the session in generation %d, want 5", got)
	}
	// No assignment pending (a new JoinGroup went out, or the session
	// runs it already): no wait.
	start := time.Now()
	th.awaitAssigned()
	th.markRebalance()
	th.awaitAssigned()
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("awaitAssigned waited %s with no assignment pending", d)
	}
	// Bounded by half the transaction timeout.
	th.in.TransactionTimeout = 100 * time.Millisecond
	th.onAssignment(nil, assign.Assignment{}, 6)
	done := make(chan struct{})
	go func() {
		th.awaitAssigned()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("awaitAssigned waits on 30 s after half the transaction timeout")
	}
}

// A producer closed after a failed rebuild fails every commit with
// txn.ErrClosed, which stops the thread rather than panicking.
func TestCommitOnAClosedProducerStops(t *testing.T) {
	t.Parallel()
	th := committerThread(t, Config{}, txntest.New(true))
	if err := th.Send(msgFrom("in", 1, "out", []byte("k"), 10)); err != nil {
		t.Fatal(err)
	}
	th.producer.Close()
	_, err := th.commit()
	if !errors.Is(err, txn.ErrClosed) {
		t.Fatalf("commit on a closed producer = %v, want txn.ErrClosed", err)
	}
}

// TestFailedCommitIsTheLastAtLeastOnce: at least once, a delivery that
// fails while a commit's flush waits for it stops the thread, and no later
// commit (the revocation's, the shutdown's) commits anything: the flush
// consumed the producer's error, so a second flush finds nothing wrong,
// and offsets committed then would pass the lost record.
func TestFailedCommitIsTheLastAtLeastOnce(t *testing.T) {
	t.Parallel()
	fake := txntest.New(false)
	th := committerThread(t, Config{}, fake)
	th.in.ExactlyOnce = false
	th.committer = committerFor(th)
	fake.SendErr = sarama.ErrNotEnoughReplicas
	if err := th.Send(msgFrom("in", 1, "out", []byte("k"), 10)); err != nil {
		t.Fatal(err)
	}
	if _, err := th.commit(); err == nil {
		t.Fatal("a commit whose record was not delivered succeeded")
	}
	fake.SendErr = nil
	if o, err := th.commit(); err == nil {
		t.Fatalf("the commit after a failed one = %v, nil; want the failure again", o)
	} else if !errors.Is(err, sarama.ErrNotEnoughReplicas) {
		t.Fatalf("the commit after a failed one = %v; want it to name the first failure", err)
	}
	if err := th.shutdown(errors.New("stop")); err == nil || err.Error() != "stop" {
		t.Fatalf("shutdown = %v, want its cause", err)
	}
}

// TestFencedFinalCommitStopsCleanly: a thread told to stop whose final
// commit finds the producer fenced (its transaction timed out while the
// broker was away) or the outcome unknown stops without an error: there is
// nothing to rebuild the producer for, and the rebuild's checks, run on
// the cancelled context, used to fail the stop (a chaos run's instance
// exited 1 after SIGTERM).
func TestFencedFinalCommitStopsCleanly(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		err    error
		status sarama.ProducerTxnStatusFlag
	}{
		{"fenced", sarama.ErrProducerFenced, sarama.ProducerTxnFlagFatalError},
		{"ambiguous", sarama.ErrRequestTimedOut, sarama.ProducerTxnFlagInTransaction},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			fake := txntest.New(true)
			th := committerThread(t, Config{}, fake)
			th.in.TransactionTimeout = time.Nanosecond // an old transaction: no twin instance
			ctx, cancel := context.WithCancel(context.Background())
			th.ctx = ctx
			th.newProducer = func() (*txn.Producer, error) {
				t.Error("a stopping thread rebuilt its producer")
				return nil, ctx.Err()
			}
			fake.CommitErr, fake.CommitStatus = c.err, c.status
			if err := th.Send(msgFrom("in", 1, "out", []byte("k"), 10)); err != nil {
				t.Fatal(err)
			}
			cancel()
			if err := th.shutdown(nil); err != nil {
				t.Fatalf("shutdown = %v, want a clean stop", err)
			}
			if n := counterValue(t, th.in.Metrics.Transactions, "0", "committed"); n != 0 {
				t.Fatalf("the %s transaction was counted as committed (%v)", c.name, n)
			}
		})
	}
}

// A stop that comes while the thread rebuilds a fenced producer (its
// coordinator's broker down, the rebuild waiting for it) is a clean stop:
// no transaction has begun, the tasks close without a commit, and the
// thread's shutdown succeeds. A CI run of the three-broker tests exited 1
// here ("stopped before the check ... passed: context canceled").
func TestStopDuringProducerRebuildIsClean(t *testing.T) {
	t.Parallel()
	fake := txntest.New(true)
	th := committerThread(t, Config{}, fake)
	th.in.TransactionTimeout = time.Nanosecond // an old transaction: no twin instance
	ctx, cancel := context.WithCancel(context.Background())
	th.ctx = ctx
	rebuilds := 0
	th.newProducer = func() (*txn.Producer, error) {
		rebuilds++
		cancel() // the stop arrives while the coordinator is unreachable
		return nil, sarama.ErrConcurrentTransactions
	}
	fake.CommitErr, fake.CommitStatus = sarama.ErrProducerFenced, sarama.ProducerTxnFlagFatalError
	if err := th.Send(msgFrom("in", 1, "out", []byte("k"), 10)); err != nil {
		t.Fatal(err)
	}
	if o, err := th.commit(); err != nil || o != fenced {
		t.Fatalf("commit = %v, %v; want fenced and a clean stop", o, err)
	}
	if rebuilds == 0 {
		t.Fatal("the fenced producer was not rebuilt: the test proved nothing")
	}
	if len(th.tasks) != 0 {
		t.Fatalf("%d tasks still open after the cut-short rebuild", len(th.tasks))
	}
	if err := th.shutdown(nil); err != nil {
		t.Fatalf("shutdown = %v, want a clean stop", err)
	}
	if n := counterValue(t, th.in.Metrics.Transactions, "0", "committed"); n != 0 {
		t.Fatalf("a transaction was counted as committed (%v)", n)
	}
}

// TestAfterWorkLeavesHealthyTasksUntouched: with no failure to settle,
// afterWork says so (untouched), and hands a processor's own error back
// as it is, so that the loop goes on with its tasks or stops on the
// error; only a settled failure makes it leave the round.
func TestAfterWorkLeavesHealthyTasksUntouched(t *testing.T) {
	t.Parallel()
	fake := txntest.New(true)
	th := committerThread(t, Config{}, fake)
	if o, err := th.afterWork(nil); o != untouched || err != nil {
		t.Fatalf("afterWork(nil) = %v, %v; want untouched, nil", o, err)
	}
	bad := errors.New("processor failed")
	if o, err := th.afterWork(bad); o != untouched || !errors.Is(err, bad) {
		t.Fatalf("afterWork(a processor's error) = %v, %v; want untouched and the error", o, err)
	}
	if fake.Aborted != 0 {
		t.Fatalf("aborted %d transactions with nothing to settle", fake.Aborted)
	}
}
