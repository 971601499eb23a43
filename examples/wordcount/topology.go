package main

import (
	"strings"
	"unicode"

	"github.com/weirstream/weir/processor"
	"github.com/weirstream/weir/serde"
)

// Words splits a line into lower-cased words: runs of letters.
func Words(line string) []string {
	return strings.FieldsFunc(strings.ToLower(line), func(r rune) bool { return !unicode.IsLetter(r) })
}

// counts is the store of the running count of each word.
var counts = processor.KeyValue("counts", serde.String(), serde.Int64())

// Topology reads lines from input and writes word counts to output. When
// counted is not nil, it receives a value for every word counted (the
// embedded run uses it to know when it is done).
func Topology(input, output string, counted chan<- struct{}) *processor.Topology {
	t := processor.NewTopology()
	lines := t.AddSource("lines", input, serde.Bytes(), serde.String())
	words := t.AddProcessor("split", processor.Func(func(ctx processor.Context[string, string], rec processor.Record[[]byte, string]) error {
		words := Words(rec.Value)
		if len(words) == 0 {
			// The line carries thread, task and node, and the record's
			// topic, partition and offset: never its key or value.
			ctx.Logger().Debug("line without words")
		}
		for _, w := range words {
			if err := ctx.Forward(processor.Record[string, string]{Key: w, Value: w, Timestamp: rec.Timestamp}); err != nil {
				return err
			}
		}
		return nil
	}), lines)
	byWord := t.AddRepartition("words", serde.String(), serde.String(), words)
	count := t.AddProcessor("count", func() processor.Processor[string, string, string, int64] {
		return &counter{counted: counted}
	}, byWord)
	t.AddStore(counts, count)
	t.AddSink("counts-out", output, serde.String(), serde.Int64(), count)
	return t
}

// counter keeps a word's count in the store and forwards each new count.
type counter struct {
	store   processor.KeyValueStore[string, int64]
	counted chan<- struct{}
}

func (c *counter) Init(ctx processor.Context[string, int64]) error {
	s, err := counts.Open(ctx)
	c.store = s
	return err
}

func (c *counter) Process(ctx processor.Context[string, int64], rec processor.Record[string, string]) error {
	n, _, err := c.store.Get(rec.Key)
	if err != nil {
		return err
	}
	n++
	if err := c.store.Put(rec.Key, n); err != nil {
		return err
	}
	if err := ctx.Forward(processor.Record[string, int64]{Key: rec.Key, Value: n, Timestamp: rec.Timestamp}); err != nil {
		return err
	}
	if c.counted != nil {
		c.counted <- struct{}{}
	}
	return nil
}

func (c *counter) Close() error { return nil }
