package produce

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/IBM/sarama"
)

// concurrentBackoff is the first wait after CONCURRENT_TRANSACTIONS from
// the coordinator (doubling up to the client's
// Producer.Transaction.Retry.Backoff): the previous transaction's markers
// usually take a few milliseconds.
const concurrentBackoff = 5 * time.Millisecond

// initID initialises the producer id, or bumps the epoch of the current
// one, which restarts every partition's sequence at 0.
func (p *Producer) initID(ctx context.Context) error {
	req := &sarama.InitProducerIDRequest{
		Version: 3, TransactionalID: &p.txnID, TransactionTimeout: p.conf.Producer.Transaction.Timeout,
		ProducerID: p.pid, ProducerEpoch: p.epoch,
	}
	if p.conf.Version.IsAtLeast(sarama.V2_7_0_0) {
		req.Version = 4
	}
	var resp *sarama.InitProducerIDResponse
	err := p.coordinated(ctx, "initialising the transactional id", func(b *sarama.Broker) (err error) {
		if resp, err = b.InitProducerID(req); err != nil {
			return err
		}
		return kerr(resp.Err)
	})
	if err != nil {
		return err
	}
	p.openMu.Lock()
	p.pid, p.epoch = resp.ProducerID, resp.ProducerEpoch
	clear(p.seq)
	p.openMu.Unlock()
	return nil
}

func kerr(k sarama.KError) error {
	if k == sarama.ErrNoError {
		return nil
	}
	return k
}

// coordinated runs call against the transaction coordinator, again while
// it fails with a retriable error (retrying).
func (p *Producer) coordinated(ctx context.Context, what string, call func(*sarama.Broker) error) error {
	return p.retrying(ctx, what,
		func() (*sarama.Broker, error) { return p.client.TransactionCoordinator(p.txnID) },
		func() { _ = p.client.RefreshTransactionCoordinator(p.txnID) }, call)
}

// retrying runs call against the broker find returns, again while it
// fails with a retriable error, at most Producer.Transaction.Retry.Max
// times more, looking the broker up again (refresh) after a transport
// error or a coordinator that moved. Fatal errors wrap ErrFatal.
func (p *Producer) retrying(ctx context.Context, what string, find func() (*sarama.Broker, error), refresh func(), call func(*sarama.Broker) error) error {
	wait := concurrentBackoff
	var err error
	for attempt := 0; attempt <= p.conf.Producer.Transaction.Retry.Max; attempt++ {
		if attempt > 0 {
			d := p.conf.Producer.Transaction.Retry.Backoff
			if errors.Is(err, sarama.ErrConcurrentTransactions) {
				d, wait = min(wait, d), 2*wait
			}
			t := time.NewTimer(d)
			select {
			case <-ctx.Done():
				t.Stop()
				return fmt.Errorf("produce: %s: %w (last error: %w)", what, ctx.Err(), err)
			case <-t.C:
			}
		}
		var b *sarama.Broker
		if b, err = find(); err == nil {
			err = call(b)
			if transport(err) {
				_ = b.Close()
			}
		}
		switch {
		case err == nil:
			return nil
		case fatalKError(err):
			return p.setFatal(fmt.Errorf("%s: %w", what, err))
		case transport(err) || coordinatorMoved(err):
			refresh()
		case !retriable(err):
			return fmt.Errorf("produce: %s: %w", what, err)
		}
	}
	return fmt.Errorf("produce: %s: retries exhausted: %w", what, err)
}

// WaitIdle blocks until every sealed batch has its result, or ctx ends.
// It does not seal open batches (Flush does).
func (p *Producer) WaitIdle(ctx context.Context) error {
	ack := make(chan struct{})
	p.post(event{kind: evIdle, ack: ack})
	select {
	case <-ack:
		return nil
	case <-p.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// InTxn reports whether a record was sent since the last Commit or Abort.
func (p *Producer) InTxn() bool { return p.inTxn }

// Commit commits the open transaction: it seals and delivers the open
// batches, adds offsets (topic → partition → offset and metadata) for
// group, and ends the transaction with a commit. It must not be called
// while a batch of the transaction has failed (the transaction can only
// abort). An error wraps ErrFatal (the producer is unusable), ErrAbortable
// (the offsets were refused, as from a group member that was fenced: call
// Abort) or neither (the outcome is unknown). With nothing sent and no
// offsets, Commit does nothing.
func (p *Producer) Commit(ctx context.Context, offsets map[string][]*sarama.PartitionOffsetMetadata, group *sarama.ConsumerGroupMetadata) error {
	p.Flush()
	if err := p.WaitIdle(ctx); err != nil {
		return fmt.Errorf("produce: waiting for the transaction's records: %w", err)
	}
	if err := p.Fatal(); err != nil {
		return err
	}
	if len(offsets) > 0 {
		if group == nil {
			return errors.New("produce: offsets without their group")
		}
		if err := p.addOffsets(ctx, offsets, group); err != nil {
			return err
		}
	}
	if err := p.endTxn(ctx, true); err != nil {
		return err
	}
	return nil
}

func (p *Producer) addOffsets(ctx context.Context, offsets map[string][]*sarama.PartitionOffsetMetadata, group *sarama.ConsumerGroupMetadata) error {
	add := &sarama.AddOffsetsToTxnRequest{Version: txnVersion(p.conf.Version), TransactionalID: p.txnID,
		ProducerID: p.pid, ProducerEpoch: p.epoch, GroupID: group.GroupID}
	err := p.coordinated(ctx, "adding offsets to the transaction", func(b *sarama.Broker) error {
		resp, err := b.AddOffsetsToTxn(add)
		if err != nil {
			return err
		}
		return kerr(resp.Err)
	})
	if err != nil {
		return abortable(err)
	}
	p.offsets = true
	commit := &sarama.TxnOffsetCommitRequest{Version: 3, TransactionalID: p.txnID, GroupID: group.GroupID,
		ProducerID: p.pid, ProducerEpoch: p.epoch, GenerationID: group.GenerationID, MemberID: group.MemberID,
		GroupInstanceID: group.GroupInstanceID, Topics: offsets}
	err = p.retrying(ctx, "committing offsets in the transaction",
		func() (*sarama.Broker, error) { return p.client.Coordinator(group.GroupID) },
		func() { _ = p.client.RefreshCoordinator(group.GroupID) },
		func(b *sarama.Broker) error {
			resp, err := b.TxnOffsetCommit(commit)
			if err != nil {
				return err
			}
			for _, pes := range resp.Topics {
				for _, pe := range pes {
					if pe.Err != sarama.ErrNoError {
						return pe.Err
					}
				}
			}
			return nil
		})
	return abortable(err)
}

// abortable marks an error that leaves the transaction able to abort.
func abortable(err error) error {
	if err == nil || errors.Is(err, ErrFatal) {
		return err
	}
	return fmt.Errorf("%w: %w", ErrAbortable, err)
}

// endTxn ends the open transaction, when it has anything on the
// coordinator, and readies the producer for the next.
func (p *Producer) endTxn(ctx context.Context, commit bool) error {
	p.addedMu.Lock()
	needed := p.anyAdded || p.offsets
	p.anyAdded = false
	p.addedMu.Unlock()
	p.offsets = false
	if needed {
		req := &sarama.EndTxnRequest{Version: txnVersion(p.conf.Version), TransactionalID: p.txnID,
			ProducerID: p.pid, ProducerEpoch: p.epoch, TransactionResult: commit}
		what := "committing the transaction"
		if !commit {
			what = "aborting the transaction"
		}
		err := p.coordinated(ctx, what, func(b *sarama.Broker) error {
			resp, err := b.EndTxn(req)
			if err != nil {
				return err
			}
			return kerr(resp.Err)
		})
		if err != nil {
			return err
		}
	}
	p.inTxn = false
	p.postWait(event{kind: evNewTxn})
	return nil
}

// Abort ends the open transaction without committing it. As sarama's
// producer does, it first delivers the batches already sent to it (so
// that the log shows them, under their abort marker), then has the
// coordinator abort the transaction. When a batch of the transaction
// failed, the partition's sequence has a gap the broker would refuse, so
// Abort then bumps the producer's epoch, which starts every sequence
// afresh. An error wraps ErrFatal, or leaves the outcome unknown; either
// way the producer must not be used again.
func (p *Producer) Abort(ctx context.Context) error {
	p.Flush()
	if err := p.WaitIdle(ctx); err != nil {
		return fmt.Errorf("produce: waiting for the batches in flight: %w", err)
	}
	if err := p.Fatal(); err != nil {
		return err
	}
	p.addedMu.Lock()
	gap := p.gap
	p.gap = false
	p.addedMu.Unlock()
	if err := p.endTxn(ctx, false); err != nil {
		return err
	}
	if !gap {
		return nil
	}
	return p.initID(ctx)
}

// Close stops the producer: batches not sent fail with ErrDropped, and
// the answers to requests in flight are not waited for. An open
// transaction is left to the coordinator (the next producer with the
// same transactional id aborts it, or it times out). The client stays
// open.
func (p *Producer) Close() {
	if p.closed {
		return
	}
	p.Flush()
	p.closed = true
	p.post(event{kind: evStop})
	<-p.done
}
