package produce

import (
	"errors"
	"fmt"
	"time"

	"github.com/IBM/sarama"
)

// addBackoff is the wait before an AddPartitionsToTxn is sent again after
// a retriable answer: CONCURRENT_TRANSACTIONS, the usual one, lasts only
// until the coordinator has written the previous transaction's markers.
const addBackoff = 10 * time.Millisecond

// loop is the producer's goroutine: it handles the inbox, then sends what
// can be sent, until Close.
func (p *Producer) loop() {
	defer close(p.done)
	for range p.notify {
		p.inMu.Lock()
		evs := p.inbox
		p.inbox = nil
		p.inMu.Unlock()
		for _, e := range evs {
			p.handle(e)
		}
		if p.stopping {
			// Answers still due post into an inbox nobody reads, which
			// never blocks their senders.
			return
		}
		p.pump()
		p.wakeIdle()
	}
}

func (p *Producer) handle(e event) {
	switch e.kind {
	case evBatches:
		for _, b := range e.batches {
			q := p.queue(b.tp)
			switch {
			case p.stopping:
				p.result(b, -1, fmt.Errorf("%w: the producer closed", ErrDropped))
			case p.Fatal() != nil:
				p.result(b, -1, p.Fatal())
			case q.failed != nil:
				p.result(b, -1, fmt.Errorf("%w: an earlier batch of %s/%d failed: %w", ErrDropped, b.tp.Topic, b.tp.Partition, q.failed))
			default:
				q.q = append(q.q, b)
			}
		}
	case evProduced:
		p.produced(e)
	case evAdded:
		p.addedParts(e)
	case evNewTxn:
		for _, q := range p.queues {
			q.added, q.failed = false, nil
		}
	case evStop:
		p.stopping = true
		p.dropQueued(fmt.Errorf("%w: the producer closed", ErrDropped))
	case evIdle:
		p.idleWaiters = append(p.idleWaiters, e.ack)
		return
	}
	if e.ack != nil {
		close(e.ack)
	}
}

// wakeIdle releases the waiters for idleness once nothing is queued or in
// flight.
func (p *Producer) wakeIdle() {
	if len(p.idleWaiters) == 0 || p.inflight > 0 || p.adding {
		return
	}
	for _, q := range p.queues {
		if len(q.q) > 0 {
			return
		}
	}
	for _, c := range p.idleWaiters {
		close(c)
	}
	p.idleWaiters = nil
}

func (p *Producer) queue(tp Partition) *queue {
	q := p.queues[tp]
	if q == nil {
		q = &queue{tp: tp}
		p.queues[tp] = q
	}
	return q
}

// dropQueued fails every batch not in flight with err.
func (p *Producer) dropQueued(err error) {
	for _, q := range p.queues {
		keep := 0
		if q.inflight {
			keep = 1
		}
		for _, b := range q.q[keep:] {
			p.result(b, -1, err)
		}
		clear(q.q[keep:])
		q.q = q.q[:keep]
	}
}

// result reports b's outcome and takes it off its queue when it heads it.
func (p *Producer) result(b *batch, offset int64, err error) {
	if q := p.queues[b.tp]; q != nil && len(q.q) > 0 && q.q[0] == b {
		q.q[0] = nil
		q.q = q.q[1:]
	}
	p.release(b.bytes)
	p.onResult(Result{Partition: b.tp, Msgs: b.msgs, Offset: offset, Err: err})
}

// fail ends q's head batch b for good with err: the batches behind it
// would be refused as out of sequence, so they are dropped, and so is
// whatever comes for the partition until the transaction ends.
func (p *Producer) fail(q *queue, b *batch, err error) {
	p.addedMu.Lock()
	p.gap = true
	p.addedMu.Unlock()
	p.result(b, -1, err)
	q.failed = err
	drop := fmt.Errorf("%w: an earlier batch of %s/%d failed: %w", ErrDropped, q.tp.Topic, q.tp.Partition, err)
	for _, o := range q.q {
		p.result(o, -1, drop)
	}
	q.q = nil
}

// failAll makes the producer unusable: everything queued fails with err.
func (p *Producer) failAll(err error) {
	p.dropQueued(p.setFatal(err))
}

// produced handles a produce request's answer, batch by batch.
func (p *Producer) produced(e event) {
	p.inflight--
	delete(p.busy, e.broker.ID())
	if e.err != nil {
		// The connection is gone or its answer unreadable: close it, so
		// that the next use opens it again, and learn where the leaders
		// are now.
		_ = e.broker.Close()
	}
	refreshed := map[string]bool{}
	for _, b := range e.batches {
		q := p.queue(b.tp)
		q.inflight = false
		err := e.err
		var offset int64 = -1
		if err == nil {
			block := e.resp.GetBlock(b.tp.Topic, b.tp.Partition)
			switch {
			case block == nil:
				err = sarama.ErrIncompleteResponse
			case block.Err == sarama.ErrNoError:
				offset = block.Offset
			case block.Err == sarama.ErrDuplicateSequenceNumber:
				// The broker has this batch from an earlier send.
			default:
				err = block.Err
			}
		}
		if err == nil {
			p.result(b, offset, nil)
			continue
		}
		if p.Fatal() != nil || p.stopping {
			p.result(b, -1, fmt.Errorf("%w: %w", ErrDropped, err))
			continue
		}
		if fatalKError(err) {
			p.result(b, -1, p.setFatal(err))
			p.failAll(err)
			continue
		}
		if !retriable(err) || b.attempts >= p.conf.Producer.Retry.Max {
			p.fail(q, b, fmt.Errorf("producing to %s/%d: %w", b.tp.Topic, b.tp.Partition, err))
			continue
		}
		b.attempts++
		if !refreshed[b.tp.Topic] {
			refreshed[b.tp.Topic] = true
			_ = p.client.RefreshMetadata(b.tp.Topic)
		}
		p.backoff(q, p.conf.Producer.Retry.Backoff)
	}
}

func (p *Producer) backoff(q *queue, d time.Duration) {
	q.notAfter = time.Now().Add(d)
	p.wakeAt(q.notAfter)
}

// wakeAt makes the loop run again at t, unless a wake no later than t is
// already set. pump calls it for every wait it leaves pending, so that a
// wake that fires early for one queue is set again for the others.
func (p *Producer) wakeAt(t time.Time) {
	now := time.Now()
	if p.retryAt.After(now) && !p.retryAt.After(t) {
		return
	}
	p.retryAt = t
	time.AfterFunc(t.Sub(now), p.wake)
}

func (p *Producer) wake() {
	select {
	case p.notify <- struct{}{}:
	default:
	}
}

// addedParts handles AddPartitionsToTxn's answer.
func (p *Producer) addedParts(e event) {
	p.adding = false
	retry := false
	for _, q := range e.parts {
		err := e.err
		if err == nil {
			err = sarama.ErrIncompleteResponse
			for _, pe := range e.added.Errors[q.tp.Topic] {
				if pe.Partition == q.tp.Partition {
					err = pe.Err
					if pe.Err == sarama.ErrNoError {
						err = nil
					}
				}
			}
		}
		switch {
		case err == nil:
			q.added, q.addAttempts = true, 0
			p.addedMu.Lock()
			p.anyAdded = true
			p.addedMu.Unlock()
		case p.Fatal() != nil || p.stopping:
		case fatalKError(err):
			p.failAll(fmt.Errorf("adding %s/%d to the transaction: %w", q.tp.Topic, q.tp.Partition, err))
		case (e.err != nil || retriable(err) || errors.Is(err, sarama.ErrOperationNotAttempted) || errors.Is(err, sarama.ErrIncompleteResponse)) &&
			q.addAttempts < p.conf.Producer.Transaction.Retry.Max && !p.deleted(q.tp.Topic, err):
			q.addAttempts++
			retry = true
			if coordinatorMoved(err) || e.err != nil {
				p.refreshCoord = true
			}
		default:
			q.addAttempts = 0
			if len(q.q) > 0 {
				p.fail(q, q.q[0], fmt.Errorf("adding %s/%d to the transaction: %w", q.tp.Topic, q.tp.Partition, err))
			}
		}
	}
	if retry {
		p.addNotAfter = time.Now().Add(p.addWait)
		p.addWait = min(2*p.addWait, max(p.conf.Producer.Transaction.Retry.Backoff, addBackoff))
	} else {
		p.addWait = addBackoff
	}
}

// deleted reports an unknown topic that the client's metadata, refreshed
// by addPartitions, no longer has either: it was deleted, and waiting
// for it would only delay the transaction's failure.
func (p *Producer) deleted(topic string, err error) bool {
	if !errors.Is(err, sarama.ErrUnknownTopicOrPartition) {
		return false
	}
	_, perr := p.client.Partitions(topic)
	return errors.Is(perr, sarama.ErrUnknownTopicOrPartition)
}

// pump adds new partitions to the transaction, and sends each broker with
// no request in flight the head batch of every partition it leads.
func (p *Producer) pump() {
	if p.stopping || p.Fatal() != nil {
		return
	}
	now := time.Now()
	var toAdd []*queue
	reqs := map[int32]*request{}
	for _, q := range p.queues {
		if len(q.q) == 0 || q.inflight {
			continue
		}
		if !q.added {
			toAdd = append(toAdd, q)
			continue
		}
		if now.Before(q.notAfter) {
			p.wakeAt(q.notAfter)
			continue
		}
		leader, err := p.client.Leader(q.tp.Topic, q.tp.Partition)
		if err != nil {
			b := q.q[0]
			if b.attempts >= p.conf.Producer.Retry.Max {
				p.fail(q, b, fmt.Errorf("finding the leader of %s/%d: %w", q.tp.Topic, q.tp.Partition, err))
				continue
			}
			b.attempts++
			p.backoff(q, p.conf.Producer.Retry.Backoff)
			continue
		}
		if p.busy[leader.ID()] {
			continue
		}
		r := reqs[leader.ID()]
		if r == nil {
			r = &request{broker: leader, req: &sarama.ProduceRequest{
				TransactionalID: &p.txnID, RequiredAcks: sarama.WaitForAll,
				Timeout: int32(p.conf.Producer.Timeout / time.Millisecond), Version: p.reqVer,
			}}
			reqs[leader.ID()] = r
		}
		b := q.q[0]
		r.req.AddBatch(q.tp.Topic, q.tp.Partition, b.rb)
		r.batches = append(r.batches, b)
		q.inflight = true
	}
	for id, r := range reqs {
		p.busy[id] = true
		p.inflight++
		batches, broker := r.batches, r.broker
		err := broker.AsyncProduce(r.req, func(resp *sarama.ProduceResponse, err error) {
			// On the broker's reading goroutine: hand over, never block.
			p.post(event{kind: evProduced, broker: broker, batches: batches, resp: resp, err: err})
		})
		if err != nil {
			p.post(event{kind: evProduced, broker: broker, batches: batches, err: err})
		}
	}
	switch {
	case len(toAdd) == 0 || p.adding:
	case now.Before(p.addNotAfter):
		p.wakeAt(p.addNotAfter)
	default:
		p.adding = true
		refresh := p.refreshCoord
		p.refreshCoord = false
		b := toAdd[0].q[0]
		go p.addPartitions(toAdd, b.rb.ProducerID, b.rb.ProducerEpoch, refresh)
	}
}

type request struct {
	broker  *sarama.Broker
	req     *sarama.ProduceRequest
	batches []*batch
}

// addPartitions asks the coordinator to add qs to the open transaction and
// posts the answer. It runs on a goroutine of its own, one at a time.
func (p *Producer) addPartitions(qs []*queue, pid int64, epoch int16, refresh bool) {
	req := &sarama.AddPartitionsToTxnRequest{
		Version: txnVersion(p.conf.Version), TransactionalID: p.txnID,
		ProducerID: pid, ProducerEpoch: epoch, TopicPartitions: map[string][]int32{},
	}
	for _, q := range qs {
		req.TopicPartitions[q.tp.Topic] = append(req.TopicPartitions[q.tp.Topic], q.tp.Partition)
	}
	if refresh {
		_ = p.client.RefreshTransactionCoordinator(p.txnID)
	}
	var resp *sarama.AddPartitionsToTxnResponse
	coord, err := p.client.TransactionCoordinator(p.txnID)
	if err == nil {
		resp, err = coord.AddPartitionsToTxn(req)
		if err != nil {
			_ = coord.Close()
		}
	}
	if resp != nil {
		// A topic the coordinator does not know may have been deleted:
		// the client's metadata learns it, so that the next Send to it
		// fails at once and the client stops offering its partitions.
		var unknown []string
		for topic, pes := range resp.Errors {
			for _, pe := range pes {
				if pe.Err == sarama.ErrUnknownTopicOrPartition {
					unknown = append(unknown, topic)
					break
				}
			}
		}
		if len(unknown) > 0 {
			_ = p.client.RefreshMetadata(unknown...)
		}
	}
	p.post(event{kind: evAdded, parts: qs, added: resp, err: err})
}

// txnVersion is the version of AddPartitionsToTxn, AddOffsetsToTxn and
// EndTxn for a client of version v (sarama's choice).
func txnVersion(v sarama.KafkaVersion) int16 {
	switch {
	case v.IsAtLeast(sarama.V2_8_0_0):
		return 3
	case v.IsAtLeast(sarama.V2_7_0_0):
		return 2
	default:
		return 1
	}
}

// fatalKError reports the errors after which the producer can do nothing.
func fatalKError(err error) bool {
	return errors.Is(err, sarama.ErrProducerFenced) || errors.Is(err, sarama.ErrInvalidProducerEpoch) ||
		errors.Is(err, sarama.ErrTransactionalIDAuthorizationFailed) || errors.Is(err, sarama.ErrClusterAuthorizationFailed) ||
		errors.Is(err, sarama.ErrUnsupportedForMessageFormat)
}

// coordinatorMoved reports the errors that send a client to look for the
// coordinator again.
func coordinatorMoved(err error) bool {
	return errors.Is(err, sarama.ErrNotCoordinatorForConsumer) || errors.Is(err, sarama.ErrConsumerCoordinatorNotAvailable)
}

// retriable reports the errors that pass by themselves: sending the same
// batch or request again may succeed. Transport errors count.
func retriable(err error) bool {
	var kerr sarama.KError
	if errors.As(err, &kerr) {
		switch kerr {
		case sarama.ErrUnknownTopicOrPartition, sarama.ErrLeaderNotAvailable, sarama.ErrNotLeaderForPartition,
			sarama.ErrRequestTimedOut, sarama.ErrReplicaNotAvailable, sarama.ErrNetworkException,
			sarama.ErrOffsetsLoadInProgress, sarama.ErrConsumerCoordinatorNotAvailable, sarama.ErrNotCoordinatorForConsumer,
			sarama.ErrNotEnoughReplicas, sarama.ErrNotEnoughReplicasAfterAppend, sarama.ErrNotController,
			sarama.ErrConcurrentTransactions, sarama.ErrKafkaStorageError, sarama.ErrFencedLeaderEpoch,
			sarama.ErrUnknownLeaderEpoch, sarama.ErrPreferredLeaderNotAvailable, sarama.ErrThrottlingQuotaExceeded,
			sarama.ErrListenerNotFound:
			return true
		}
		return false
	}
	return transport(err)
}

// transport reports an error of the connection rather than an answer of
// the broker: every error of a broker call but a Kafka error code and a
// closed client.
func transport(err error) bool {
	var kerr sarama.KError
	return err != nil && !errors.As(err, &kerr) && !errors.Is(err, sarama.ErrClosedClient)
}
