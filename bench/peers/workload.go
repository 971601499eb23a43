package main

import (
	"encoding/binary"
	"fmt"
	"iter"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/IBM/sarama"
)

// A workload is one job every peer runs on the same pre-produced input:
// its input records, and the final count per output key they must give.
type workload struct {
	name  string // wordcount, count, windowed, join or restore
	about string // for the table
	// unit names what rate counts: lines for wordcount, records else.
	unit string
	// keys is the workload's point on its key space: the wordcount's
	// distinct words to draw from, the restored store's keys, the others'
	// fixed key count.
	keys int
	// input yields the inputs input records, as often as it is ranged
	// over.
	input  iter.Seq[*sarama.ProducerMessage]
	inputs int
	// table holds the records of a table the workload reads besides its
	// input (the join's), produced first to tableTopic(input).
	table []*sarama.ProducerMessage
	// want is every output key's final value (nil for restore, whose
	// keys are restoreKey's).
	want map[string]int64
	// updates is how many output records hold every update, once: what a
	// peer without a record cache writes.
	updates int
	// rank is an output value's place among its key's updates, from 1;
	// without a cache, under exactly once, a key's outputs rank 1, 2, 3...
	rank func(int64) int64
}

// count is the rank of a count: itself.
func count(n int64) int64 { return n }

// fromSlice sets w's input to records.
func (w *workload) fromSlice(records []*sarama.ProducerMessage) {
	w.input, w.inputs = slices.Values(records), len(records)
}

// Key counts of the workloads whose key space is fixed.
const (
	countKeys    = 10_000
	windowedKeys = 1_000
)

// windowSize is the windowed workload's tumbling window, in every peer.
const windowSize = 10 * time.Second

// wordCount returns lines of 10 words drawn from vocabulary distinct
// words, keyed by line number: split, re-keyed by word through a
// repartition topic, counted per word. The draws are the same seeded
// sequence at every vocabulary, so the 10,000-word input is today's.
func wordCount(topic string, lines, vocabulary int, base time.Time) *workload {
	w := &workload{name: "wordcount", unit: "lines", keys: vocabulary, want: map[string]int64{}, updates: lines * 10, rank: count}
	rng := rand.New(rand.NewPCG(1, 2))
	words := make([]string, 10)
	records := make([]*sarama.ProducerMessage, 0, lines)
	for i := range lines {
		for j := range words {
			words[j] = "w" + strconv.Itoa(rng.IntN(vocabulary))
			w.want[words[j]]++
		}
		records = append(records, &sarama.ProducerMessage{Topic: topic, Key: sarama.StringEncoder("line-" + strconv.Itoa(i)),
			Value: sarama.StringEncoder(strings.Join(words, " ")), Timestamp: base.Add(time.Duration(i) * time.Millisecond)})
	}
	w.fromSlice(records)
	w.about = fmt.Sprintf("%d lines x 10 words drawn from %d distinct (%d drawn); split, repartition by word, count", lines, vocabulary, len(w.want))
	return w
}

// countPerKey returns n records over countKeys keys with 100-byte values,
// counted per key (no repartition).
func countPerKey(topic string, n int, base time.Time) *workload {
	w := &workload{name: "count", unit: "records", keys: countKeys, want: map[string]int64{}, updates: n, rank: count,
		about: fmt.Sprintf("%d records, %d keys, 100-byte values; count per key", n, countKeys)}
	rng := rand.New(rand.NewPCG(3, 4))
	value := make([]byte, 100)
	records := make([]*sarama.ProducerMessage, 0, n)
	for i := range n {
		key := "k" + strconv.Itoa(rng.IntN(countKeys))
		w.want[key]++
		records = append(records, &sarama.ProducerMessage{Topic: topic, Key: sarama.StringEncoder(key),
			Value: sarama.ByteEncoder(value), Timestamp: base.Add(time.Duration(i) * time.Millisecond)})
	}
	w.fromSlice(records)
	return w
}

// windowedCount returns n records over windowedKeys keys, one per millisecond,
// counted per key in 10 s tumbling windows with a day of grace (so that no
// record is late and the final counts do not depend on timing); output
// keys are "<key>@<window start, Unix ms>".
func windowedCount(topic string, n int, base time.Time) *workload {
	w := &workload{name: "windowed", unit: "records", keys: windowedKeys, want: map[string]int64{}, updates: n, rank: count,
		about: fmt.Sprintf("%d records, %d keys, 10 s tumbling windows; count per key and window", n, windowedKeys)}
	rng := rand.New(rand.NewPCG(5, 6))
	value := make([]byte, 100)
	base = base.Truncate(windowSize)
	records := make([]*sarama.ProducerMessage, 0, n)
	for i := range n {
		key := "k" + strconv.Itoa(rng.IntN(windowedKeys))
		ts := base.Add(time.Duration(i) * time.Millisecond)
		start := ts.Truncate(windowSize).UnixMilli()
		w.want[key+"@"+strconv.FormatInt(start, 10)]++
		records = append(records, &sarama.ProducerMessage{Topic: topic, Key: sarama.StringEncoder(key),
			Value: sarama.ByteEncoder(value), Timestamp: ts})
	}
	w.fromSlice(records)
	return w
}

// joinTableKeys is the join workload's table size.
const joinTableKeys = 10_000

// tableTopic is the topic of the join workload's table: the input topic's
// name with "-table", in every peer.
func tableTopic(input string) string { return input + "-table" }

// streamTableJoin returns a table of 10,000 keys (int64 values below 10^6,
// an hour older than the stream) and n stream records over its keys, each
// carrying its rank among its key's records (1, 2, ...); every peer joins
// them, writing rank*10^6 + the table's value per stream record. A key's
// last output is its record count times 10^6 plus its table value, and
// an output above it is a record joined twice.
func streamTableJoin(topic string, n int, base time.Time) *workload {
	w := &workload{name: "join", unit: "records", keys: joinTableKeys, want: map[string]int64{}, updates: n,
		rank:  func(v int64) int64 { return v / 1_000_000 },
		about: fmt.Sprintf("%d stream records joined with a table of %d keys (inner stream-table join)", n, joinTableKeys)}
	rng := rand.New(rand.NewPCG(7, 8))
	row := map[string]int64{}
	for i := range joinTableKeys {
		key := "t" + strconv.Itoa(i)
		row[key] = rng.Int64N(1_000_000)
		w.table = append(w.table, &sarama.ProducerMessage{Topic: tableTopic(topic), Key: sarama.StringEncoder(key),
			Value: sarama.ByteEncoder(binary.BigEndian.AppendUint64(nil, uint64(row[key]))), Timestamp: base})
	}
	rank := map[string]int64{}
	records := make([]*sarama.ProducerMessage, 0, n)
	for i := range n {
		key := "t" + strconv.Itoa(rng.IntN(joinTableKeys))
		rank[key]++
		w.want[key] = rank[key]*1_000_000 + row[key]
		records = append(records, &sarama.ProducerMessage{Topic: topic, Key: sarama.StringEncoder(key),
			Value: sarama.ByteEncoder(binary.BigEndian.AppendUint64(nil, uint64(rank[key]))), Timestamp: base.Add(time.Hour + time.Duration(i)*time.Microsecond)})
	}
	w.fromSlice(records)
	return w
}

// decodeCount reads an output value: a count as 8 bytes big-endian, as
// Kafka's LongSerializer (and weir's serde.Int64) writes it.
func decodeCount(b []byte) (int64, bool) {
	if len(b) != 8 {
		return 0, false
	}
	return int64(binary.BigEndian.Uint64(b)), true
}

// restoreInput returns n records with n distinct keys, restoreKey(i) for
// i below n, counted per key by the count topology: its store, and its
// changelog, end with n entries. The records are made as they are
// produced, not held: a curve up to 20M keys would otherwise hold
// gigabytes in the driver, next to the peers.
func restoreInput(topic string, n int, base time.Time) *workload {
	w := &workload{name: "restore", unit: "records", keys: n, inputs: n, updates: n, rank: count,
		about: fmt.Sprintf("a count store of %d keys restored from its changelog after the state directory is deleted", n)}
	value := make([]byte, 100)
	w.input = func(yield func(*sarama.ProducerMessage) bool) {
		for i := range n {
			m := &sarama.ProducerMessage{Topic: topic, Key: sarama.StringEncoder(restoreKey(i)),
				Value: sarama.ByteEncoder(value), Timestamp: base.Add(time.Duration(i) * time.Microsecond)}
			if !yield(m) {
				return
			}
		}
	}
	return w
}

// restoreKey is the restore workload's i-th key.
func restoreKey(i int) string { return "r" + strconv.Itoa(i) }

// restoreIndex is the i of a restoreKey(i) below n.
func restoreIndex(key string, n int) (int, bool) {
	digits, ok := strings.CutPrefix(key, "r")
	if !ok || digits == "" || !isDigits(digits) || (len(digits) > 1 && digits[0] == '0') {
		return 0, false
	}
	i, err := strconv.Atoi(digits)
	return i, err == nil && i < n
}
