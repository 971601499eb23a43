package stream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"

	"github.com/weirstream/weir/internal/assign"
	"github.com/weirstream/weir/internal/client"
	"github.com/weirstream/weir/internal/graph"
	"github.com/weirstream/weir/internal/repair"
	"github.com/weirstream/weir/internal/task"
	"github.com/weirstream/weir/txn"
)

// batchPerTask is how many records a task processes before the thread
// looks at its other tasks, commits and rebalance requests.
const batchPerTask = 64

// Thread is a stream thread: one consumer group member, one producer and
// the tasks assigned to it, all processed by the goroutine running loop.
//
// sarama runs a goroutine per claimed partition (ConsumeClaim) that pushes
// fetched records into the partition's bounded queue. Those goroutines talk
// to the loop only through the fields under mu and the wake channel; tasks
// are touched by the loop alone, so processors and stores need no locks.
type Thread struct {
	in     *Instance
	idx    int
	log    *slog.Logger
	ctx    context.Context // cancelled when the thread must stop
	client sarama.Client   // the group member's
	group  sarama.ConsumerGroup
	// The producer has a client of its own: a broker connection serves
	// one request at a time, and a commit queued behind this member's
	// JoinGroup would carry the generation the group is leaving.
	pclient     sarama.Client
	producer    *txn.Producer
	newProducer func() (*txn.Producer, error)
	// noDanglingCheck is set once the broker showed it can never answer
	// the open-transaction checks (checkDangling): too old, the checks
	// refused, or an embedded test broker. A check that fails for a
	// reason that passes never sets it.
	noDanglingCheck atomic.Bool
	// lastBefore is what the coordinator said of the thread's
	// transactional id's last transaction before the first
	// InitProducerId of the producer being built (newProducer); nil once
	// a producer passed its checks. Asked again after an init of the
	// thread's own, it would describe that init's empty transaction, and
	// records of a commit would be aborted.
	lastBefore *repair.LastTransaction
	// checkWait is the wait before the next attempt of an
	// open-transaction check that failed (awaitCheckable); 0 after one
	// that was made.
	checkWait time.Duration
	// offsetsPart is the partition of __consumer_offsets holding the
	// group's offsets, nil until known (ensureCommitted); offsetsAsked is
	// when the thread last asked.
	offsetsPart  *txn.Partition
	offsetsAsked time.Time
	committer    committer
	maxBytes     int // the producer's MaxMessageBytes
	strategy     *assign.Strategy
	instance     string // group.instance.id, "" without static membership
	recorded     string // the member id last recorded (recordMember), sarama's goroutine only

	wake   chan struct{} // cap 1: something arrived for the loop
	exited chan struct{} // closed when loop returns

	// assigned is set once the current group session has an assignment,
	// for App.State.
	assigned atomic.Bool
	// assignedTasks is how many tasks the current assignment gives this
	// member; until it runs as many, it is still taking them up.
	assignedTasks atomic.Int32
	// pendingTasks is how many tasks the current assignment withholds
	// for a cooperative hand-over (assign.Assignment.Pending): the member
	// gets them in the follow-up rebalance.
	pendingTasks atomic.Int32
	// rebalancing is when this member last sent JoinGroup, in Unix
	// nanoseconds, until its session runs in the generation of its new
	// assignment (assignedGen); 0 otherwise.
	rebalancing atomic.Int64
	assignedGen atomic.Int32
	// newestGen is the generation of this member's newest assignment,
	// never reset (endAbandoned).
	newestGen atomic.Int32
	// absence tracks the processes whose open records the thread may
	// take over (endAbandoned).
	absence absence
	// committing (cap 1) is held by the loop for the whole of a commit
	// and by userData while it marks a rebalance: a commit under way
	// finishes before this member's JoinGroup goes out, and none starts
	// after it until the new assignment (see commitDue).
	committing chan struct{}
	// aborts counts the transactions aborted in a row, since the last one
	// that committed (see handleTxnError and committedNow).
	aborts atomic.Int32
	// checkOwn asks the loop, once it has nothing pending, to look for
	// an offset commit of its producer left open (checkOwnOffsets).
	checkOwn atomic.Bool
	// firstAbort is the cause of the first abort of the current streak.
	firstAbort error

	mu     sync.Mutex
	sess   sarama.ConsumerGroupSession
	claims map[task.TP]*claim // the partitions claimed now
	// blockedGone is the blocked time of queues already closed.
	blockedGone time.Duration
	clock       threadClock
	opened      []task.TP
	releases    []release
	stopped     bool

	statusMu sync.Mutex
	status   []task.Info // published by loop for App.Tasks

	// Owned by loop.
	tasks      map[assign.TaskID]*task.Task
	order      []assign.TaskID // round-robin order of tasks
	owner      map[task.TP]*task.Task
	lastCommit time.Time
	// interval is how long after lastCommit the next commit is due (see
	// nextInterval); waited records that the loop waited for input since
	// the last commit.
	interval  time.Duration
	waited    bool
	lastPurge time.Time
	fences    fenceLog // fencings of the producer since the last commit
	// failure is a record refused under ProductionErrors=Fail: sticky, so
	// a processor that ignores Send's error cannot commit past it.
	failure error
	// broken is set by a commit that failed at least once; every later
	// commit returns it (see commitLocked).
	broken error
	// skips are what the tasks' replay after an abort passes over, with
	// the cause: refused records to drop (a *task.ProductionError) and
	// input records a processor failed on (a *task.RecordError, with an
	// empty sink in the key).
	skips map[skipKey]error
	// replayBytes counts the key and value bytes of the records the tasks
	// keep for a rewind (task.Host.Keep); past MaxBufferBytes they are let
	// go, replayLost is set, and a rewind before the next commit falls
	// back to rejoining the group.
	replayBytes int
	replayLost  bool
	// isolate names the topics whose records are sent one at a time until
	// the next commit, to find a record the broker refuses (see settle).
	isolate map[string]bool
	// dynamic holds the topics the thread has written that the layout does
	// not know (dynamic sinks choose them per record), at most
	// maxDynamicTopics, so that the open-transaction checks look at them
	// too (writtenTopics).
	dynamic   map[string]struct{}
	dynamicMu sync.Mutex // dynamic is read off the loop too (heldBy)
}

// maxDynamicTopics bounds the topics of dynamic sinks a thread remembers
// for its open-transaction checks; past it, later ones are not checked
// (and a warning says so once).
const maxDynamicTopics = 10_000

// noteTopic records that the thread wrote to topic.
func (th *Thread) noteTopic(topic string) {
	if _, known := th.in.Layout.Limits[topic]; known {
		return
	}
	th.dynamicMu.Lock()
	defer th.dynamicMu.Unlock()
	if _, ok := th.dynamic[topic]; ok {
		return
	}
	if th.dynamic == nil {
		th.dynamic = map[string]struct{}{}
	}
	if len(th.dynamic) == maxDynamicTopics {
		th.log.Warn("more topics written by dynamic sinks than the open-transaction checks follow; later ones are not checked", "limit", maxDynamicTopics)
	}
	if len(th.dynamic) >= maxDynamicTopics {
		return
	}
	th.dynamic[topic] = struct{}{}
}

// writtenTopics returns every topic the thread writes or has written: the
// layout's (sinks, repartition topics, changelogs, dead-letter topics) and
// those its dynamic sinks chose.
func (th *Thread) writtenTopics() []string {
	out := slices.Collect(maps.Keys(th.in.Layout.Limits))
	th.dynamicMu.Lock()
	for t := range th.dynamic {
		out = append(out, t)
	}
	th.dynamicMu.Unlock()
	slices.Sort(out)
	return out
}

// New connects a stream thread: its group member, and its producer with
// a client of its own. idx is its index in the instance; ctx ends it.
func New(in *Instance, idx int, ctx context.Context) (*Thread, error) {
	th := &Thread{
		in:         in,
		idx:        idx,
		log:        in.Logger.With("thread", idx),
		ctx:        ctx,
		wake:       make(chan struct{}, 1),
		exited:     make(chan struct{}),
		committing: make(chan struct{}, 1),
		claims:     map[task.TP]*claim{},
		tasks:      map[assign.TaskID]*task.Task{},
		owner:      map[task.TP]*task.Task{},
		skips:      map[skipKey]error{},
		isolate:    map[string]bool{},
	}
	th.committer = committerFor(th)
	th.strategy = assign.NewStrategy(in.Layout.AssignSubtopologies(in.Graph.Stores), th.userData, th.onAssignment).
		WithStandbys(in.StandbyReplicas).WithWarmups(in.Warmups).WithLogger(th.log)
	sc := client.Thread(in.Client, in.ProcessID, idx, th.strategy)
	th.instance = sc.Consumer.Group.InstanceId
	kc, err := sarama.NewClient(in.Brokers, sc)
	if err != nil {
		return nil, fmt.Errorf("weir: thread %d: connecting: %w", idx, err)
	}
	th.client = kc
	if th.group, err = sarama.NewConsumerGroupFromClient(in.ApplicationID, kc); err != nil {
		kc.Close()
		return nil, fmt.Errorf("weir: thread %d: consumer group: %w", idx, err)
	}
	pc := *sc
	pc.ClientID += "-producer"
	if th.pclient, err = sarama.NewClient(in.Brokers, &pc); err != nil {
		th.group.Close()
		kc.Close()
		return nil, fmt.Errorf("weir: thread %d: connecting the producer: %w", idx, err)
	}
	th.maxBytes = pc.Producer.MaxMessageBytes
	th.newProducer = func() (*txn.Producer, error) {
		return th.buildProducer(func() (*txn.Producer, error) { return txn.New(th.pclient) }, th.checkDangling)
	}
	if th.producer, err = th.initProducer(); err != nil {
		th.group.Close()
		kc.Close()
		th.pclient.Close()
		return nil, fmt.Errorf("weir: thread %d: %w", idx, err)
	}
	return th, nil
}

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
	// __consumer_offsets) disturbs the producer.
	if ds, err := th.in.Admin.DescribeTopics([]string{offsetsTopic}); err == nil && len(ds) == 1 && ds[0].Err == sarama.ErrNoError {
		for _, pm := range ds[0].Partitions {
			topics[offsetsTopic] = append(topics[offsetsTopic], pm.ID)
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
	if th.offsetsPart == nil {
		th.lookUpOffsetsPartition()
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
// __consumer_offsets holding the group's offsets, once the admin client
// can say, asking at most once a minute (an embedded test broker may have
// no such topic, and the check after each commit would ask every time).
func (th *Thread) lookUpOffsetsPartition() {
	if time.Since(th.offsetsAsked) < time.Minute {
		return
	}
	th.offsetsAsked = time.Now()
	if p, err := offsetsPartition(th.in.Admin, th.in.ApplicationID); err == nil {
		th.offsetsPart = &txn.Partition{Topic: offsetsTopic, Partition: p}
	}
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

// leavePredecessorTimeout bounds the removal of the previous
// incarnation's member at start.
const leavePredecessorTimeout = 5 * time.Second

// leavePredecessor removes from the group the member this thread's
// previous incarnation joined as (recorded in the state directory), when
// it is dynamic. A process killed with kill -9 leaves its member in the
// group until its session times out; a rebalance started meanwhile, such
// as the one the restarted instance's own join starts, waits for it, and
// no member of the group commits until it is over. Removing it first lets
// the rebalance complete at once. A member the group no longer knows is
// the usual case after a clean stop, and not an error; any failure is
// logged and only costs that wait. Static members are left alone: they
// take their place back by their instance id.
func (th *Thread) leavePredecessor() {
	if th.instance != "" || th.in.Members == nil {
		return
	}
	old := th.in.Members.MemberID(th.idx)
	if old == "" {
		return
	}
	done := make(chan error, 1)
	go func() {
		b, err := th.client.Coordinator(th.in.ApplicationID)
		if err != nil {
			done <- err
			return
		}
		resp, err := b.LeaveGroup(&sarama.LeaveGroupRequest{Version: 3, GroupId: th.in.ApplicationID, Members: []sarama.MemberIdentity{{MemberId: old}}})
		if err == nil && resp.Err != sarama.ErrNoError {
			err = resp.Err
		}
		if err == nil {
			for _, m := range resp.Members {
				if m.Err != sarama.ErrNoError {
					err = m.Err
				}
			}
		}
		done <- err
	}()
	timer := time.NewTimer(leavePredecessorTimeout)
	defer timer.Stop()
	select {
	case err := <-done:
		switch {
		case err == nil:
			th.log.Info("removed the previous incarnation's member from the group", "member", old)
		case errors.Is(err, sarama.ErrUnknownMemberId):
			th.log.Debug("the previous incarnation's member has left the group already", "member", old)
		default:
			th.log.Warn("could not remove the previous incarnation's member from the group; a rebalance may wait for its session to time out", "member", old, "error", err)
		}
	case <-timer.C:
		th.log.Warn("removing the previous incarnation's member from the group timed out", "member", old, "after", leavePredecessorTimeout)
	}
}

// recordMember keeps the thread's member id in the state directory for
// its next incarnation (see leavePredecessor); it runs in Setup.
func (th *Thread) recordMember(id string) {
	if th.instance != "" || th.in.Members == nil || id == "" || id == th.recorded {
		return
	}
	if err := th.in.Members.SetMemberID(th.idx, id); err != nil {
		th.log.Warn("could not record the group member id", "error", err)
		return
	}
	th.recorded = id
}

// InstanceID is the thread's group.instance.id under static membership,
// "" without.
func (th *Thread) InstanceID() string { return th.instance }

// Abandon closes the clients of a thread that will not Run (another
// thread of the instance failed to start).
func (th *Thread) Abandon() {
	th.group.Close()
	th.producer.Close()
	th.pclient.Close()
	th.client.Close()
}

// userData is what this member tells the group leader about itself.
// sarama calls it right before each JoinGroup: a rebalance starts.
func (th *Thread) userData() assign.UserData {
	th.markRebalance()
	return assign.UserData{ProcessID: th.in.ProcessID, State: th.in.Local.Offsets(), Addr: th.in.AdvertisedAddr}
}

// markRebalance records that this member is about to send JoinGroup.
//
// A commit under way when it is called carries the generation the group
// is leaving, which the group accepts until every member has rejoined:
// markRebalance waits for that commit to end before this member rejoins,
// so the commit cannot land after the group has moved on and abort. The
// wait is bounded by half the transaction timeout, as the rebalance
// window is.
func (th *Thread) markRebalance() {
	timer := time.NewTimer(th.in.TransactionTimeout / 2)
	defer timer.Stop()
	select {
	case th.committing <- struct{}{}:
		defer func() { <-th.committing }()
	case <-timer.C:
		th.log.Warn("rejoining the group while a commit is still under way; it may abort")
	}
	th.assignedGen.Store(0)
	th.rebalancing.Store(time.Now().UnixNano())
}

// inRebalance reports whether this member is between its JoinGroup and its
// new assignment, when a commit would carry the generation the group is
// leaving and fail (aborting the transaction under exactly once). The
// window is trusted for half the transaction timeout at most, so that a
// rebalance that never completes cannot keep a transaction open until the
// broker aborts it.
//
// The window closes only once the session reports the new generation:
// sarama delivers the assignment (onAssignment) before it stores the
// generation in a cooperative session, and a commit in between would
// still carry the old one.
func (th *Thread) inRebalance() bool {
	since := th.rebalancing.Load()
	if since == 0 {
		return false
	}
	if gen := th.assignedGen.Load(); gen != 0 {
		if sess := th.session(); sess != nil && sess.GenerationID() >= gen {
			th.rebalancing.CompareAndSwap(since, 0)
			return false
		}
	}
	return time.Since(time.Unix(0, since)) < th.in.TransactionTimeout/2
}

// onAssignment runs on sarama's rebalance goroutine right after a new
// assignment arrives, before sarama revokes claims. It closes the queues
// of partitions this member loses, so a claim goroutine blocked on a full
// queue lets go and the revocation does not wait for the rebalance timeout.
// The member's standbys go to the instance's standby runner, and the
// group's hosts to the instance's Hosts.
func (th *Thread) onAssignment(tasks []assign.TaskID, a assign.Assignment, generation int32) {
	standbys := a.Standbys
	if th.in.Standbys != nil {
		th.in.Standbys.Set(th.idx, standbys, a.Warmups)
	}
	if th.in.Hosts != nil {
		th.in.Hosts.set(generation, a.Hosts)
	}
	keep := map[task.TP]bool{}
	for _, id := range tasks {
		for _, topic := range th.in.Layout.Topics[id.Subtopology] {
			keep[task.TP{Topic: topic, Partition: id.Partition}] = true
		}
	}
	th.mu.Lock()
	defer th.mu.Unlock()
	for p, c := range th.claims {
		if !keep[p] {
			c.q.Close()
		}
	}
	th.assigned.Store(true)
	th.assignedTasks.Store(int32(len(tasks)))
	th.pendingTasks.Store(int32(len(a.Pending)))
	th.assignedGen.Store(generation)
	th.newestGen.Store(generation)
	th.checkOwn.Store(true)
	th.in.Metrics.Rebalances.WithLabelValues(strconv.Itoa(th.idx)).Inc()
	th.log.Info("assignment", "generation", generation, "tasks", len(tasks), "standbys", len(standbys), "warmups", len(a.Warmups), "pending", len(a.Pending))
}

// Wake tells the loop something arrived for it (task.Host).
func (th *Thread) Wake() {
	select {
	case th.wake <- struct{}{}:
	default:
	}
}

// Run runs the thread until its context ends or it fails, then commits,
// closes its tasks, leaves the group and closes its clients. It returns
// nil after a clean stop.
func (th *Thread) Run() error {
	consumeCtx, stopConsume := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		th.leavePredecessor()
		th.consume(consumeCtx)
	})
	wg.Go(func() {
		for err := range th.group.Errors() {
			th.log.Warn("consumer group", "error", err)
		}
	})

	err := th.loop()
	// The last commit is done: now nothing may be processed or committed,
	// and claim goroutines may return.
	th.mu.Lock()
	th.stopped = true
	for _, r := range th.releases {
		close(r.done)
	}
	th.releases = nil
	for _, c := range th.claims {
		c.q.Close()
	}
	th.mu.Unlock()
	close(th.exited)

	stopConsume()
	if cerr := th.group.Close(); cerr != nil && err == nil {
		err = fmt.Errorf("weir: thread %d: leaving the group: %w", th.idx, cerr)
	}
	wg.Wait()
	if perr := th.producer.Close(); perr != nil && err == nil {
		err = fmt.Errorf("weir: thread %d: closing producer: %w", th.idx, perr)
	}
	th.pclient.Close()
	th.client.Close()
	return err
}

// consume keeps the member in the group until ctx ends.
func (th *Thread) consume(ctx context.Context) {
	topics := th.in.Layout.AllTopics()
	backoff := 100 * time.Millisecond
	unstable := 0 // sessions in a row ended by a pending offset commit
	for ctx.Err() == nil {
		th.assigned.Store(false)
		err := th.group.Consume(ctx, topics, (*groupHandler)(th))
		if ctx.Err() != nil || errors.Is(err, sarama.ErrClosedConsumerGroup) {
			return
		}
		if errors.Is(err, sarama.ErrUnstableOffsetCommit) {
			if unstable++; unstable%unstableSessions == 0 {
				th.reportUnstable(unstable)
			}
		} else if err != nil {
			unstable = 0
		}
		if err != nil {
			th.log.Warn("group session ended", "error", err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 5*time.Second)
			continue
		}
		backoff = 100 * time.Millisecond
	}
}

// loop processes records until the thread's context ends or an error
// stops it. It commits before it returns.
func (th *Thread) loop() error {
	cfg := th.in
	th.lastCommit = time.Now()
	th.lastPurge = time.Now()
	th.setInterval(cfg.CommitInterval)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	lastPublish := time.Now()
	th.clock.switchTo(busyState)
	defer th.clock.switchTo(stoppedState)
	for {
		if th.ctx.Err() != nil {
			return th.shutdown(nil)
		}
		if err := th.control(); err != nil {
			return th.shutdown(err)
		}
		if th.checkOwn.Load() && !th.producer.Pending() {
			th.checkOwn.Store(false)
			if err := th.checkOwnOffsets(); err != nil {
				return th.shutdown(err)
			}
		}
		now := time.Now()
		if now.Sub(lastPublish) >= publishInterval {
			lastPublish = now
			th.publish()
		}
		progressed, wait, err := th.processBatch(now)
		if err != nil {
			return th.shutdown(err)
		}
		for _, id := range th.order {
			if t := th.tasks[id]; t.Running() {
				_, settled, err := th.afterWork(t.Punctuate(graph.WallClockTime, now))
				if err != nil {
					return th.shutdown(err)
				}
				if settled {
					break
				}
			}
		}
		if now.Sub(th.lastCommit) >= th.interval {
			if _, err := th.commitDue(); err != nil {
				return th.shutdown(err)
			}
			th.setInterval(th.nextInterval())
		}
		if progressed {
			continue
		}
		deadline := th.lastCommit.Add(th.interval)
		if th.inRebalance() {
			// The commit waits for the assignment: look again later.
			if later := now.Add(cfg.CommitInterval); later.After(deadline) {
				deadline = later
			}
		}
		if !wait.IsZero() && wait.Before(deadline) {
			deadline = wait
		}
		for _, id := range th.order {
			if next := th.tasks[id].NextWallClock(); !next.IsZero() && next.Before(deadline) {
				deadline = next
			}
		}
		if next := lastPublish.Add(publishInterval); next.Before(deadline) {
			deadline = next
		}
		timer.Reset(max(time.Until(deadline), time.Millisecond))
		th.waited = true
		th.clock.switchTo(idleState)
		select {
		case <-th.wake:
		case <-timer.C:
		case <-th.ctx.Done():
		}
		th.clock.switchTo(busyState)
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
	}
}

// nextInterval is the interval to the commit after the one just made. A
// thread that did not wait for input once since its previous commit is
// behind: it doubles the interval, up to MaxCommitInterval, so that
// fewer commits (their round trips, and with record caches the updates
// of a key they each write) take from the catching up. Once it has
// waited, it is back to CommitInterval.
func (th *Thread) nextInterval() time.Duration {
	if th.waited {
		th.waited = false
		return th.in.CommitInterval
	}
	return min(2*th.interval, max(th.in.MaxCommitInterval, th.in.CommitInterval))
}

// setInterval sets the interval to the next commit, and its gauge.
func (th *Thread) setInterval(d time.Duration) {
	if d == th.interval {
		return
	}
	th.interval = d
	th.in.Metrics.CommitInterval.WithLabelValues(strconv.Itoa(th.idx)).Set(d.Seconds())
}

// backpressured returns the total time the thread's fetchers have spent
// blocked on full queues: of the queues gone, and of the live ones so far.
func (th *Thread) backpressured() time.Duration {
	th.mu.Lock()
	defer th.mu.Unlock()
	total := th.blockedGone
	for _, c := range th.claims {
		total += c.q.Blocked()
	}
	return total
}

// processBatch gives each task with a record ready a batch of records.
// wait is the earliest time a task holding back for an empty partition
// wants to be looked at again.
func (th *Thread) processBatch(now time.Time) (progressed bool, wait time.Time, err error) {
	for _, id := range th.order {
		t := th.tasks[id]
		if !t.Running() {
			continue
		}
		for range batchPerTask {
			p, w, err := t.Next(now)
			if err != nil {
				return progressed, wait, err
			}
			if p == nil {
				if !w.IsZero() && (wait.IsZero() || w.Before(wait)) {
					wait = w
				}
				break
			}
			// The thread's failure state decides before the record's own
			// error: a processor may have returned (or swallowed) the
			// error of a record that was refused or not delivered.
			_, settled, err := th.afterWork(t.Process(p))
			if err != nil || settled {
				return progressed, wait, err
			}
			progressed = true
		}
		if th.buffered() >= th.in.MaxBufferBytes {
			done, err := th.commitDue()
			if !done {
				// The commit waits for the new generation; processing
				// waits with it, so the buffer and the open transaction
				// stay bounded. The loop looks again each commit interval.
				return false, wait, nil
			}
			// The commit may close tasks: start the round over.
			return progressed, wait, err
		}
	}
	return progressed, wait, nil
}

// buffered is the size of the thread's uncommitted state changes.
func (th *Thread) buffered() int {
	n := 0
	for _, id := range th.order {
		n += th.tasks[id].BufferedBytes()
	}
	return n
}

// resetTasks discards every task's uncommitted state and closes the tasks
// without committing: their claims end, the group session restarts, and
// the tasks come back (to this member, the assignment being sticky) at the
// committed offsets, restoring only their changelog's committed tail.
func (th *Thread) resetTasks() {
	for _, id := range slices.Clone(th.order) {
		t := th.tasks[id]
		t.DiscardState()
		th.closeTask(t)
	}
	th.publish()
}
