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
)

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
	err      error         // first failure since the last commit
	done     chan struct{}
	closed   bool
}

// New creates a producer on client. The client's configuration decides
// whether it is transactional (Producer.Transaction.ID set); creating a
// transactional producer initialises its id, fencing any earlier producer
// with the same id and aborting its open transaction.
func New(client sarama.Client) (*Producer, error) {
	ap, err := sarama.NewAsyncProducerFromClient(client)
	if err != nil {
		return nil, fmt.Errorf("txn: creating producer: %w", classify(err))
	}
	return wrap(ap), nil
}

// wrap starts the bookkeeping around ap.
func wrap(ap sarama.AsyncProducer) *Producer {
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
			p.ack(fmt.Errorf("producing to %s: %w", e.Msg.Topic, e.Err))
		}
	}
}

func (p *Producer) ack(err error) {
	p.mu.Lock()
	if err != nil && p.err == nil {
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
func (p *Producer) Send(m *sarama.ProducerMessage) error {
	if p.transactional && !p.inTxn {
		if err := p.ap.BeginTxn(); err != nil {
			return fmt.Errorf("txn: begin: %w", classify(err))
		}
		p.inTxn, p.began = true, time.Now()
	}
	p.mu.Lock()
	if p.err != nil {
		err := p.err
		p.mu.Unlock()
		if p.transactional {
			// The transaction cannot commit: find out whether it can be
			// aborted or the producer is fenced.
			return p.fail(context.Background(), err)
		}
		return err
	}
	if p.inflight == 0 {
		p.idle = make(chan struct{})
	}
	p.inflight++
	p.mu.Unlock()
	p.ap.Input() <- m
	return nil
}

// flush waits until every record sent is acknowledged or failed.
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
	err := p.err
	p.err = nil
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
	if !p.transactional {
		return p.flush(ctx)
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
// errors.
func (p *Producer) discardErr(ctx context.Context) { _ = p.flush(ctx) }

// Abort aborts the open transaction, if any, for a commit the runtime
// decided not to make. Errors are classified as for Commit.
func (p *Producer) Abort(ctx context.Context) error {
	if !p.transactional || !p.inTxn {
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
// with the same id initialises or when it times out.
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
