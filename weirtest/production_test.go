package weirtest_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/kstream"
	"github.com/weirstream/weir/processor"
	"github.com/weirstream/weir/serde"
	"github.com/weirstream/weir/weirtest"
)

// A record its output topic refuses (over MaxMessageBytes, or without a
// key on a compacted topic) follows ProductionErrors, as in an
// application: Skip drops and counts it, DeadLetter writes its input
// record to the dead-letter topic too, Fail stops the driver with a
// *weir.ProductionError naming the sink and the size.
func TestProductionErrors(t *testing.T) {
	t.Parallel()
	big := strings.Repeat("x", 200)
	for _, c := range []struct {
		name   string
		policy weir.ErrorPolicy
		limits weirtest.TopicLimits
		key    string // "" pipes a null key
		value  string
	}{
		{"skip too large", weir.Skip, weirtest.TopicLimits{MaxMessageBytes: 100}, "k", big},
		{"dead-letter too large", weir.DeadLetter("dlq"), weirtest.TopicLimits{MaxMessageBytes: 100}, "k", big},
		{"fail too large", weir.Fail, weirtest.TopicLimits{MaxMessageBytes: 100}, "k", big},
		{"skip null key on a compacted topic", weir.Skip, weirtest.TopicLimits{Compacted: true}, "", "v"},
		{"fail null key on a compacted topic", weir.Fail, weirtest.TopicLimits{Compacted: true}, "", "v"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			b := kstream.NewBuilder()
			b.Stream("in", "in", serde.Bytes(), serde.String()).To("out", serde.Bytes(), serde.String())
			reg := prometheus.NewRegistry()
			d, err := weirtest.New(b, weirtest.Config{ProductionErrors: c.policy, Metrics: reg,
				Topics: map[string]weirtest.TopicLimits{"out": c.limits}})
			if err != nil {
				t.Fatal(err)
			}
			defer d.Close()
			in := weirtest.Input(d, "in", serde.Bytes(), serde.String())
			var key []byte
			if c.key != "" {
				key = []byte(c.key)
			}
			if err := in.Pipe([]byte("ok"), "small", time.UnixMilli(1)); err != nil {
				t.Fatal(err)
			}
			err = in.Pipe(key, c.value, time.UnixMilli(2))
			out, rerr := weirtest.Output(d, "out", serde.Bytes(), serde.String()).ReadAll()
			if rerr != nil {
				t.Fatal(rerr)
			}
			if len(out) != 1 || out[0].Value != "small" {
				t.Errorf("out = %v, want only the record within the limits", out)
			}
			if c.policy.Fails() {
				var pe *weir.ProductionError
				if !errors.As(err, &pe) || pe.Sink != "out" || pe.Offset != 1 || pe.Topic != "in" {
					t.Fatalf("Pipe of a refused record = %v, want a *weir.ProductionError for sink out, input in@1", err)
				}
				if c.limits.MaxMessageBytes > 0 && (!errors.Is(err, processor.ErrRecordTooLarge) || pe.Size <= pe.Limit) {
					t.Errorf("too large: %v, size %d limit %d", err, pe.Size, pe.Limit)
				}
				if c.limits.Compacted && !errors.Is(err, processor.ErrNullKeyOnCompactedTopic) {
					t.Errorf("null key: %v", err)
				}
				if again := in.Pipe([]byte("ok"), "later", time.UnixMilli(3)); !errors.Is(again, err) {
					t.Errorf("a Pipe after the failure = %v, want the failure again", again)
				}
				return
			}
			if err != nil {
				t.Fatalf("Pipe of a refused record under %s = %v", c.policy, err)
			}
			skipped := counterValue(t, reg, "weir_records_skipped_total", "reason", "production")
			if skipped != 1 {
				t.Errorf("weir_records_skipped_total{reason=production} = %v, want 1", skipped)
			}
			dlq, err := weirtest.Output(d, "dlq", serde.Bytes(), serde.String()).ReadAll()
			if err != nil {
				t.Fatal(err)
			}
			if topic := c.policy.DeadLetterTopic(); topic == "" {
				if len(dlq) != 0 {
					t.Errorf("dead-letter records under Skip: %v", dlq)
				}
			} else if len(dlq) != 1 || dlq[0].Value != c.value {
				t.Errorf("dead-letter topic = %v, want the refused record's input", dlq)
			}
		})
	}
}

// counterValue returns the counter name summed over its series whose label
// has value.
func counterValue(t *testing.T, reg *prometheus.Registry, name, label, value string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	n := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					n += m.GetCounter().GetValue()
				}
			}
		}
	}
	return n
}
