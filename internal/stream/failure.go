package stream

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"syscall"
	"time"

	"github.com/IBM/sarama"

	"github.com/weirstream/weir/internal/client"
	"github.com/weirstream/weir/internal/repair"
	"github.com/weirstream/weir/internal/task"
	"github.com/weirstream/weir/txn"
)

// This file is the thread's failure authority: every failure of a record,
// a punctuation or a commit reaches settle, which alone decides whether the
// thread goes on (after aborting and rewinding its tasks to their last
// commit) or stops. User code cannot hide a failure from it: the thread
// asks the producer after every record and every punctuation, whatever the
// processor returned, and a failed transaction never commits.

// maxSkips bounds the refused records a thread remembers to skip in a
// replay; each one cost an aborted transaction, so reaching it means
// something refuses most output, and the thread stops.
const maxSkips = 10_000

// skipKey names a refused record in a replay: the input record that
// produced it and the topic it was for.
type skipKey struct {
	topic     string
	partition int32
	offset    int64
	sink      string
}

// Send is the one way a record leaves the thread: it is checked against
// the limits of its topic (read at start) and the replay's skip list, then
// handed to the producer. A refused record is a *task.ProductionError: under
// ProductionErrors=Skip it is counted and dropped here (send returns nil);
// otherwise the thread is failed, whatever the caller does with the error.
func (th *Thread) Send(m *sarama.ProducerMessage) error {
	if th.failure != nil {
		return th.failure
	}
	o, _ := m.Metadata.(*client.Origin)
	if o != nil && o.Offset >= 0 && len(th.skips) > 0 {
		if cause, ok := th.skips[skipKey{o.Topic, o.Partition, o.Offset, m.Topic}]; ok {
			th.log.Debug("dropping a refused record again in the replay", "task", o.Task,
				"topic", o.Topic, "partition", o.Partition, "offset", o.Offset, "sink", m.Topic)
			var pe *task.ProductionError
			if errors.As(cause, &pe) {
				return th.deadLetterRefused(o, pe)
			}
			return nil
		}
	}
	size := m.ByteSize(2)
	limit := th.maxBytes
	lim := th.in.Layout.Limits[m.Topic]
	if lim.MaxBytes > 0 && lim.MaxBytes < limit {
		limit = lim.MaxBytes
	}
	switch {
	case size > limit:
		return th.refuse(o, newProductionError(o, m, size, limit, task.ErrRecordTooLarge))
	case lim.Compacted && m.Key == nil:
		return th.refuse(o, newProductionError(o, m, size, 0, task.ErrNullKeyOnCompactedTopic))
	}
	if err := th.producer.Send(m); err != nil {
		return err
	}
	th.noteTopic(m.Topic)
	if th.isolate[m.Topic] {
		// Finding the record the broker refuses: one record a batch.
		ctx, cancel := context.WithTimeout(context.Background(), th.in.TransactionTimeout)
		defer cancel()
		return th.producer.Wait(ctx)
	}
	return nil
}

// refuse applies ProductionErrors to a record refused before it was sent;
// o is the record's origin.
func (th *Thread) refuse(o *client.Origin, pe *task.ProductionError) error {
	if th.mustFail(o, pe) {
		th.failure = pe
		return pe
	}
	th.skipped(pe)
	return th.deadLetterRefused(o, pe)
}

// mustFail reports whether a refused record stops the thread: under
// ProductionErrors=Fail, and always for a changelog record (state cannot
// skip a change) and a dead-letter record (nothing is left to do with it).
func (th *Thread) mustFail(o *client.Origin, pe *task.ProductionError) bool {
	return pe.Store != "" || (o != nil && o.DeadLetter) || th.in.PoliciesFor(pe.Sink).Production.Fails()
}

// skipped counts and logs a refused record that ProductionErrors Skip or
// DeadLetter drops.
func (th *Thread) skipped(pe *task.ProductionError) {
	th.in.Metrics.RecordsSkipped.WithLabelValues(strconv.Itoa(th.idx), pe.Task, "production").Inc()
	th.log.Warn("dropping a record Kafka refuses", "task", pe.Task, "topic", pe.Topic, "partition", pe.Partition,
		"offset", pe.Offset, "punctuator", pe.Punctuator, "sink", pe.Sink, "size", pe.Size, "limit", pe.Limit,
		"dead_letter_topic", th.in.PoliciesFor(pe.Sink).Production.DeadLetterTopic(), "error", pe.Err)
}

// deadLetterRefused writes the dead-letter record of a refused record
// under ProductionErrors=DeadLetter: the input record that produced it
// (o.Input), or headers only for a punctuator's record.
func (th *Thread) deadLetterRefused(o *client.Origin, pe *task.ProductionError) error {
	topic := th.in.PoliciesFor(pe.Sink).Production.DeadLetterTopic()
	if topic == "" {
		return nil
	}
	var in *sarama.ConsumerMessage
	if o != nil {
		in = o.Input
	}
	m := task.DeadLetterRecord(topic, in, task.Failure{Application: th.in.ApplicationID, Task: pe.Task,
		Kind: task.KindProduction, Node: pe.Punctuator, Sink: pe.Sink, Err: pe.Err})
	th.in.Metrics.DeadLettered.WithLabelValues(strconv.Itoa(th.idx), pe.Task).Inc()
	return th.Send(m)
}

// ReplayFailure implements task.Host: the error of an input record the
// thread aborted a transaction for (replayWithout).
func (th *Thread) ReplayFailure(topic string, partition int32, offset int64) error {
	if len(th.skips) == 0 {
		return nil
	}
	return th.skips[skipKey{topic, partition, offset, ""}]
}

// replayWithout aborts the transaction and rewinds the tasks to their last
// commit, so that what re's record did before a processor failed on it is
// undone; the replay passes over the record (ReplayFailure). The abort is
// the policy at work, not a failure: it does not count towards
// MaxConsecutiveAborts, and maxSkips bounds how many records it serves.
func (th *Thread) replayWithout(re *task.RecordError) error {
	if len(th.skips) >= maxSkips {
		return fmt.Errorf("weir: thread %d: more than %d failed records to pass over before a commit: %w", th.idx, maxSkips, re)
	}
	th.skips[skipKey{re.Topic, re.Partition, re.Offset, ""}] = re
	th.log.Warn("a processor failed on a record; aborting the transaction and replaying without the record",
		"task", re.Task, "topic", re.Topic, "partition", re.Partition, "offset", re.Offset, "node", re.Node,
		"policy", string(th.in.PoliciesFor(re.Topic).Processing), "error", re.Err)
	ctx, cancel := context.WithTimeout(context.Background(), th.in.RebalanceTimeout)
	err := th.producer.Abort(ctx)
	cancel()
	if err != nil {
		_, err := th.settle(err)
		return err
	}
	th.in.Metrics.Transactions.WithLabelValues(strconv.Itoa(th.idx), "aborted").Inc()
	if err := th.checkDangling(th.producer, true, repair.LastTransaction{}); err != nil {
		if th.stopping() {
			return th.stoppedMidRepair("the check after an abort", err)
		}
		return err
	}
	return th.rewind(re)
}

func newProductionError(o *client.Origin, m *sarama.ProducerMessage, size, limit int, cause error) *task.ProductionError {
	pe := &task.ProductionError{Sink: m.Topic, Size: size, Limit: limit, Err: cause, Offset: -1}
	if o != nil {
		pe.Task, pe.Topic, pe.Partition, pe.Offset, pe.Punctuator, pe.Store = o.Task, o.Topic, o.Partition, o.Offset, o.Node, o.Store
	}
	return pe
}

// failed returns the thread's failure, if any: a record refused under
// ProductionErrors=Fail, or a record the producer could not deliver.
func (th *Thread) failed() error {
	if th.failure != nil {
		return th.failure
	}
	return th.producer.Err()
}

// afterWork settles the outcome of one input record or punctuation: the
// thread's failure state comes first, then the error user code returned.
// It returns nil when the thread goes on; settled reports that a failure
// was settled, with outcome o (the tasks may have been rewound or closed),
// so the caller must not touch them again this round.
func (th *Thread) afterWork(err error) (o outcome, settled bool, _ error) {
	if f := th.failed(); f != nil {
		o, err := th.settle(f)
		return o, true, err
	}
	if err != nil && (isTxnError(err) || errors.Is(err, txn.ErrClosed)) {
		o, err := th.settle(err)
		return o, true, err
	}
	var rw *task.ReplayWithoutError
	if errors.As(err, &rw) {
		return aborted, true, th.replayWithout(rw.Record)
	}
	return committed, false, err
}

// settle decides what a failure means. It returns what the thread did
// about it and nil when the thread goes on, or the error that stops it:
//
//   - a refused record (*task.ProductionError, or *txn.RefusedError found by the
//     broker): under Fail, and always for a changelog record, the thread
//     stops (shutdown aborts the open transaction); under Skip it is
//     counted, and under exactly once the transaction is aborted and the
//     tasks replay without the record;
//   - any other failed delivery: exactly once aborts and rewinds; at least
//     once stops, since the records already sent cannot be taken back;
//   - an aborted, fenced or ambiguous transaction: handleTxnError.
func (th *Thread) settle(err error) (outcome, error) {
	var pe *task.ProductionError
	if errors.As(err, &pe) {
		return aborted, pe
	}
	// The producer's list of refused records, not the error, says what
	// was refused: a commit that fails on a refusal may return before the
	// producer has heard of every refused record, or of any.
	var re *txn.RefusedError
	refused, n := th.producer.TakeRefused()
	if n > 0 || errors.As(err, &re) {
		if len(refused) == 0 {
			refused, n = []*txn.RefusedError{re}, 1
		}
		re = refused[0]
		if n > 1 {
			// The broker refuses a whole batch for one bad record and does
			// not say which (sarama drops KIP-467's record errors). Under
			// exactly once the transaction is replayed with the refused
			// topics' records sent one at a time, so that the next refusal
			// names the culprit alone; at least once, nothing can be
			// replayed and the refused records are reported as they are.
			topics := map[string]bool{}
			for _, r := range refused {
				topics[r.Msg.Topic] = true
			}
			if th.in.ExactlyOnce {
				th.log.Warn("Kafka refused a batch of records; replaying them one at a time to find the record it refuses",
					"records", n, "topics", len(topics))
				for topic := range topics {
					th.isolate[topic] = true
				}
				if txnEnded(err) {
					return th.act(err)
				}
				// Not wrapping re: no record of the batch is known to be bad.
				return th.settle(fmt.Errorf("%w: a batch of %d records refused: %v", txn.ErrFailed, n, re))
			}
			if !th.in.PoliciesFor(re.Msg.Topic).Production.Fails() {
				return aborted, fmt.Errorf("weir: thread %d: Kafka refused a batch of %d records without saying which one it refuses; at least once they cannot be replayed to find out: %w",
					th.idx, n, re)
			}
		}
		errs := make([]*task.ProductionError, len(refused))
		origins := make([]*client.Origin, len(refused))
		for i, r := range refused {
			origins[i], _ = r.Msg.Metadata.(*client.Origin)
			errs[i] = newProductionError(origins[i], r.Msg, r.Msg.ByteSize(2), 0, r.Err)
			if th.mustFail(origins[i], errs[i]) {
				return aborted, errs[i]
			}
		}
		for i, pe := range errs {
			th.skipped(pe)
			if !th.in.ExactlyOnce {
				// Nothing is replayed: the dead-letter record goes now.
				if err := th.deadLetterRefused(origins[i], pe); err != nil {
					return dropped, err
				}
				continue
			}
			if pe.Offset >= 0 {
				if len(th.skips) >= maxSkips {
					return aborted, fmt.Errorf("weir: thread %d: more than %d refused records to skip: %w", th.idx, maxSkips, pe)
				}
				// The replay drops the record, and dead-letters it then,
				// in the transaction that commits the input record.
				th.skips[skipKey{pe.Topic, pe.Partition, pe.Offset, pe.Sink}] = pe
			}
		}
		if n > len(refused) {
			th.log.Warn("more records refused than reported", "reported", len(refused), "refused", n)
		}
		if !th.in.ExactlyOnce {
			return dropped, nil
		}
		if txnEnded(err) {
			return th.act(err)
		}
		if err = th.producer.Err(); err == nil {
			err = fmt.Errorf("%w: %w", txn.ErrFailed, re)
		}
	}
	if errors.Is(err, txn.ErrFailed) && !txnEnded(err) {
		if !th.in.ExactlyOnce {
			return aborted, err
		}
		ctx, cancel := context.WithTimeout(context.Background(), th.in.RebalanceTimeout)
		aerr := th.producer.Abort(ctx)
		cancel()
		if aerr == nil {
			aerr = fmt.Errorf("%w: %w", txn.ErrAborted, err)
		}
		err = aerr
	}
	return th.act(err)
}

// groupMovedOn reports a commit the group refused because this member's
// generation is over or ending (what Kafka's clients call a failed commit:
// the tasks may have new owners already).
func groupMovedOn(err error) bool {
	return errors.Is(err, sarama.ErrUnknownMemberId) || errors.Is(err, sarama.ErrFencedInstancedId) ||
		errors.Is(err, sarama.ErrIllegalGeneration) || errors.Is(err, sarama.ErrRebalanceInProgress)
}

// txnEnded reports an error after which no transaction is open: it was
// aborted, or the producer is fenced or its outcome unknown.
func txnEnded(err error) bool {
	return errors.Is(err, txn.ErrAborted) || errors.Is(err, txn.ErrFenced) || errors.Is(err, txn.ErrAmbiguous)
}

// forgetSkips drops the skip entries that committed offsets have passed.
func (th *Thread) forgetSkips(committed map[string]map[int32]int64) {
	for k := range th.skips {
		if off, ok := committed[k.topic][k.partition]; ok && off > k.offset {
			delete(th.skips, k)
		}
	}
}

// A thread fenced maxFences times within fenceWindow, with no commit in
// between, stops: another instance shares its transactional ids.
const (
	maxFences   = 3
	fenceWindow = 5 * time.Minute
)

// fenceLog holds the recent fencings of a thread's producer since its
// last commit. Two instances with the same transactional ids fence each
// other with no commit in between; fencings that commits separate are the
// cluster's (a transaction coordinator that failed over, a transaction
// that outlived its timeout), which a rebuilt producer heals however
// often they come.
type fenceLog struct{ times []time.Time }

// fenced records a fencing at now and returns how many the log holds
// within fenceWindow.
func (f *fenceLog) fenced(now time.Time) int {
	f.times = append(slices.DeleteFunc(f.times, func(t time.Time) bool { return now.Sub(t) > fenceWindow }), now)
	return len(f.times)
}

// committed forgets the fencings: a transaction committed since.
func (f *fenceLog) committed() { f.times = f.times[:0] }

// isTxnError reports a failed transaction, from a commit or from sending a
// record into it.
func isTxnError(err error) bool {
	return errors.Is(err, txn.ErrAborted) || errors.Is(err, txn.ErrFenced) || errors.Is(err, txn.ErrAmbiguous) || errors.Is(err, txn.ErrFailed)
}

// outcomeOf names what a failed transaction came to: fenced, ambiguous or
// aborted; ok is false for an error that is none of them (a failure no
// transaction can undo, which stops the thread).
func outcomeOf(err error) (o outcome, ok bool) {
	switch {
	case errors.Is(err, txn.ErrFenced):
		return fenced, true
	case errors.Is(err, txn.ErrAmbiguous):
		return ambiguous, true
	case errors.Is(err, txn.ErrAborted):
		return aborted, true
	}
	return aborted, false
}

// act is the one place that acts on a failed transaction (see package
// txn): it returns the transaction's outcome and nil when the thread goes
// on, or the error that stops it.
//
//   - aborted: nothing of the transaction happened; the tasks rewind to
//     their last commit (in place, or by rejoining: see rewind);
//   - fenced: the producer is rebuilt and the tasks closed, unless another
//     instance shares this one's transactional ids, when the thread stops;
//   - ambiguous: the producer is rebuilt and the tasks closed, so that
//     they start again from what the group has committed;
//   - anything else stops the thread.
//
// Every one of them counts towards MaxConsecutiveAborts.
func (th *Thread) act(err error) (outcome, error) {
	o, ok := outcomeOf(err)
	if !ok {
		return o, err
	}
	// A thread whose transactions keep aborting makes no progress while it
	// looks alive: past the bound it fails with the cause. The first cause
	// of a streak is usually the telling one (a missing topic); later ones
	// may be the client's reaction to it (an open circuit breaker).
	n := th.aborts.Add(1)
	if n == 1 {
		th.firstAbort = err
	}
	if int(n) > th.in.MaxConsecutiveAborts {
		return o, fmt.Errorf("weir: thread %d: %d transactions aborted in a row without one committing (Config.MaxConsecutiveAborts is %d); the first: %v; the last: %w",
			th.idx, n, th.in.MaxConsecutiveAborts, th.firstAbort, err)
	}
	thread := strconv.Itoa(th.idx)
	th.in.Metrics.Transactions.WithLabelValues(thread, "aborted").Inc()
	switch o {
	case aborted:
		th.log.Warn("transaction aborted; tasks restart from the committed offsets", "error", err)
		if derr := th.checkDangling(th.producer, true, repair.LastTransaction{}); derr != nil {
			if th.stopping() {
				return o, th.stoppedMidRepair("the check after an abort", derr)
			}
			return o, derr
		}
		return o, th.rewind(err)
	case fenced:
		th.in.Metrics.ProducerEvents.WithLabelValues(thread, "fenced").Inc()
		// The producer's epoch was bumped: by the coordinator when this
		// thread's transaction timed out (a stall longer than
		// TransactionTimeout), or by another producer with the same
		// transactional id, that is another instance with this process id
		// (a later incarnation, or a copy of this state directory). The
		// first heals by rebuilding the producer. The second would make
		// the two fence each other forever: a transaction younger than the
		// timeout cannot have timed out, so this instance stops, as it
		// does after maxFences in fenceWindow with no commit in between,
		// whatever their cause.
		open := th.producer.OpenFor()
		th.resetTasks()
		if n := th.fences.fenced(time.Now()); open < th.in.TransactionTimeout || n >= maxFences {
			return o, fmt.Errorf("%w (transaction open %v, %d fencings in %v without a commit): another instance runs with this instance's process id (%s); this one stops: %w",
				ErrFenced, open.Round(time.Millisecond), n, fenceWindow, th.in.ProcessID, err)
		}
		if th.stopping() {
			th.log.Warn("producer fenced while the thread stops; the next owner of its tasks processes again from the committed offsets", "error", err)
			return o, nil
		}
		th.log.Warn("producer fenced; rebuilding it and rejoining", "error", err)
		return o, th.rebuildProducer()
	default: // ambiguous
		th.in.Metrics.ProducerEvents.WithLabelValues(thread, "rebuilt").Inc()
		th.resetTasks()
		if th.stopping() {
			th.log.Warn("transaction outcome unknown while the thread stops; the next owner of its tasks processes again from the committed offsets", "error", err)
			return o, nil
		}
		th.log.Warn("transaction outcome unknown; rebuilding the producer and rejoining", "error", err)
		return o, th.rebuildProducer()
	}
}

// stopping reports a thread told to stop: a fenced or ambiguous final
// commit (shutdown's) leaves no producer to rebuild, since nothing will
// use it, and the rebuild's checks would fail on the cancelled context
// and turn a clean stop into a failed one. The tasks are closed all the
// same; their next owner, or this instance's next start, checks for
// records left open when it initialises its producer.
func (th *Thread) stopping() bool { return th.ctx.Err() != nil }

// stoppedMidRepair ends a repair that the thread's stop cut short (a
// producer rebuild, or the open-transaction check after an abort, waiting
// for a broker that is down): no transaction has begun since the last one
// ended, so stopping here loses nothing. The tasks close without a commit,
// their uncommitted state discarded; their next owner, or this instance's
// next start, checks for records left open when it initialises its
// producer, and processes again from the committed offsets. The stop is
// clean: it returns nil.
func (th *Thread) stoppedMidRepair(what string, err error) error {
	th.log.Warn(what+" was cut short by the thread's stop; its tasks close without a commit, and their next owner checks for records left open", "error", err)
	th.resetTasks()
	return nil
}

// rewind takes the thread's tasks back to their last commit after an
// aborted transaction. In place when it can: each running task replays the
// records it processed since the commit, which the thread kept, and the
// group never hears of it. It rejoins the group instead (closing the tasks,
// which the sticky assignment gives back at the committed offsets) when the
// kept records were let go because they passed Stores.MaxBufferBytes, or
// when the group has moved on without this member's generation (unknown
// member, fenced static instance, a generation that is over, a rebalance
// in progress): the group refuses every commit of the old generation, so
// replaying its tasks would only abort again, up to MaxConsecutiveAborts
// within a second at the default commit interval, before the session ends.
func (th *Thread) rewind(cause error) error {
	mode := "in_place"
	if th.replayLost || groupMovedOn(cause) {
		mode = "rejoin"
	}
	th.in.Metrics.Rewinds.WithLabelValues(strconv.Itoa(th.idx), mode).Inc()
	if mode == "rejoin" {
		th.resetTasks()
		th.replayBytes, th.replayLost = 0, false
		return nil
	}
	for _, id := range th.order {
		t := th.tasks[id]
		if !t.Initialized() {
			continue // restoring: it has processed nothing
		}
		if err := t.Rewind(); err != nil {
			return err
		}
	}
	th.replayBytes = 0
	th.publish()
	return nil
}

// Keep implements task.Host: a task keeps a processed record until the
// commit that covers it, for a rewind in place, while the thread's kept
// records stay within MaxBufferBytes.
func (th *Thread) Keep(size int) bool {
	if th.replayLost || !th.in.ExactlyOnce {
		return false
	}
	th.replayBytes += size
	if th.replayBytes > th.in.MaxBufferBytes {
		// Too much to keep: let it all go; a rewind before the next
		// commit rejoins the group.
		th.replayLost = true
		for _, id := range th.order {
			th.tasks[id].ForgetKept()
		}
		return false
	}
	return true
}

// PartitionCount implements task.Host.
func (th *Thread) PartitionCount(topic string) (int32, error) {
	ps, err := th.client.Partitions(topic)
	if err != nil {
		return 0, fmt.Errorf("weir: partitions of %s: %w", topic, err)
	}
	return int32(len(ps)), nil
}

// rebuildProducer replaces the producer: a fenced producer is dead, and
// one whose last commit has an unknown outcome must not be reused. The new
// producer is created before the old one is closed, so that a failed
// creation leaves the thread a producer to shut down with (whose calls then
// fail with txn.ErrClosed or its own error, never a panic).
func (th *Thread) rebuildProducer() error {
	p, err := th.initProducer()
	if err != nil && th.stopping() {
		return th.stoppedMidRepair("rebuilding the producer", err)
	}
	if err != nil {
		return fmt.Errorf("weir: thread %d: rebuilding producer: %w", th.idx, err)
	}
	if err := th.producer.Close(); err != nil {
		th.log.Debug("closing the old producer", "error", err)
	}
	th.producer = p
	return nil
}

// initProducer builds a producer (newProducer), again and again while it
// fails for a reason that passes. The transaction coordinator may not
// answer at once: one that just took over from a broker that died, or
// whose previous transaction cannot complete while its partitions lack
// in-sync replicas, answers CONCURRENT_TRANSACTIONS or NOT_COORDINATOR for
// as long as that lasts. Stopping the thread would not end it sooner, so
// the thread tries again, with a warning each time, until the coordinator
// answers, the error is not one that passes, or the thread stops.
func (th *Thread) initProducer() (*txn.Producer, error) {
	wait := rebuildFirstWait
	for attempt := 1; ; attempt++ {
		p, err := th.newProducer()
		if err == nil {
			return p, nil
		}
		if !initRetriable(err) || th.ctx.Err() != nil {
			return nil, err
		}
		th.log.Warn("the transaction coordinator cannot initialise the producer yet; trying again", "attempt", attempt, "retry_in", wait, "error", err)
		t := time.NewTimer(wait)
		select {
		case <-th.ctx.Done():
		case <-t.C:
		}
		t.Stop()
		wait = min(2*wait, rebuildMaxWait)
	}
}

// Waits between attempts to rebuild a producer whose coordinator is not
// ready (rebuildProducer).
const (
	rebuildFirstWait = 200 * time.Millisecond
	rebuildMaxWait   = 5 * time.Second
)

// initRetriable reports whether initialising a transactional producer
// failed for a reason that passes by itself: the coordinator moving,
// loading or finishing the previous transaction, or no broker reachable
// for now. A fenced producer, refused permissions or a bad configuration
// do not pass.
func initRetriable(err error) bool {
	if errors.Is(err, txn.ErrFenced) {
		return false
	}
	var kerr sarama.KError
	if errors.As(err, &kerr) {
		switch kerr {
		case sarama.ErrConcurrentTransactions, sarama.ErrConsumerCoordinatorNotAvailable, sarama.ErrNotCoordinatorForConsumer,
			sarama.ErrOffsetsLoadInProgress, sarama.ErrRequestTimedOut, sarama.ErrNetworkException, sarama.ErrNotEnoughReplicas,
			sarama.ErrNotEnoughReplicasAfterAppend, sarama.ErrLeaderNotAvailable, sarama.ErrNotLeaderForPartition:
			return true
		}
		return false
	}
	var nerr net.Error
	return errors.Is(err, sarama.ErrOutOfBrokers) || errors.Is(err, sarama.ErrNotConnected) ||
		errors.Is(err, io.EOF) || errors.As(err, &nerr) || errors.Is(err, syscall.ECONNREFUSED)
}
