package processor

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/weirstream/weir/internal/graph"
	"github.com/weirstream/weir/serde"
)

// A processor's logger names its task and node, and on lines logged while
// a record is processed, the record's topic, partition and offset: never
// its key or value.
func TestContextLoggerCarriesTaskNodeAndRecord(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	env := &fakeEnv{log: slog.New(slog.NewJSONHandler(&buf, nil)).With("task", "0_0")}
	var loggers []*slog.Logger
	tp := NewTopology()
	src := tp.AddSource("in", "payments", serde.String(), serde.String())
	p := tp.AddProcessor("balance", func() Processor[string, string, string, string] {
		return &initProc{init: func(ctx Context[string, string]) error {
			ctx.Logger().Info("init")
			_, err := ctx.Schedule(time.Second, WallClockTime, func(time.Time) error {
				ctx.Logger().Info("tick")
				return nil
			})
			return err
		}, process: func(ctx Context[string, string], rec Record[string, string]) error {
			loggers = append(loggers, ctx.Logger())
			ctx.Logger().Debug("below the level")
			ctx.Logger().Info("balance", "n", 1)
			return ctx.Forward(rec)
		}}
	}, src)
	q := tp.AddProcessor("audit", Func(func(ctx Context[string, string], rec Record[string, string]) error {
		ctx.Logger().Warn("audited")
		return nil
	}), p)
	tp.AddSink("out", "out", serde.String(), serde.String(), q)
	g, err := tp.graph()
	if err != nil {
		t.Fatal(err)
	}
	insts := instantiate(t, g, env)
	for _, off := range []int64{42, 43} {
		env.meta, env.inRecord = graph.Metadata{Topic: "payments", Partition: 3, Offset: off}, true
		if err := feed(t, insts["in"], "secret-key", "secret-value", time.UnixMilli(1)); err != nil {
			t.Fatal(err)
		}
	}
	env.inRecord = false
	if err := env.schedules[0].fn(time.Now()); err != nil {
		t.Fatal(err)
	}

	if strings.Contains(buf.String(), "secret") {
		t.Errorf("a record's key or value was logged:\n%s", buf.String())
	}
	var lines []map[string]any
	for l := range strings.Lines(buf.String()) {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatal(err)
		}
		lines = append(lines, m)
	}
	want := []struct {
		msg, node string
		offset    float64 // 0: no record
	}{
		{"init", "balance", 0},
		{"balance", "balance", 42}, {"audited", "audit", 42},
		{"balance", "balance", 43}, {"audited", "audit", 43},
		{"tick", "balance", 0},
	}
	if len(lines) != len(want) {
		t.Fatalf("logged %d lines, want %d (debug dropped):\n%s", len(lines), len(want), buf.String())
	}
	for i, w := range want {
		l := lines[i]
		if l["msg"] != w.msg || l["task"] != "0_0" || l["node"] != w.node {
			t.Errorf("line %d = %v, want msg %s, task 0_0, node %s", i, l, w.msg, w.node)
		}
		if w.offset == 0 {
			if _, ok := l["offset"]; ok || l["topic"] != nil || l["partition"] != nil {
				t.Errorf("line %d, logged outside a record, has record coordinates: %v", i, l)
			}
			continue
		}
		if l["topic"] != "payments" || l["partition"] != 3.0 || l["offset"] != w.offset {
			t.Errorf("line %d = %v, want payments/3@%v", i, l, w.offset)
		}
	}
	if lines[1]["n"] != 1.0 {
		t.Errorf("the processor's own attribute is lost: %v", lines[1])
	}
	// One logger per node instance, whatever the number of records.
	if len(loggers) != 2 || loggers[0] != loggers[1] {
		t.Errorf("Logger made a new logger per record")
	}
}

// Taking the logger, and a line below the level, allocate nothing: a
// processor may log on its hot path at a level that is usually off.
func TestContextLoggerIsFreeWhenDisabled(t *testing.T) {
	env := &fakeEnv{log: slog.New(slog.NewJSONHandler(&bytes.Buffer{}, nil)), inRecord: true}
	ctx := &nodeContext[string, string]{env: env, node: "p"}
	ctx.Logger()
	if n := testing.AllocsPerRun(100, func() { ctx.Logger().Debug("below the level") }); n != 0 {
		t.Errorf("a disabled line costs %v allocations, want 0", n)
	}
}

// markHandler records whether each line it handles came marked as user
// code's (graph.UserLine).
type markHandler struct {
	slog.Handler
	marks *[]bool
}

func (h markHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h markHandler) Handle(ctx context.Context, r slog.Record) error {
	*h.marks = append(*h.marks, graph.IsUserLine(ctx))
	return nil
}

func (h markHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return markHandler{h.Handler.WithAttrs(as), h.marks}
}

// A processor's lines reach the handler marked as user code's, so that
// the operator console, which lists weir's own warnings, leaves them out.
func TestContextLoggerMarksUserLines(t *testing.T) {
	t.Parallel()
	var marks []bool
	env := &fakeEnv{log: slog.New(markHandler{slog.DiscardHandler, &marks}), inRecord: true}
	ctx := &nodeContext[string, string]{env: env, node: "p"}
	ctx.Logger().Warn("the processor's own line")
	if len(marks) != 1 || !marks[0] {
		t.Errorf("marks %v, want one line marked as user code's", marks)
	}
}
