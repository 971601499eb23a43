package txn

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"time"

	"github.com/IBM/sarama"

	"github.com/weirstream/weir/internal/produce"
)

// Producer sends records and commits them, with input offsets, in Kafka
// transactions (exactly once), or commits intervals of acknowledged
// records (at least once). It counts the records in flight so that a
// commit can wait for all of them, keeps the first delivery error of the
// transaction where Commit reads it, and under exactly once begins a
// transaction before the first record of each commit interval.
//
// Under exactly once ([New] with a transactional id) the records go
// through weir's own producer, which batches them on the sending
// goroutine and writes the batches straight onto the client's broker
// connections, with sarama's protocol requests for the transaction. At
// least once, and around a producer given to [Wrap], they go through a
// sarama AsyncProducer.
//
// A Producer is not safe for concurrent use: its methods must not run at
// the same time (call them from one goroutine, or serialise them with a
// mutex, as the package example does for the claims of a consumer group
// session). Err is the exception: it may be called from any goroutine. The
// Producer's own goroutine (weir's producer's, under exactly once)
// collects the acknowledgements until Close.
type Producer struct {
	ap            sarama.AsyncProducer // nil when eng sends
	eng           *produce.Producer    // weir's transactional producer, or nil
	client        sarama.Client        // the client New was given; nil after Wrap
	transactional bool
	inTxn         bool
	began         time.Time // when the open transaction began

	mu       sync.Mutex
	inflight int
	idle     chan struct{} // closed while inflight == 0
	err      error         // first failure, other than a refusal, since the last commit
	// refused are the records of the open transaction (at least once,
	// of the interval) refused so far, the first maxRefused of them;
	// nrefused counts all. An abort moves them to aborted, where they
	// wait for TakeRefused without failing the next transaction.
	refused          []*RefusedError
	nrefused         int
	aborted          []*RefusedError
	nabortedRefusals int
	pending          bool // records sent since the last commit or abort
	// written holds, for each partition a record of the open transaction
	// was acknowledged on, the highest such offset; lastCommitted is
	// written as the last commit left it (see LastCommitted).
	written       map[Partition]int64
	lastCommitted map[Partition]int64
	done          chan struct{}
	closed        bool
	// held are records Send took but has not handed to sarama yet (fewer
	// than burst); only the sending goroutine touches them.
	held  []*sarama.ProducerMessage
	burst int
}

// Partition names a topic's partition.
type Partition struct {
	Topic     string
	Partition int32
}

// maxRefused bounds the refused records a producer keeps for its caller.
const maxRefused = 100

// New creates a producer on client, which must have been configured with
// [ConfigureProducer] (or equivalent settings: New reports every missing
// one) and which the producer does not own: closing the producer leaves
// the client open, and the caller closes it after the producer.
//
// The client's configuration decides whether the producer is
// transactional (Producer.Transaction.ID set). Creating a transactional
// producer initialises its id with the transaction coordinator: this
// fences any earlier producer with the same id and aborts its open
// transaction. A fencing error wraps [ErrFenced].
func New(client sarama.Client) (*Producer, error) {
	if err := checkConfig(client.Config()); err != nil {
		return nil, err
	}
	if client.Config().Producer.Transaction.ID != "" {
		return newTransactional(client)
	}
	ap, err := sarama.NewAsyncProducerFromClient(client)
	if err != nil {
		return nil, fmt.Errorf("txn: creating producer: %w", classify(err))
	}
	p := Wrap(ap)
	p.client = client
	return p, nil
}

// Wrap returns a Producer around ap, which it owns from now on: Close
// closes it, and nothing else may use it. ap must return successes and
// errors (Producer.Return.Successes and Return.Errors), or Commit waits for
// ever. Wrap is for producers that New cannot make, such as a fake in a
// test; a wrapped producer cannot be rebuilt.
func Wrap(ap sarama.AsyncProducer) *Producer {
	p := &Producer{ap: ap, transactional: ap.IsTransactional(), idle: make(chan struct{}), done: make(chan struct{})}
	close(p.idle)
	go p.drain()
	return p
}

// Rebuild replaces p, a producer that returned [ErrFenced] or
// [ErrAmbiguous], by a new one on the same client, and closes p. It
// creates the new producer first: initialising the transactional id bumps
// its epoch, so that nothing p still has in flight can land in a later
// transaction, and makes the broker abort the transaction p left open. Only
// then is p closed.
//
// Nothing of p's open transaction survives: reprocess from the last
// committed offsets. On error (the new producer could not be created; a
// fencing error wraps ErrFenced) p is left as it was, for the caller to
// Close. Rebuild needs a producer made by New.
func (p *Producer) Rebuild() (*Producer, error) {
	if p.client == nil {
		return nil, errors.New("txn: Rebuild: the producer was not made by New")
	}
	np, err := New(p.client)
	if err != nil {
		return nil, fmt.Errorf("txn: rebuilding the producer: %w", err)
	}
	// p is fenced for good now; what closing it reports (the errors of
	// records it still held) is about a transaction already aborted.
	_ = p.Close()
	return np, nil
}

func (p *Producer) drain() {
	defer close(p.done)
	succ, errs := p.ap.Successes(), p.ap.Errors()
	for succ != nil || errs != nil {
		select {
		case m, ok := <-succ:
			if !ok {
				succ = nil
				continue
			}
			if !p.acked(m, succ) {
				succ = nil
			}
		case e, ok := <-errs:
			if !ok {
				errs = nil
				continue
			}
			p.ack(deliveryError(e))
		}
	}
}

// ackBatch is the most deliveries acked takes under one lock: sarama
// returns a produce response's records one by one, and counting each
// under its own lock cost as much as receiving it.
const ackBatch = 256

// acked counts m delivered, with the deliveries already waiting behind it
// in succ (up to ackBatch), and remembers where each landed
// (LastCommitted). It reports false when it found succ closed.
func (p *Producer) acked(m *sarama.ProducerMessage, succ <-chan *sarama.ProducerMessage) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	var run ackRun
	defer p.foldLocked(&run)
	p.ackedLocked(&run, m)
	for range ackBatch - 1 {
		select {
		case m, ok := <-succ:
			if !ok {
				return false
			}
			p.ackedLocked(&run, m)
		default:
			return true
		}
	}
	return true
}

// ackRun is the highest offset of a run of deliveries to one partition:
// sarama returns a batch's records one after the other, and only the run's
// end goes into written, which spares a map lookup (and the hash of the
// topic's name) per record.
type ackRun struct {
	tp  Partition
	off int64
	n   int // deliveries in the run
}

// ackedLocked counts m delivered, in run. Called with mu held.
func (p *Producer) ackedLocked(run *ackRun, m *sarama.ProducerMessage) {
	if p.transactional && m != nil {
		if run.n > 0 && (m.Partition != run.tp.Partition || m.Topic != run.tp.Topic) {
			p.foldLocked(run)
		}
		if run.n == 0 || m.Offset > run.off {
			run.tp, run.off = Partition{m.Topic, m.Partition}, m.Offset
		}
		run.n++
	}
	p.settledLocked(1)
}

// foldLocked puts run's offset into written and empties run. Called with
// mu held, before it is released: Commit reads written under mu once the
// last record is counted.
func (p *Producer) foldLocked(run *ackRun) {
	if run.n == 0 {
		return
	}
	if off, ok := p.written[run.tp]; !ok || run.off > off {
		if p.written == nil {
			p.written = map[Partition]int64{}
		}
		p.written[run.tp] = run.off
	}
	*run = ackRun{}
}

// ack counts a failed delivery: the transaction's first failure, or a
// refused record.
func (p *Producer) ack(err error) {
	p.mu.Lock()
	var re *RefusedError
	switch {
	case errors.As(err, &re):
		p.refuseLocked(re)
	case p.err == nil:
		p.err = err
	}
	p.settledLocked(1)
	p.mu.Unlock()
}

// refuseLocked keeps a refused record for TakeRefused (the first
// maxRefused of them) and counts it. Called with mu held.
func (p *Producer) refuseLocked(re *RefusedError) {
	if len(p.refused) < maxRefused {
		p.refused = append(p.refused, re)
	}
	p.nrefused++
}

// settledLocked counts n records in flight less. Called with mu held.
func (p *Producer) settledLocked(n int) {
	p.inflight -= n
	if p.inflight == 0 {
		close(p.idle)
	}
}

// Send hands m to the producer, beginning a transaction first when none is
// open. It returns once sarama has taken m, or once the producer holds
// it back for a burst (SetBurst). Delivery is asynchronous, and its
// failure shows in Err and in the next Send or Commit. Send blocks while
// sarama's input buffer is full; it takes no context, because the record
// being processed is finished even when the application stops, and
// sarama fails what it cannot deliver.
//
// Send never ends a transaction. Once a record of the transaction has
// failed, every later Send returns that failure (wrapping [ErrFailed]) and
// Err keeps reporting it until Commit or Abort ends the transaction: a
// caller that ignores one error cannot go on to commit input whose output
// was lost, because Commit refuses a failed transaction. After an error
// from Send, stop sending and call Commit (which aborts) or Abort. A
// closed producer returns [ErrClosed].
func (p *Producer) Send(m *sarama.ProducerMessage) error {
	if p.closed {
		return ErrClosed
	}
	if p.eng != nil {
		return p.sendEngine(m)
	}
	if p.transactional && !p.inTxn {
		if err := p.Err(); err != nil {
			return err
		}
		if err := p.ap.BeginTxn(); err != nil {
			err = fmt.Errorf("txn: begin: %w", classify(err))
			p.setErr(err)
			return fmt.Errorf("%w: %w", ErrFailed, err)
		}
		p.inTxn, p.began = true, time.Now()
	}
	if err := p.enter(); err != nil {
		return err
	}
	p.pending = true
	p.held = append(p.held, m)
	if len(p.held) >= p.burst {
		p.Flush()
	}
	return nil
}

// enter counts a record in flight, or returns the failure of the
// transaction (wrapping ErrFailed), under one lock a record.
func (p *Producer) enter() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.errLocked(); err != nil {
		return err
	}
	if p.inflight == 0 {
		p.idle = make(chan struct{})
	}
	p.inflight++
	return nil
}

// SetBurst makes Send hold records back and hand them to sarama n at a
// time, in the order sent; n ≤ 1, the default, hands each record over at
// once. Each record crosses four of sarama's goroutines: one handed over
// alone wakes each of them for itself, while a burst lets each go on to
// the next record without sleeping, which saves CPU when records are
// sent faster than sarama takes them one by one. The caller that sets a
// burst calls Flush whenever sending pauses, so that the last records of
// a burst do not wait for the next; Wait, Commit, Abort and Close flush
// first. Records held back count as sent (Pending, Wait). Call SetBurst
// from the goroutine that sends; a smaller n takes effect at the next
// Send, which hands over what is held with it. Under exactly once it does
// nothing: weir's producer batches every record as Send takes it.
func (p *Producer) SetBurst(n int) { p.burst = n }

// Flush hands sarama every record Send holds back (see SetBurst), without
// waiting for their acknowledgements (Wait does). Call it from the
// goroutine that sends; it blocks, as Send does, while sarama's input
// buffer is full. Under exactly once it does nothing: a batch left open
// is sent after the client's Producer.Flush.Frequency (at least 1 ms),
// or at once by Wait and Commit, which lets a batch gather the records
// of several rounds of sending.
func (p *Producer) Flush() {
	if p.closed || p.eng != nil {
		return
	}
	in := p.ap.Input()
	for _, m := range p.held {
		in <- m
	}
	clear(p.held)
	p.held = p.held[:0]
}

// Wait blocks until every record sent so far is acknowledged or failed,
// without ending the transaction or the interval: a failure stays for Err
// and TakeRefused. Sending one record and waiting for it keeps it alone in
// its batch, so that a refusal names it and no other. Wait returns nil
// once the records are settled, whether they failed or not, and ctx's
// error wrapped when ctx ends first.
func (p *Producer) Wait(ctx context.Context) error {
	if p.closed {
		return ErrClosed
	}
	if p.eng != nil {
		p.eng.Flush()
	} else {
		p.Flush()
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
// of the current commit interval) wrapping [ErrFailed], or nil while every
// record so far was delivered or is still in flight. A [*RefusedError] in
// the chain names a record the broker or the client's limits refused. Err
// is safe to call from any goroutine.
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
// stays failed (Kafka fails the whole transaction) and must be aborted,
// and the caller skips the records when it reprocesses their input (a
// record's Metadata can say which input it came from).
func (p *Producer) TakeRefused() (refused []*RefusedError, n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	current := len(p.refused) > 0
	refused = append(p.aborted, p.refused...)
	n = p.nabortedRefusals + p.nrefused
	if len(refused) > maxRefused {
		refused = refused[:maxRefused]
	}
	if p.transactional && current && p.inTxn && p.err == nil {
		p.err = fmt.Errorf("%w (%d records refused)", p.refused[0], p.nrefused)
	}
	p.refused, p.nrefused, p.aborted, p.nabortedRefusals = nil, 0, nil, 0
	return refused, n
}

// Pending reports whether records were sent since the last commit or
// abort, that is whether a commit has output to settle even without
// offsets.
func (p *Producer) Pending() bool { return p.pending }

func (p *Producer) setErr(err error) {
	p.mu.Lock()
	if p.err == nil {
		p.err = err
	}
	p.mu.Unlock()
}

// settle waits until every record sent is acknowledged or failed, then
// reports the first failure of the interval and starts a new one. Records
// refused while no other failure happened are kept for TakeRefused and
// reported without starting a new interval.
func (p *Producer) settle(ctx context.Context) error {
	if err := p.Wait(ctx); err != nil {
		return err
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

// Commit ends the current transaction (or, at least once, the current
// commit interval). Call it from the goroutine that sends, every commit
// interval, and before giving up the input partitions (in a sarama
// handler's Cleanup).
//
// Exactly once (a producer with a transactional id): Commit adds offsets
// to the transaction with group's metadata and commits it, together with
// every record sent since the last commit. offsets maps topic → partition →
// the offset of the next record to consume (the last one processed plus
// one) for every input partition processed since the last commit; group is
// the consumer group member that consumed them ([SessionGroup]). With
// neither records nor offsets there is nothing to commit and Commit
// returns nil. Commit does not give up when ctx ends (a commit cut short
// would leave its outcome unknown): it blocks until the broker answers or
// the client's retries (Producer.Retry for the records,
// Producer.Transaction.Retry for the coordinator) run out.
// A failure wraps [ErrAborted], [ErrFenced] or [ErrAmbiguous] and its cause
// (see the package documentation for what to do): a transaction in which a
// record failed is never committed but aborted, and reported as ErrAborted
// wrapping the record's error. Offsets without a group are refused with
// neither the transaction nor the producer touched.
//
// At least once (no transactional id): Commit waits until every record is
// acknowledged, for at most ctx's lifetime, and returns the first delivery
// error of the interval; offsets and group are ignored, and the offsets
// are the caller's to commit after a nil return.
//
// A closed producer returns [ErrClosed].
func (p *Producer) Commit(ctx context.Context, offsets map[string]map[int32]int64, group *Group) error {
	return p.CommitWithMetadata(ctx, offsets, nil, group)
}

// CommitWithMetadata is [Producer.Commit] with a metadata string committed
// with each partition's offset (topic → partition → metadata; a partition
// missing from it gets none), as Kafka's OffsetAndMetadata: it comes back
// with the committed offset, for example to carry state that must move
// with the offsets, such as a partition's stream time.
func (p *Producer) CommitWithMetadata(ctx context.Context, offsets map[string]map[int32]int64, metadata map[string]map[int32]string, group *Group) error {
	if p.closed {
		return ErrClosed
	}
	if !p.transactional {
		return p.settle(ctx)
	}
	if p.eng != nil {
		return p.commitEngine(ctx, offsets, metadata, group)
	}
	p.Flush()
	if len(offsets) > 0 && group == nil {
		return errors.New("txn: Commit: offsets without the group that consumed them")
	}
	if err := p.Err(); err != nil {
		// A record of this transaction failed: it must not commit.
		return p.fail(err)
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
		if err := p.ap.AddOffsetsToTxnWithGroupMetadata(toPartitionOffsets(offsets, metadata), group); err != nil {
			return p.fail(fmt.Errorf("adding offsets: %w", err))
		}
	}
	// CommitTxn flushes the records of the transaction first.
	if err := p.ap.CommitTxn(); err != nil {
		if ferr := p.Err(); ferr != nil {
			err = fmt.Errorf("%w (%w)", ferr, err)
		}
		return p.fail(fmt.Errorf("commit: %w", err))
	}
	p.inTxn = false
	// Every record is acknowledged once CommitTxn returns (a delivery
	// error would have failed it): sarama hands each acknowledgement to
	// drain before it counts the record done, so this wait is drain's
	// bookkeeping only, and a context already done (a caller committing
	// in a session's Cleanup) must not turn a commit into a failure.
	if err := p.settle(context.WithoutCancel(ctx)); err != nil {
		return fmt.Errorf("%w: %w", ErrAmbiguous, err)
	}
	p.mu.Lock()
	p.lastCommitted, p.written = p.written, nil
	p.mu.Unlock()
	return nil
}

// LastCommitted returns, for each partition the last committed
// transaction wrote records to, the offset of the last of them, or nil
// when the last commit wrote no record (or none succeeded yet; at least
// once, always nil). A transaction that ends without committing leaves
// it as the last commit left it. The caller owns the map.
//
// A transaction's records stay open on a partition until its marker
// reaches the partition, and Kafka's coordinator completes a transaction
// without writing the marker to a partition whose leader it cannot find
// (it takes the partition for deleted): after a broker restart, records of
// a committed transaction may stay open. weir's runtime checks the
// partitions LastCommitted names after each commit.
func (p *Producer) LastCommitted() map[Partition]int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return maps.Clone(p.lastCommitted)
}

// fail handles a failed commit: abort when the error is abortable, then
// tell apart aborted, fenced and unknown outcomes. A zombie writing to a
// partition already in its transaction may see an abortable
// INVALID_TXN_STATE first and learn that it is fenced only on abort.
func (p *Producer) fail(cause error) error {
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
		p.discardErr()
		return fmt.Errorf("%w: %w", ErrAborted, cause)
	}
	return fmt.Errorf("%w: %w", ErrAmbiguous, cause)
}

// discardErr forgets the aborted transaction's failures, refusals
// included, once drain has counted its records: sarama's AbortTxn returns
// only after handing every record of the transaction back, so the wait is
// short and needs no context.
func (p *Producer) discardErr() {
	_ = p.Wait(context.Background())
	p.mu.Lock()
	p.keepAbortedRefusals()
	p.err, p.pending, p.written = nil, false, nil
	p.mu.Unlock()
}

// keepAbortedRefusals moves the refusals of a transaction that ended
// without committing where TakeRefused still finds them (a commit that
// failed on them aborts before its caller can look), while the next
// transaction starts clean. Called with mu held.
func (p *Producer) keepAbortedRefusals() {
	p.aborted = append(p.aborted, p.refused...)
	if len(p.aborted) > maxRefused {
		p.aborted = p.aborted[:maxRefused]
	}
	p.nabortedRefusals += p.nrefused
	p.refused, p.nrefused = nil, 0
}

// Abort ends the open transaction, if any, without committing it: for a
// caller that decided not to commit (its processing failed, or it stops
// without committing). Nothing of the transaction happens; reprocess from
// the last committed offsets. It returns nil when the transaction was
// aborted or none was open, and otherwise an error classified as for
// Commit ([ErrFenced] or [ErrAmbiguous]: replace the producer).
//
// At least once there is nothing to undo: Abort waits, for at most ctx's
// lifetime, for the records in flight and forgets the interval's failure.
// A closed producer returns [ErrClosed].
func (p *Producer) Abort(ctx context.Context) error {
	if p.closed {
		return ErrClosed
	}
	if !p.transactional {
		_ = p.settle(ctx)
		p.mu.Lock()
		p.err, p.refused, p.nrefused, p.pending = nil, nil, 0, false
		p.mu.Unlock()
		return nil
	}
	if p.eng != nil {
		return p.abortEngine(ctx)
	}
	if !p.inTxn {
		return nil
	}
	p.Flush()
	if err := p.ap.AbortTxn(); err != nil {
		return p.fail(fmt.Errorf("abort: %w", err))
	}
	p.inTxn = false
	p.discardErr()
	return nil
}

// OpenFor returns how long the current transaction has been open, or 0
// when none is. A producer fenced while its transaction was younger than
// the transaction timeout (Producer.Transaction.Timeout) was fenced by
// another producer with its transactional id, not by the coordinator
// aborting a transaction that timed out: rebuilding it would fence the
// other one in turn.
func (p *Producer) OpenFor() time.Duration {
	if !p.inTxn {
		return 0
	}
	return time.Since(p.began)
}

// Close closes the sarama producer, once: sarama panics on a second Close,
// so later calls return nil and every other method of a closed producer
// returns [ErrClosed]. It does not close the client New was given. An open
// transaction is left to the broker, which aborts it when the next
// producer with the same transactional id initialises or when it times
// out: commit or abort before closing a producer that will not be
// replaced. The error is sarama's, such as the records that failed while
// it shut down.
func (p *Producer) Close() error {
	if p.closed {
		return nil
	}
	if p.eng != nil {
		p.closed = true
		p.eng.Close()
		return nil
	}
	p.Flush()
	p.closed = true
	err := p.ap.Close()
	<-p.done
	return err
}

func toPartitionOffsets(offsets map[string]map[int32]int64, metadata map[string]map[int32]string) map[string][]*sarama.PartitionOffsetMetadata {
	out := make(map[string][]*sarama.PartitionOffsetMetadata, len(offsets))
	for topic, parts := range offsets {
		for p, off := range parts {
			pom := &sarama.PartitionOffsetMetadata{Partition: p, Offset: off, LeaderEpoch: -1}
			if m, ok := metadata[topic][p]; ok {
				pom.Metadata = &m
			}
			out[topic] = append(out[topic], pom)
		}
	}
	return out
}
