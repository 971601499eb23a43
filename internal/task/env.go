package task

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/IBM/sarama"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/weirstream/weir/internal/client"
	"github.com/weirstream/weir/internal/graph"
	"github.com/weirstream/weir/internal/statelog"
)

// schedule is a punctuator.
type schedule struct {
	node      string
	interval  time.Duration
	typ       graph.PunctuationType
	fn        func(time.Time) error
	next      time.Time
	cancelled bool
}

// Punctuate fires the due punctuators of one clock. A stream-time
// punctuator fires once however far time jumped, then is due one interval
// later.
func (t *Task) Punctuate(typ graph.PunctuationType, now time.Time) error {
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
			if te := t.topologyError(err); te != nil {
				return te
			}
			return fmt.Errorf("weir: task %s: punctuator of %s: %w", t.name, s.node, err)
		}
	}
	return nil
}

// Flush forwards what the task's record caches hold (graph.Flusher),
// parents first, as punctuations of their nodes: the thread calls it
// before each commit, so the commit carries the records.
func (t *Task) Flush() error {
	if t.sh.Cache == nil || !t.running {
		return nil
	}
	for _, inst := range t.insts {
		f, ok := inst.(graph.Flusher)
		if !ok {
			continue
		}
		t.punctNode, t.cur = f.NodeName(), nil
		if err := f.Flush(); err != nil {
			if te := t.topologyError(err); te != nil {
				return te
			}
			return fmt.Errorf("weir: task %s: flushing the record cache of %s: %w", t.name, f.NodeName(), err)
		}
	}
	return nil
}

// CacheBudget implements graph.TaskEnv.
func (t *Task) CacheBudget() *graph.CacheBudget { return t.sh.Cache }

// NextWallClock returns when the earliest wall-clock punctuator is due.
func (t *Task) NextWallClock() time.Time {
	var next time.Time
	for _, s := range t.punct {
		if s.typ == graph.WallClockTime && !s.cancelled && (next.IsZero() || s.next.Before(next)) {
			next = s.next
		}
	}
	return next
}

// Context implements graph.TaskEnv: the task's context, cancelled when it closes.
func (t *Task) Context() context.Context { return t.ctx }

// ApplicationID implements graph.TaskEnv.
func (t *Task) ApplicationID() string { return t.sh.ApplicationID }

// TaskID implements graph.TaskEnv.
func (t *Task) TaskID() string { return t.name }

// Partition implements graph.TaskEnv: the task's partition.
func (t *Task) Partition() int32 { return t.id.Partition }

// StreamTime implements graph.TaskEnv.
func (t *Task) StreamTime() time.Time { return t.streamTime }

// ResumedStreamTime implements graph.TaskEnv: the stream time committed
// before the task started, zero on a first start.
func (t *Task) ResumedStreamTime() time.Time { return t.resumedTime }

// InputKeyNull implements graph.TaskEnv.
func (t *Task) InputKeyNull() bool { return t.nulls.active }

// NextVersion implements graph.TaskEnv: a hybrid logical clock in
// microseconds. It is the wall clock (Config.Clock) in Unix microseconds,
// or one more than the last version when that is not smaller, so that it
// never repeats or goes back within the task, whatever the clock does;
// the last version is committed with the offsets (Progress), and a task's
// next owner continues after it even when its own clock is behind.
//
// The wall clock is what makes a version larger than any the task gave
// before a crash without committing it: at least once, those records
// were written, and the records replayed after the crash must supersede
// them. That holds while the task's clock runs ahead of its versions,
// that is unless it gave more than one version per microsecond for as
// long as the restart took, and while the instances' clocks agree to
// better than the time a task takes to move.
func (t *Task) NextVersion() uint64 {
	v := uint64(max(t.now().UnixMicro(), 0))
	if v <= t.version {
		v = t.version + 1
	}
	t.version = v
	return v
}

// Logger implements graph.TaskEnv.
func (t *Task) Logger() *slog.Logger { return t.log }

// CountLate implements graph.TaskEnv. The counter is resolved at the first
// late record, so tasks without windows never create the series.
func (t *Task) CountLate() {
	if t.late == nil {
		t.late = t.sh.Metrics.LateRecords.WithLabelValues(t.thread, t.name)
	}
	t.late.Inc()
}

// Metadata implements graph.TaskEnv.
func (t *Task) Metadata() (graph.Metadata, bool) { return t.meta, t.inRecord }

// Schedule implements graph.TaskEnv.
func (t *Task) Schedule(node string, interval time.Duration, typ graph.PunctuationType, fn func(time.Time) error) (func(), error) {
	s := &schedule{node: node, interval: interval, typ: typ, fn: fn}
	switch typ {
	case graph.WallClockTime:
		s.next = t.now().Add(interval)
	case graph.StreamTime:
		// Due at the first record when stream time is still unknown.
		if !t.streamTime.IsZero() {
			s.next = t.streamTime.Add(interval)
		}
	}
	t.punct = append(t.punct, s)
	return func() { s.cancelled = true }, nil
}

// Send implements graph.TaskEnv: the record goes to the thread (Host.Send).
func (t *Task) Send(topic string, internal bool, key, value []byte, ts time.Time, headers []graph.Header, part int32) error {
	out := t.output(topic, internal)
	topic = out.topic
	// A repartition record under the empty key of a null-key record is
	// dropped, as its state writes are (see nullkey.go).
	if internal && t.dropNullKey(key, "repartition_topic", topic) {
		return nil
	}
	m := statelog.NewMessage(key, value)
	m.Topic, m.Timestamp, m.Metadata = topic, ts, t.origin(part >= 0)
	if part >= 0 {
		m.Partition = part
	}
	m.Headers = t.outputHeaders(headers)
	if !ts.IsZero() {
		t.latency.Observe(time.Since(ts).Seconds())
	}
	if err := t.host.Send(m); err != nil {
		t.sendFailed = true
		return err
	}
	out.written.Inc()
	return nil
}

// outputHeaders returns the headers of a record the task writes: those
// given, without any graph.EpochHeader or graph.ReplayHeader they carried
// (another application's, or the input's), then the task's own: the reset
// epoch on a table update (a record with graph.VersionHeader) when above
// 0, and graph.ReplayHeader while the input record is a replay.
func (t *Task) outputHeaders(headers []graph.Header) []sarama.RecordHeader {
	if len(headers) == 0 && !t.replaying {
		return nil
	}
	out := make([]sarama.RecordHeader, 0, len(headers)+2)
	update := false
	for _, h := range headers {
		switch h.Key {
		case graph.EpochHeader, graph.ReplayHeader:
			continue
		case graph.VersionHeader:
			update = true
		}
		out = append(out, sarama.RecordHeader{Key: headerKey(h.Key), Value: h.Value})
	}
	if update && t.sh.ResetEpoch > 0 {
		out = append(out, sarama.RecordHeader{Key: epochHeaderKey, Value: strconv.AppendInt(nil, t.sh.ResetEpoch, 10)})
	}
	if t.replaying {
		out = append(out, sarama.RecordHeader{Key: replayHeaderKey, Value: strconv.AppendInt(nil, t.sh.ResetEpoch, 10)})
	}
	return out
}

// The names of weir's own headers as the producer takes them, made once:
// every table update carries one. The producer only reads them.
var (
	versionHeaderKey = []byte(graph.VersionHeader)
	epochHeaderKey   = []byte(graph.EpochHeader)
	replayHeaderKey  = []byte(graph.ReplayHeader)
)

// headerKey returns a header's name as the producer takes it.
func headerKey(name string) []byte {
	if name == graph.VersionHeader {
		return versionHeaderKey
	}
	return []byte(name)
}

// hasHeader reports whether headers has one named key.
func hasHeader(headers []*sarama.RecordHeader, key string) bool {
	for _, h := range headers {
		if h != nil && string(h.Key) == key {
			return true
		}
	}
	return false
}

// outputKey is a topic as a sink names it.
type outputKey struct {
	topic    string
	internal bool
}

// output is a topic the task writes, with what each of its records needs.
type output struct {
	key     outputKey
	topic   string // the real topic: an internal one expanded
	written prometheus.Counter
}

// output returns the task's output to the topic a sink names. The first
// record to a topic resolves its counter and, for an internal topic, its
// real name; every later one finds them in a map, without the label
// lookup of WithLabelValues or a string concatenation per record.
func (t *Task) output(topic string, internal bool) *output {
	k := outputKey{topic, internal}
	if t.lastOutput != nil && t.lastOutput.key == k {
		return t.lastOutput // a sink sends record after record to one topic
	}
	if o := t.outputs[k]; o != nil {
		t.lastOutput = o
		return o
	}
	o := &output{key: k, topic: topic}
	if internal {
		o.topic = graph.InternalTopic(t.sh.ApplicationID, topic)
	}
	o.written = t.sh.Metrics.RecordsWritten.WithLabelValues(t.thread, t.name, o.topic)
	if t.outputs == nil {
		t.outputs = map[outputKey]*output{}
	}
	t.outputs[k] = o
	t.lastOutput = o
	return o
}

// origin returns the origin of the records the task produces now: of the
// record being processed, or of the punctuator running. It is shared by
// the records of one input record or punctuation.
func (t *Task) origin(explicit bool) *client.Origin {
	if t.cur == nil {
		t.cur = &client.Origin{Task: t.name, Offset: -1}
		if t.inRecord {
			t.cur.Topic, t.cur.Partition, t.cur.Offset = t.meta.Topic, t.meta.Partition, t.meta.Offset
			t.cur.Input = t.curIn
		} else {
			t.cur.Node = t.punctNode
		}
		t.curExplicit = nil
	}
	if !explicit {
		return t.cur
	}
	if t.curExplicit == nil {
		t.curExplicit = new(*t.cur)
		t.curExplicit.Explicit = true
	}
	return t.curExplicit
}

// PartitionCount implements graph.TaskEnv.
func (t *Task) PartitionCount(topic string, internal bool) (int32, error) {
	if internal {
		topic = graph.InternalTopic(t.sh.ApplicationID, topic)
	}
	return t.host.PartitionCount(topic)
}
