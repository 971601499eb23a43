package main

import (
	"strings"
	"unicode"

	"github.com/weirstream/weir/kstream"
	"github.com/weirstream/weir/serde"
)

// Words splits a line into lower-cased words: runs of letters.
func Words(line string) []string {
	return strings.FieldsFunc(strings.ToLower(line), func(r rune) bool { return !unicode.IsLetter(r) })
}

// Topology reads lines from input and writes word counts to output, every
// running count of every word: lines are split into words, re-keyed by
// word through the repartition topic "<app id>-words-repartition" and
// counted in the store "counts" (changelog "<app id>-counts-changelog"),
// the names the Processor API version of this example used, so state
// written by it carries over. When counted is not nil, it receives a
// value for every word counted (the embedded run uses it to know when it
// is done).
func Topology(input, output string, counted chan<- struct{}) *kstream.Builder {
	b := kstream.NewBuilder()
	b.Stream("lines", input, serde.Bytes(), serde.String()).
		FlatMapValues(Words, kstream.Named("split")).
		GroupBy("words", func(_ []byte, word string) string { return word }, serde.String(), serde.String()).
		// Every count, 1, 2, 3, ..., as the output format promises: no
		// record cache, which would write a word's latest count once per
		// commit.
		Count("counts", kstream.WithoutCache()).
		ToStream().
		Peek(func(string, int64) {
			if counted != nil {
				counted <- struct{}{}
			}
		}, kstream.Named("counted")).
		To(output, serde.String(), serde.Int64())
	return b
}
