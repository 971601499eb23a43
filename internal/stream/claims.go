package stream

import (
	"fmt"
	"slices"
	"strconv"

	"github.com/IBM/sarama"

	"github.com/weirstream/weir/internal/assign"
	"github.com/weirstream/weir/internal/queue"
	"github.com/weirstream/weir/internal/task"
)

// claim is a partition this member claims now: the queue its claim
// goroutine fills, the claim's high watermark and the offset it started
// at.
type claim struct {
	q         *task.Queue
	hwm       func() int64
	start     int64
	committed int64  // the group's committed offset at the claim's start; -1 none
	meta      string // the metadata committed with it (the task's stream time)
}

// release is a claim goroutine waiting for the loop to commit and close
// the task of a revoked partition.
type release struct {
	tp   task.TP
	done chan struct{}
}

// control opens tasks for new partitions, starts the tasks whose restore
// finished and serves revocations: the requests the claim goroutines left
// for the loop.
func (th *Thread) control() error {
	th.mu.Lock()
	opened, releases := th.opened, th.releases
	th.opened, th.releases = nil, nil
	claims := make(map[task.TP]claim, len(opened))
	for _, p := range opened {
		if c := th.claims[p]; c != nil {
			claims[p] = *c
		}
	}
	th.mu.Unlock()

	if err := th.openClaimed(opened, claims); err != nil {
		return err
	}
	started, err := th.startRestored()
	if err != nil {
		return err
	}
	if len(opened) > 0 || started {
		th.publish()
	}
	if len(releases) == 0 {
		return nil
	}
	return th.releaseRevoked(releases)
}

// openClaimed gives each newly claimed partition of opened to its task, created
// when the thread has none yet; claims holds the partitions' claims, those
// revoked already missing.
func (th *Thread) openClaimed(opened []task.TP, claims map[task.TP]claim) error {
	for _, p := range opened {
		sub, ok := th.in.Layout.BySource[p.Topic]
		if !ok {
			return fmt.Errorf("weir: internal error: assigned %s/%d, which no sub-topology reads", p.Topic, p.Partition)
		}
		id := assign.TaskID{Subtopology: sub, Partition: p.Partition}
		t, ok := th.tasks[id]
		if !ok {
			var err error
			if t, err = task.New(th.ctx, th.in.Shared, th, th.idx, th.log, id); err != nil {
				return err
			}
			th.tasks[id] = t
			th.order = append(th.order, id)
			th.log.Info("task created", "task", t.Name())
		}
		c, ok := claims[p]
		if !ok {
			continue // revoked already
		}
		if !t.Attach(p, c.q, c.hwm, c.start, c.meta) {
			return fmt.Errorf("weir: internal error: task %s does not read %s/%d", t.Name(), p.Topic, p.Partition)
		}
		th.owner[p] = t
	}
	return nil
}

// startRestored starts the tasks whose restore finished; started reports
// that one did.
func (th *Thread) startRestored() (started bool, err error) {
	for _, id := range th.order {
		t := th.tasks[id]
		if t.Running() {
			continue
		}
		done, err := t.Restored()
		if err != nil {
			return started, err
		}
		if done {
			started = true
			th.log.Info("task running", "task", t.Name())
		}
	}
	return started, nil
}

// releaseRevoked commits and closes the tasks of revoked partitions, then lets
// their claim goroutines return. A commit that fails stops the thread;
// one that does not commit (aborted, fenced) leaves the uncommitted
// records to the new owner.
func (th *Thread) releaseRevoked(releases []release) error {
	var closing []*task.Task
	for _, r := range releases {
		if t := th.owner[r.tp]; t != nil && !slices.Contains(closing, t) {
			closing = append(closing, t)
		}
	}
	var err error
	if len(closing) > 0 {
		switch o, cerr := th.commit(); {
		case cerr != nil:
			err = cerr
		case o != committed:
			th.log.Warn("commit before revocation did not commit; the new owner repeats the uncommitted records", "outcome", o)
		}
		for _, t := range closing {
			if th.tasks[t.ID()] == t { // a failed commit may have closed it
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
func (th *Thread) closeTask(t *task.Task) {
	if err := t.Close(); err != nil {
		th.log.Warn("closing task", "task", t.Name(), "error", err)
	}
	th.mu.Lock()
	for _, in := range t.Inputs() {
		p := in.TP()
		if c := th.claims[p]; c != nil && c.q == in.Queue() {
			c.q.Close()
			th.blockedGone += c.q.Blocked()
			delete(th.claims, p)
		}
		delete(th.owner, p)
	}
	th.mu.Unlock()
	delete(th.tasks, t.ID())
	th.order = slices.DeleteFunc(th.order, func(id assign.TaskID) bool { return id == t.ID() })
	th.log.Info("task closed", "task", t.Name())
}

// groupHandler is the thread seen as a sarama.ConsumerGroupHandler.
type groupHandler Thread

// Setup starts a group session.
func (h *groupHandler) Setup(sess sarama.ConsumerGroupSession) error {
	th := (*Thread)(h)
	th.mu.Lock()
	th.sess = sess
	th.mu.Unlock()
	th.recordMember(sess.MemberID())
	th.Wake() // a commit waiting for the new generation may go
	return nil
}

// Cleanup ends a group session.
func (h *groupHandler) Cleanup(sarama.ConsumerGroupSession) error { return nil }

// ConsumeClaim moves one partition's records into its queue until the
// partition is revoked, then waits until the loop has committed and closed
// its task, so that the next owner starts exactly where this one stopped.
func (h *groupHandler) ConsumeClaim(sess sarama.ConsumerGroupSession, sc sarama.ConsumerGroupClaim) error {
	th := (*Thread)(h)
	p := task.TP{Topic: sc.Topic(), Partition: sc.Partition()}
	cfg := th.in
	q := queue.New(queue.Limits{Items: cfg.QueueRecords, Bytes: cfg.QueueBytes}, task.RecordSize, th.Wake)

	// Lag is known from the assignment on, not from the first fetch: the
	// claim's position and the log end are read now, and the claim's own
	// high watermark takes over once a fetch has reported it.
	start, committed := sc.InitialOffset(), sc.InitialOffset()
	if committed < 0 {
		committed = -1
	}
	if start < 0 {
		// sarama reports the reset's sentinel (OffsetOldest), not an
		// offset, when the group has no committed offset.
		if off, err := th.client.GetOffset(p.Topic, p.Partition, sarama.OffsetOldest); err == nil {
			start = off
		}
	}
	end, err := th.client.GetOffset(p.Topic, p.Partition, sarama.OffsetNewest)
	if err != nil {
		end = -1
	}
	hwm := claimHighWatermark(sc.HighWaterMarkOffset, end)
	committedAt, meta, haveCommitted := th.committedOffset(p)
	th.mu.Lock()
	if th.stopped {
		th.mu.Unlock()
		return nil
	}
	if old := th.claims[p]; old != nil {
		old.q.Close()
	}
	th.claims[p] = &claim{q: q, hwm: hwm, start: start, committed: committed, meta: meta}
	th.opened = append(th.opened, p)
	th.mu.Unlock()
	th.Wake()

	if haveCommitted {
		th.checkLostRecords(p, start, committedAt)
	}

	// Until sarama revokes the claim (Messages closes) or the loop closes
	// the queue (the task was closed, or the assignment dropped it).
	for running := true; running; {
		select {
		case m, ok := <-sc.Messages():
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
	th.Wake()
	select {
	case <-r.done:
	case <-th.exited:
	}
	return nil
}

// committedOffset reads the group's committed offset of p and the
// metadata committed with it; ok is false when there is none (or it cannot
// be read, which is logged).
func (th *Thread) committedOffset(p task.TP) (offset int64, meta string, ok bool) {
	resp, err := th.in.Admin.ListConsumerGroupOffsets(th.in.ApplicationID, map[string][]int32{p.Topic: {p.Partition}})
	if err != nil {
		th.log.Warn("reading the committed offset", "topic", p.Topic, "partition", p.Partition, "error", err)
		return 0, "", false
	}
	b := resp.GetBlock(p.Topic, p.Partition)
	if b == nil || b.Err != sarama.ErrNoError || b.Offset < 0 {
		return 0, "", false
	}
	return b.Offset, b.Metadata, true
}

// checkLostRecords reports records lost to retention: when a partition's
// committed offset is below the log start, sarama starts the claim at the
// oldest record (Consumer.Group.ResetInvalidOffsets), and the records in
// between were deleted unread. Processing goes on from the oldest record;
// the loss is logged as an error and counted, never silent.
func (th *Thread) checkLostRecords(p task.TP, start, committed int64) {
	var err error
	if start < 0 {
		// sarama reset the claim: it reports the reset's sentinel
		// (OffsetOldest), not an offset.
		if start, err = th.client.GetOffset(p.Topic, p.Partition, sarama.OffsetOldest); err != nil {
			th.log.Debug("reading the log start", "topic", p.Topic, "partition", p.Partition, "error", err)
			return
		}
	}
	if committed >= start {
		return
	}
	lost := start - committed
	th.in.Metrics.RecordsLost.WithLabelValues(p.Topic, strconv.Itoa(int(p.Partition))).Add(float64(lost))
	th.log.Error("records lost to retention before they were processed: the committed offset is below the log start",
		"topic", p.Topic, "partition", p.Partition, "committed", committed, "log_start", start, "lost", lost)
}

// claimHighWatermark is a claim's log end: the claim's high watermark once
// a fetch has reported one, end (read when the claim started) before.
func claimHighWatermark(hwm func() int64, end int64) func() int64 {
	return func() int64 {
		if h := hwm(); h > 0 {
			return h
		}
		return end
	}
}
