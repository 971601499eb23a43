package task

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/weirstream/weir/internal/graph"
	"github.com/weirstream/weir/processor"
	"github.com/weirstream/weir/serde"
)

// routeTopology is in -> route -> {good, bad}: route logs every record and
// forwards a record with value "ok" to good, and any other to a handle of
// another node. That handle is a wiring mistake weir.New cannot see.
func routeTopology() *processor.Topology {
	top := processor.NewTopology()
	src := top.AddSource("in", "in", serde.String(), serde.String())
	var good, foreign processor.Child[string, string]
	route := top.AddProcessor("route", processor.Func(func(ctx processor.Context[string, string], rec processor.Record[string, string]) error {
		ctx.Logger().Info("routing")
		if rec.Value == "ok" {
			return ctx.ForwardTo(good, rec)
		}
		return ctx.ForwardTo(foreign, rec)
	}), src)
	top.AddSink("good", "good-topic", serde.String(), serde.String(), route)
	other := top.AddProcessor("other", processor.Func(func(processor.Context[string, string], processor.Record[string, string]) error { return nil }), src)
	top.AddSink("other-out", "other-topic", serde.String(), serde.String(), other)
	good, foreign = route.Child("good"), other.Child("other-out")
	return top
}

// TestTopologyErrorIsNotARecordError pins item 3 of issue 20: forwarding
// to a child that is not there was reported as a poison record (a
// RecordError with the record's coordinates), and the runbook then told
// the operator to skip a good record. It is a TopologyError naming the
// node, and the record stays unconsumed.
func TestTopologyErrorIsNotARecordError(t *testing.T) {
	t.Parallel()
	var logs bytes.Buffer
	tk, q, host := brokerlessTask(t, routeTopology(), prometheus.NewRegistry(), &logs)
	for i, v := range []string{"ok", "misrouted"} {
		m := &sarama.ConsumerMessage{Topic: "in", Partition: 0, Offset: int64(10 + i), Key: []byte("k"), Value: []byte(v), Timestamp: time.UnixMilli(1)}
		if err := q.Push(context.Background(), m); err != nil {
			t.Fatal(err)
		}
	}
	p, _, err := tk.Next(time.Now())
	if err != nil || p == nil {
		t.Fatalf("Next = %v, %v", p, err)
	}
	if err := tk.Process(p); err != nil {
		t.Fatal(err)
	}
	if len(host.sent) != 1 || host.sent[0].Topic != "good-topic" {
		t.Fatalf("sent %v, want one record to good-topic", host.sent)
	}
	if p, _, err = tk.Next(time.Now()); err != nil || p == nil {
		t.Fatalf("Next = %v, %v", p, err)
	}
	err = tk.Process(p)
	var te *TopologyError
	var re *RecordError
	if !errors.As(err, &te) || errors.As(err, &re) {
		t.Fatalf("Process = %v (%T), want a TopologyError and no RecordError", err, err)
	}
	if te.Task != "0_0" || te.Node != "route" || !strings.Contains(te.Error(), `a Child handle of node "other"`) {
		t.Errorf("TopologyError = %#v: %v", te, te)
	}
	if p.consumed != 11 {
		t.Errorf("consumed offset %d, want 11: the record stays unconsumed", p.consumed)
	}

	// The processor's log lines carry the record's coordinates, which the
	// task sets for each record.
	var offsets []float64
	for l := range strings.Lines(logs.String()) {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatal(err)
		}
		if m["msg"] == "routing" && m["node"] == "route" && m["topic"] == "in" && m["partition"] == 0.0 {
			offsets = append(offsets, m["offset"].(float64))
		}
	}
	if len(offsets) != 2 || offsets[0] != 10 || offsets[1] != 11 {
		t.Errorf("routing lines at offsets %v, want [10 11]:\n%s", offsets, logs.String())
	}
}

// A topology error in a punctuator or in Init is a TopologyError too, not
// an error of the punctuator or of the task's start.
func TestTopologyErrorOutsideRecords(t *testing.T) {
	t.Parallel()
	unattached := processor.KeyValue("unattached", serde.String(), serde.Int64())
	failInit := false
	top := processor.NewTopology()
	src := top.AddSource("in", "in", serde.String(), serde.String())
	var zero processor.Child[string, string]
	p := top.AddProcessor("p", func() processor.Processor[string, string, string, string] {
		return &hooks{init: func(ctx processor.Context[string, string]) error {
			if failInit {
				_, err := unattached.Open(ctx)
				return err
			}
			_, err := ctx.Schedule(time.Millisecond, processor.WallClockTime, func(time.Time) error {
				return ctx.ForwardTo(zero, processor.Record[string, string]{})
			})
			return err
		}}
	}, src)
	top.AddSink("out", "out", serde.String(), serde.String(), p)
	user := top.AddProcessor("user", processor.Func(func(processor.Context[string, string], processor.Record[string, string]) error { return nil }), src)
	top.AddStore(unattached, user)
	tk, _, _ := brokerlessTask(t, top, prometheus.NewRegistry(), &bytes.Buffer{})

	var te *TopologyError
	if err := tk.Punctuate(graph.WallClockTime, time.Now().Add(time.Hour)); !errors.As(err, &te) || te.Node != "p" || !strings.Contains(err.Error(), "zero Child") {
		t.Errorf("Punctuate = %v, want a TopologyError of p", err)
	}
	failInit = true
	if err := tk.init(); !errors.As(err, &te) || te.Node != "p" || !strings.Contains(err.Error(), `"p" is not attached to store "unattached"`) {
		t.Errorf("init = %v, want a TopologyError of p", err)
	}
}

// hooks is a processor made of functions.
type hooks struct {
	init func(ctx processor.Context[string, string]) error
}

func (h *hooks) Init(ctx processor.Context[string, string]) error { return h.init(ctx) }
func (h *hooks) Process(ctx processor.Context[string, string], rec processor.Record[string, string]) error {
	return ctx.Forward(rec)
}
func (h *hooks) Close() error { return nil }
