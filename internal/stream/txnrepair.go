package stream

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
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

// This file is the thread's side of the open-transaction repair: building
// a producer (initialising it, with retries while its coordinator moves)
// and the checks that run when a producer is built, after an abort and
// after every commit (checkDangling, ensureCommitted), with their
// fail-safe rule: a check that cannot be made is retried, and no
// transaction starts until it passes. The checks themselves and the
// transactions that end open records are package internal/repair's.

// buildProducer initialises a transactional producer (create) and runs
// the open-transaction checks on it (check), with a new producer epoch
// when a check is fenced (at most producerInitAttempts in all). Before the
// first InitProducerId moves the id on, once per producer built, it asks
// the coordinator whether the id's last transaction committed
// (lastBefore), and gives every check that answer.
func (th *Thread) buildProducer(create func() (*txn.Producer, error), check func(*txn.Producer, bool, repair.LastTransaction) error) (*txn.Producer, error) {
	for attempt := 1; ; attempt++ {
		for th.lastBefore == nil {
			last, err := th.lastTransaction()
			if err == nil {
				th.lastBefore = &last
			} else if err := th.awaitCheckable(err); err != nil {
				return nil, err
			}
		}
		p, err := create()
		if err != nil {
			return nil, err
		}
		if err = check(p, false, *th.lastBefore); err == nil {
			th.lastBefore = nil
			return p, nil
		}
		p.Close()
		// Fenced while ending records a broker left open (a coordinator
		// just restarted may fence the epoch it gave): a new producer
		// epoch tries again.
		if !errors.Is(err, txn.ErrFenced) || attempt >= producerInitAttempts || th.ctx.Err() != nil {
			return nil, err
		}
		th.log.Warn("producer fenced while ending records left open; initialising it again", "attempt", attempt, "error", err)
	}
}

// checkDangling runs after the thread's transactional producer p was
// initialised, which ends any transaction of its transactional id: no
// partition the application writes may then hold an open transaction of
// its producer id. One that does kept records of a transaction the
// coordinator aborted without its marker reaching the partition (seen
// after broker restarts), and the thread's next commit there would commit
// them (repair.DanglingError). The thread ends them with an aborted
// transaction of its own over those partitions, one record each, checks
// again, and fails if any is still open after danglingAttempts aborts. It
// runs again after every transaction the thread aborts: the abort's
// markers can be lost the same way, and the next commit would commit
// what the abort should have ended. At least once there is nothing to
// check.
//
// A check that cannot be made fails safe. When the broker can never
// answer it (before Kafka 3.0, the requests refused by ACLs:
// cannotEverCheck) the thread logs so once and stops checking, as it
// always has on such clusters. Any other failure (a broker restarting, a
// partition whose leader moves, no answer within danglingCallTimeout) is
// retried with backoff, a warning and
// weir_producer_events_total{reason="dangling_check_failed"} each time,
// for as long as it lasts or until the thread stops: the thread starts
// no transaction meanwhile, since its first commit could commit records
// the check has not yet seen.
//
// At producer initialisation no transaction of the id can be in progress
// on a real broker (InitProducerId ended it), so one that is reported as
// such means the broker cannot answer this check (an embedded test
// broker): the thread then stops checking. After an abort the check waits
// up to danglingWait for the abort's markers.
//
// Records left open on a partition by the id's last transaction, which its
// coordinator reports committed (last, asked before the producer was
// initialised; repair.LastTransaction.Committed), lost their commit marker:
// an abort would drop output whose input offsets are committed. Those the
// thread ends with a commit instead (repair.CommitOver), which writes no
// record. Right after an abort of its own the thread knows no such thing,
// and aborts; once it has nothing pending it asks the coordinator again
// (checkOwnOffsets).
func (th *Thread) checkDangling(p *txn.Producer, afterAbort bool, last repair.LastTransaction) error {
	if th.pclient == nil || th.in.Admin == nil || th.noDanglingCheck.Load() {
		return nil
	}
	id := th.pclient.Config().Producer.Transaction.ID
	if id == "" {
		return nil
	}
	topics := map[string][]int32{}
	// The group's offsets are written in the transaction too: an offset
	// commit left open there would make the group's offset fetches fail
	// as unstable until a marker comes, and the next commit's marker would
	// commit the aborted transaction's offsets.
	for _, topic := range th.writtenTopics() {
		for {
			ps, err := th.pclient.Partitions(topic)
			if err == nil {
				topics[topic] = ps
				break
			}
			if errors.Is(err, sarama.ErrUnknownTopicOrPartition) {
				break // a topic that does not exist holds no records
			}
			// Not knowing a topic's partitions is not knowing what they hold.
			if err := th.awaitCheckable(fmt.Errorf("partitions of %s: %w", topic, err)); err != nil {
				return err
			}
		}
	}
	// Asked of the admin client, not the producer's: looking a missing
	// topic up in the producer's metadata (an embedded broker has no
	// __consumer_offsets) disturbs the producer. Only a topic that does
	// not exist is left out: not knowing its partitions (a broker down)
	// is not knowing whether the group's offsets of an aborted or
	// committed transaction are open there, and the check waits.
	for {
		ps, err := offsetsPartitions(th.in.Admin)
		if err == nil {
			if len(ps) > 0 {
				topics[offsetsTopic] = ps
				th.offsetsPart = &txn.Partition{Topic: offsetsTopic, Partition: groupPartition(th.in.ApplicationID, int32(len(ps)))}
			}
			break
		}
		if err := th.awaitCheckable(err); err != nil {
			return err
		}
	}
	wait := time.Duration(0)
	if afterAbort {
		wait = danglingWait
	}
	for attempt := 0; ; {
		de, err := th.findDangling(id, topics, wait)
		wait = danglingWait // after an abort of its own
		if err == nil {
			th.checkWait = 0
		}
		switch {
		case err != nil && (cannotEverCheck(err) || !afterAbort && attempt == 0 && errors.Is(err, repair.ErrTxnInProgress)):
			th.stopChecking(err)
			return nil
		case err != nil:
			if err := th.awaitCheckable(err); err != nil {
				return err
			}
			continue
		case de == nil:
			return nil
		case attempt >= danglingAttempts:
			return fmt.Errorf("weir: thread %d: still open after %d aborts over them: %w", th.idx, attempt, de)
		}
		attempt++
		committed, aborted := splitDangling(de, last)
		if len(committed) > 0 {
			th.log.Warn("partitions hold records of this thread's last transaction, which its coordinator committed, without their commit marker; ending them with a commit",
				"transactional_id", id, "producer_id", de.ProducerID, "partitions", danglingNames(committed))
			th.in.Metrics.ProducerEvents.WithLabelValues(strconv.Itoa(th.idx), "dangling_committed").Inc()
			if err := repair.CommitOver(th.ctx, th.pclient, th.in.Admin, id, th.in.ApplicationID, committed); err != nil {
				return fmt.Errorf("weir: thread %d: ending records of a committed transaction left open on %s: %w", th.idx, danglingNames(committed), err)
			}
		}
		if len(aborted) > 0 {
			ab := &repair.DanglingError{TransactionalID: de.TransactionalID, ProducerID: de.ProducerID, Partitions: aborted}
			th.log.Warn("a partition holds records of an aborted transaction of this thread's producer that the broker left open; ending them with an abort", "error", ab)
			th.in.Metrics.ProducerEvents.WithLabelValues(strconv.Itoa(th.idx), "dangling_aborted").Inc()
			if err := abortOver(th.ctx, p, aborted, th.spareTopic(), th.addGroupToTxn); err != nil {
				return fmt.Errorf("weir: thread %d: %w (ending them: %w)", th.idx, ab, err)
			}
		}
		// A cluster that just lost a broker may take a while to show the
		// markers on every partition's leader: look again a little later
		// each time.
		t := time.NewTimer(min(danglingBackoff<<(attempt-1), 4*time.Second))
		select {
		case <-th.ctx.Done():
			t.Stop()
			return fmt.Errorf("weir: thread %d: stopped while ending open records: %w", th.idx, th.ctx.Err())
		case <-t.C:
		}
	}
}

// ensureCommitted runs after every commit under exactly once, before the
// thread's next transaction can begin: Kafka's coordinator completes a
// transaction without writing its marker to a partition whose leader it
// cannot find (a broker restarting), and a partition of the committed
// transaction may hold its records open (repair.EnsureCommitted). The next
// marker of the thread's producer there would decide them, and an abort
// marker (the thread's next transaction aborting, or the check after it,
// which cannot tell whose records they are) would drop output, changelog
// records and offsets whose commit the thread already relied on. Found
// now, they are known to be the committed transaction's, and end with a
// commit marker (log `records of the transaction just committed are still
// open ...; ending them with a commit`, counted as dangling_committed).
//
// A check that fails for a reason that passes is made again, under
// checkDangling's rules (awaitCheckable): the thread starts no
// transaction meanwhile. A thread that stops leaves the check to its
// producer's next initialisation, which finds the same records and the
// same committed transaction (checkDangling).
func (th *Thread) ensureCommitted() error {
	if th.pclient == nil || th.in.Admin == nil || th.noDanglingCheck.Load() || th.stopping() {
		return nil
	}
	for th.offsetsPart == nil {
		err := th.lookUpOffsetsPartition()
		if err == nil {
			break
		}
		if err := th.awaitCheckable(err); err != nil {
			if th.stopping() {
				return nil
			}
			return err
		}
	}
	id := th.pclient.Config().Producer.Transaction.ID
	written := th.producer.LastCommitted()
	if id == "" || len(written) == 0 && th.offsetsPart == nil {
		return nil
	}
	var opts []repair.CheckOption
	if th.in.AdminMeta != nil {
		opts = append(opts, repair.WithMetadata(th.in.AdminMeta))
	}
	wait, waited := time.Millisecond, time.Duration(0)
	for {
		ended, err := repair.EnsureCommitted(th.ctx, th.pclient, th.in.Admin, id, th.in.ApplicationID, written, th.offsetsPart, opts...)
		if len(ended) > 0 {
			th.log.Warn("records of the transaction just committed are still open, their commit marker missing; ending them with a commit",
				"transactional_id", id, "partitions", danglingNames(ended))
			th.in.Metrics.ProducerEvents.WithLabelValues(strconv.Itoa(th.idx), "dangling_committed").Inc()
		}
		var de *repair.DanglingError
		switch {
		case err == nil:
			th.checkWait = 0
			return nil
		case errors.As(err, &de):
			// Not the committed transaction's: the checks of the next
			// producer initialisation, or after the next abort, decide.
			th.log.Warn("records of this thread's producer are open that the transaction just committed did not write; leaving them to the next check", "error", de)
			return nil
		case th.stopping():
			return nil
		case cannotEverCheck(err):
			th.stopChecking(err)
			return nil
		case errors.Is(err, repair.ErrTxnInProgress) && waited < danglingWait:
			// The coordinator is still writing the commit's markers.
			t := time.NewTimer(wait)
			select {
			case <-th.ctx.Done():
			case <-t.C:
			}
			t.Stop()
			waited += wait
			wait = min(2*wait, 100*time.Millisecond)
		default:
			if err := th.awaitCheckable(err); err != nil {
				if th.stopping() {
					return nil
				}
				return err
			}
		}
	}
}

// stopChecking turns the open-transaction checks off for the thread's
// life, once a broker showed it can never answer them (cannotEverCheck).
func (th *Thread) stopChecking(err error) {
	th.noDanglingCheck.Store(true)
	th.log.Warn("the brokers cannot answer the checks for records of aborted transactions; this thread will not check", "error", err)
}

// lookUpOffsetsPartition sets offsetsPart, the partition of
// __consumer_offsets holding the group's offsets. A cluster without that
// topic (an embedded test broker) is asked again at most once a minute,
// and the check after each commit goes on without it meanwhile. An admin
// client that cannot say returns the error: the check after a commit
// that wrote offsets must not pass without looking at them.
func (th *Thread) lookUpOffsetsPartition() error {
	if time.Since(th.offsetsAsked) < time.Minute {
		return nil
	}
	ps, err := offsetsPartitions(th.in.Admin)
	if err != nil {
		return err
	}
	th.offsetsAsked = time.Now()
	if len(ps) > 0 {
		th.offsetsPart = &txn.Partition{Topic: offsetsTopic, Partition: groupPartition(th.in.ApplicationID, int32(len(ps)))}
	}
	return nil
}

// splitDangling sorts the partitions of de into those holding records of
// the id's last transaction, which committed (last), and the others.
func splitDangling(de *repair.DanglingError, last repair.LastTransaction) (committed, aborted []repair.DanglingPartition) {
	for _, dp := range de.Partitions {
		if last.Committed(de.ProducerID, dp) {
			committed = append(committed, dp)
		} else {
			aborted = append(aborted, dp)
		}
	}
	return committed, aborted
}

// danglingNames lists parts as "topic/partition@offset".
func danglingNames(parts []repair.DanglingPartition) []string {
	names := make([]string, len(parts))
	for i, dp := range parts {
		names[i] = fmt.Sprintf("%s/%d@%d", dp.Topic, dp.Partition, dp.StartOffset)
	}
	return names
}

// lastTransaction returns what the coordinator of the thread's
// transactional id says of its last transaction (checkDangling): the
// zero value when the checks are off, an error when the coordinator did
// not answer (checkDangling's rules: one that can never answer turns the
// checks off). It is asked before the producer's InitProducerId, which
// completes a transaction left in PrepareCommit as a commit.
func (th *Thread) lastTransaction() (repair.LastTransaction, error) {
	if th.in.Admin == nil || th.noDanglingCheck.Load() {
		return repair.LastTransaction{}, nil
	}
	id := th.pclient.Config().Producer.Transaction.ID
	if id == "" {
		return repair.LastTransaction{}, nil
	}
	type answer struct {
		last repair.LastTransaction
		err  error
	}
	done := make(chan answer, 1)
	go func() {
		last, err := repair.DescribeLast(th.in.Admin, id)
		done <- answer{last, err}
	}()
	var err error
	select {
	case a := <-done:
		if a.err == nil {
			return a.last, nil
		}
		err = a.err
	case <-time.After(danglingCallTimeout):
		err = fmt.Errorf("no answer to describing transactional id %s within %v", id, danglingCallTimeout)
	case <-th.ctx.Done():
		return repair.LastTransaction{}, th.ctx.Err()
	}
	if cannotEverCheck(err) {
		th.stopChecking(err)
		return repair.LastTransaction{}, nil
	}
	return repair.LastTransaction{}, err
}

// cannotEverCheck reports whether err says the brokers can never answer
// the open-transaction checks: a broker before Kafka 3.0, requests
// refused by ACLs, an admin client without the calls.
func cannotEverCheck(err error) bool {
	if errors.Is(err, repair.ErrCannotDescribe) {
		return true
	}
	var kerr sarama.KError
	if errors.As(err, &kerr) {
		switch kerr {
		case sarama.ErrUnsupportedVersion, sarama.ErrClusterAuthorizationFailed, sarama.ErrTransactionalIDAuthorizationFailed,
			sarama.ErrTopicAuthorizationFailed, sarama.ErrInvalidRequest:
			return true
		}
	}
	return false
}

// awaitCheckable waits before a failed open-transaction check is made
// again (checkDangling): a warning and a dangling_check_failed event,
// then checkWait, doubled from checkFirstWait up to checkMaxWait across
// failures in a row. It returns the context's error when the thread
// stops meanwhile.
func (th *Thread) awaitCheckable(cause error) error {
	th.checkWait = min(max(2*th.checkWait, checkFirstWait), checkMaxWait)
	th.in.Metrics.ProducerEvents.WithLabelValues(strconv.Itoa(th.idx), "dangling_check_failed").Inc()
	th.log.Warn("could not check for records of aborted transactions; no transaction starts until the check passes",
		"retry_in", th.checkWait, "error", cause)
	t := time.NewTimer(th.checkWait)
	defer t.Stop()
	select {
	case <-th.ctx.Done():
		return fmt.Errorf("weir: thread %d: stopped before the check for records of aborted transactions passed (%w): %w", th.idx, cause, th.ctx.Err())
	case <-t.C:
		return nil
	}
}

// Waits between failed open-transaction checks (awaitCheckable).
const (
	checkFirstWait = 250 * time.Millisecond
	checkMaxWait   = 10 * time.Second
)

// findDangling is repair.FindDangling, asked again while a transaction of id
// is still ending (for at most wait): what it returns is the open records
// found, or why it could not tell.
func (th *Thread) findDangling(id string, topics map[string][]int32, wait time.Duration) (*repair.DanglingError, error) {
	deadline := time.Now().Add(wait)
	for {
		err := th.findDanglingOnce(id, topics)
		var de *repair.DanglingError
		switch {
		case errors.As(err, &de):
			return de, nil
		case !errors.Is(err, repair.ErrTxnInProgress) || time.Now().After(deadline):
			return nil, err
		}
		select {
		case <-th.ctx.Done():
			return nil, th.ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// findDanglingOnce is one repair.FindDangling, given up on after
// danglingCallTimeout (sarama's admin calls take no context; a broker that
// does not implement the calls may not answer them at all).
func (th *Thread) findDanglingOnce(id string, topics map[string][]int32) error {
	done := make(chan error, 1)
	var opts []repair.CheckOption
	if th.in.AdminMeta != nil {
		opts = append(opts, repair.WithMetadata(th.in.AdminMeta))
	}
	go func() { done <- repair.FindDangling(th.in.Admin, id, topics, opts...) }()
	select {
	case err := <-done:
		return err
	case <-time.After(danglingCallTimeout):
		return fmt.Errorf("weir: no answer to describing transactions and producers within %v", danglingCallTimeout)
	case <-th.ctx.Done():
		return th.ctx.Err()
	}
}

// danglingCallTimeout bounds one check; a broker answers it in
// milliseconds, and repair.FindDangling's attempts after a leader move take
// well under a second more.
const danglingCallTimeout = 5 * time.Second

// producerInitAttempts is how many times a thread initialises its
// producer when it is fenced while ending records left open
// (checkDangling).
const producerInitAttempts = 3

// danglingAttempts is how many transactions checkDangling runs to end
// open records before it gives up, the checks between them
// danglingBackoff apart, doubled each time up to 4 s (about 20 s in all):
// the broker that left them open (just restarted) may drop the next
// marker too, and the cluster around it may take seconds to settle.
const danglingAttempts = 8

// danglingBackoff is the wait after the first transaction that ends open
// records before checkDangling looks again.
const danglingBackoff = 250 * time.Millisecond

// danglingWait bounds how long checkDangling waits for an abort of the
// thread's own to end (its markers to be written) before it looks; a
// broker writes them in milliseconds.
const danglingWait = 5 * time.Second

// offsetsTopic is Kafka's internal topic of group offsets.
const offsetsTopic = repair.OffsetsTopic

// abortOver opens a transaction of p over parts, one record in each, and
// aborts it: the abort marker ends every open record of p's producer id
// there. The records (key "weir.abort", no value) are aborted with it,
// never read read_committed.
//
// The broker refuses clients' records in __consumer_offsets, where an
// offset commit left open blocks the group's offset fetches (every
// session of the group then ends with UNSTABLE_OFFSET_COMMIT). For that
// partition addGroup adds the group's offsets partition to the
// transaction instead (AddOffsetsToTxn), once the transaction is open;
// spare, a partition the thread writes, carries the transaction's record
// when no other part does.
func abortOver(ctx context.Context, p *txn.Producer, parts []repair.DanglingPartition, spare task.TP, addGroup func() error) error {
	send := func(topic string, partition int32) error {
		return p.Send(&sarama.ProducerMessage{Topic: topic, Partition: partition, Key: sarama.StringEncoder("weir.abort"),
			Metadata: &client.Origin{Explicit: true, Offset: -1}})
	}
	offsets, sent := false, 0
	for _, dp := range parts {
		if dp.Topic == offsetsTopic {
			offsets = true
			continue
		}
		if err := send(dp.Topic, dp.Partition); err != nil {
			return err
		}
		sent++
	}
	if offsets && sent == 0 {
		if err := send(spare.Topic, spare.Partition); err != nil {
			return err
		}
	}
	wctx, cancel := context.WithTimeout(ctx, danglingWait)
	defer cancel()
	if err := p.Wait(wctx); err != nil {
		return err
	}
	if err := p.Err(); err != nil {
		_ = p.Abort(wctx)
		return err
	}
	if offsets {
		if err := addGroup(); err != nil {
			_ = p.Abort(wctx)
			return fmt.Errorf("adding the group's offsets partition to the transaction: %w", err)
		}
	}
	return p.Abort(wctx)
}

// addGroupToTxn adds the group's offsets partition to the transaction the
// thread's producer has open (abortOver): an AddOffsetsToTxn of the
// producer's id and epoch, which the coordinator describes, sent to the
// transaction coordinator on the producer's client.
func (th *Thread) addGroupToTxn() error {
	id := th.pclient.Config().Producer.Transaction.ID
	ta, ok := th.in.Admin.(sarama.TransactionClusterAdmin)
	if !ok {
		return errors.New("the admin client cannot describe transactions")
	}
	states, err := ta.DescribeTransactions([]string{id})
	if err != nil {
		return err
	}
	st, ok := states[id]
	switch {
	case !ok:
		return fmt.Errorf("the coordinator did not describe transactional id %s", id)
	case st.ErrorCode != sarama.ErrNoError:
		return st.ErrorCode
	case st.TransactionState != "Ongoing":
		return fmt.Errorf("transactional id %s is %s, not Ongoing", id, st.TransactionState)
	}
	b, err := th.pclient.TransactionCoordinator(id)
	if err != nil {
		return err
	}
	resp, err := b.AddOffsetsToTxn(&sarama.AddOffsetsToTxnRequest{Version: 3, TransactionalID: id,
		ProducerID: st.ProducerID, ProducerEpoch: st.ProducerEpoch, GroupID: th.in.ApplicationID})
	if err != nil {
		return err
	}
	if resp.Err != sarama.ErrNoError {
		return resp.Err
	}
	return nil
}

// spareTopic returns a partition the thread writes (the first of its
// sorted output topics, partition 0), for abortOver.
func (th *Thread) spareTopic() task.TP {
	topics := slices.Sorted(maps.Keys(th.in.Layout.Limits))
	if len(topics) == 0 {
		return task.TP{}
	}
	return task.TP{Topic: topics[0], Partition: 0}
}

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
