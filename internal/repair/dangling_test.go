package repair

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
)

// txnAdmin answers DescribeTransactions and DescribeProducers from its
// fields; every other ClusterAdmin method is the nil embedded interface's
// (a test calling one fails loudly).
type txnAdmin struct {
	sarama.ClusterAdmin
	states    map[string]sarama.TransactionState
	producers map[string]map[int32]sarama.DescribeProducersResponsePartition
	err       error
	asked     map[string][]int32
	// then, when set, answers DescribeProducers from the second call on
	// (a leader move the metadata refresh found).
	then  map[string]map[int32]sarama.DescribeProducersResponsePartition
	calls int
}

func (a *txnAdmin) DescribeTransactions(ids []string) (map[string]sarama.TransactionState, error) {
	return a.states, nil
}

func (a *txnAdmin) DescribeProducers(tps map[string][]int32) (map[string]map[int32]sarama.DescribeProducersResponsePartition, error) {
	a.calls++
	if a.calls > 1 {
		if a.then != nil {
			return a.then, nil
		}
		return a.producers, a.err
	}
	a.asked = tps // the first question: every partition
	return a.producers, a.err
}

func (a *txnAdmin) ListTransactions([]string, []int64, int64) ([]sarama.ListTransactionsResponseTransactionState, error) {
	return nil, nil
}

// refresher records the topics whose metadata it was asked to refresh.
type refresher struct{ topics []string }

func (r *refresher) RefreshMetadata(topics ...string) error {
	r.topics = append(r.topics, topics...)
	return nil
}

func producersOn(states ...sarama.ProducerState) sarama.DescribeProducersResponsePartition {
	return sarama.DescribeProducersResponsePartition{ActiveProducers: states}
}

func TestFindDangling(t *testing.T) {
	t.Parallel()
	const id = "app-proc-0"
	empty := map[string]sarama.TransactionState{id: {TransactionalID: id, TransactionState: "CompleteAbort", ProducerID: 7, ProducerEpoch: 6}}
	topics := map[string][]int32{"echo": {0, 1}, "app-agg-changelog": {0, 1}}
	for _, tc := range []struct {
		name      string
		states    map[string]sarama.TransactionState
		producers map[string]map[int32]sarama.DescribeProducersResponsePartition
		err       error
		then      map[string]map[int32]sarama.DescribeProducersResponsePartition
		dangling  []DanglingPartition
		fails     string // another error, containing this
	}{
		{name: "clean: closed transactions of ours, an open one of another producer",
			states: empty,
			producers: map[string]map[int32]sarama.DescribeProducersResponsePartition{
				"echo":              {0: producersOn(sarama.ProducerState{ProducerID: 7, ProducerEpoch: 6, CurrentTxnStartOffset: -1}), 1: producersOn(sarama.ProducerState{ProducerID: 9, CurrentTxnStartOffset: 40})},
				"app-agg-changelog": {0: producersOn(), 1: producersOn(sarama.ProducerState{ProducerID: 7, CurrentTxnStartOffset: -1})},
			}},
		{name: "records of an aborted transaction of ours left open",
			states: empty,
			producers: map[string]map[int32]sarama.DescribeProducersResponsePartition{
				"echo":              {1: producersOn(sarama.ProducerState{ProducerID: 9, CurrentTxnStartOffset: 3}, sarama.ProducerState{ProducerID: 7, ProducerEpoch: 4, CurrentTxnStartOffset: 1752})},
				"app-agg-changelog": {0: producersOn(sarama.ProducerState{ProducerID: 7, ProducerEpoch: 4, CurrentTxnStartOffset: 10})},
			},
			dangling: []DanglingPartition{{"app-agg-changelog", 0, 10, 4}, {"echo", 1, 1752, 4}}},
		{name: "found although other partitions did not answer",
			states:    empty,
			producers: map[string]map[int32]sarama.DescribeProducersResponsePartition{"echo": {1: producersOn(sarama.ProducerState{ProducerID: 7, ProducerEpoch: 4, CurrentTxnStartOffset: 5})}},
			err:       errors.New("no leader for app-agg-changelog/1"),
			dangling:  []DanglingPartition{{"echo", 1, 5, 4}}},
		{name: "cannot tell: no partition answered",
			states: empty, err: errors.New("no leader"), fails: "describing the producers"},
		{name: "cannot tell: one partition did not answer",
			states:    empty,
			producers: map[string]map[int32]sarama.DescribeProducersResponsePartition{"echo": {0: producersOn()}},
			err:       errors.New("no leader for echo/1"), fails: "did not say"},
		{name: "cannot tell: the old leader answers NOT_LEADER_OR_FOLLOWER and no producers",
			states: empty,
			producers: map[string]map[int32]sarama.DescribeProducersResponsePartition{
				"echo":              {0: producersOn(), 1: {ErrorCode: sarama.ErrNotLeaderForPartition}},
				"app-agg-changelog": {0: producersOn(), 1: producersOn()},
			},
			fails: "echo/1"},
		{name: "the new leader, asked after a refresh, has our records open",
			states: empty,
			producers: map[string]map[int32]sarama.DescribeProducersResponsePartition{
				"echo":              {0: producersOn(), 1: {ErrorCode: sarama.ErrNotLeaderForPartition}},
				"app-agg-changelog": {0: producersOn(), 1: producersOn()},
			},
			then:     map[string]map[int32]sarama.DescribeProducersResponsePartition{"echo": {1: producersOn(sarama.ProducerState{ProducerID: 7, ProducerEpoch: 6, CurrentTxnStartOffset: 88})}},
			dangling: []DanglingPartition{{"echo", 1, 88, 6}}},
		{name: "the new leader, asked after a refresh, has nothing open",
			states: empty,
			producers: map[string]map[int32]sarama.DescribeProducersResponsePartition{
				"echo":              {0: producersOn(), 1: {ErrorCode: sarama.ErrNotLeaderForPartition}},
				"app-agg-changelog": {0: producersOn(), 1: producersOn()},
			},
			then: map[string]map[int32]sarama.DescribeProducersResponsePartition{"echo": {1: producersOn()}}},
		{name: "a transaction of ours is open: the check is misplaced",
			states: map[string]sarama.TransactionState{id: {TransactionState: "Ongoing", ProducerID: 7}}, fails: "is Ongoing"},
		{name: "a transaction of ours is ending: ask again",
			states: map[string]sarama.TransactionState{id: {TransactionState: "PrepareAbort", ProducerID: 7}}, fails: "PrepareAbort"},
		{name: "the coordinator refused",
			states: map[string]sarama.TransactionState{id: {ErrorCode: sarama.ErrTransactionalIDAuthorizationFailed}}, fails: "describing transactional id"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			a := &txnAdmin{states: tc.states, producers: tc.producers, err: tc.err, then: tc.then}
			meta := &refresher{}
			err := FindDangling(a, id, topics, WithMetadata(meta), WithAttempts(3, time.Millisecond))
			if tc.then != nil && (len(meta.topics) == 0 || meta.topics[0] != "echo") {
				t.Fatalf("refreshed %v before asking again, want echo", meta.topics)
			}
			var de *DanglingError
			switch {
			case tc.dangling != nil:
				if !errors.As(err, &de) {
					t.Fatalf("FindDangling = %v, want a DanglingError", err)
				}
				if de.ProducerID != 7 || de.TransactionalID != id || len(de.Partitions) != len(tc.dangling) {
					t.Fatalf("found %+v, want %+v", de, tc.dangling)
				}
				for i, p := range tc.dangling {
					if de.Partitions[i] != p {
						t.Fatalf("partition %d: %+v, want %+v", i, de.Partitions[i], p)
					}
					if !strings.Contains(err.Error(), "--start-offset") {
						t.Fatalf("the error does not say how to abort them: %v", err)
					}
				}
			case tc.fails != "":
				if err == nil || errors.As(err, &de) || !strings.Contains(err.Error(), tc.fails) {
					t.Fatalf("FindDangling = %v, want an error that is no DanglingError and says %q", err, tc.fails)
				}
				if inProgress := tc.states[id].TransactionState != "" && tc.states[id].TransactionState != "CompleteAbort"; errors.Is(err, ErrTxnInProgress) != inProgress {
					t.Fatalf("FindDangling = %v: ErrTxnInProgress %t, want %t", err, !inProgress, inProgress)
				}
			case err != nil:
				t.Fatalf("FindDangling = %v, want nil", err)
			}
			if tc.states[id].TransactionState == "CompleteAbort" && len(a.asked) != len(topics) {
				t.Fatalf("asked about %v, want every topic of %v", a.asked, topics)
			}
		})
	}
}

func TestFindDanglingNeedsTransactionAdmin(t *testing.T) {
	t.Parallel()
	var plain struct{ sarama.ClusterAdmin }
	if err := FindDangling(plain, "x", nil); err == nil {
		t.Fatal("an admin without the transaction APIs passed the check")
	}
}

// DescribeLast reports the coordinator's state of an id's last
// transaction, and an unknown id as nothing; Committed holds only for the
// records of a completed commit's producer id and epoch.
func TestDescribeLast(t *testing.T) {
	t.Parallel()
	admin := &txnAdmin{states: map[string]sarama.TransactionState{
		"app-0": {TransactionState: "CompleteCommit", ProducerID: 7, ProducerEpoch: 3},
		"gone":  {ErrorCode: errTransactionalIDNotFound},
		"bad":   {ErrorCode: sarama.ErrTransactionalIDAuthorizationFailed},
	}}
	last, err := DescribeLast(admin, "app-0")
	if err != nil || last != (LastTransaction{State: "CompleteCommit", ProducerID: 7, ProducerEpoch: 3}) {
		t.Fatalf("DescribeLast(app-0) = %+v, %v", last, err)
	}
	if !last.Committed(7, DanglingPartition{ProducerEpoch: 3}) || last.Committed(7, DanglingPartition{ProducerEpoch: 2}) || last.Committed(8, DanglingPartition{ProducerEpoch: 3}) {
		t.Error("Committed holds for other records than the last commit's producer id and epoch")
	}
	if last, err := DescribeLast(admin, "gone"); err != nil || last.State != "" {
		t.Errorf("DescribeLast(gone) = %+v, %v; want nothing", last, err)
	}
	if _, err := DescribeLast(admin, "bad"); !errors.Is(err, sarama.ErrTransactionalIDAuthorizationFailed) {
		t.Errorf("DescribeLast(bad) = %v, want the authorization error", err)
	}
}

// EndAbandoned refuses, before it sends anything, records whose outcome
// the coordinator does not say: a transaction not complete, or records of
// another epoch than the last transaction's.
func TestEndAbandonedRefusesUnknownOutcomes(t *testing.T) {
	t.Parallel()
	parts := []DanglingPartition{{Topic: OffsetsTopic, Partition: 3, StartOffset: 10, ProducerEpoch: 5}}
	for _, tc := range []struct {
		name       string
		last       LastTransaction
		inProgress bool
	}{
		{"ongoing", LastTransaction{State: "Ongoing", ProducerID: 7, ProducerEpoch: 5}, true},
		{"committing", LastTransaction{State: "PrepareCommit", ProducerID: 7, ProducerEpoch: 5}, true},
		{"unknown id", LastTransaction{}, true},
		{"another epoch", LastTransaction{State: "CompleteCommit", ProducerID: 7, ProducerEpoch: 6}, false},
	} {
		// A nil client: a refusal must not reach the broker.
		ended, err := EndAbandoned(context.Background(), nil, "app-x-0", "app", parts, tc.last)
		if ended || err == nil || errors.Is(err, ErrTxnInProgress) != tc.inProgress {
			t.Errorf("%s: EndAbandoned = %v, %v; want a refusal (in progress: %v)", tc.name, ended, err, tc.inProgress)
		}
	}
	if ended, err := EndAbandoned(context.Background(), nil, "app-x-0", "app", nil, LastTransaction{State: "CompleteCommit"}); ended || err != nil {
		t.Errorf("no partitions: EndAbandoned = %v, %v; want nothing done", ended, err)
	}
}
