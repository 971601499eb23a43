package stream

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/IBM/sarama"

	"github.com/weirstream/weir/internal/client"
	"github.com/weirstream/weir/txn"
)

// outcome is what a commit came to, when it did not stop the thread.
type outcome int

const (
	// committed: the input offsets, output and state changes are
	// committed, or there was nothing to commit.
	committed outcome = iota
	// deferred: at least once, the output and the state are written but
	// the group refused the offsets for now (it moved to a new
	// generation); the next commit carries them.
	deferred
	// aborted: the transaction was aborted and nothing of it happened;
	// the tasks went back to their last commit (see Thread.rewind).
	aborted
	// fenced: the producer was fenced; it was rebuilt and the tasks
	// closed, to come back at the committed offsets.
	fenced
	// ambiguous: the commit's outcome is unknown; the producer was
	// rebuilt and the tasks closed, as when fenced.
	ambiguous
	// dropped: at least once, records Kafka refused were dropped under
	// ProductionErrors=Skip or DeadLetter; nothing was undone.
	dropped
	// untouched: not a commit's outcome, afterWork's when there was no
	// failure to settle: the tasks are as they were, and the caller goes
	// on with them.
	untouched
)

// committer makes what a thread sent since its last commit durable with
// the input offsets that produced it. The thread has one, chosen by the
// guarantee (exactlyOnce or atLeastOnce); the parts common to both (the
// record caches, the changelog records, the thread's failure state) come
// first, in Thread.commitLocked. A commit returns committed or deferred;
// a failed transaction goes to the thread's failure authority (settle,
// then act), and its outcome comes back from there.
type committer interface {
	commit(ctx context.Context, offsets map[string]map[int32]int64, metadata map[string]map[int32]string) (outcome, error)
}

// committerFor returns th's committer for the guarantee.
func committerFor(th *Thread) committer {
	if th.in.ExactlyOnce {
		return exactlyOnce{th}
	}
	return atLeastOnce{th}
}

// commitDue commits unless this member is between its JoinGroup and its
// new assignment (inRebalance), when the commit would carry the
// generation the group is leaving; done reports whether it committed.
// The check and the commit hold the commit gate together, so userData
// cannot mark a rebalance in between.
func (th *Thread) commitDue() (done bool, err error) {
	th.committing <- struct{}{}
	defer func() { <-th.committing }()
	if th.inRebalance() {
		return false, nil
	}
	_, err = th.commitLocked()
	return true, err
}

// commit commits whatever the rebalance state (a revocation, the last
// commit of a stopping thread), holding the commit gate. A revocation's
// commit comes right after the new assignment, which sarama hands over
// before it stores the new generation in the session; it first waits for
// that generation (awaitAssigned), or it would carry the old one and
// abort with ILLEGAL_GENERATION.
func (th *Thread) commit() (outcome, error) {
	th.awaitAssigned()
	th.committing <- struct{}{}
	defer func() { <-th.committing }()
	return th.commitLocked()
}

// awaitAssigned waits until the group session runs in the generation of
// this member's newest assignment, when one arrived (onAssignment) and
// the session does not yet; at most half the transaction timeout, as long
// as the rebalance window is trusted (inRebalance). sarama stores the
// generation right after the assignment, without waiting for anything
// of the thread's, so the wait is short.
func (th *Thread) awaitAssigned() {
	deadline := time.Now().Add(th.in.TransactionTimeout / 2)
	for {
		gen := th.assignedGen.Load()
		sess := th.session()
		if gen == 0 || sess == nil || sess.GenerationID() >= gen || !time.Now().Before(deadline) {
			return
		}
		time.Sleep(time.Millisecond)
	}
}

// commitLocked is the one place where a thread commits; the caller holds
// the commit gate.
//
// At least once: produce the buffered state changes to the changelogs,
// wait until every record is acknowledged, write the changes to Badger
// with their checkpoints, then commit the input offsets.
//
// Exactly once: the changelog records join the thread's transaction, which
// commits together with the input offsets and the group's metadata; only
// then are the changes written to Badger with their checkpoints. A failed
// transaction is settled (see settle): the thread stops, or its tasks go
// back to their last commit and the outcome is rewound.
//
// At least once, a commit that failed is the last one the thread tries:
// the records sent before it may be lost (a delivery that failed while
// the flush waited for it, whose error the flush consumed), and a later
// commit would carry offsets past them. Every commit after it returns the
// same error, so the thread stops and the next owner of its tasks
// processes again from the last committed offsets.
func (th *Thread) commitLocked() (outcome, error) {
	if th.broken != nil {
		return committed, th.broken
	}
	o, err := th.commitOnce()
	if err != nil && !th.in.ExactlyOnce {
		th.broken = fmt.Errorf("weir: thread %d: no commit after a failed one: %w", th.idx, err)
	}
	return o, err
}

// commitOnce is commitLocked's work, without its guard.
func (th *Thread) commitOnce() (outcome, error) {
	th.lastCommit = time.Now()
	offsets := map[string]map[int32]int64{}
	metadata := map[string]map[int32]string{}
	for _, id := range th.order {
		// What the record caches hold, the changelog records and the
		// task's positions go into this commit.
		if o, err := th.afterWork(th.tasks[id].PrepareCommit(offsets, metadata)); err != nil || o != untouched {
			return o, err
		}
	}
	if err := th.failed(); err != nil {
		// Never commit past a record that was refused or lost.
		return th.settle(err)
	}
	if len(offsets) == 0 && !th.producer.Pending() {
		th.idle()
		return committed, nil
	}
	// Not th.ctx: the last commit runs after the thread was told to stop.
	ctx, cancel := context.WithTimeout(context.Background(), th.in.RebalanceTimeout)
	defer cancel()
	start := time.Now()
	defer func() {
		th.in.Metrics.CommitDuration.WithLabelValues(strconv.Itoa(th.idx)).Observe(time.Since(start).Seconds())
	}()
	return th.committer.commit(ctx, offsets, metadata)
}

// atLeastOnce commits at least once: it waits until every record sent is
// acknowledged (the changelog records among them), writes the state
// changes to Badger with their checkpoints, then commits the input
// offsets to the group.
type atLeastOnce struct{ th *Thread }

func (c atLeastOnce) commit(ctx context.Context, offsets map[string]map[int32]int64, metadata map[string]map[int32]string) (outcome, error) {
	th := c.th
	if err := th.producer.Commit(ctx, nil, nil); err != nil {
		// Refused records that ProductionErrors=Skip drops leave the
		// interval intact; anything else stops the thread.
		if _, err := th.settle(err); err != nil {
			return committed, th.failCommit(err)
		}
		if err := th.producer.Commit(ctx, nil, nil); err != nil {
			return committed, th.failCommit(err)
		}
	}
	// State follows the changelog, which now holds every change: write it
	// to Badger whatever happens to the offsets below.
	if err := th.applyState(); err != nil {
		return committed, err
	}
	if len(offsets) == 0 {
		th.progressed()
		return committed, nil
	}
	sess := th.session()
	if sess == nil {
		return deferred, nil
	}
	err := client.CommitOffsets(ctx, th.client, th.in.ApplicationID, sess.GenerationID(), sess.MemberID(), th.instance, offsets, metadata)
	if errors.Is(err, client.ErrTasksMigrated) {
		// The group moved on to a new generation while the commit was
		// under way (a cooperative rebalance changes it under a running
		// session). Tasks that really moved are revoked through
		// ConsumeClaim, which commits again; the rest commit next time.
		th.log.Debug("commit deferred", "error", err)
		return deferred, nil
	}
	if err != nil {
		return committed, err
	}
	th.committed(offsets)
	return committed, nil
}

// exactlyOnce commits the thread's transaction, which holds the output and
// the changelog records, together with the input offsets and the group's
// metadata (so that a zombie member cannot commit); only then are the
// state changes written to Badger with their checkpoints.
type exactlyOnce struct{ th *Thread }

func (c exactlyOnce) commit(ctx context.Context, offsets map[string]map[int32]int64, metadata map[string]map[int32]string) (outcome, error) {
	th := c.th
	sess := th.session()
	if sess == nil {
		return th.settle(fmt.Errorf("%w: no group session to commit with", txn.ErrFailed))
	}
	var instance *string
	if th.instance != "" {
		instance = &th.instance
	}
	group := sarama.NewConsumerGroupMetadataFromSession(sess, th.in.ApplicationID, instance)
	start := time.Now()
	if err := th.producer.CommitWithMetadata(ctx, offsets, metadata, group); err != nil {
		return th.settle(err)
	}
	th.in.Metrics.Transactions.WithLabelValues(strconv.Itoa(th.idx), "committed").Inc()
	if err := th.applyState(); err != nil {
		return committed, err
	}
	th.committed(offsets)
	took := time.Since(start)
	th.log.Debug("transaction committed", "took", took)
	if err := th.guard.AfterCommit(th.producer); err != nil {
		return committed, err
	}
	if limit := th.requestTimeout(); limit > 0 && took >= limit {
		// A request of this commit may have timed out and been sent
		// again by sarama, which retries transactional requests on a new
		// connection without telling us: the first copy can still reach
		// the broker, and a late EndTxn would end the next transaction,
		// half written (sarama has no KIP-890 protection). A new producer
		// bumps the epoch, and the broker refuses every late copy.
		th.in.Metrics.ProducerEvents.WithLabelValues(strconv.Itoa(th.idx), "rebuilt").Inc()
		th.log.Warn("a commit took longer than the request timeout; rebuilding the producer so that no late request of it can reach a later transaction", "took", took.Round(time.Millisecond), "request_timeout", limit)
		if err := th.rebuildProducer(); err != nil {
			return committed, err
		}
	}
	return committed, nil
}

// requestTimeout is how long a request of the producer waits for its
// response (sarama's Net.ReadTimeout), 0 when unknown.
func (th *Thread) requestTimeout() time.Duration {
	if th.pclient != nil {
		return th.pclient.Config().Net.ReadTimeout
	}
	if th.in.Client != nil {
		return th.in.Client.RequestTimeout
	}
	return 0
}

// failCommit handles a changelog or flush failure at least once: the
// thread stops, its uncommitted state discarded.
func (th *Thread) failCommit(err error) error {
	for _, id := range th.order {
		th.tasks[id].DiscardState()
	}
	return err
}

func (th *Thread) session() sarama.ConsumerGroupSession {
	th.mu.Lock()
	defer th.mu.Unlock()
	return th.sess
}

// applyState writes the committed state changes of every task to Badger,
// with their checkpoints, in one batch.
func (th *Thread) applyState() error {
	c := th.in.DB.NewCommit()
	now := time.Now()
	for _, id := range th.order {
		if err := th.tasks[id].Stage(c, now); err != nil {
			c.Cancel()
			return err
		}
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("weir: thread %d: %w", th.idx, err)
	}
	for _, id := range th.order {
		th.tasks[id].Applied()
	}
	return nil
}

// idle records a commit that had nothing to commit. The thread is not
// stuck, so the last-commit gauge advances, unless transactions aborted
// since the last commit: a thread whose tasks an abort closed (to come back
// after a rejoin) has nothing to commit while it waits for them, and is
// not idle but between attempts. The abort streak stays either way, so
// that an abort-and-rejoin loop reaches MaxConsecutiveAborts.
func (th *Thread) idle() {
	if th.aborts.Load() == 0 {
		th.in.Metrics.LastCommit.WithLabelValues(strconv.Itoa(th.idx)).SetToCurrentTime()
	}
}

// progressed records a commit that succeeded: the abort streak ends, and
// the fencings before it say nothing of another instance.
func (th *Thread) progressed() {
	th.aborts.Store(0)
	th.fences.committed()
	th.firstAbort = nil
	th.in.Metrics.LastCommit.WithLabelValues(strconv.Itoa(th.idx)).SetToCurrentTime()
}

// committed records committed offsets.
func (th *Thread) committed(offsets map[string]map[int32]int64) {
	th.progressed()
	for _, id := range th.order {
		th.tasks[id].PostCommit(offsets)
	}
	th.replayBytes, th.replayLost = 0, false
	clear(th.isolate)
	th.publish()
	th.forgetSkips(offsets)
	th.purge(offsets)
}

// purge deletes consumed records of repartition topics, at most once per
// Topics.PurgeInterval, so the topics do not grow without bound.
func (th *Thread) purge(committed map[string]map[int32]int64) {
	if time.Since(th.lastPurge) < th.in.PurgeInterval {
		return
	}
	th.lastPurge = time.Now()
	for topic, parts := range committed {
		if !th.in.Layout.Internal[topic] {
			continue
		}
		if err := th.in.Admin.DeleteRecords(topic, parts); err != nil {
			th.log.Warn("purging repartition topic", "topic", topic, "error", err)
		}
	}
}

// shutdown commits what was processed, closes every task and returns
// cause, or the commit's error when there is no cause. A thread that stops
// on a failure commits nothing (as Kafka Streams closes its tasks dirty):
// the failing record may have produced part of its output, and at least
// once a delivery may have failed whose error a flush already consumed,
// so offsets committed now could pass records that never reached Kafka.
// Under exactly once the open transaction is aborted; either way the
// uncommitted state is discarded, and the next owner of the tasks
// processes again from the last committed offsets.
func (th *Thread) shutdown(cause error) error {
	if cause != nil {
		if th.in.ExactlyOnce {
			ctx, cancel := context.WithTimeout(context.Background(), th.in.RebalanceTimeout)
			// A closed producer (a rebuild that failed) has nothing to
			// abort: its transaction is the broker's to abort.
			if err := th.producer.Abort(ctx); err != nil {
				th.log.Warn("aborting the last transaction", "error", err)
			}
			cancel()
		}
		for _, id := range th.order {
			th.tasks[id].DiscardState()
		}
	} else if o, err := th.commit(); err != nil {
		th.log.Warn("final commit failed", "error", err)
		cause = err
	} else if o != committed && o != deferred {
		// Nothing is lost: the next owner of the tasks processes again
		// what this commit would have covered.
		th.log.Warn("the final commit did not commit; the records since the last commit will be processed again", "outcome", o)
	}
	for _, id := range slices.Clone(th.order) {
		th.closeTask(th.tasks[id])
	}
	th.publish()
	if cause != nil {
		th.log.Error("thread stopped", "error", cause)
	}
	return cause
}

// String names the outcome, for logs.
func (o outcome) String() string {
	switch o {
	case committed:
		return "committed"
	case deferred:
		return "deferred"
	case aborted:
		return "aborted"
	case fenced:
		return "fenced"
	case ambiguous:
		return "ambiguous"
	case dropped:
		return "dropped"
	case untouched:
		return "untouched"
	}
	return fmt.Sprintf("outcome(%d)", int(o))
}
