package task

import (
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/IBM/sarama"

	"github.com/weirstream/weir/internal/graph"
	"github.com/weirstream/weir/internal/queue"
)

// TP is a topic partition.
type TP struct {
	Topic     string
	Partition int32
}

// Queue is an input partition's queue of fetched records.
type Queue = queue.Queue[*sarama.ConsumerMessage]

// RecordSize is the size a queue counts of a record: its key and value.
func RecordSize(m *sarama.ConsumerMessage) int { return len(m.Key) + len(m.Value) }

// Input is one input partition of a task.
type Input struct {
	tp   TP
	src  graph.SourceInstance
	node string // the source node, which RecordError names for a record it cannot decode
	q    *Queue // nil until the partition's claim starts

	// head is the decoded record at the front of redo or q, if any.
	head     *sarama.ConsumerMessage
	headTime time.Time

	// done holds the records processed since the last commit, in order,
	// while the thread can still replay them (see thread.rewind); redo
	// holds records to process again, before q.
	done, redo []*sarama.ConsumerMessage

	consumed  int64 // next offset to commit; -1 before the first record
	committed int64 // last committed next offset; -1 unknown
	// replayEnd: the records before it replay what the application
	// processed before a reset (Progress.ReplayEnd); 0 none.
	replayEnd int64
	// internal: the partition is of one of the application's repartition
	// topics, whose records carry graph.ReplayHeader when they were
	// written for a replayed record.
	internal bool
	hwm      func() int64 // the claim's high watermark
	start    int64        // the offset the claim started at

	// raw is decodeHead's record for the source to decode, kept here so
	// that passing it through the interface does not allocate one per
	// record. It refers to nothing head does not.
	raw graph.RawRecord
}

// Next decodes the heads of the task's partitions and returns the one with
// the smallest timestamp, or nil when the task has nothing to process now.
// wait tells the thread when to look again if the task is holding back for
// an empty partition (MaxTaskIdle).
func (t *Task) Next(now time.Time) (p *Input, wait time.Time, err error) {
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
		// A partition that holds records its claim has not delivered yet
		// is waited for, a bounded time, whatever MaxTaskIdle says: at
		// the start of a claim an empty queue means "not fetched yet",
		// and processing the others would, for example, join stream
		// records before the table rows they need were read.
		for _, cand := range t.parts {
			if cand.head == nil && cand.awaitsFirstFetch() {
				if t.fetchWaitSince.IsZero() {
					t.fetchWaitSince = now
				}
				if deadline := t.fetchWaitSince.Add(firstFetchWait); now.Before(deadline) {
					return nil, deadline, nil
				}
			}
		}
		idle := t.sh.MaxTaskIdle
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

// firstFetchWait bounds how long a task with several input partitions
// waits for the records a partition's claim has not delivered yet (see
// Next). A partition whose unread offsets are only transaction markers
// never delivers them: the bound ends that wait.
const firstFetchWait = time.Second

// awaitsFirstFetch reports whether p has delivered nothing since its claim
// started while its log holds offsets beyond the claim's start, or has no
// claim yet.
func (p *Input) awaitsFirstFetch() bool {
	if p.q == nil {
		return true
	}
	return p.consumed < 0 && len(p.redo) == 0 && p.hwm != nil && p.hwm() > p.start
}

// decodeHead decodes the front record of p, applying the error policies to
// records that cannot be decoded.
func (t *Task) decodeHead(p *Input) error {
	for p.q != nil {
		m, ok := p.peek()
		if !ok {
			return nil
		}
		raw := &p.raw
		*raw = graph.RawRecord{
			Key: m.Key, Value: m.Value, Timestamp: m.Timestamp,
			Topic: m.Topic, Partition: m.Partition, Offset: m.Offset,
		}
		if len(m.Headers) > 0 {
			// A new slice each time: the decoded record shares it.
			raw.Headers = make([]graph.Header, len(m.Headers))
			for i, h := range m.Headers {
				raw.Headers[i] = graph.Header{Key: string(h.Key), Value: h.Value}
			}
		}
		ts, err := p.src.Decode(raw)
		if err == nil {
			p.head, p.headTime = m, ts
			return nil
		}
		pol := t.sh.PoliciesFor(m.Topic)
		policy, kind := pol.Deserialization, KindDeserialization
		var de *graph.DecodeError
		if errors.As(err, &de) && de.Stage == "timestamp" {
			policy, kind = pol.Timestamp, KindTimestamp
		}
		if policy.Fails() {
			t.nodeFailed(p.node)
			return &RecordError{Task: t.name, Node: p.node, Topic: m.Topic, Partition: m.Partition, Offset: m.Offset, Err: err}
		}
		if err := t.passOver(p, m, policy, Failure{Kind: kind, Node: p.node, Err: err}); err != nil {
			return err
		}
	}
	return nil
}

// passOver skips or dead-letters m, the head of p, as policy says, and
// consumes it. A dead-lettered record is kept for a replay like a
// processed one: the dead-letter record belongs to the transaction of m's
// offset, and a replay after an abort writes it again.
//
// A replay in place logs at debug level and does not count again: the
// record was logged and counted when it was first passed over.
func (t *Task) passOver(p *Input, m *sarama.ConsumerMessage, policy Policy, f Failure) error {
	level, replay := slog.LevelWarn, len(p.redo) > 0
	if replay {
		level = slog.LevelDebug
	}
	topic := policy.DeadLetterTopic()
	if topic != "" {
		f.Application, f.Task = t.sh.ApplicationID, t.name
		if err := t.host.Send(DeadLetterRecord(topic, m, f)); err != nil {
			return err
		}
	}
	msg := "skipping a record"
	if topic != "" {
		msg = "dead-lettering a record"
	}
	t.log.Log(t.ctx, level, msg, "kind", f.Kind, "topic", m.Topic, "partition", m.Partition, "offset", m.Offset,
		"node", f.Node, "dead_letter_topic", topic, "error", f.Err)
	switch {
	case replay:
	case topic != "":
		t.deadLettered.Inc()
	default:
		t.sh.Metrics.RecordsSkipped.WithLabelValues(t.thread, t.name, f.Kind).Inc()
	}
	p.pop()
	p.consumed = m.Offset + 1
	if t.host.Keep(len(m.Key) + len(m.Value)) {
		p.done = append(p.done, m)
	}
	return nil
}

// peek returns the next record to process: a record to process again
// first, else the queue's front.
func (p *Input) peek() (*sarama.ConsumerMessage, bool) {
	if len(p.redo) > 0 {
		return p.redo[0], true
	}
	return p.q.Peek()
}

// pop removes the record peek returned.
func (p *Input) pop() {
	if len(p.redo) > 0 {
		p.redo[0] = nil
		p.redo = p.redo[1:]
		return
	}
	p.q.Pop()
}

// Process runs the head record of p through the topology.
func (t *Task) Process(p *Input) error {
	m := p.head
	p.head = nil
	if cause := t.host.ReplayFailure(m.Topic, m.Partition, m.Offset); cause != nil {
		// A replay after the transaction aborted for this record: it
		// has no effect but its dead-letter record this time.
		return t.passOver(p, m, t.sh.PoliciesFor(m.Topic).Processing, processingFailure(cause))
	}
	t.meta = graph.Metadata{Topic: m.Topic, Partition: m.Partition, Offset: m.Offset}
	t.inRecord, t.cur, t.curIn, t.sendFailed = true, nil, m, false
	t.replaying = m.Offset < p.replayEnd || p.internal && hasHeader(m.Headers, graph.ReplayHeader)
	t.nulls.begin(m.Key == nil)
	if p.headTime.After(t.streamTime) {
		t.streamTime = p.headTime
	}
	err := p.src.Process()
	t.inRecord, t.curIn, t.nulls.active, t.replaying = false, nil, false, false
	if err != nil {
		err = t.recordError(m, err)
		var re *RecordError
		policy := t.sh.PoliciesFor(m.Topic).Processing
		if t.sendFailed || policy.Fails() || !errors.As(err, &re) {
			// The record stays unconsumed: a restart processes it again.
			return err
		}
		if t.sh.ExactlyOnce {
			// Undo what the record did before it failed: the thread
			// aborts and replays without it.
			return &ReplayWithoutError{Record: re}
		}
		// At least once what the record did stays; it is counted once,
		// as failed at its node, and passed over.
		return t.passOver(p, m, policy, processingFailure(re))
	}
	p.pop()
	p.consumed = m.Offset + 1
	if t.host.Keep(len(m.Key) + len(m.Value)) {
		p.done = append(p.done, m)
	}
	t.processed.Inc()
	t.bytes.Add(float64(len(m.Key) + len(m.Value)))
	return t.Punctuate(graph.StreamTime, t.streamTime)
}

// recordError is the error of a record that failed: a *RecordError, or a
// *TopologyError when the topology, not the record, is at fault.
func (t *Task) recordError(m *sarama.ConsumerMessage, err error) error {
	if te := t.topologyError(err); te != nil {
		return te
	}
	re := &RecordError{Task: t.name, Topic: m.Topic, Partition: m.Partition, Offset: m.Offset, Err: err}
	var ne *graph.NodeError
	if errors.As(err, &ne) {
		re.Node, re.Err = ne.Node, ne.Err
		if !t.sendFailed {
			t.nodeFailed(ne.Node)
		}
	}
	return re
}

// nodeFailed counts an input record that failed at node, with the error
// that stops the application. An error that comes back up from a send the
// host refused is not counted (the caller checks sendFailed): the
// thread's failure authority settles it, and it may go on.
func (t *Task) nodeFailed(node string) {
	t.sh.Metrics.NodeFailures.WithLabelValues(t.thread, t.name, node).Inc()
}

// Offsets adds the task's uncommitted positions to out.
//
// meta, when not nil, gets the metadata to commit with each offset: the
// task's stream time and the last version it gave (see EncodeProgress),
// so that the task's next owner starts from them rather than from its
// first record's time and the wall clock. When the version moved but no
// offset did (a punctuator wrote table updates), every partition is
// committed again where it stands, so that the version is not lost.
func (t *Task) Offsets(out map[string]map[int32]int64, meta map[string]map[int32]string) {
	var enc string
	versionMoved := meta != nil && t.version != t.committedVersion
	for _, p := range t.parts {
		off := p.consumed
		if off < 0 || off == p.committed {
			if !versionMoved {
				continue
			}
			if off < 0 {
				off = max(p.committed, p.start)
			}
			if off < 0 {
				continue // no position known yet: nothing can be committed
			}
		}
		if out[p.tp.Topic] == nil {
			out[p.tp.Topic] = map[int32]int64{}
		}
		out[p.tp.Topic][p.tp.Partition] = off
		if meta == nil || (t.streamTime.IsZero() && t.version == 0 && off >= p.replayEnd) {
			continue
		}
		if meta[p.tp.Topic] == nil {
			meta[p.tp.Topic] = map[int32]string{}
		}
		if off < p.replayEnd {
			// The replay goes on: its next owner must know where it ends.
			meta[p.tp.Topic][p.tp.Partition] = EncodeProgress(Progress{StreamTime: t.streamTime, Version: t.version, ReplayEnd: p.replayEnd})
			continue
		}
		if enc == "" {
			enc = EncodeProgress(Progress{StreamTime: t.streamTime, Version: t.version})
		}
		meta[p.tp.Topic][p.tp.Partition] = enc
	}
}

// Progress is what a task commits with its offsets as their metadata:
// what its next owner needs beyond the positions.
type Progress struct {
	// StreamTime is the task's stream time; zero before its first record.
	StreamTime time.Time
	// Version is the last table-output version the task gave (see
	// NextVersion); 0 before the first.
	Version uint64
	// ReplayEnd, when above the offset it is committed with, is where the
	// application stood on this partition before a reset (`weir reset`
	// writes it): the records before it are a replay, and what the task
	// writes for them carries processor.ReplayHeader. 0: none.
	ReplayEnd int64
}

// The offset metadata weir commits starts with the version of its format:
// "weir1:<stream time in Unix ms>" (before table-output versions),
// "weir2:<stream time in Unix ms, empty when none>:<version>", or, while a
// replay after a reset lasts, "weir3:<stream time>:<version>:<replay end>".
// weir writes weir2 when no replay is pending, so that a weir that knows
// only weir2 reads it.
const (
	progressV1 = "weir1:"
	progressV2 = "weir2:"
	progressV3 = "weir3:"
)

// EncodeProgress is the offset metadata weir commits for a task that
// reached p.
func EncodeProgress(p Progress) string {
	ms := ""
	if !p.StreamTime.IsZero() {
		ms = strconv.FormatInt(p.StreamTime.UnixMilli(), 10)
	}
	if p.ReplayEnd > 0 {
		return progressV3 + ms + ":" + strconv.FormatUint(p.Version, 10) + ":" + strconv.FormatInt(p.ReplayEnd, 10)
	}
	return progressV2 + ms + ":" + strconv.FormatUint(p.Version, 10)
}

// DecodeProgress reads the progress EncodeProgress (or an earlier weir)
// wrote; false for metadata of any other form (none, another client's, a
// later format).
func DecodeProgress(meta string) (Progress, bool) {
	if rest, ok := strings.CutPrefix(meta, progressV1); ok {
		st, ok := decodeMillis(rest)
		return Progress{StreamTime: st}, ok && !st.IsZero()
	}
	var p Progress
	rest, ok := strings.CutPrefix(meta, progressV2)
	if !ok {
		if rest, ok = strings.CutPrefix(meta, progressV3); !ok {
			return Progress{}, false
		}
		var end string
		if i := strings.LastIndexByte(rest, ':'); i >= 0 {
			rest, end = rest[:i], rest[i+1:]
		}
		n, err := strconv.ParseInt(end, 10, 64)
		if err != nil || n < 0 {
			return Progress{}, false
		}
		p.ReplayEnd = n
	}
	ms, ver, ok := strings.Cut(rest, ":")
	if !ok {
		return Progress{}, false
	}
	if ms != "" {
		if p.StreamTime, ok = decodeMillis(ms); !ok {
			return Progress{}, false
		}
	}
	v, err := strconv.ParseUint(ver, 10, 64)
	if err != nil {
		return Progress{}, false
	}
	p.Version = v
	return p, true
}

// decodeMillis reads a non-negative count of Unix milliseconds.
func decodeMillis(s string) (time.Time, bool) {
	ms, err := strconv.ParseInt(s, 10, 64)
	if err != nil || ms < 0 {
		return time.Time{}, false
	}
	return time.UnixMilli(ms), true
}

// PostCommit records that the task's positions given by committed (the
// offsets its thread committed) are committed: the records processed up
// to them will never be replayed, and its stream time and version are the
// committed ones a rewind goes back to.
func (t *Task) PostCommit(committed map[string]map[int32]int64) {
	for _, p := range t.parts {
		if off, ok := committed[p.tp.Topic][p.tp.Partition]; ok {
			p.committed = off
		}
		clear(p.done)
		p.done = p.done[:0]
	}
	t.committedTime = t.streamTime
	t.committedVersion = t.version
}

// graph.TaskEnv, for the task's node instances.

// TP returns the input's topic partition.
func (p *Input) TP() TP { return p.tp }

// Queue returns the input's queue, nil before its claim started.
func (p *Input) Queue() *Queue { return p.q }

// Attach gives the input partition tp of the task the queue of a claim
// that starts at offset start, with the claim's high watermark: processing
// restarts from what the claim delivers. It reports false when the task
// does not read tp.
//
// meta is the metadata committed with the partition's offset: the stream
// time a previous owner reached (see Offsets), which the task's stream
// time starts from, so that windows it closed stay closed, and the last
// version it gave, which the task's versions continue after.
func (t *Task) Attach(tp TP, q *Queue, hwm func() int64, start int64, meta string) bool {
	p := t.byTP[tp]
	if p == nil {
		return false
	}
	p.q, p.hwm, p.start, p.head, p.consumed, p.committed, p.replayEnd = q, hwm, start, nil, -1, -1, 0
	p.done, p.redo = nil, nil
	t.fetchWaitSince = time.Time{}
	if pr, ok := DecodeProgress(meta); ok {
		if pr.ReplayEnd > start {
			p.replayEnd = pr.ReplayEnd
		}
		if pr.StreamTime.After(t.streamTime) {
			t.streamTime, t.committedTime = pr.StreamTime, pr.StreamTime
		}
		if pr.StreamTime.After(t.resumedTime) {
			t.resumedTime = pr.StreamTime
		}
		if pr.Version > t.version {
			t.version, t.committedVersion = pr.Version, pr.Version
		}
	}
	return true
}

// ForgetKept lets go of the records kept for a replay: too many were kept,
// and a rewind before the next commit cannot replay them.
func (t *Task) ForgetKept() {
	for _, p := range t.parts {
		clear(p.done)
		p.done = nil
	}
}

// processingFailure is the Failure of a record a processor failed on:
// err is its *RecordError, which names the node.
func processingFailure(err error) Failure {
	f := Failure{Kind: KindProcessing, Err: err}
	var re *RecordError
	if errors.As(err, &re) {
		f.Node, f.Err = re.Node, re.Err
	}
	return f
}
