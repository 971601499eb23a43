package kstream_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/weirstream/weir/kstream"
	"github.com/weirstream/weir/processor"
	"github.com/weirstream/weir/serde"
	"github.com/weirstream/weir/weirtest"
)

func TestProcessValuesKeepsTheKey(t *testing.T) {
	t.Parallel()
	b := kstream.NewBuilder()
	// The processor tries to re-key every record and forwards twice; the
	// key of the input wins both times, so the count groups without a
	// repartition.
	b.Stream("in", "in", serde.String(), serde.String()).
		ProcessValues("words", processor.Func(func(ctx processor.Context[string, string], rec processor.Record[string, string]) error {
			for w := range strings.FieldsSeq(rec.Value) {
				if err := ctx.Forward(processor.Record[string, string]{Key: w, Value: w, Timestamp: rec.Timestamp}); err != nil {
					return err
				}
			}
			return nil
		})).
		GroupByKey().
		Count("words-per-key").
		ToStream().
		To("out", serde.String(), serde.Int64())
	top, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	if desc := top.Describe(); strings.Contains(desc, "repartition") {
		t.Errorf("ProcessValues then GroupByKey added a repartition:\n%s", desc)
	}
	d := driver(t, b)
	pipe(t, d, "in", kv[string, string]{"a", "x y", 1}, kv[string, string]{"b", "z", 2})
	expect(t, d, "out", serde.String(), serde.Int64(),
		kv[string, int64]{"a", 1, 1}, kv[string, int64]{"a", 2, 1}, kv[string, int64]{"b", 1, 2})
}

// lateTicker forwards from a punctuator, which ProcessValues refuses.
type lateTicker struct{ refused chan error }

func (p *lateTicker) Init(ctx processor.Context[string, string]) error {
	_, err := ctx.Schedule(time.Second, processor.WallClockTime, func(now time.Time) error {
		err := ctx.Forward(processor.Record[string, string]{Key: "tick", Value: "tock", Timestamp: now})
		p.refused <- err
		return nil
	})
	return err
}

func (p *lateTicker) Process(processor.Context[string, string], processor.Record[string, string]) error {
	return nil
}

func (p *lateTicker) Close() error { return nil }

func TestProcessValuesRefusesForwardsFromPunctuators(t *testing.T) {
	t.Parallel()
	refused := make(chan error, 1)
	b := kstream.NewBuilder()
	b.Stream("in", "in", serde.String(), serde.String()).
		ProcessValues("ticker", func() processor.Processor[string, string, string, string] { return &lateTicker{refused: refused} }).
		To("out", serde.String(), serde.String())
	d, err := weirtest.New(b, weirtest.Config{WallClock: time.Unix(1000, 0)})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := d.AdvanceWallClock(2 * time.Second); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-refused:
		if !errors.Is(err, kstream.ErrForwardOutsideRecord) {
			t.Errorf("Forward from a punctuator: %v, want ErrForwardOutsideRecord", err)
		}
	default:
		t.Fatal("the punctuator did not run")
	}
	expect[string, string](t, d, "out", serde.String(), serde.String())
}
