// Package txn is a stream thread's producer and the commit it performs:
// under at least once a flush (every record sent so far acknowledged),
// under exactly once a Kafka transaction holding the thread's output,
// repartition and changelog records together with its input offsets,
// committed with the consumer group's metadata so that a zombie member is
// fenced (KIP-447).
//
// The outcome of a failed commit tells the runtime what to do:
//
//   - ErrAborted: the transaction was aborted and the producer is ready for
//     the next one. Discard the uncommitted state and reprocess from the
//     last committed offsets.
//   - ErrFenced: another producer with the same transactional id, or the
//     group, fenced this one. The producer is dead: close it and the tasks
//     (local state stays valid) and rejoin with a new producer.
//   - ErrAmbiguous: the outcome is unknown (a timeout). The producer must
//     never be used again, since sarama has no protection against a late
//     commit landing on a later transaction (KIP-890): rebuild it.
package txn

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/IBM/sarama"
)

var (
	// ErrAborted is a commit that failed and was aborted.
	ErrAborted = errors.New("txn: transaction aborted")
	// ErrFenced is a producer fenced by a newer one or by the group.
	ErrFenced = errors.New("txn: producer fenced")
	// ErrAmbiguous is a commit whose outcome is unknown.
	ErrAmbiguous = errors.New("txn: transaction outcome unknown")
	// ErrFailed is a transaction (or, at least once, a commit interval)
	// in which a record could not be delivered: it cannot commit.
	ErrFailed = errors.New("txn: a record of the transaction failed")
	// ErrClosed is any call on a closed producer.
	ErrClosed = errors.New("txn: producer closed")
)

// RefusedError is a record that can never be delivered as it is: the
// broker refused it (too large for the topic, or invalid, such as a record
// without key on a compacted topic) or it exceeds the client's
// Producer.MaxMessageBytes. Retrying the same record fails the same way.
type RefusedError struct {
	Msg *sarama.ProducerMessage
	Err error
}

// Error names the topic and the record's size, never its contents.
func (e *RefusedError) Error() string {
	return fmt.Sprintf("record of %d bytes refused by %s: %v", e.Msg.ByteSize(2), e.Msg.Topic, e.Err)
}

// Unwrap returns the cause.
func (e *RefusedError) Unwrap() error { return e.Err }

// refused reports the errors that a record cannot outlive: retrying it
// meets the same limit or the same validation.
func refused(err error) bool {
	var ce sarama.ConfigurationError
	return errors.As(err, &ce) && strings.Contains(string(ce), "MaxMessageBytes") ||
		errors.Is(err, sarama.ErrMessageSizeTooLarge) || errors.Is(err, sarama.ErrMessageSetSizeTooLarge) ||
		errors.Is(err, sarama.ErrInvalidRecord) || errors.Is(err, sarama.ErrInvalidMessage) ||
		errors.Is(err, sarama.ErrInvalidTimestamp)
}

// deliveryError describes a failed delivery.
func deliveryError(e *sarama.ProducerError) error {
	if refused(e.Err) {
		return &RefusedError{Msg: e.Msg, Err: e.Err}
	}
	return fmt.Errorf("producing to %s: %w", e.Msg.Topic, e.Err)
}

// Producer wraps a sarama AsyncProducer: it counts records in flight so a
// commit can wait for all of them, keeps the first delivery error, and
// under exactly once begins a transaction before the first record of each
// commit interval. One goroutine (the stream thread) calls its methods.
type Producer struct {
	ap            sarama.AsyncProducer
	transactional bool
	inTxn         bool
	began         time.Time // when the open transaction began

	mu       sync.Mutex
	inflight int
	idle     chan struct{} // closed while inflight == 0
	err      error         // first failure, other than a refusal, since the last commit
	// refused are the records refused since the last commit or
	// TakeRefused, the first maxRefused of them; nrefused counts all.
	refused  []*RefusedError
	nrefused int
	pending  bool // records sent since the last commit or abort
	done     chan struct{}
	closed   bool
}

// maxRefused bounds the refused records a producer keeps for its caller.
const maxRefused = 100

// New creates a producer on client. The client's configuration decides
// whether it is transactional (Producer.Transaction.ID set); creating a
// transactional producer initialises its id, fencing any earlier producer
// with the same id and aborting its open transaction.
func New(client sarama.Client) (*Producer, error) {
	ap, err := sarama.NewAsyncProducerFromClient(client)
	if err != nil {
		return nil, fmt.Errorf("txn: creating producer: %w", classify(err))
	}
	return Wrap(ap), nil
}

// Wrap returns a Producer around ap, which it owns from now on (Close
// closes it). ap must return successes and errors
// (Producer.Return.Successes and Return.Errors).
func Wrap(ap sarama.AsyncProducer) *Producer {
	p := &Producer{ap: ap, transactional: ap.IsTransactional(), idle: make(chan struct{}), done: make(chan struct{})}
	close(p.idle)
	go p.drain()
	return p
}

func (p *Producer) drain() {
	defer close(p.done)
	succ, errs := p.ap.Successes(), p.ap.Errors()
	for succ != nil || errs != nil {
		select {
		case _, ok := <-succ:
			if !ok {
				succ = nil
				continue
			}
			p.ack(nil)
		case e, ok := <-errs:
			if !ok {
				errs = nil
				continue
			}
			p.ack(deliveryError(e))
		}
	}
}

func (p *Producer) ack(err error) {
	p.mu.Lock()
	var re *RefusedError
	switch {
	case err == nil:
	case errors.As(err, &re):
		if len(p.refused) < maxRefused {
			p.refused = append(p.refused, re)
		}
		p.nrefused++
	case p.err == nil:
		p.err = err
	}
	p.inflight--
	if p.inflight == 0 {
		close(p.idle)
	}
	p.mu.Unlock()
}

// Send hands m to the producer, beginning a transaction first when none is
// open. It blocks while sarama's input buffer is full; it does not give up
// on cancellation, because the record being processed is finished even
// when the application stops, and sarama fails what it cannot deliver.
//
// Send never ends a transaction. Once a record of the transaction has
// failed, every later Send returns that failure (wrapping ErrFailed) and
// Err keeps reporting it until Commit or Abort ends the transaction: a
// caller that ignores one error cannot go on to commit input whose output
// was lost, because Commit refuses a failed transaction.
func (p *Producer) Send(m *sarama.ProducerMessage) error {
	if p.closed {
		return ErrClosed
	}
	if err := p.Err(); err != nil {
		return err
	}
	if p.transactional && !p.inTxn {
		if err := p.ap.BeginTxn(); err != nil {
			err = fmt.Errorf("txn: begin: %w", classify(err))
			p.setErr(err)
			return fmt.Errorf("%w: %w", ErrFailed, err)
		}
		p.inTxn, p.began = true, time.Now()
	}
	p.mu.Lock()
	if p.inflight == 0 {
		p.idle = make(chan struct{})
	}
	p.inflight++
	p.mu.Unlock()
	p.pending = true
	p.ap.Input() <- m
	return nil
}

// Wait blocks until every record sent so far is acknowledged or failed,
// without ending the transaction or the interval: a failure stays for Err
// and TakeRefused. Sending one record and waiting for it keeps it alone in
// its batch, so that a refusal names it and no other.
func (p *Producer) Wait(ctx context.Context) error {
	if p.closed {
		return ErrClosed
	}
	p.mu.Lock()
	idle := p.idle
	p.mu.Unlock()
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("txn: waiting for acknowledgements: %w", ctx.Err())
	}
}

// Err returns the failure of the current transaction (or, at least once,
// of the current commit interval) wrapping ErrFailed, or nil while every
// record so far was delivered or is still in flight. A *RefusedError in
// the chain names a record the broker or the client's limits refused.
func (p *Producer) Err() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.errLocked()
}

func (p *Producer) errLocked() error {
	switch {
	case p.err != nil:
		return fmt.Errorf("%w: %w", ErrFailed, p.err)
	case len(p.refused) > 0:
		return fmt.Errorf("%w: %w", ErrFailed, p.refused[0])
	}
	return nil
}

// TakeRefused returns the records refused since the last commit or call
// (the first 100 of them, and how many there were) and forgets them, for a
// caller that skips refused records. At least once the producer then goes
// on as if they had not been sent; under exactly once the transaction
// stays failed (Kafka fails the whole transaction) and must be aborted.
func (p *Producer) TakeRefused() (refused []*RefusedError, n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	refused, n = p.refused, p.nrefused
	p.refused, p.nrefused = nil, 0
	if p.transactional && n > 0 && p.err == nil {
		p.err = fmt.Errorf("%w (%d records refused)", refused[0], n)
	}
	return refused, n
}

// Pending reports whether records were sent since the last commit or
// abort.
func (p *Producer) Pending() bool { return p.pending }

func (p *Producer) setErr(err error) {
	p.mu.Lock()
	if p.err == nil {
		p.err = err
	}
	p.mu.Unlock()
}

// flush waits until every record sent is acknowledged or failed, then
// reports the first failure of the interval and starts a new one. Records
// refused while no other failure happened are kept for TakeRefused and
// reported without starting a new interval.
func (p *Producer) flush(ctx context.Context) error {
	p.mu.Lock()
	idle := p.idle
	p.mu.Unlock()
	select {
	case <-idle:
	case <-ctx.Done():
		return fmt.Errorf("txn: waiting for acknowledgements: %w", ctx.Err())
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err == nil && len(p.refused) > 0 {
		return p.errLocked()
	}
	err := p.errLocked()
	p.err, p.refused, p.nrefused, p.pending = nil, nil, 0, false
	return err
}

// Group identifies the consumer group member committing offsets.
type Group = sarama.ConsumerGroupMetadata

// Commit ends the current commit interval.
//
// At least once (a producer without transactional id): it waits for every
// record to be acknowledged and returns the first delivery error; offsets
// are the caller's to commit afterwards.
//
// Exactly once: it adds offsets (topic -> partition -> next offset) with
// the group's metadata to the transaction and commits it. A failure is
// reported as ErrAborted, ErrFenced or ErrAmbiguous (see the package
// documentation), wrapping the cause.
func (p *Producer) Commit(ctx context.Context, offsets map[string]map[int32]int64, group *Group) error {
	if p.closed {
		return ErrClosed
	}
	if !p.transactional {
		return p.flush(ctx)
	}
	if err := p.Err(); err != nil {
		// A record of this transaction failed: it must not commit.
		return p.fail(ctx, err)
	}
	if !p.inTxn {
		if len(offsets) == 0 {
			return nil
		}
		if err := p.ap.BeginTxn(); err != nil {
			return fmt.Errorf("txn: begin: %w", classify(err))
		}
		p.inTxn, p.began = true, time.Now()
	}
	if len(offsets) > 0 {
		if err := p.ap.AddOffsetsToTxnWithGroupMetadata(toPartitionOffsets(offsets), group); err != nil {
			return p.fail(ctx, fmt.Errorf("adding offsets: %w", err))
		}
	}
	// CommitTxn flushes the records of the transaction first.
	if err := p.ap.CommitTxn(); err != nil {
		if ferr := p.Err(); ferr != nil {
			err = fmt.Errorf("%w (%w)", ferr, err)
		}
		return p.fail(ctx, fmt.Errorf("commit: %w", err))
	}
	p.inTxn = false
	// Every record is acknowledged once CommitTxn returns; a delivery
	// error would have failed it.
	if err := p.flush(ctx); err != nil {
		return fmt.Errorf("%w: %w", ErrAmbiguous, err)
	}
	return nil
}

// fail handles a failed commit: abort when the error is abortable, then
// tell apart aborted, fenced and unknown outcomes. A zombie writing to a
// partition already in its transaction may see an abortable
// INVALID_TXN_STATE first and learn that it is fenced only on abort.
func (p *Producer) fail(ctx context.Context, cause error) error {
	status := p.ap.TxnStatus()
	switch {
	case status&sarama.ProducerTxnFlagFatalError != 0 || errors.Is(cause, sarama.ErrProducerFenced):
		return fmt.Errorf("%w: %w", ErrFenced, cause)
	case status&sarama.ProducerTxnFlagAbortableError != 0:
		if err := p.ap.AbortTxn(); err != nil {
			if p.ap.TxnStatus()&sarama.ProducerTxnFlagFatalError != 0 || errors.Is(err, sarama.ErrProducerFenced) {
				return fmt.Errorf("%w: %w (abort: %w)", ErrFenced, cause, err)
			}
			return fmt.Errorf("%w: %w (abort: %w)", ErrAmbiguous, cause, err)
		}
		p.inTxn = false
		p.discardErr(ctx)
		return fmt.Errorf("%w: %w", ErrAborted, cause)
	}
	return fmt.Errorf("%w: %w", ErrAmbiguous, cause)
}

// discardErr waits for the aborted records' callbacks and forgets their
// errors, refusals included.
func (p *Producer) discardErr(ctx context.Context) {
	_ = p.flush(ctx)
	p.mu.Lock()
	p.err, p.refused, p.nrefused, p.pending = nil, nil, 0, false
	p.mu.Unlock()
}

// Abort aborts the open transaction, if any, for a commit the runtime
// decided not to make. Errors are classified as for Commit.
func (p *Producer) Abort(ctx context.Context) error {
	if p.closed {
		return ErrClosed
	}
	if !p.transactional {
		// Nothing to undo; forget the interval's failure.
		p.discardErr(ctx)
		return nil
	}
	if !p.inTxn {
		return nil
	}
	if err := p.ap.AbortTxn(); err != nil {
		return p.fail(ctx, fmt.Errorf("abort: %w", err))
	}
	p.inTxn = false
	p.discardErr(ctx)
	return nil
}

// OpenFor returns how long the current transaction has been open, or 0.
// A producer fenced while its transaction was younger than the
// transaction timeout was fenced by another producer with its id, not by
// the coordinator aborting a transaction that timed out.
func (p *Producer) OpenFor() time.Duration {
	if !p.inTxn {
		return 0
	}
	return time.Since(p.began)
}

// Close closes the producer once; sarama panics on a second Close. An open
// transaction is left to the broker, which aborts it when the next producer
// with the same id initialises or when it times out. Every other method of
// a closed producer returns ErrClosed.
func (p *Producer) Close() error {
	if p.closed {
		return nil
	}
	p.closed = true
	err := p.ap.Close()
	<-p.done
	return err
}

func toPartitionOffsets(offsets map[string]map[int32]int64) map[string][]*sarama.PartitionOffsetMetadata {
	out := make(map[string][]*sarama.PartitionOffsetMetadata, len(offsets))
	for topic, parts := range offsets {
		for p, off := range parts {
			out[topic] = append(out[topic], &sarama.PartitionOffsetMetadata{Partition: p, Offset: off, LeaderEpoch: -1})
		}
	}
	return out
}

// classify marks errors that fence the producer.
func classify(err error) error {
	if errors.Is(err, sarama.ErrProducerFenced) {
		return fmt.Errorf("%w: %w", ErrFenced, err)
	}
	return err
}
