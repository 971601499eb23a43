package task

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/weirstream/weir/processor"
	"github.com/weirstream/weir/serde"
)

// counterValue returns the value of the counter name whose labels include
// labels, and whether reg has it.
func counterValue(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) (float64, bool) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metrics:
		for _, m := range mf.GetMetric() {
			have := map[string]string{}
			for _, lp := range m.GetLabel() {
				have[lp.GetName()] = lp.GetValue()
			}
			for k, v := range labels {
				if have[k] != v {
					continue metrics
				}
			}
			return m.GetCounter().GetValue(), true
		}
	}
	return 0, false
}

// pushValues queues one record per value on q, at offsets 0, 1, ...
func pushValues(t *testing.T, q *Queue, values ...string) {
	t.Helper()
	for i, v := range values {
		m := &sarama.ConsumerMessage{Topic: "in", Offset: int64(i), Key: []byte("k"), Value: []byte(v), Timestamp: time.UnixMilli(1_000_000)}
		if err := q.Push(context.Background(), m); err != nil {
			t.Fatal(err)
		}
	}
}

// The payload of a record no test error may quote.
const secret = "SECRET-PAYLOAD"

// TestDecodeErrorNamesTheSourceNode pins item 5 of issue 20: a record that
// could not be decoded stopped with a RecordError whose Node was empty,
// though the documented format names the node and a processor's failure
// did. It names the source node now, and counts in
// weir_node_failures_total under that node.
func TestDecodeErrorNamesTheSourceNode(t *testing.T) {
	t.Parallel()
	top := processor.NewTopology()
	src := top.AddSource("parse", "in", serde.String(), serde.Int64())
	top.AddSink("out", "out", serde.String(), serde.Int64(), src)
	reg := prometheus.NewRegistry()
	tk, q, _ := brokerlessTask(t, top, reg, &bytes.Buffer{})
	pushValues(t, q, secret) // 14 bytes: not an int64

	_, _, err := tk.Next(time.Now())
	var re *RecordError
	if !errors.As(err, &re) {
		t.Fatalf("Next = %v, want a *RecordError", err)
	}
	if re.Node != "parse" || re.Task != "0_0" || re.Topic != "in" || re.Partition != 0 || re.Offset != 0 {
		t.Errorf("RecordError = %+v, want node parse, task 0_0, record in/0@0", re)
	}
	// The format docs/operations.md shows for a poison record.
	if want := "weir: task 0_0, record in/0@0, node parse: cannot decode value: serde: int64 needs 8 bytes, got 14"; err.Error() != want {
		t.Errorf("error text\n%s\nwant\n%s", err, want)
	}
	if strings.Contains(err.Error(), secret) {
		t.Errorf("the error quotes the record: %v", err)
	}
	if n, _ := counterValue(t, reg, "weir_node_failures_total", map[string]string{"thread": "0", "task": "0_0", "node": "parse"}); n != 1 {
		t.Errorf("weir_node_failures_total{node=parse} = %v, want 1", n)
	}
}

// failingHost refuses every record for the topic "refused", as a thread
// does once its producer failed.
type failingHost struct{ recordingHost }

func (h *failingHost) Send(m *sarama.ProducerMessage) error {
	if m.Topic == "refused" {
		return errors.New("producer failed")
	}
	return h.recordingHost.Send(m)
}

// Records written count per task and real topic when the host takes them;
// a processor's error counts as a failure of its node, and an error that
// comes back from a refused send does not, since the thread settles it.
func TestRecordsWrittenAndNodeFailures(t *testing.T) {
	t.Parallel()
	top := processor.NewTopology()
	src := top.AddSource("in", "in", serde.String(), serde.String())
	check := top.AddProcessor("check", processor.Func(func(ctx processor.Context[string, string], rec processor.Record[string, string]) error {
		switch rec.Value {
		case "bad":
			return errors.New("bad value")
		case "refuse":
			return nil
		}
		return ctx.Forward(rec)
	}), src)
	top.AddSink("out", "out", serde.String(), serde.String(), check)
	top.AddRepartition("by-key", serde.String(), serde.String(), check)
	send := top.AddProcessor("send", processor.Func(func(ctx processor.Context[string, string], rec processor.Record[string, string]) error {
		if rec.Value == "refuse" {
			return ctx.Forward(rec)
		}
		return nil
	}), src)
	top.AddSink("to-refused", "refused", serde.String(), serde.String(), send)
	reg := prometheus.NewRegistry()
	tk, q, _ := brokerlessTask(t, top, reg, &bytes.Buffer{})
	tk.host = &failingHost{}
	pushValues(t, q, "a", "b", "bad", "refuse")

	for i, node := range []string{"", "", "check", "to-refused"} { // the node each record fails at
		p, _, err := tk.Next(time.Now())
		if err != nil || p == nil {
			t.Fatalf("record %d: Next = %v, %v", i, p, err)
		}
		err = tk.Process(p)
		var re *RecordError
		switch {
		case node == "" && err != nil:
			t.Fatalf("record %d: %v", i, err)
		case node != "" && (!errors.As(err, &re) || re.Node != node):
			t.Fatalf("record %d: %v, want a RecordError of node %s", i, err, node)
		}
		if err != nil {
			p.pop() // the next record comes up
		}
	}
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"weir_records_written_total", map[string]string{"thread": "0", "task": "0_0", "topic": "out"}, 2},
		{"weir_records_written_total", map[string]string{"topic": "app-by-key-repartition"}, 2},
		{"weir_node_failures_total", map[string]string{"thread": "0", "task": "0_0", "node": "check"}, 1},
		// Resolved at the refused record, never incremented.
		{"weir_records_written_total", map[string]string{"topic": "refused"}, 0},
	} {
		if got, ok := counterValue(t, reg, c.name, c.labels); !ok || got != c.want {
			t.Errorf("%s %v = %v (present %v), want %v", c.name, c.labels, got, ok, c.want)
		}
	}
	if got, ok := counterValue(t, reg, "weir_node_failures_total", map[string]string{"node": "to-refused"}); ok {
		t.Errorf("weir_node_failures_total{node=to-refused} = %v, want none: a refused send is the thread's to settle", got)
	}
}

// A sink's topic and counter are resolved at its first record: later
// records find them without allocating (no WithLabelValues, no topic name
// built). Not parallel: AllocsPerRun counts the whole process.
func TestOutputResolvedOnce(t *testing.T) {
	top := processor.NewTopology()
	top.AddRepartition("by-key", serde.String(), serde.String(), top.AddSource("in", "in", serde.String(), serde.String()))
	tk, _, _ := brokerlessTask(t, top, prometheus.NewRegistry(), &bytes.Buffer{})
	if a, b := tk.output("by-key", true), tk.output("by-key", true); a != b || a.topic != "app-by-key-repartition" {
		t.Errorf("output resolved twice (%p, %p) or to %q", a, b, a.topic)
	}
	if n := testing.AllocsPerRun(100, func() { tk.output("by-key", true).written.Add(0) }); n != 0 {
		t.Errorf("finding a resolved output allocates %v times", n)
	}
}
