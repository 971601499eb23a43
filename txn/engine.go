package txn

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/IBM/sarama"

	"github.com/weirstream/weir/internal/produce"
)

// This file is the Producer on weir's own transactional producer
// (internal/produce), which New makes for a client with a transactional
// id: records are batched on the sending goroutine and written straight
// onto the client's broker connections, where sarama's AsyncProducer
// moves each record through goroutines and channels of its own. The
// Producer's contract is the same on either; what differs is said at
// each method.

// newTransactional makes a transactional Producer on weir's producer. It
// initialises the transactional id as sarama's producer does (fencing
// the earlier producer with that id and aborting its open transaction),
// with the client's Producer.Transaction.Retry for the coordinator's
// retriable answers.
func newTransactional(client sarama.Client) (*Producer, error) {
	p := &Producer{client: client, transactional: true, idle: make(chan struct{}), done: make(chan struct{})}
	close(p.idle)
	close(p.done) // no drain goroutine: results come through delivered
	eng, err := produce.New(context.Background(), client, produce.Options{OnResult: p.delivered})
	if err != nil {
		return nil, fmt.Errorf("txn: creating producer: %w", classify(err))
	}
	p.eng = eng
	return p, nil
}

// delivered counts a batch's records settled, on the engine's goroutine:
// where a delivered batch landed (LastCommitted), or why it failed. A
// batch dropped because one before it on its partition failed adds no
// failure of its own when a refusal already explains it: the refused
// records are what TakeRefused reports.
func (p *Producer) delivered(r produce.Result) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case r.Err == nil:
		// A resend the broker already had (Offset -1) does not say where
		// it landed; the batch that did land it was answered too, unless
		// its answer was lost, and then the partition is missing from
		// LastCommitted for this transaction.
		if r.Offset >= 0 {
			for i, m := range r.Msgs {
				m.Offset = r.Offset + int64(i)
			}
			p.foldLocked(&ackRun{tp: Partition(r.Partition), off: r.Offset + int64(len(r.Msgs)) - 1, n: len(r.Msgs)})
		}
	case errors.Is(r.Err, produce.ErrDropped) && (p.err != nil || len(p.refused) > 0):
	case refused(r.Err) && !errors.Is(r.Err, produce.ErrDropped):
		for _, m := range r.Msgs {
			p.refuseLocked(&RefusedError{Msg: m, Err: r.Err})
		}
	case p.err == nil:
		p.err = classify(r.Err)
	}
	p.settledLocked(len(r.Msgs))
}

// sendEngine is Send on the engine. A record the engine refuses before
// batching it (larger than Producer.MaxMessageBytes) is a refusal, as
// sarama's producer reports it, and Send returns nil for it; another
// error fails the transaction and is returned.
func (p *Producer) sendEngine(m *sarama.ProducerMessage) error {
	if err := p.enter(); err != nil {
		return err
	}
	if !p.inTxn {
		p.inTxn, p.began = true, time.Now()
	}
	p.pending = true
	err := p.eng.Send(m)
	if err == nil {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.settledLocked(1)
	if refused(err) {
		p.refuseLocked(&RefusedError{Msg: m, Err: err})
		return nil
	}
	if p.err == nil {
		p.err = classify(err)
	}
	return p.errLocked()
}

// commitEngine is CommitWithMetadata on the engine. Like sarama's
// CommitTxn it does not give up when ctx ends: it waits for the
// transaction's records, then adds the offsets and ends the transaction,
// each bounded by the client's retries (Producer.Retry for records,
// Producer.Transaction.Retry for the coordinator).
func (p *Producer) commitEngine(ctx context.Context, offsets map[string]map[int32]int64, metadata map[string]map[int32]string, group *Group) error {
	if len(offsets) > 0 && group == nil {
		return errors.New("txn: Commit: offsets without the group that consumed them")
	}
	ctx = context.WithoutCancel(ctx)
	if err := p.Wait(ctx); err != nil {
		return err
	}
	if err := p.Err(); err != nil {
		// A record of this transaction failed: it must not commit.
		return p.failEngine(ctx, err, true)
	}
	if !p.inTxn {
		if len(offsets) == 0 {
			return nil
		}
		p.inTxn, p.began = true, time.Now()
	}
	var pos map[string][]*sarama.PartitionOffsetMetadata
	if len(offsets) > 0 {
		pos = toPartitionOffsets(offsets, metadata)
	}
	if err := p.eng.Commit(ctx, pos, group); err != nil {
		return p.failEngine(ctx, fmt.Errorf("commit: %w", err), errors.Is(err, produce.ErrAbortable))
	}
	p.inTxn = false
	p.mu.Lock()
	p.lastCommitted, p.written = p.written, nil
	p.err, p.refused, p.nrefused, p.pending = nil, nil, 0, false
	p.mu.Unlock()
	return nil
}

// failEngine classifies a failed commit on the engine as fail does on
// sarama's producer: fenced, aborted (when the transaction can abort and
// the abort succeeds) or unknown.
func (p *Producer) failEngine(ctx context.Context, cause error, abortable bool) error {
	switch {
	case errors.Is(cause, produce.ErrFatal) || errors.Is(cause, ErrFenced) || p.eng.Fatal() != nil:
		return fmt.Errorf("%w: %w", ErrFenced, cause)
	case !abortable:
		return fmt.Errorf("%w: %w", ErrAmbiguous, cause)
	}
	if err := p.eng.Abort(ctx); err != nil {
		if errors.Is(err, produce.ErrFatal) {
			return fmt.Errorf("%w: %w (abort: %w)", ErrFenced, cause, err)
		}
		return fmt.Errorf("%w: %w (abort: %w)", ErrAmbiguous, cause, err)
	}
	p.inTxn = false
	p.discardErr()
	return fmt.Errorf("%w: %w", ErrAborted, cause)
}

// abortEngine is Abort on the engine: the records already sent are
// delivered under the abort marker, as sarama's producer does.
func (p *Producer) abortEngine(ctx context.Context) error {
	if !p.inTxn {
		return nil
	}
	if err := p.eng.Abort(context.WithoutCancel(ctx)); err != nil {
		if errors.Is(err, produce.ErrFatal) {
			return fmt.Errorf("%w: abort: %w", ErrFenced, err)
		}
		return fmt.Errorf("%w: abort: %w", ErrAmbiguous, err)
	}
	p.inTxn = false
	p.discardErr()
	return nil
}
