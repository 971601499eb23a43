package stream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/weirstream/weir/internal/assign"
	"github.com/weirstream/weir/internal/client"
	"github.com/weirstream/weir/internal/metrics"
	"github.com/weirstream/weir/internal/task"
	"github.com/weirstream/weir/internal/topics"
	"github.com/weirstream/weir/internal/txntest"
	"github.com/weirstream/weir/txn"
)

// failureThread is a thread with no broker: a fake producer, no tasks, the
// limits of three topics ("out" allows 1000 bytes, "compacted" needs keys,
// "app-s-changelog" is a store's changelog).
func failureThread(t *testing.T, cfg Config, fake *txntest.Fake) *Thread {
	t.Helper()
	cfg.ExactlyOnce = true
	cfg.RebalanceTimeout, cfg.TransactionTimeout, cfg.MaxBufferBytes = time.Minute, 10*time.Second, 16<<20
	if cfg.MaxConsecutiveAborts == 0 {
		cfg.MaxConsecutiveAborts = 10
	}
	cfg.Logger = slog.New(slog.DiscardHandler)
	m, err := metrics.New(prometheus.NewRegistry(), "app", noSource{})
	if err != nil {
		t.Fatal(err)
	}
	in := &Instance{Config: cfg, ProcessID: "p", OnPublish: func() {}, Shared: &task.Shared{
		Config:  task.Config{ApplicationID: "app"},
		Metrics: m,
		Layout: &topics.Layout{Limits: map[string]topics.Limit{
			"out":             {MaxBytes: 1000},
			"compacted":       {MaxBytes: 1 << 20, Compacted: true},
			"app-s-changelog": {MaxBytes: 1000, Compacted: true},
		}}}}
	th := &Thread{in: in, log: cfg.Logger, ctx: context.Background(), maxBytes: 1 << 20, committing: make(chan struct{}, 1),
		tasks: map[assign.TaskID]*task.Task{}, owner: map[task.TP]*task.Task{}, skips: map[skipKey]error{}, isolate: map[string]bool{}}
	th.producer = txn.Wrap(fake)
	th.committer = committerFor(th)
	th.guard = th.newGuard() // no producer client: checks nothing
	th.newProducer = func() (*txn.Producer, error) { return txn.Wrap(txntest.New(fake.IsTransactional())), nil }
	t.Cleanup(func() { th.producer.Close() })
	return th
}

// productionThread is a failureThread under ProductionErrors policy.
func productionThread(t *testing.T, policy task.Policy, fake *txntest.Fake) *Thread {
	th := failureThread(t, Config{}, fake)
	th.in.ProductionErrors = policy
	return th
}

// noSource is a metrics.Source with nothing to report.
type noSource struct{}

func (noSource) Snapshot() metrics.Snapshot { return metrics.Snapshot{} }

func msgFrom(topic string, offset int64, sink string, key []byte, valueSize int) *sarama.ProducerMessage {
	m := &sarama.ProducerMessage{Topic: sink, Value: sarama.ByteEncoder(make([]byte, valueSize)),
		Metadata: &client.Origin{Task: "0_0", Topic: topic, Offset: offset}}
	if key != nil {
		m.Key = sarama.ByteEncoder(key)
	}
	return m
}

func skippedCount(th *Thread) float64 {
	var m dto.Metric
	if err := th.in.Metrics.RecordsSkipped.WithLabelValues("0", "0_0", "production").Write(&m); err != nil {
		panic(err)
	}
	return m.GetCounter().GetValue()
}

// waitFailed waits until the fake producer's failure reached the thread.
func waitFailed(t *testing.T, th *Thread) {
	t.Helper()
	th.producer.Flush() // as the loop does after each round
	deadline := time.Now().Add(10 * time.Second)
	for th.failed() == nil {
		if time.Now().After(deadline) {
			t.Fatal("the delivery failure did not reach the producer within 10 s")
		}
		time.Sleep(time.Millisecond)
	}
}

// A record over its topic's limit or without key for a compacted topic
// is refused before it reaches the producer: under task.Fail the thread fails
// for good (a processor that drops the error cannot go on), under task.Skip it
// is dropped and counted, and a changelog record fails under either.
func TestSendRefusesWhatTheTopicRefuses(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		policy task.Policy
		msg    *sarama.ProducerMessage
		cause  error // nil: accepted
	}{
		{"within the limit", task.Fail, msgFrom("in", 7, "out", []byte("k"), 900), nil},
		{"over the topic's limit fails", task.Fail, msgFrom("in", 7, "out", []byte("k"), 1000), task.ErrRecordTooLarge},
		{"over the topic's limit is skipped", task.Skip, msgFrom("in", 7, "out", []byte("k"), 1000), task.ErrRecordTooLarge},
		{"no key on a compacted topic fails", task.Fail, msgFrom("in", 7, "compacted", nil, 10), task.ErrNullKeyOnCompactedTopic},
		{"no key on a compacted topic is skipped", task.Skip, msgFrom("in", 7, "compacted", nil, 10), task.ErrNullKeyOnCompactedTopic},
		{"a changelog record always fails", task.Skip, &sarama.ProducerMessage{Topic: "app-s-changelog", Key: sarama.StringEncoder("k"),
			Value: sarama.ByteEncoder(make([]byte, 2000)), Metadata: &client.Origin{Task: "0_0", Offset: -1, Store: "s"}}, task.ErrRecordTooLarge},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			th := productionThread(t, c.policy, txntest.New(true))
			err := th.Send(c.msg)
			store := c.msg.Metadata.(*client.Origin).Store != ""
			switch {
			case c.cause == nil:
				if err != nil || th.failed() != nil || !th.producer.Pending() {
					t.Fatalf("send = %v, failed = %v, pending = %v; want the record sent", err, th.failed(), th.producer.Pending())
				}
			case c.policy == task.Skip && !store:
				if err != nil || th.failed() != nil || th.producer.Pending() {
					t.Fatalf("send = %v, failed = %v, pending = %v; want the record dropped", err, th.failed(), th.producer.Pending())
				}
				if n := skippedCount(th); n != 1 {
					t.Errorf("skipped = %v, want 1", n)
				}
			default:
				var pe *task.ProductionError
				if !errors.As(err, &pe) || !errors.Is(err, c.cause) {
					t.Fatalf("send = %v, want a *task.ProductionError for %v", err, c.cause)
				}
				if pe.Sink != c.msg.Topic || pe.Size != c.msg.ByteSize(2) || (c.cause == task.ErrRecordTooLarge) != (pe.Limit > 0) {
					t.Errorf("ProductionError = %+v", pe)
				}
				if !store && (pe.Topic != "in" || pe.Offset != 7) {
					t.Errorf("ProductionError = %+v does not name input record in@7", pe)
				}
				// Sticky: the next record, however fine, is not sent.
				if err := th.Send(msgFrom("in", 8, "out", []byte("k"), 1)); !errors.Is(err, c.cause) || th.producer.Pending() {
					t.Errorf("send after the failure = %v, pending = %v; want the failure again and nothing sent", err, th.producer.Pending())
				}
				if _, err := th.settle(th.failed()); err == nil {
					t.Error("settle let the thread go on after a refused record under Fail")
				}
			}
		})
	}
}

// A record the broker refuses fails the transaction. Under task.Skip the
// transaction is aborted (not committed), the record is counted, and a
// replay of its input record drops it; under task.Fail the thread stops with
// the input record's coordinates.
func TestBrokerRefusalIsSettledByPolicy(t *testing.T) {
	t.Parallel()
	for _, policy := range []task.Policy{task.Skip, task.Fail} {
		t.Run(fmt.Sprint(policy), func(t *testing.T) {
			t.Parallel()
			fake := txntest.New(true)
			fake.SendErr = sarama.ErrInvalidRecord
			th := productionThread(t, policy, fake)
			if err := th.Send(msgFrom("in", 7, "out", []byte("k"), 10)); err != nil {
				t.Fatal(err)
			}
			// sarama fails the transaction when a delivery fails.
			waitFailed(t, th)
			fake.Status = sarama.ProducerTxnFlagInError | sarama.ProducerTxnFlagAbortableError
			ctx := context.Background()
			err := th.producer.Commit(ctx, map[string]map[int32]int64{"in": {0: 8}}, &txn.Group{GroupID: "app"})
			if !errors.Is(err, txn.ErrFailed) && !errors.Is(err, txn.ErrAborted) {
				t.Fatalf("Commit of a transaction with a refused record = %v", err)
			}
			if fake.Committed != 0 {
				t.Fatalf("CommitTxn called %d times on a failed transaction", fake.Committed)
			}
			fake.SendErr = nil
			_, err = th.settle(err)
			if policy == task.Fail {
				var pe *task.ProductionError
				if !errors.As(err, &pe) || pe.Offset != 7 || pe.Sink != "out" || !errors.Is(err, sarama.ErrInvalidRecord) {
					t.Fatalf("settle = %v, want a *task.ProductionError for in@7 to out", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("settle = %v, want the thread to go on", err)
			}
			if n := skippedCount(th); n != 1 {
				t.Errorf("skipped = %v, want 1", n)
			}
			// The replay drops the refused record and sends the others.
			if err := th.Send(msgFrom("in", 7, "out", []byte("k"), 10)); err != nil || th.producer.Pending() {
				t.Fatalf("replayed refused record: send = %v, pending = %v; want it dropped", err, th.producer.Pending())
			}
			if err := th.Send(msgFrom("in", 8, "out", []byte("k"), 10)); err != nil || !th.producer.Pending() {
				t.Fatalf("send = %v, pending = %v; want the next record sent", err, th.producer.Pending())
			}
			// Once the input offset is committed past it, it is forgotten.
			th.forgetSkips(map[string]map[int32]int64{"in": {0: 9}})
			if len(th.skips) != 0 {
				t.Errorf("%d skip entries left after the commit passed them", len(th.skips))
			}
		})
	}
}

// A producer rebuild that fails (InitProducerId refused) leaves the old
// producer in place, not closed, so that the shutdown after it aborts on a
// live producer instead of panicking on a closed one.
func TestFailedRebuildKeepsTheOldProducer(t *testing.T) {
	t.Parallel()
	fake := txntest.New(true)
	th := failureThread(t, Config{}, fake)
	old := th.producer
	initErr := errors.New("InitProducerId: coordinator not available")
	th.newProducer = func() (*txn.Producer, error) { return nil, initErr }
	if err := th.Send(msgFrom("in", 1, "out", []byte("k"), 1)); err != nil {
		t.Fatal(err)
	}
	_, err := th.act(fmt.Errorf("%w: commit timed out", txn.ErrAmbiguous))
	if !errors.Is(err, initErr) {
		t.Fatalf("act = %v, want the failed rebuild", err)
	}
	if th.producer != old || fake.Closed != 0 {
		t.Fatalf("the old producer was replaced or closed (closed %d times) though no new one exists", fake.Closed)
	}
	if got := th.shutdown(err); !errors.Is(got, initErr) {
		t.Errorf("shutdown = %v", got)
	}
	if fake.Aborted != 1 {
		t.Errorf("shutdown aborted the open transaction %d times, want 1", fake.Aborted)
	}
	if err := th.producer.Close(); err != nil {
		t.Fatal(err)
	}
	if err := th.producer.Abort(context.Background()); !errors.Is(err, txn.ErrClosed) {
		t.Errorf("Abort on the closed producer = %v, want txn.ErrClosed", err)
	}
	if !strings.Contains(err.Error(), "rebuilding producer") {
		t.Errorf("error %q does not say the rebuild failed", err)
	}
}

// A batch refused for one bad record (Kafka fails every record of it)
// found by the commit: no record of the batch may be skipped, since none
// is known to be the bad one; the thread replays with the topic's records
// sent one at a time, and the next refusal, alone in its batch, is skipped.
func TestBatchRefusalIsIsolatedBeforeSkipping(t *testing.T) {
	t.Parallel()
	fake := txntest.New(true)
	fake.SendErr = sarama.ErrInvalidRecord
	fake.Gate = make(chan struct{})
	th := productionThread(t, task.Skip, fake)
	for off := int64(7); off <= 9; off++ {
		if err := th.Send(msgFrom("in", off, "out", []byte("k"), 10)); err != nil {
			t.Fatal(err)
		}
	}
	close(fake.Gate) // the batch is refused whole
	if err := th.producer.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	fake.Status = sarama.ProducerTxnFlagInError | sarama.ProducerTxnFlagAbortableError
	// The commit aborts on the failure before the thread looks.
	err := th.producer.Commit(context.Background(), map[string]map[int32]int64{"in": {0: 10}}, &txn.Group{GroupID: "app"})
	if !errors.Is(err, txn.ErrAborted) {
		t.Fatalf("Commit = %v, want ErrAborted", err)
	}
	if _, err := th.settle(err); err != nil {
		t.Fatalf("settle = %v", err)
	}
	if len(th.skips) != 0 || skippedCount(th) != 0 {
		t.Fatalf("skipped %v records (%d skip entries) of a batch whose bad record is unknown", skippedCount(th), len(th.skips))
	}
	if !th.isolate["out"] {
		t.Fatal("topic out is not sent one record at a time after a batch refusal")
	}
	// The replay: records 7 and 8 go through; 9 is refused alone.
	fake.SendErr = nil
	for off := int64(7); off <= 8; off++ {
		if err := th.Send(msgFrom("in", off, "out", []byte("k"), 10)); err != nil || th.failed() != nil {
			t.Fatalf("replayed record %d: send = %v, failed = %v", off, err, th.failed())
		}
	}
	fake.SendErr = sarama.ErrInvalidRecord
	if err := th.Send(msgFrom("in", 9, "out", []byte("k"), 10)); err != nil {
		t.Fatal(err)
	}
	if _, err := th.settle(th.failed()); err != nil {
		t.Fatalf("settle = %v", err)
	}
	if _, ok := th.skips[skipKey{"in", 0, 9, "out", recordDigest(msgFrom("in", 9, "out", []byte("k"), 10))}]; !ok || len(th.skips) != 1 || skippedCount(th) != 1 {
		t.Fatalf("skip entries %v, skipped %v; want exactly input in@9's record", th.skips, skippedCount(th))
	}
}

// Transactions that keep aborting are bounded: the thread is degraded
// after one, fails past MaxConsecutiveAborts with the last cause, and a
// commit in between starts the count over.
func TestConsecutiveAbortsAreBounded(t *testing.T) {
	t.Parallel()
	th := failureThread(t, Config{MaxConsecutiveAborts: 3}, txntest.New(true))
	cause := errors.New("UNKNOWN_TOPIC_OR_PARTITION")
	abort := func() error {
		_, err := th.act(fmt.Errorf("%w: %w", txn.ErrAborted, cause))
		return err
	}
	for i := range 3 {
		if err := abort(); err != nil {
			t.Fatalf("abort %d: %v", i+1, err)
		}
		if !th.Aborting() {
			t.Fatalf("abort %d: the thread does not report aborting", i+1)
		}
	}
	th.progressed()
	if th.Aborting() {
		t.Fatal("a commit did not end the aborting state")
	}
	for i := range 3 {
		if err := abort(); err != nil {
			t.Fatalf("after the commit, abort %d: %v", i+1, err)
		}
	}
	err := abort()
	if !errors.Is(err, cause) || !strings.Contains(err.Error(), "4 transactions aborted in a row") {
		t.Fatalf("abort 4 in a row = %v, want the thread to fail with the cause", err)
	}
}

// A coordinator that is not ready to initialise the new producer (it took
// over from a broker that died, or is still completing the last
// transaction: CONCURRENT_TRANSACTIONS, seen on the replicated cluster
// when a broker is killed mid-commit) does not stop the thread: the
// rebuild tries again until the coordinator answers.
func TestRebuildWaitsForTheCoordinator(t *testing.T) {
	t.Parallel()
	fake := txntest.New(true)
	th := failureThread(t, Config{}, fake)
	calls := 0
	for _, busy := range []error{sarama.ErrConcurrentTransactions, sarama.ErrNotCoordinatorForConsumer, sarama.ErrConsumerCoordinatorNotAvailable, sarama.ErrOutOfBrokers} {
		calls = 0
		th.newProducer = func() (*txn.Producer, error) {
			calls++
			if calls < 3 {
				return nil, fmt.Errorf("txn: creating producer: %w", busy)
			}
			return txn.Wrap(txntest.New(true)), nil
		}
		old := th.producer
		if err := th.rebuildProducer(); err != nil {
			t.Fatalf("rebuild while the coordinator answers %v = %v; want it to wait", busy, err)
		}
		if calls != 3 || th.producer == old {
			t.Fatalf("after %v: %d attempts, producer replaced %v; want 3 and a new producer", busy, calls, th.producer != old)
		}
	}
	calls = 0
	th.newProducer = func() (*txn.Producer, error) {
		calls++
		return nil, fmt.Errorf("txn: creating producer: %w", sarama.ErrTransactionalIDAuthorizationFailed)
	}
	if err := th.rebuildProducer(); !errors.Is(err, sarama.ErrTransactionalIDAuthorizationFailed) || calls != 1 {
		t.Fatalf("rebuild refused for good = %v after %d attempts; want the refusal after 1", err, calls)
	}
}

// Topics a dynamic sink chose are checked for open transactions like the
// layout's: the thread remembers each one it wrote (bounded).
func TestDynamicSinkTopicsAreChecked(t *testing.T) {
	t.Parallel()
	th := failureThread(t, Config{}, txntest.New(true))
	for _, topic := range []string{"tenant-a", "out", "tenant-b", "tenant-a"} {
		if err := th.Send(msgFrom("in", 1, topic, []byte("k"), 10)); err != nil {
			t.Fatal(err)
		}
	}
	got := th.writtenTopics()
	for _, want := range []string{"app-s-changelog", "compacted", "out", "tenant-a", "tenant-b"} {
		if !slices.Contains(got, want) {
			t.Errorf("written topics %v lack %s", got, want)
		}
	}
	if len(got) != 5 {
		t.Errorf("written topics %v, want 5", got)
	}
}
