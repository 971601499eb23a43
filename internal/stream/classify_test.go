package stream

import (
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"syscall"
	"testing"

	"github.com/IBM/sarama"

	"github.com/weirstream/weir/internal/repair"
	"github.com/weirstream/weir/txn"
)

// TestTxnErrorClassification: the failure authority names a failed
// transaction by the txn sentinel it wraps, however deeply: fenced before
// ambiguous before aborted; ErrFailed is a transaction error that has not
// ended yet (settle aborts it first), and anything else is no transaction
// error at all, which stops the thread.
func TestTxnErrorClassification(t *testing.T) {
	t.Parallel()
	wrap := func(err error) error { return fmt.Errorf("weir: commit: %w", fmt.Errorf("txn: %w", err)) }
	for _, c := range []struct {
		name     string
		err      error
		outcome  outcome
		ok       bool // outcomeOf names it
		txnError bool // isTxnError
		ended    bool // txnEnded
	}{
		{"aborted", txn.ErrAborted, aborted, true, true, true},
		{"aborted, wrapped", wrap(txn.ErrAborted), aborted, true, true, true},
		{"fenced", txn.ErrFenced, fenced, true, true, true},
		{"fenced, wrapped", wrap(fmt.Errorf("%w: %w", txn.ErrFenced, sarama.ErrProducerFenced)), fenced, true, true, true},
		{"ambiguous", txn.ErrAmbiguous, ambiguous, true, true, true},
		{"ambiguous, wrapped", wrap(fmt.Errorf("%w: %w", txn.ErrAmbiguous, sarama.ErrRequestTimedOut)), ambiguous, true, true, true},
		{"failed: still open", txn.ErrFailed, aborted, false, true, false},
		{"failed, wrapped", wrap(fmt.Errorf("%w: record refused", txn.ErrFailed)), aborted, false, true, false},
		{"an abort of a failed transaction", fmt.Errorf("%w: %w", txn.ErrAborted, txn.ErrFailed), aborted, true, true, true},
		{"an abort that was fenced", fmt.Errorf("%w: %w", txn.ErrAborted, txn.ErrFenced), fenced, true, true, true},
		{"ambiguous and fenced", fmt.Errorf("%w: %w", txn.ErrAmbiguous, txn.ErrFenced), fenced, true, true, true},
		{"aborted and ambiguous", fmt.Errorf("%w: %w", txn.ErrAborted, txn.ErrAmbiguous), ambiguous, true, true, true},
		{"closed producer", txn.ErrClosed, aborted, false, false, false},
		{"a sarama error", sarama.ErrOutOfBrokers, aborted, false, false, false},
		{"a plain error", errors.New("disk full"), aborted, false, false, false},
		{"the text alone", errors.New(txn.ErrFenced.Error()), aborted, false, false, false},
		{"nil", nil, aborted, false, false, false},
	} {
		o, ok := outcomeOf(c.err)
		if o != c.outcome || ok != c.ok {
			t.Errorf("%s: outcomeOf(%v) = %v, %v; want %v, %v", c.name, c.err, o, ok, c.outcome, c.ok)
		}
		if got := isTxnError(c.err); got != c.txnError {
			t.Errorf("%s: isTxnError(%v) = %v, want %v", c.name, c.err, got, c.txnError)
		}
		if got := txnEnded(c.err); got != c.ended {
			t.Errorf("%s: txnEnded(%v) = %v, want %v", c.name, c.err, got, c.ended)
		}
	}
}

// TestGroupMovedOn: a commit refused because the member's generation is
// over or ending rewinds by rejoining; any other refusal does not.
func TestGroupMovedOn(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		err  error
		want bool
	}{
		{sarama.ErrUnknownMemberId, true},
		{sarama.ErrFencedInstancedId, true},
		{sarama.ErrIllegalGeneration, true},
		{sarama.ErrRebalanceInProgress, true},
		{fmt.Errorf("%w: committing offsets: %w", txn.ErrAborted, sarama.ErrIllegalGeneration), true},
		{fmt.Errorf("%w: %w", txn.ErrAborted, sarama.ErrRebalanceInProgress), true},
		{sarama.ErrNotCoordinatorForConsumer, false},
		{sarama.ErrConcurrentTransactions, false},
		{txn.ErrAborted, false},
		{errors.New(sarama.ErrUnknownMemberId.Error()), false},
		{nil, false},
	} {
		if got := groupMovedOn(c.err); got != c.want {
			t.Errorf("groupMovedOn(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

// timeoutErr is a net.Error, as a dial or read that timed out returns.
type timeoutErr struct{}

func (timeoutErr) Error() string   { return "i/o timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }

var _ net.Error = timeoutErr{}

// TestInitRetriable: a producer initialisation is tried again while the
// coordinator moves, loads or finishes the last transaction, or no broker
// is reachable for now; never when the producer is fenced (even with a
// retriable cause beside it), refused permissions or misconfigured.
func TestInitRetriable(t *testing.T) {
	t.Parallel()
	retriable := []error{
		sarama.ErrConcurrentTransactions, sarama.ErrConsumerCoordinatorNotAvailable, sarama.ErrNotCoordinatorForConsumer,
		sarama.ErrOffsetsLoadInProgress, sarama.ErrRequestTimedOut, sarama.ErrNetworkException, sarama.ErrNotEnoughReplicas,
		sarama.ErrNotEnoughReplicasAfterAppend, sarama.ErrLeaderNotAvailable, sarama.ErrNotLeaderForPartition,
		sarama.ErrOutOfBrokers, sarama.ErrNotConnected, io.EOF, syscall.ECONNREFUSED, timeoutErr{},
		&net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED},
	}
	for _, err := range retriable {
		for _, e := range []error{err, fmt.Errorf("txn: creating producer: %w", err)} {
			if !initRetriable(e) {
				t.Errorf("initRetriable(%v) = false, want true", e)
			}
		}
	}
	final := []error{
		txn.ErrFenced,
		fmt.Errorf("%w: %w", txn.ErrFenced, sarama.ErrProducerFenced),
		fmt.Errorf("%w: %w", txn.ErrFenced, sarama.ErrConcurrentTransactions),
		fmt.Errorf("%w: %w", txn.ErrFenced, io.EOF),
		sarama.ErrTransactionalIDAuthorizationFailed, sarama.ErrClusterAuthorizationFailed,
		sarama.ErrInvalidTransactionTimeout, sarama.ErrUnsupportedVersion, sarama.ErrProducerFenced,
		// A KError decides alone: one that is not listed is final even
		// when a retriable error is wrapped beside it.
		errors.Join(sarama.ErrInvalidTransactionTimeout, io.EOF),
		errors.New("invalid configuration"),
	}
	for _, err := range final {
		if initRetriable(err) {
			t.Errorf("initRetriable(%v) = true, want false", err)
		}
	}
}

// TestCannotEverCheck: only an admin client without the calls, a broker
// before Kafka 3.0, refusals by ACLs and an invalid request turn the
// open-transaction checks off; a failure that passes (a leader moving,
// a broker restarting, no answer) does not.
func TestCannotEverCheck(t *testing.T) {
	t.Parallel()
	never := []error{
		repair.ErrCannotDescribe,
		fmt.Errorf("weir: %w", repair.ErrCannotDescribe),
		sarama.ErrUnsupportedVersion, sarama.ErrClusterAuthorizationFailed, sarama.ErrTransactionalIDAuthorizationFailed,
		sarama.ErrTopicAuthorizationFailed, sarama.ErrInvalidRequest,
		fmt.Errorf("txn: describing transactional id app-p-0: %w", sarama.ErrTransactionalIDAuthorizationFailed),
		fmt.Errorf("txn: describing the producers of 2 topic(s): %w", &repair.UnansweredError{Partitions: []repair.PartitionError{
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
		repair.ErrTxnInProgress,
		fmt.Errorf("%w: app-p-0 is Ongoing", repair.ErrTxnInProgress),
		&repair.UnansweredError{Partitions: []repair.PartitionError{{Topic: "out", Partition: 1, Err: sarama.ErrNotLeaderForPartition}}},
		&repair.DanglingError{TransactionalID: "app-p-0", ProducerID: 7},
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
	parts := []repair.DanglingPartition{
		{Topic: offsetsTopic, Partition: 12, StartOffset: 3, ProducerEpoch: 5},
		{Topic: "a", Partition: 0, StartOffset: 1, ProducerEpoch: 4},
		{Topic: "a", Partition: 1, StartOffset: 10, ProducerEpoch: 5},
		{Topic: "b", Partition: 3, StartOffset: 7, ProducerEpoch: 5},
		{Topic: "b", Partition: 4, StartOffset: 8, ProducerEpoch: 6},
	}
	de := &repair.DanglingError{TransactionalID: "app-p-1", ProducerID: 9, Partitions: parts}
	committed, aborted := splitDangling(de, repair.LastTransaction{State: "PrepareCommit", ProducerID: 9, ProducerEpoch: 5})
	wantCommitted := []repair.DanglingPartition{parts[0], parts[2], parts[3]}
	wantAborted := []repair.DanglingPartition{parts[1], parts[4]}
	if !slices.Equal(committed, wantCommitted) || !slices.Equal(aborted, wantAborted) {
		t.Errorf("splitDangling = %v, %v; want %v, %v", committed, aborted, wantCommitted, wantAborted)
	}
	if c, a := splitDangling(&repair.DanglingError{ProducerID: 9}, repair.LastTransaction{State: "CompleteCommit", ProducerID: 9}); c != nil || a != nil {
		t.Errorf("splitDangling of no partitions = %v, %v; want nothing", c, a)
	}
}

// TestDanglingNames: the partitions a log line names are
// "topic/partition@offset", in the order given.
func TestDanglingNames(t *testing.T) {
	t.Parallel()
	got := danglingNames([]repair.DanglingPartition{
		{Topic: "out", Partition: 3, StartOffset: 1752, ProducerEpoch: 4},
		{Topic: offsetsTopic, Partition: 0, StartOffset: 0},
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
