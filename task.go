package weir

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/IBM/sarama"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/weirstream/weir/internal/assign"
	"github.com/weirstream/weir/internal/client"
	"github.com/weirstream/weir/internal/graph"
	"github.com/weirstream/weir/internal/queue"
	"github.com/weirstream/weir/internal/topics"
)

// tp is a topic partition.
type tp struct {
	topic     string
	partition int32
}

// msgQueue is a partition's queue of fetched records.
type msgQueue = queue.Queue[*sarama.ConsumerMessage]

func msgSize(m *sarama.ConsumerMessage) int { return len(m.Key) + len(m.Value) }

// partition is one input partition of a task.
type partition struct {
	tp  tp
	src graph.SourceInstance
	q   *msgQueue // nil until the partition's claim starts

	// head is the decoded record at the front of redo or q, if any.
	head     *sarama.ConsumerMessage
	headTime time.Time

	// done holds the records processed since the last commit, in order,
	// while the thread can still replay them (see thread.rewind); redo
	// holds records to process again, before q.
	done, redo []*sarama.ConsumerMessage

	consumed  int64        // next offset to commit; -1 before the first record
	committed int64        // last committed next offset; -1 unknown
	hwm       func() int64 // the claim's high watermark
	start     int64        // the offset the claim started at
}

// task is one sub-topology on one partition. All its methods run on its
// thread's goroutine.
type task struct {
	id    assign.TaskID
	name  string
	th    *thread
	ctx   context.Context
	stop  context.CancelFunc
	log   *slog.Logger
	parts []*partition
	byTP  map[tp]*partition
	insts []graph.Instance // in graph order: parents before children

	stores map[string]*taskStore
	// running is false while the stores restore; the loop processes only
	// running tasks. restoreDone is closed when the restore goroutine ends.
	running     bool
	initialized bool
	restoreDone chan struct{}
	restoreErr  error

	streamTime time.Time
	// committedTime is the stream time at the last commit, where a rewind
	// takes the task back to.
	committedTime time.Time
	meta          graph.Metadata
	inRecord      bool
	punctNode     string // the node whose punctuator runs
	// nulls drops the empty-key writes of a record whose Kafka key is
	// null (see nullkey.go).
	nulls nullKeys
	// cur is the origin of the records produced now (see origin), reset
	// for every input record and punctuation.
	cur, curExplicit *client.Origin
	punct            []*schedule
	idleSince        time.Time // when the task first waited for an empty partition

	// Metrics of the task, resolved once.
	processed, bytes, punctuations prometheus.Counter
	skipped, dropped               prometheus.Counter
	latency                        prometheus.Observer
}

// schedule is a punctuator.
type schedule struct {
	node      string
	interval  time.Duration
	typ       graph.PunctuationType
	fn        func(time.Time) error
	next      time.Time
	cancelled bool
}

// newTask creates a task's node instances, children first, then runs Init
// parents first.
func newTask(th *thread, id assign.TaskID) (*task, error) {
	sub := th.app.layout.Subs[id.Subtopology]
	ctx, cancel := context.WithCancel(th.ctx)
	t := &task{
		id:   id,
		name: id.String(),
		th:   th,
		ctx:  ctx,
		stop: cancel,
		byTP: map[tp]*partition{},
	}
	t.log = th.log.With("task", t.name)
	m, thread := th.app.metrics, strconv.Itoa(th.idx)
	t.processed = m.RecordsProcessed.WithLabelValues(thread, t.name)
	t.bytes = m.BytesProcessed.WithLabelValues(thread, t.name)
	t.punctuations = m.Punctuations.WithLabelValues(thread, t.name)
	t.skipped = m.RecordsSkipped.WithLabelValues(thread, t.name, "deserialization")
	t.dropped = m.RecordsDropped.WithLabelValues(thread, t.name, "null_key")
	t.latency = m.EndToEndLatency.WithLabelValues(t.name)
	if err := t.build(sub); err != nil {
		cancel()
		return nil, err
	}
	th.app.local.Acquire(id, th.idx)
	t.openStores(sub)
	if len(t.stores) == 0 {
		if err := t.init(); err != nil {
			cancel()
			return nil, err
		}
		return t, nil
	}
	t.restoreDone = make(chan struct{})
	go func() {
		defer close(t.restoreDone)
		t.restoreErr = t.restore(t.ctx)
		th.signal()
	}()
	return t, nil
}

// build creates the task's node instances, children first, and its
// partitions on the first call; a later call (a rewind) replaces the
// instances and the partitions' sources.
func (t *task) build(sub *graph.Subtopology) error {
	made := map[*graph.Node]graph.Instance{}
	var create func(n *graph.Node) (graph.Instance, error)
	create = func(n *graph.Node) (graph.Instance, error) {
		if inst, ok := made[n]; ok {
			return inst, nil
		}
		children := make([]graph.Instance, len(n.Children))
		for i, c := range n.Children {
			inst, err := create(c)
			if err != nil {
				return nil, err
			}
			children[i] = inst
		}
		inst, err := n.New(t, children)
		if err != nil {
			return nil, fmt.Errorf("weir: task %s: creating node %s: %w", t.name, n.Name, err)
		}
		made[n] = inst
		return inst, nil
	}
	insts := make([]graph.Instance, 0, len(sub.Nodes))
	for _, n := range sub.Nodes {
		inst, err := create(n)
		if err != nil {
			return err
		}
		insts = append(insts, inst)
		if n.Kind != graph.KindSource {
			continue
		}
		src, ok := inst.(graph.SourceInstance)
		if !ok {
			return fmt.Errorf("weir: internal error: source %s has no source instance", n.Name)
		}
		key := tp{topics.TopicName(t.th.app.cfg.ApplicationID, n), t.id.Partition}
		if p := t.byTP[key]; p != nil {
			p.src = src
			continue
		}
		p := &partition{tp: key, src: src, consumed: -1, committed: -1}
		t.parts = append(t.parts, p)
		t.byTP[p.tp] = p
	}
	t.insts = insts
	return nil
}

// rewind takes a running task back to its last commit: its uncommitted
// state changes are discarded, its node instances closed and created anew
// (so processors drop whatever they held in memory, and punctuators are
// scheduled again by Init), and the records processed since the commit are
// queued to be processed again, in their order, before anything fetched
// after them. The stores' committed state is in Badger already: nothing is
// restored.
func (t *task) rewind() error {
	t.discardState()
	var errs []error
	for _, inst := range t.insts {
		if err := inst.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		t.log.Warn("closing processors for a rewind", "error", err)
	}
	t.initialized, t.running = false, false
	t.punct, t.cur, t.inRecord, t.idleSince = nil, nil, false, time.Time{}
	t.streamTime = t.committedTime
	for _, p := range t.parts {
		p.redo = append(p.done, p.redo...)
		p.done, p.head = nil, nil
		p.consumed = p.committed
	}
	if err := t.build(t.th.app.layout.Subs[t.id.Subtopology]); err != nil {
		return err
	}
	return t.init()
}

// init runs Init on every node, parents first; the task then processes.
func (t *task) init() error {
	for i, inst := range t.insts {
		if err := inst.Init(); err != nil {
			for _, done := range t.insts[:i] {
				_ = done.Close()
			}
			return fmt.Errorf("weir: task %s: init: %w", t.name, err)
		}
	}
	t.initialized, t.running = true, true
	return nil
}

// restored reports whether a restoring task has finished its restore, and
// then runs Init. A failed restore is the error.
func (t *task) restored() (bool, error) {
	if t.running {
		return true, nil
	}
	select {
	case <-t.restoreDone:
	default:
		return false, nil
	}
	if t.restoreErr != nil {
		return false, t.restoreErr
	}
	return true, t.init()
}

// close stops a restore in progress, runs Close on every node and cancels
// the task's context.
func (t *task) close() error {
	t.stop()
	if t.restoreDone != nil {
		<-t.restoreDone
	}
	defer t.th.app.local.Release(t.id, t.th.idx, t.storeNames())
	var errs []error
	if t.initialized {
		for _, inst := range t.insts {
			if err := inst.Close(); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("weir: task %s: close: %w", t.name, err)
	}
	return nil
}

// next decodes the heads of the task's partitions and returns the one with
// the smallest timestamp, or nil when the task has nothing to process now.
// wait tells the thread when to look again if the task is holding back for
// an empty partition (MaxTaskIdle).
func (t *task) next(now time.Time) (p *partition, wait time.Time, err error) {
	empty := false
	for _, cand := range t.parts {
		if cand.head == nil {
			if err := t.decodeHead(cand); err != nil {
				return nil, time.Time{}, err
			}
		}
		if cand.head == nil {
			empty = true
			continue
		}
		if p == nil || cand.headTime.Before(p.headTime) {
			p = cand
		}
	}
	if p == nil {
		t.idleSince = time.Time{}
		return nil, time.Time{}, nil
	}
	if empty && len(t.parts) > 1 {
		idle := t.th.app.cfg.MaxTaskIdle
		if idle > 0 {
			if t.idleSince.IsZero() {
				t.idleSince = now
			}
			if deadline := t.idleSince.Add(idle); now.Before(deadline) {
				return nil, deadline, nil
			}
		}
	}
	t.idleSince = time.Time{}
	return p, time.Time{}, nil
}

// decodeHead decodes the front record of p, applying the error policies to
// records that cannot be decoded.
func (t *task) decodeHead(p *partition) error {
	for p.q != nil {
		m, ok := p.peek()
		if !ok {
			return nil
		}
		raw := graph.RawRecord{
			Key: m.Key, Value: m.Value, Timestamp: m.Timestamp,
			Topic: m.Topic, Partition: m.Partition, Offset: m.Offset,
		}
		if len(m.Headers) > 0 {
			raw.Headers = make([]graph.Header, len(m.Headers))
			for i, h := range m.Headers {
				raw.Headers[i] = graph.Header{Key: string(h.Key), Value: h.Value}
			}
		}
		ts, err := p.src.Decode(&raw)
		if err == nil {
			p.head, p.headTime = m, ts
			return nil
		}
		policy := t.th.app.cfg.DeserializationErrors
		var de *graph.DecodeError
		if errors.As(err, &de) && de.Stage == "timestamp" {
			policy = t.th.app.cfg.TimestampErrors
		}
		if policy == Fail {
			return &RecordError{Task: t.name, Topic: m.Topic, Partition: m.Partition, Offset: m.Offset, Err: err}
		}
		t.log.Warn("skipping record", "topic", m.Topic, "partition", m.Partition, "offset", m.Offset, "error", err)
		if policy == t.th.app.cfg.TimestampErrors && errors.As(err, &de) && de.Stage == "timestamp" {
			t.th.app.metrics.RecordsSkipped.WithLabelValues(strconv.Itoa(t.th.idx), t.name, "timestamp").Inc()
		} else {
			t.skipped.Inc()
		}
		p.pop()
		p.consumed = m.Offset + 1
	}
	return nil
}

// peek returns the next record to process: a record to process again
// first, else the queue's front.
func (p *partition) peek() (*sarama.ConsumerMessage, bool) {
	if len(p.redo) > 0 {
		return p.redo[0], true
	}
	return p.q.Peek()
}

// pop removes the record peek returned.
func (p *partition) pop() {
	if len(p.redo) > 0 {
		p.redo[0] = nil
		p.redo = p.redo[1:]
		return
	}
	p.q.Pop()
}

// process runs the head record of p through the topology.
func (t *task) process(p *partition) error {
	m := p.head
	p.head = nil
	t.meta = graph.Metadata{Topic: m.Topic, Partition: m.Partition, Offset: m.Offset}
	t.inRecord, t.cur = true, nil
	t.nulls.begin(m.Key == nil)
	if p.headTime.After(t.streamTime) {
		t.streamTime = p.headTime
	}
	err := p.src.Process()
	t.inRecord, t.nulls.active = false, false
	if err != nil {
		// The record stays unconsumed: a restart processes it again.
		return t.recordError(m, err)
	}
	p.pop()
	p.consumed = m.Offset + 1
	t.th.keepForReplay(p, m)
	t.processed.Inc()
	t.bytes.Add(float64(len(m.Key) + len(m.Value)))
	return t.punctuate(graph.StreamTime, t.streamTime)
}

func (t *task) recordError(m *sarama.ConsumerMessage, err error) error {
	re := &RecordError{Task: t.name, Topic: m.Topic, Partition: m.Partition, Offset: m.Offset, Err: err}
	var ne *graph.NodeError
	if errors.As(err, &ne) {
		re.Node, re.Err = ne.Node, ne.Err
	}
	return re
}

// punctuate fires the due punctuators of one clock. A stream-time
// punctuator fires once however far time jumped, then is due one interval
// later.
func (t *task) punctuate(typ graph.PunctuationType, now time.Time) error {
	for i := 0; i < len(t.punct); i++ {
		s := t.punct[i]
		if s.cancelled {
			t.punct = append(t.punct[:i], t.punct[i+1:]...)
			i--
			continue
		}
		if s.typ != typ || now.Before(s.next) {
			continue
		}
		s.next = now.Add(s.interval)
		t.punctuations.Inc()
		t.punctNode, t.cur = s.node, nil
		if err := s.fn(now); err != nil {
			return fmt.Errorf("weir: task %s: punctuator of %s: %w", t.name, s.node, err)
		}
	}
	return nil
}

// nextWallClock returns when the earliest wall-clock punctuator is due.
func (t *task) nextWallClock() time.Time {
	var next time.Time
	for _, s := range t.punct {
		if s.typ == graph.WallClockTime && !s.cancelled && (next.IsZero() || s.next.Before(next)) {
			next = s.next
		}
	}
	return next
}

// offsets adds the task's uncommitted positions to out.
func (t *task) offsets(out map[string]map[int32]int64) {
	for _, p := range t.parts {
		if p.consumed < 0 || p.consumed == p.committed {
			continue
		}
		if out[p.tp.topic] == nil {
			out[p.tp.topic] = map[int32]int64{}
		}
		out[p.tp.topic][p.tp.partition] = p.consumed
	}
}

// committedAll records that the positions given by offsets are committed:
// the records processed up to them will never be replayed.
func (t *task) committedAll(out map[string]map[int32]int64) {
	for _, p := range t.parts {
		if off, ok := out[p.tp.topic][p.tp.partition]; ok {
			p.committed = off
		}
		clear(p.done)
		p.done = p.done[:0]
	}
	t.committedTime = t.streamTime
}

// graph.TaskEnv, for the task's node instances.

func (t *task) Context() context.Context { return t.ctx }
func (t *task) ApplicationID() string    { return t.th.app.cfg.ApplicationID }
func (t *task) TaskID() string           { return t.name }
func (t *task) Partition() int32         { return t.id.Partition }
func (t *task) StreamTime() time.Time    { return t.streamTime }
func (t *task) Logger() *slog.Logger     { return t.log }

func (t *task) Metadata() (graph.Metadata, bool) { return t.meta, t.inRecord }

func (t *task) Schedule(node string, interval time.Duration, typ graph.PunctuationType, fn func(time.Time) error) (func(), error) {
	s := &schedule{node: node, interval: interval, typ: typ, fn: fn}
	switch typ {
	case graph.WallClockTime:
		s.next = time.Now().Add(interval)
	case graph.StreamTime:
		// Due at the first record when stream time is still unknown.
		if !t.streamTime.IsZero() {
			s.next = t.streamTime.Add(interval)
		}
	}
	t.punct = append(t.punct, s)
	return func() { s.cancelled = true }, nil
}

func (t *task) Send(topic string, internal bool, key, value []byte, ts time.Time, headers []graph.Header, part int32) error {
	if internal {
		topic = graph.InternalTopic(t.th.app.cfg.ApplicationID, topic)
		// A repartition record under the empty key of a null-key record
		// is dropped, as its state writes are (see nullkey.go).
		if t.dropNullKey(key, "repartition_topic", topic) {
			return nil
		}
	}
	m := &sarama.ProducerMessage{Topic: topic, Timestamp: ts, Metadata: t.origin(part >= 0)}
	if key != nil {
		m.Key = sarama.ByteEncoder(key)
	}
	if value != nil {
		m.Value = sarama.ByteEncoder(value)
	}
	if part >= 0 {
		m.Partition = part
	}
	if len(headers) > 0 {
		m.Headers = make([]sarama.RecordHeader, len(headers))
		for i, h := range headers {
			m.Headers[i] = sarama.RecordHeader{Key: []byte(h.Key), Value: h.Value}
		}
	}
	if !ts.IsZero() {
		t.latency.Observe(time.Since(ts).Seconds())
	}
	return t.th.send(m)
}

// origin returns the origin of the records the task produces now: of the
// record being processed, or of the punctuator running. It is shared by
// the records of one input record or punctuation.
func (t *task) origin(explicit bool) *client.Origin {
	if t.cur == nil {
		t.cur = &client.Origin{Task: t.name, Offset: -1}
		if t.inRecord {
			t.cur.Topic, t.cur.Partition, t.cur.Offset = t.meta.Topic, t.meta.Partition, t.meta.Offset
		} else {
			t.cur.Node = t.punctNode
		}
		t.curExplicit = new(*t.cur)
		t.curExplicit.Explicit = true
	}
	if explicit {
		return t.curExplicit
	}
	return t.cur
}

func (t *task) PartitionCount(topic string, internal bool) (int32, error) {
	if internal {
		topic = graph.InternalTopic(t.th.app.cfg.ApplicationID, topic)
	}
	ps, err := t.th.client.Partitions(topic)
	if err != nil {
		return 0, fmt.Errorf("weir: partitions of %s: %w", topic, err)
	}
	return int32(len(ps)), nil
}
