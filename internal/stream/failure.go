package stream

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"
	"time"

	"github.com/IBM/sarama"

	"github.com/weirstream/weir/internal/client"
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
	// digest tells apart the records one input record produces for one
	// sink (recordDigest): the replay drops the refused record only, not
	// its siblings. 0 for a processing failure (sink "").
	digest uint64
}

// recordDigest is an FNV-1a hash of a record's key and value, with their
// lengths (and whether each is null), so that a replay finds again the
// record the broker refused among the records of the same input record
// for the same sink. Records that are the same bytes are refused alike.
func recordDigest(m *sarama.ProducerMessage) uint64 {
	h := fnv.New64a()
	for _, e := range []sarama.Encoder{m.Key, m.Value} {
		var n [9]byte
		if e == nil {
			n[0] = 1
			h.Write(n[:])
			continue
		}
		b, err := e.Encode()
		if err != nil {
			n[0] = 2
		}
		binary.BigEndian.PutUint64(n[1:], uint64(len(b)))
		h.Write(n[:])
		h.Write(b)
	}
	return h.Sum64()
}

// ReplayFailure implements task.Host: the error of an input record the
// thread aborted a transaction for (replayWithout).
func (th *Thread) ReplayFailure(topic string, partition int32, offset int64) error {
	if len(th.skips) == 0 {
		return nil
	}
	return th.skips[skipKey{topic, partition, offset, "", 0}]
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
	th.skips[skipKey{re.Topic, re.Partition, re.Offset, "", 0}] = re
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
	if err := th.guard.AfterAbort(th.producer); err != nil {
		if th.stopping() {
			return th.stoppedMidRepair("the check after an abort", err)
		}
		return err
	}
	return th.rewind(re)
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
// It returns nil when the thread goes on, with untouched when there was
// nothing to settle; any other outcome says a failure was settled (the
// tasks may have been rewound or closed), so the caller must not touch
// them again this round.
func (th *Thread) afterWork(err error) (outcome, error) {
	if f := th.failed(); f != nil {
		return th.settle(f)
	}
	if err != nil && (isTxnError(err) || errors.Is(err, txn.ErrClosed)) {
		return th.settle(err)
	}
	var rw *task.ReplayWithoutError
	if errors.As(err, &rw) {
		return aborted, th.replayWithout(rw.Record)
	}
	return untouched, err
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
		o, next, done := th.settleRefused(err, refused, n)
		if done {
			return o, next
		}
		err = next
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

// settleRefused is settle for records the broker refused (refused, of n
// in all; err is the failure that reported them). When done, o and next
// are settle's answer; otherwise next is the failed transaction that
// settle aborts and replays, the refused records having been marked to
// be skipped in the replay.
func (th *Thread) settleRefused(err error, refused []*txn.RefusedError, n int) (o outcome, next error, done bool) {
	re := refused[0]
	if n > 1 {
		if o, next, done = th.settleRefusedBatch(err, refused, n); done {
			return o, next, true
		}
	}
	errs := make([]*task.ProductionError, len(refused))
	origins := make([]*client.Origin, len(refused))
	for i, r := range refused {
		origins[i], _ = r.Msg.Metadata.(*client.Origin)
		errs[i] = task.NewProductionError(origins[i], r.Msg, r.Msg.ByteSize(2), 0, r.Err)
		if th.mustFail(origins[i], errs[i]) {
			return aborted, errs[i], true
		}
	}
	for i, pe := range errs {
		th.skipped(pe)
		if !th.in.ExactlyOnce {
			// Nothing is replayed: the dead-letter record goes now.
			if err := th.deadLetterRefused(origins[i], pe); err != nil {
				return dropped, err, true
			}
			continue
		}
		if pe.Offset >= 0 {
			if len(th.skips) >= maxSkips {
				return aborted, fmt.Errorf("weir: thread %d: more than %d refused records to skip: %w", th.idx, maxSkips, pe), true
			}
			// The replay drops the record, and dead-letters it then,
			// in the transaction that commits the input record.
			th.skips[skipKey{pe.Topic, pe.Partition, pe.Offset, pe.Sink, recordDigest(refused[i].Msg)}] = pe
		}
	}
	if n > len(refused) {
		th.log.Warn("more records refused than reported", "reported", len(refused), "refused", n)
	}
	if !th.in.ExactlyOnce {
		return dropped, nil, true
	}
	if txnEnded(err) {
		o, err := th.act(err)
		return o, err, true
	}
	if next = th.producer.Err(); next == nil {
		next = fmt.Errorf("%w: %w", txn.ErrFailed, re)
	}
	return aborted, next, false
}

// settleRefusedBatch is settleRefused for a refusal of n > 1 records. The
// broker refuses a whole batch for one bad record and does not say which
// (sarama drops KIP-467's record errors). Under exactly once the
// transaction is replayed with the refused topics' records sent one at a
// time, so that the next refusal names the culprit alone; at least once,
// nothing can be replayed and the refused records are reported as they
// are (not done: settleRefused goes on with them) unless the policy
// skips them, which it cannot do without knowing which.
func (th *Thread) settleRefusedBatch(err error, refused []*txn.RefusedError, n int) (o outcome, next error, done bool) {
	re := refused[0]
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
			o, err := th.act(err)
			return o, err, true
		}
		// Not wrapping re: no record of the batch is known to be bad.
		o, err := th.settle(fmt.Errorf("%w: a batch of %d records refused: %v", txn.ErrFailed, n, re))
		return o, err, true
	}
	if !th.in.PoliciesFor(re.Msg.Topic).Production.Fails() {
		return aborted, fmt.Errorf("weir: thread %d: Kafka refused a batch of %d records without saying which one it refuses; at least once they cannot be replayed to find out: %w",
			th.idx, n, re), true
	}
	return 0, nil, false
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
//
// A producer is fenced once: a fenced producer that is not rebuilt (a
// thread that stops tries its commit before revocation and its final
// commit on it) fails again on the same epoch, and those failures are not
// new fencings.
type fenceLog struct {
	times []time.Time
	last  *txn.Producer // the producer of the last fencing recorded
}

// fenced records a fencing of p at now and returns how many the log holds
// within fenceWindow; a fencing of the producer already recorded last
// counts nothing more.
func (f *fenceLog) fenced(now time.Time, p *txn.Producer) int {
	f.times = slices.DeleteFunc(f.times, func(t time.Time) bool { return now.Sub(t) > fenceWindow })
	if p == nil || p != f.last {
		f.times = append(f.times, now)
	}
	f.last = p
	return len(f.times)
}

// committed forgets the fencings: a transaction committed since.
func (f *fenceLog) committed() { f.times, f.last = f.times[:0], nil }

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
		if derr := th.guard.AfterAbort(th.producer); derr != nil {
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
		if n := th.fences.fenced(time.Now(), th.producer); open < th.in.TransactionTimeout || n >= maxFences {
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

// Waits between attempts to rebuild a producer whose coordinator is not
// ready (rebuildProducer).
const (
	rebuildFirstWait = 200 * time.Millisecond
	rebuildMaxWait   = 5 * time.Second
)
