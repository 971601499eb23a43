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
	// guard runs the open-transaction checks of the producer
	// (repair.Guard).
	guard     *repair.Guard
	committer committer
	maxBytes  int // the producer's MaxMessageBytes
	strategy  *assign.Strategy
	instance  string // group.instance.id, "" without static membership
	recorded  string // the member id last recorded (recordMember), sarama's goroutine only

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
	// never reset (the guard's take-overs: repair.Guard).
	newestGen atomic.Int32
	// committing (cap 1) is held by the loop for the whole of a commit
	// and by userData while it marks a rebalance: a commit under way
	// finishes before this member's JoinGroup goes out, and none starts
	// after it until the new assignment (see commitDue).
	committing chan struct{}
	// aborts counts the transactions aborted in a row, since the last one
	// that committed (see handleTxnError and committedNow).
	aborts atomic.Int32
	// checkOwn asks the loop, once it has nothing pending, to look for
	// an offset commit of its producer left open
	// (repair.Guard.CheckOwnOffsets).
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
	th.guard = th.newGuard()
	th.newProducer = func() (*txn.Producer, error) {
		return th.guard.Build(func() (*txn.Producer, error) { return txn.New(th.pclient) })
	}
	if th.producer, err = th.initProducer(); err != nil {
		th.group.Close()
		kc.Close()
		th.pclient.Close()
		return nil, fmt.Errorf("weir: thread %d: %w", idx, err)
	}
	return th, nil
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
			if unstable++; unstable%repair.UnstableSessions == 0 {
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
	th.lastCommit = time.Now()
	th.lastPurge = time.Now()
	th.setInterval(th.in.CommitInterval)
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
			if err := th.guard.CheckOwnOffsets(th.producer); err != nil {
				return th.shutdown(err)
			}
		}
		now := time.Now()
		if now.Sub(lastPublish) >= publishInterval {
			lastPublish = now
			th.publish()
		}
		progressed, wait, err := th.round(now)
		if err != nil {
			return th.shutdown(err)
		}
		// At least once the producer holds records back to hand them
		// to sarama in bursts: what a round left held goes now, so that
		// no output waits for the next round's records or the commit.
		// Under exactly once Flush does nothing: a batch left open
		// leaves after the client's flush frequency (5 ms).
		th.producer.Flush()
		if progressed {
			continue
		}
		th.sleep(timer, th.nextWake(now, wait, lastPublish.Add(publishInterval)))
	}
}

// round is the work of one turn of the loop at now: a batch of records,
// the wall-clock punctuations due and the commit due. progressed reports
// that records were processed; wait, when not zero, is when a task's
// queue may next hold a record it can process.
func (th *Thread) round(now time.Time) (progressed bool, wait time.Time, err error) {
	if progressed, wait, err = th.processBatch(now); err != nil {
		return false, wait, err
	}
	for _, id := range th.order {
		if t := th.tasks[id]; t.Running() {
			o, err := th.afterWork(t.Punctuate(graph.WallClockTime, now))
			if err != nil {
				return false, wait, err
			}
			if o != untouched {
				break // the tasks were rewound or closed
			}
		}
	}
	if now.Sub(th.lastCommit) >= th.interval {
		if _, err := th.commitDue(); err != nil {
			return false, wait, err
		}
		th.setInterval(th.nextInterval())
	}
	return progressed, wait, nil
}

// nextWake returns when the loop, with nothing to process at now, must
// look again: the commit due (later while a rebalance holds it back),
// wait (a queue's next processable record), a task's next wall-clock
// punctuation or the next status publication, whichever comes first.
func (th *Thread) nextWake(now, wait, publish time.Time) time.Time {
	deadline := th.lastCommit.Add(th.interval)
	if th.inRebalance() {
		// The commit waits for the assignment: look again later.
		if later := now.Add(th.in.CommitInterval); later.After(deadline) {
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
	if publish.Before(deadline) {
		deadline = publish
	}
	return deadline
}

// sleep idles the loop until deadline, something arrives (wake) or the
// thread must stop; timer is the loop's, stopped and drained on return.
func (th *Thread) sleep(timer *time.Timer, deadline time.Time) {
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
			if o, err := th.afterWork(t.Process(p)); err != nil || o != untouched {
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
