package integration

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/processor"
	"github.com/weirstream/weir/serde"
	"github.com/weirstream/weir/weirtest/kafka"
)

// TestTopologyErrorStopsRunAsATopologyError pins item 3 of issue 20: a
// wiring mistake that only running shows (here: input record 50 takes a
// route whose Child handle belongs to another node) stopped the
// application as a poison record, and the runbook told the operator to
// skip a good record. Run now returns a *weir.TopologyError naming the
// node and no *weir.RecordError, whether or not the processor swallows
// ForwardTo's error; nothing from record 50 on is committed.
func TestTopologyErrorStopsRunAsATopologyError(t *testing.T) {
	t.Parallel()
	for _, swallow := range []bool{false, true} {
		t.Run(fmt.Sprintf("swallow=%v", swallow), func(t *testing.T) {
			t.Parallel()
			c := kafka.Cluster(t)
			in, out, app := c.Name(t, "in"), c.Name(t, "out"), c.Name(t, "app")
			c.CreateTopic(t, in, 1, nil)
			c.CreateTopic(t, out, 1, nil)
			produceFailureInput(t, c, in, 0, failureInput)

			top := processor.NewTopology()
			src := top.AddSource("in", in, serde.Bytes(), serde.String())
			var good, foreign processor.Child[[]byte, string]
			route := top.AddProcessor("route", processor.Func(func(ctx processor.Context[[]byte, string], rec processor.Record[[]byte, string]) error {
				md, _ := ctx.Metadata()
				outRec := processor.Record[[]byte, string]{Key: []byte("k"), Value: strconv.FormatInt(md.Offset, 10), Timestamp: rec.Timestamp}
				child := good
				if md.Offset == 50 {
					child = foreign
				}
				err := ctx.ForwardTo(child, outRec)
				if swallow {
					return nil
				}
				return err
			}), src)
			top.AddSink("out", out, serde.Bytes(), serde.String(), route)
			other := top.AddProcessor("other", processor.Func(func(processor.Context[[]byte, string], processor.Record[[]byte, string]) error { return nil }), src)
			top.AddSink("other-out", out, serde.Bytes(), serde.String(), other)
			good, foreign = route.Child("out"), other.Child("other-out")

			inst := start(t, top, eosFailureConfig(c, app, t))
			err := waitRun(t, inst, 60*time.Second)
			var te *weir.TopologyError
			var re *weir.RecordError
			if !errors.As(err, &te) || errors.As(err, &re) {
				t.Fatalf("Run = %v (%T), want a *weir.TopologyError and no *weir.RecordError", err, err)
			}
			if te.Node != "route" || te.Task != "0_0" || !strings.Contains(err.Error(), `a Child handle of node "other"`) {
				t.Errorf("TopologyError = %+v: %v", te, err)
			}
			committed := committedOffset(t, c, app, in)
			if committed > 50 {
				t.Fatalf("input committed up to %d, past record 50", committed)
			}
			checkEchoedUpTo(t, echoed(t, c, out), max(committed, 0), nil)
		})
	}
}
