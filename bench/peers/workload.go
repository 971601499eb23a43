package main

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
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
	unit    string
	records []*sarama.ProducerMessage
	// table holds the records of a table the workload reads besides its
	// input (the join's), produced first to tableTopic(input).
	table []*sarama.ProducerMessage
	want  map[string]int64
}

// windowSize is the windowed workload's tumbling window, in every peer.
const windowSize = 10 * time.Second

// wordCount returns lines of 10 words drawn from 10,000 distinct words,
// keyed by line number: split, re-keyed by word through a repartition
// topic, counted per word.
func wordCount(topic string, lines int, base time.Time) *workload {
	w := &workload{name: "wordcount", unit: "lines", want: map[string]int64{},
		about: fmt.Sprintf("%d lines x 10 words, 10,000 distinct; split, repartition by word, count", lines)}
	rng := rand.New(rand.NewPCG(1, 2))
	words := make([]string, 10)
	for i := range lines {
		for j := range words {
			words[j] = "w" + strconv.Itoa(rng.IntN(10_000))
			w.want[words[j]]++
		}
		w.records = append(w.records, &sarama.ProducerMessage{Topic: topic, Key: sarama.StringEncoder("line-" + strconv.Itoa(i)),
			Value: sarama.StringEncoder(strings.Join(words, " ")), Timestamp: base.Add(time.Duration(i) * time.Millisecond)})
	}
	return w
}

// countPerKey returns n records over 10,000 keys with 100-byte values,
// counted per key (no repartition).
func countPerKey(topic string, n int, base time.Time) *workload {
	w := &workload{name: "count", unit: "records", want: map[string]int64{},
		about: fmt.Sprintf("%d records, 10,000 keys, 100-byte values; count per key", n)}
	rng := rand.New(rand.NewPCG(3, 4))
	value := make([]byte, 100)
	for i := range n {
		key := "k" + strconv.Itoa(rng.IntN(10_000))
		w.want[key]++
		w.records = append(w.records, &sarama.ProducerMessage{Topic: topic, Key: sarama.StringEncoder(key),
			Value: sarama.ByteEncoder(value), Timestamp: base.Add(time.Duration(i) * time.Millisecond)})
	}
	return w
}

// windowedCount returns n records over 1,000 keys, one per millisecond,
// counted per key in 10 s tumbling windows with a day of grace (so that no
// record is late and the final counts do not depend on timing); output
// keys are "<key>@<window start, Unix ms>".
func windowedCount(topic string, n int, base time.Time) *workload {
	w := &workload{name: "windowed", unit: "records", want: map[string]int64{},
		about: fmt.Sprintf("%d records, 1,000 keys, 10 s tumbling windows; count per key and window", n)}
	rng := rand.New(rand.NewPCG(5, 6))
	value := make([]byte, 100)
	base = base.Truncate(windowSize)
	for i := range n {
		key := "k" + strconv.Itoa(rng.IntN(1_000))
		ts := base.Add(time.Duration(i) * time.Millisecond)
		start := ts.Truncate(windowSize).UnixMilli()
		w.want[key+"@"+strconv.FormatInt(start, 10)]++
		w.records = append(w.records, &sarama.ProducerMessage{Topic: topic, Key: sarama.StringEncoder(key),
			Value: sarama.ByteEncoder(value), Timestamp: ts})
	}
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
	w := &workload{name: "join", unit: "records", want: map[string]int64{},
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
	for i := range n {
		key := "t" + strconv.Itoa(rng.IntN(joinTableKeys))
		rank[key]++
		w.want[key] = rank[key]*1_000_000 + row[key]
		w.records = append(w.records, &sarama.ProducerMessage{Topic: topic, Key: sarama.StringEncoder(key),
			Value: sarama.ByteEncoder(binary.BigEndian.AppendUint64(nil, uint64(rank[key]))), Timestamp: base.Add(time.Hour + time.Duration(i)*time.Microsecond)})
	}
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

// restoreInput returns n records with n distinct keys, counted per key by
// the count topology: its store, and its changelog, end with n entries.
func restoreInput(topic string, n int, base time.Time) *workload {
	w := &workload{name: "restore", unit: "records", want: map[string]int64{},
		about: fmt.Sprintf("a count store of %d keys restored from its changelog after the state directory is deleted", n)}
	value := make([]byte, 100)
	for i := range n {
		key := "r" + strconv.Itoa(i)
		w.want[key] = 1
		w.records = append(w.records, &sarama.ProducerMessage{Topic: topic, Key: sarama.StringEncoder(key),
			Value: sarama.ByteEncoder(value), Timestamp: base.Add(time.Duration(i) * time.Microsecond)})
	}
	return w
}
