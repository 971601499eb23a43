package weir

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"

	"github.com/weirstream/weir/internal/assign"
	"github.com/weirstream/weir/internal/client"
	"github.com/weirstream/weir/internal/graph"
	"github.com/weirstream/weir/internal/queue"
	"github.com/weirstream/weir/internal/txn"
)

// batchPerTask is how many records a task processes before the thread
// looks at its other tasks, commits and rebalance requests.
const batchPerTask = 64

// thread is a stream thread: one consumer group member, one producer and
// the tasks assigned to it, all processed by the goroutine running loop.
//
// sarama runs a goroutine per claimed partition (ConsumeClaim) that pushes
// fetched records into the partition's bounded queue. Those goroutines talk
// to the loop only through the fields under mu and the wake channel; tasks
// are touched by the loop alone, so processors and stores need no locks.
type thread struct {
	app    *App
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
	maxBytes    int // the producer's MaxMessageBytes
	strategy    *assign.Strategy
	instance    string // group.instance.id, "" without static membership

	wake   chan struct{} // cap 1: something arrived for the loop
	exited chan struct{} // closed when loop returns

	// assigned is set once the current group session has an assignment,
	// for App.State.
	assigned atomic.Bool
	// assignedTasks is how many tasks the current assignment gives this
	// member; until it runs as many, it is still taking them up.
	assignedTasks atomic.Int32
	// rebalancing is when this member last sent JoinGroup, in Unix
	// nanoseconds, until its session runs in the generation of its new
	// assignment (assignedGen); 0 otherwise.
	rebalancing atomic.Int64
	assignedGen atomic.Int32

	mu     sync.Mutex
	sess   sarama.ConsumerGroupSession
	queues map[tp]*msgQueue
	hwms   map[tp]func() int64
	starts map[tp]int64 // the offsets claims started at
	// blockedGone is the blocked time of queues already closed.
	blockedGone time.Duration
	clock       threadClock
	opened      []tp
	releases    []release
	stopped     bool

	statusMu sync.Mutex
	status   []TaskInfo // published by loop for App.Tasks

	// Owned by loop.
	tasks      map[assign.TaskID]*task
	order      []assign.TaskID // round-robin order of tasks
	owner      map[tp]*task
	lastCommit time.Time
	lastPurge  time.Time
	fences     []time.Time // recent fencings of the producer
	// failure is a record refused under ProductionErrors=Fail: sticky, so
	// a processor that ignores Send's error cannot commit past it.
	failure error
	// skips are refused records to drop when the tasks replay them.
	skips map[skipKey]struct{}
	// replayBytes counts the key and value bytes of the records the tasks
	// keep for a rewind (partition.done); past State.MaxBufferBytes they
	// are let go, replayLost is set, and a rewind before the next commit
	// falls back to rejoining the group.
	replayBytes int
	replayLost  bool
	// isolate names the topics whose records are sent one at a time until
	// the next commit, to find a record the broker refuses (see settle).
	isolate map[string]bool
}

// release is a claim goroutine waiting for the loop to commit and close
// the task of a revoked partition.
type release struct {
	tp   tp
	done chan struct{}
}

func newThread(app *App, idx int, ctx context.Context) (*thread, error) {
	th := &thread{
		app:     app,
		idx:     idx,
		log:     app.cfg.Logger.With("thread", idx),
		ctx:     ctx,
		wake:    make(chan struct{}, 1),
		exited:  make(chan struct{}),
		queues:  map[tp]*msgQueue{},
		hwms:    map[tp]func() int64{},
		starts:  map[tp]int64{},
		tasks:   map[assign.TaskID]*task{},
		owner:   map[tp]*task{},
		skips:   map[skipKey]struct{}{},
		isolate: map[string]bool{},
	}
	th.strategy = assign.NewStrategy(app.layout.AssignSubtopologies(), th.userData, th.onAssignment)
	sc := client.Thread(app.cfg.clientOptions(), app.dir.ProcessID, idx, th.strategy)
	th.instance = sc.Consumer.Group.InstanceId
	client, err := sarama.NewClient(app.cfg.Brokers, sc)
	if err != nil {
		return nil, fmt.Errorf("weir: thread %d: connecting: %w", idx, err)
	}
	th.client = client
	if th.group, err = sarama.NewConsumerGroupFromClient(app.cfg.ApplicationID, client); err != nil {
		client.Close()
		return nil, fmt.Errorf("weir: thread %d: consumer group: %w", idx, err)
	}
	pc := *sc
	pc.ClientID += "-producer"
	if th.pclient, err = sarama.NewClient(app.cfg.Brokers, &pc); err != nil {
		th.group.Close()
		client.Close()
		return nil, fmt.Errorf("weir: thread %d: connecting the producer: %w", idx, err)
	}
	th.maxBytes = pc.Producer.MaxMessageBytes
	th.newProducer = func() (*txn.Producer, error) { return txn.New(th.pclient) }
	if th.producer, err = th.newProducer(); err != nil {
		th.group.Close()
		client.Close()
		th.pclient.Close()
		return nil, fmt.Errorf("weir: thread %d: %w", idx, err)
	}
	return th, nil
}

// userData is what this member tells the group leader about itself.
// sarama calls it right before each JoinGroup: a rebalance starts.
func (th *thread) userData() assign.UserData {
	th.assignedGen.Store(0)
	th.rebalancing.Store(time.Now().UnixNano())
	return assign.UserData{ProcessID: th.app.dir.ProcessID, State: th.app.local.Offsets()}
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
func (th *thread) inRebalance() bool {
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
	return time.Since(time.Unix(0, since)) < th.app.cfg.TransactionTimeout/2
}

// onAssignment runs on sarama's rebalance goroutine right after a new
// assignment arrives, before sarama revokes claims. It closes the queues
// of partitions this member loses, so a claim goroutine blocked on a full
// queue lets go and the revocation does not wait for the rebalance timeout.
func (th *thread) onAssignment(tasks []assign.TaskID, generation int32) {
	keep := map[tp]bool{}
	for _, id := range tasks {
		for _, topic := range th.app.layout.Topics[id.Subtopology] {
			keep[tp{topic, id.Partition}] = true
		}
	}
	th.mu.Lock()
	defer th.mu.Unlock()
	for p, q := range th.queues {
		if !keep[p] {
			q.Close()
		}
	}
	th.assigned.Store(true)
	th.assignedTasks.Store(int32(len(tasks)))
	th.assignedGen.Store(generation)
	th.app.metrics.Rebalances.WithLabelValues(strconv.Itoa(th.idx)).Inc()
	th.log.Info("assignment", "generation", generation, "tasks", len(tasks))
}

func (th *thread) signal() {
	select {
	case th.wake <- struct{}{}:
	default:
	}
}

// run runs the thread until ctx ends or it fails, then leaves the group.
func (th *thread) run() error {
	consumeCtx, stopConsume := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { th.consume(consumeCtx) })
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
	for _, q := range th.queues {
		q.Close()
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
func (th *thread) consume(ctx context.Context) {
	topics := th.app.layout.AllTopics()
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		th.assigned.Store(false)
		err := th.group.Consume(ctx, topics, (*groupHandler)(th))
		if ctx.Err() != nil || errors.Is(err, sarama.ErrClosedConsumerGroup) {
			return
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
func (th *thread) loop() error {
	cfg := &th.app.cfg
	th.lastCommit = time.Now()
	th.lastPurge = time.Now()
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
			if t := th.tasks[id]; t.running {
				rewound, err := th.afterWork(t.punctuate(graph.WallClockTime, now))
				if err != nil {
					return th.shutdown(err)
				}
				if rewound {
					break
				}
			}
		}
		if now.Sub(th.lastCommit) >= cfg.CommitInterval && !th.inRebalance() {
			if err := th.commit(); err != nil && !errors.Is(err, errCommitLater) {
				return th.shutdown(err)
			}
		}
		if progressed {
			continue
		}
		deadline := th.lastCommit.Add(cfg.CommitInterval)
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
			if next := th.tasks[id].nextWallClock(); !next.IsZero() && next.Before(deadline) {
				deadline = next
			}
		}
		if next := lastPublish.Add(publishInterval); next.Before(deadline) {
			deadline = next
		}
		timer.Reset(max(time.Until(deadline), time.Millisecond))
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

// publishInterval is how often the loop refreshes what App.Tasks and the
// metrics see of its tasks (besides after every change).
const publishInterval = time.Second

// backpressured returns the total time the thread's fetchers have spent
// blocked on full queues: of the queues gone, and of the live ones so far.
func (th *thread) backpressured() time.Duration {
	th.mu.Lock()
	defer th.mu.Unlock()
	total := th.blockedGone
	for _, q := range th.queues {
		total += q.Blocked()
	}
	return total
}

// processBatch gives each task with a record ready a batch of records.
// wait is the earliest time a task holding back for an empty partition
// wants to be looked at again.
func (th *thread) processBatch(now time.Time) (progressed bool, wait time.Time, err error) {
	for _, id := range th.order {
		t := th.tasks[id]
		if !t.running {
			continue
		}
		for range batchPerTask {
			p, w, err := t.next(now)
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
			rewound, err := th.afterWork(t.process(p))
			if err != nil || rewound {
				return progressed, wait, err
			}
			progressed = true
		}
		if th.buffered() >= th.app.cfg.State.MaxBufferBytes {
			if th.inRebalance() {
				// The commit waits for the new generation; processing
				// waits with it, so the buffer and the open transaction
				// stay bounded. The loop looks again each commit interval.
				return false, wait, nil
			}
			// The commit may close tasks: start the round over.
			if err := th.commit(); err != nil && !errors.Is(err, errCommitLater) {
				return progressed, wait, err
			}
			return progressed, wait, nil
		}
	}
	return progressed, wait, nil
}

// buffered is the size of the thread's uncommitted state changes.
func (th *thread) buffered() int {
	n := 0
	for _, id := range th.order {
		n += th.tasks[id].bufferedBytes()
	}
	return n
}

// control opens tasks for new partitions and serves revocations.
func (th *thread) control() error {
	th.mu.Lock()
	opened, releases := th.opened, th.releases
	th.opened, th.releases = nil, nil
	queues := make(map[tp]*msgQueue, len(opened))
	hwms := make(map[tp]func() int64, len(opened))
	starts := make(map[tp]int64, len(opened))
	for _, p := range opened {
		queues[p], hwms[p], starts[p] = th.queues[p], th.hwms[p], th.starts[p]
	}
	th.mu.Unlock()

	for _, p := range opened {
		sub, ok := th.app.layout.BySource[p.topic]
		if !ok {
			return fmt.Errorf("weir: internal error: assigned %s/%d, which no sub-topology reads", p.topic, p.partition)
		}
		id := assign.TaskID{Subtopology: sub, Partition: p.partition}
		t, ok := th.tasks[id]
		if !ok {
			var err error
			if t, err = newTask(th, id); err != nil {
				return err
			}
			th.tasks[id] = t
			th.order = append(th.order, id)
			t.log.Info("task created")
		}
		part := t.byTP[p]
		part.q, part.hwm, part.start, part.head, part.consumed, part.committed = queues[p], hwms[p], starts[p], nil, -1, -1
		part.done, part.redo = nil, nil
		th.owner[p] = t
	}

	changed := len(opened) > 0
	for _, id := range th.order {
		t := th.tasks[id]
		if t.running {
			continue
		}
		done, err := t.restored()
		if err != nil {
			return err
		}
		if done {
			changed = true
			t.log.Info("task running")
		}
	}
	if changed {
		th.publish()
	}
	if len(releases) == 0 {
		return nil
	}
	var closing []*task
	for _, r := range releases {
		if t := th.owner[r.tp]; t != nil && !slices.Contains(closing, t) {
			closing = append(closing, t)
		}
	}
	var err error
	if len(closing) > 0 {
		if cerr := th.commit(); cerr != nil && !errors.Is(cerr, errCommitLater) {
			err = cerr
		} else if cerr != nil {
			th.log.Warn("commit before revocation failed; the new owner repeats the uncommitted records", "error", cerr)
		}
		for _, t := range closing {
			if th.tasks[t.id] == t { // a failed commit may have closed it
				th.closeTask(t)
			}
		}
	}
	th.publish()
	for _, r := range releases {
		close(r.done)
	}
	return err
}

// closeTask closes t and forgets its partitions.
func (th *thread) closeTask(t *task) {
	if err := t.close(); err != nil {
		th.log.Warn("closing task", "task", t.name, "error", err)
	}
	th.mu.Lock()
	for _, p := range t.parts {
		if q := th.queues[p.tp]; q != nil && q == p.q {
			q.Close()
			th.blockedGone += q.Blocked()
			delete(th.queues, p.tp)
			delete(th.hwms, p.tp)
			delete(th.starts, p.tp)
		}
		delete(th.owner, p.tp)
	}
	th.mu.Unlock()
	delete(th.tasks, t.id)
	th.order = slices.DeleteFunc(th.order, func(id assign.TaskID) bool { return id == t.id })
	t.log.Info("task closed")
}

// errCommitLater is a commit the group refused for now (it is rebalancing
// or moved to a new generation); the next commit carries the same offsets.
var errCommitLater = errors.New("weir: commit deferred: group is rebalancing")

// commit is the one place where a thread commits.
//
// At least once: produce the buffered state changes to the changelogs,
// wait until every record is acknowledged, write the changes to Badger
// with their checkpoints, then commit the input offsets.
//
// Exactly once: the changelog records join the thread's transaction, which
// commits together with the input offsets and the group's metadata; only
// then are the changes written to Badger with their checkpoints. A failed
// transaction is aborted and its state changes discarded; the thread's
// tasks close and the group gives them back from the committed offsets.
func (th *thread) commit() error {
	th.lastCommit = time.Now()
	offsets := map[string]map[int32]int64{}
	for _, id := range th.order {
		th.tasks[id].offsets(offsets)
	}
	for _, id := range th.order {
		if err := th.tasks[id].sendChangelog(); err != nil {
			return th.settle(err)
		}
	}
	if err := th.failed(); err != nil {
		// Never commit past a record that was refused or lost.
		return th.settle(err)
	}
	if len(offsets) == 0 && !th.producer.Pending() {
		return nil
	}
	// Not th.ctx: the last commit runs after the thread was told to stop.
	ctx, cancel := context.WithTimeout(context.Background(), th.app.cfg.Consumer.RebalanceTimeout)
	defer cancel()
	start := time.Now()
	defer func() {
		th.app.metrics.CommitDuration.WithLabelValues(strconv.Itoa(th.idx)).Observe(time.Since(start).Seconds())
	}()
	if th.app.cfg.Guarantee == ExactlyOnce {
		return th.commitTransaction(ctx, offsets)
	}
	if err := th.producer.Commit(ctx, nil, nil); err != nil {
		// Refused records that ProductionErrors=Skip drops leave the
		// interval intact; anything else stops the thread.
		if err := th.settle(err); err != nil {
			return th.failCommit(err)
		}
		if err := th.producer.Commit(ctx, nil, nil); err != nil {
			return th.failCommit(err)
		}
	}
	// State follows the changelog, which now holds every change: write it
	// to Badger whatever happens to the offsets below.
	if err := th.applyState(); err != nil {
		return err
	}
	if len(offsets) == 0 {
		return nil
	}
	sess := th.session()
	if sess == nil {
		return errCommitLater
	}
	err := client.CommitOffsets(ctx, th.client, th.app.cfg.ApplicationID, sess.GenerationID(), sess.MemberID(), th.instance, offsets)
	if errors.Is(err, client.ErrTasksMigrated) {
		// The group moved on to a new generation while the commit was
		// under way (a cooperative rebalance changes it under a running
		// session). Tasks that really moved are revoked through
		// ConsumeClaim, which commits again; the rest commit next time.
		th.log.Debug("commit deferred", "error", err)
		return errCommitLater
	}
	if err != nil {
		return err
	}
	th.committed(offsets)
	return nil
}

// commitTransaction commits the thread's transaction with offsets.
func (th *thread) commitTransaction(ctx context.Context, offsets map[string]map[int32]int64) error {
	sess := th.session()
	if sess == nil {
		return th.settle(fmt.Errorf("%w: no group session to commit with", txn.ErrFailed))
	}
	var instance *string
	if th.instance != "" {
		instance = &th.instance
	}
	group := sarama.NewConsumerGroupMetadataFromSession(sess, th.app.cfg.ApplicationID, instance)
	start := time.Now()
	if err := th.producer.Commit(ctx, offsets, group); err != nil {
		return th.settle(err)
	}
	th.app.metrics.Transactions.WithLabelValues(strconv.Itoa(th.idx), "committed").Inc()
	if err := th.applyState(); err != nil {
		return err
	}
	th.committed(offsets)
	th.log.Debug("transaction committed", "took", time.Since(start))
	return nil
}

// failCommit handles a changelog or flush failure at least once: the
// thread stops, its uncommitted state discarded.
func (th *thread) failCommit(err error) error {
	for _, id := range th.order {
		th.tasks[id].discardState()
	}
	return err
}

// resetTasks discards every task's uncommitted state and closes the tasks
// without committing: their claims end, the group session restarts, and
// the tasks come back (to this member, the assignment being sticky) at the
// committed offsets, restoring only their changelog's committed tail.
func (th *thread) resetTasks() {
	for _, id := range slices.Clone(th.order) {
		t := th.tasks[id]
		t.discardState()
		th.closeTask(t)
	}
	th.publish()
}

func (th *thread) session() sarama.ConsumerGroupSession {
	th.mu.Lock()
	defer th.mu.Unlock()
	return th.sess
}

// applyState writes the committed state changes to Badger.
func (th *thread) applyState() error {
	for _, id := range th.order {
		if err := th.tasks[id].applyState(); err != nil {
			return err
		}
	}
	return nil
}

// committed records committed offsets.
func (th *thread) committed(offsets map[string]map[int32]int64) {
	for _, id := range th.order {
		th.tasks[id].committedAll(offsets)
	}
	th.replayBytes, th.replayLost = 0, false
	clear(th.isolate)
	th.publish()
	th.forgetSkips(offsets)
	th.purge(offsets)
}

// purge deletes consumed records of repartition topics, at most once per
// Topics.PurgeInterval, so the topics do not grow without bound.
func (th *thread) purge(committed map[string]map[int32]int64) {
	if time.Since(th.lastPurge) < th.app.cfg.Topics.PurgeInterval {
		return
	}
	th.lastPurge = time.Now()
	for topic, parts := range committed {
		if !th.app.layout.Internal[topic] {
			continue
		}
		if err := th.app.admin.DeleteRecords(topic, parts); err != nil {
			th.log.Warn("purging repartition topic", "topic", topic, "error", err)
		}
	}
}

// shutdown commits what was processed, closes every task and returns
// cause, or the commit's error when there is no cause. Under exactly once
// a failure aborts instead: the failing record may have produced part of
// its output, which must not be committed.
func (th *thread) shutdown(cause error) error {
	if cause != nil && th.app.cfg.Guarantee == ExactlyOnce {
		ctx, cancel := context.WithTimeout(context.Background(), th.app.cfg.Consumer.RebalanceTimeout)
		// A closed producer (a rebuild that failed) has nothing to abort:
		// its transaction is the broker's to abort.
		if err := th.producer.Abort(ctx); err != nil {
			th.log.Warn("aborting the last transaction", "error", err)
		}
		cancel()
		for _, id := range th.order {
			th.tasks[id].discardState()
		}
	} else if err := th.commit(); err != nil && !errors.Is(err, errCommitLater) {
		th.log.Warn("final commit failed", "error", err)
		if cause == nil {
			cause = err
		}
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

// groupHandler is the thread seen as a sarama.ConsumerGroupHandler.
type groupHandler thread

func (h *groupHandler) Setup(sess sarama.ConsumerGroupSession) error {
	th := (*thread)(h)
	th.mu.Lock()
	th.sess = sess
	th.mu.Unlock()
	th.signal() // a commit waiting for the new generation may go
	return nil
}

func (h *groupHandler) Cleanup(sarama.ConsumerGroupSession) error { return nil }

// ConsumeClaim moves one partition's records into its queue until the
// partition is revoked, then waits until the loop has committed and closed
// its task, so that the next owner starts exactly where this one stopped.
func (h *groupHandler) ConsumeClaim(sess sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	th := (*thread)(h)
	p := tp{claim.Topic(), claim.Partition()}
	cfg := &th.app.cfg
	q := queue.New(queue.Limits{Items: cfg.Queue.MaxRecords, Bytes: cfg.Queue.MaxBytes}, msgSize, th.signal)

	th.mu.Lock()
	if th.stopped {
		th.mu.Unlock()
		return nil
	}
	if old := th.queues[p]; old != nil {
		old.Close()
	}
	th.queues[p] = q
	th.hwms[p] = claim.HighWaterMarkOffset
	th.starts[p] = claim.InitialOffset()
	th.opened = append(th.opened, p)
	th.mu.Unlock()
	th.signal()

	th.checkLostRecords(p, claim.InitialOffset())

	// Until sarama revokes the claim (Messages closes) or the loop closes
	// the queue (the task was closed, or the assignment dropped it).
	for running := true; running; {
		select {
		case m, ok := <-claim.Messages():
			running = ok && q.Push(sess.Context(), m) == nil
		case <-q.Done():
			running = false
		}
	}

	r := release{tp: p, done: make(chan struct{})}
	th.mu.Lock()
	if th.stopped {
		th.mu.Unlock()
		return nil
	}
	th.releases = append(th.releases, r)
	th.mu.Unlock()
	th.signal()
	select {
	case <-r.done:
	case <-th.exited:
	}
	return nil
}

// threadClock splits a thread's wall time into busy (working: processing,
// committing, restoring bookkeeping) and idle (waiting for records), read
// at any time by the metrics. Flink's busy and idle time.
type threadClock struct {
	mu    sync.Mutex
	state int
	since time.Time
	spent [2]time.Duration // busy, idle
}

const (
	busyState = iota
	idleState
	stoppedState
)

func (c *threadClock) switchTo(state int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	if c.state < stoppedState && !c.since.IsZero() {
		c.spent[c.state] += now.Sub(c.since)
	}
	c.state, c.since = state, now
}

// read returns the busy and idle time so far, the current stretch
// included.
func (c *threadClock) read() (busy, idle time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	spent := c.spent
	if c.state < stoppedState && !c.since.IsZero() {
		spent[c.state] += time.Since(c.since)
	}
	return spent[busyState], spent[idleState]
}

// checkLostRecords reports records lost to retention: when a partition's
// committed offset is below the log start, sarama starts the claim at the
// oldest record (Consumer.Group.ResetInvalidOffsets), and the records in
// between were deleted unread. Processing goes on from the oldest record;
// the loss is logged as an error and counted, never silent.
func (th *thread) checkLostRecords(p tp, start int64) {
	resp, err := th.app.admin.ListConsumerGroupOffsets(th.app.cfg.ApplicationID, map[string][]int32{p.topic: {p.partition}})
	if err != nil {
		th.log.Debug("reading the committed offset", "topic", p.topic, "partition", p.partition, "error", err)
		return
	}
	b := resp.GetBlock(p.topic, p.partition)
	if b == nil || b.Err != sarama.ErrNoError || b.Offset < 0 {
		return
	}
	if start < 0 {
		// sarama reset the claim: it reports the reset's sentinel
		// (OffsetOldest), not an offset.
		if start, err = th.client.GetOffset(p.topic, p.partition, sarama.OffsetOldest); err != nil {
			th.log.Debug("reading the log start", "topic", p.topic, "partition", p.partition, "error", err)
			return
		}
	}
	if b.Offset >= start {
		return
	}
	lost := start - b.Offset
	th.app.metrics.RecordsLost.WithLabelValues(p.topic, strconv.Itoa(int(p.partition))).Add(float64(lost))
	th.log.Error("records lost to retention before they were processed: the committed offset is below the log start",
		"topic", p.topic, "partition", p.partition, "committed", b.Offset, "log_start", start, "lost", lost)
}
