package stream

import (
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"

	"github.com/IBM/sarama"

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
