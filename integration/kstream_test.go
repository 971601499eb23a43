package integration

import (
	"bytes"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/weirstream/weir/kstream"
	"github.com/weirstream/weir/processor"
	"github.com/weirstream/weir/serde"
	"github.com/weirstream/weir/weirtest"
	"github.com/weirstream/weir/weirtest/kafka"
)

// dslWordCount is the DSL word count: lines split into words, grouped by
// word through the repartition topic "by-word", counted in the store
// "counts", every update written to out.
func dslWordCount(in, out string) *kstream.Builder {
	b := kstream.NewBuilder()
	b.Stream("lines", in, serde.String(), serde.String()).
		FlatMapValues(strings.Fields).
		GroupBy("by-word", func(_, w string) string { return w }, serde.String(), serde.String()).
		Count("counts").
		ToStream().
		To(out, serde.String(), serde.Int64())
	return b
}

// TestDSLWordCountMatchesWeirtest runs the DSL word count on the broker
// under exactly once, through a real repartition topic and changelogged
// store, and checks its committed output against weirtest on the same
// input: the final count of every word is weirtest's, and each word's
// updates are 1, 2, ..., n, each once (none lost, none duplicated).
func TestDSLWordCountMatchesWeirtest(t *testing.T) {
	t.Parallel()
	c := kafka.Cluster(t)
	in, out, app := c.Name(t, "in"), c.Name(t, "out"), c.Name(t, "app")
	const partitions = 3
	c.CreateTopic(t, in, partitions, nil)
	c.CreateTopic(t, out, partitions, nil)

	words := []string{"alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota", "kappa", "lambda"}
	var lines []string
	for i := range 300 {
		lines = append(lines, fmt.Sprintf("%s %s %s", words[i%len(words)], words[(i*7)%len(words)], words[(i*i)%len(words)]))
	}

	// Timestamps are recent: records far older than the topics'
	// retention would be deleted by the broker.
	base := time.Now().Add(-time.Minute).Truncate(time.Millisecond)

	// What weirtest computes.
	d, err := weirtest.New(dslWordCount(in, out), weirtest.Config{ApplicationID: app})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	pipe := weirtest.Input(d, in, serde.String(), serde.String())
	for i, l := range lines {
		if err := pipe.Pipe(fmt.Sprintf("line-%d", i), l, base.Add(time.Duration(i)*time.Millisecond)); err != nil {
			t.Fatal(err)
		}
	}
	all, err := weirtest.KeyValueStore(d, "counts", serde.String(), serde.Int64()).All()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{}
	for _, e := range all {
		want[e.Key] = e.Value
	}
	if len(want) != len(words) {
		t.Fatalf("weirtest counted %d words, want %d", len(want), len(words))
	}

	// The same on the broker.
	var msgs []*sarama.ProducerMessage
	for i, l := range lines {
		msgs = append(msgs, &sarama.ProducerMessage{Topic: in, Key: sarama.StringEncoder(fmt.Sprintf("line-%d", i)), Value: sarama.StringEncoder(l), Timestamp: base.Add(time.Duration(i) * time.Millisecond)})
	}
	kafka.Produce(t, c, msgs...)
	cfg := eosFailureConfig(c, app, t)
	cfg.Threads = 2
	// Every update, as weirtest forwards it: no record cache (the default).
	a := start(t, dslWordCount(in, out), cfg)
	admin, err := sarama.NewClusterAdmin(c.Brokers, c.SaramaConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	kafka.Eventually(t, 90*time.Second, 100*time.Millisecond, func() (bool, string) {
		lag := inputLag(t, c, admin, app, in)
		return lag == 0, fmt.Sprintf("input lag %d", lag)
	})
	// The words' records pass the repartition topic in later
	// transactions: wait until every word's committed count has reached
	// weirtest's, then stop and read the whole output.
	waitWordCounts(t, c, out, want)
	if err := a.stop(t); err != nil {
		t.Fatal(err)
	}
	writeSentinels(t, c, out, partitions)
	got := readToSentinels(t, c, out, partitions, sarama.ReadCommitted)

	checkWordUpdates(t, out, got, want, false)
}

// waitWordCounts reads the word count output topic (read_committed)
// until every word of want has reached its count there.
func waitWordCounts(t *testing.T, c *kafka.Env, topic string, want map[string]int64) {
	t.Helper()
	kafka.ReadAll(t, c, topic, sarama.ReadCommitted, func(got []*sarama.ConsumerMessage) bool {
		reached := map[string]bool{}
		for _, m := range got {
			if n, err := serde.Int64().Deserialize(topic, m.Value); err == nil && n == want[string(m.Key)] {
				reached[string(m.Key)] = true
			}
		}
		return len(reached) == len(want)
	})
}

// checkWordUpdates fails the test unless the word count output got
// (read from topic) holds exactly the words of want, and each word's
// updates are 1, 2, ..., want[word], in order, each once: none lost, none
// duplicated. With cached, the count's record cache forwards a word's
// latest count per commit: its updates must rise strictly (a count
// applied twice or a record processed twice would repeat or overshoot)
// and end at want[word] (a lost record would fall short).
func checkWordUpdates(t *testing.T, topic string, got []*sarama.ConsumerMessage, want map[string]int64, cached bool) {
	t.Helper()
	updates := map[string][]int64{}
	versions := map[string]uint64{}
	for _, m := range got {
		n, err := serde.Int64().Deserialize(topic, m.Value)
		if err != nil {
			t.Fatalf("%s/%d@%d: %v", topic, m.Partition, m.Offset, err)
		}
		updates[string(m.Key)] = append(updates[string(m.Key)], n)
		// Each update carries its version, larger than the key's last.
		v, ok := recordVersion(m)
		if !ok || v <= versions[string(m.Key)] {
			t.Fatalf("%s/%d@%d (word %q): version %d (found %v) after %d", topic, m.Partition, m.Offset, m.Key, v, ok, versions[string(m.Key)])
		}
		versions[string(m.Key)] = v
	}
	if gotWords, wantWords := slices.Sorted(maps.Keys(updates)), slices.Sorted(maps.Keys(want)); !slices.Equal(gotWords, wantWords) {
		t.Fatalf("broker counted words %v, want %v", gotWords, wantWords)
	}
	var total, held int
	for w, n := range want {
		seq := updates[w]
		total += len(seq)
		held += int(n) - len(seq)
		if cached {
			ok := len(seq) > 0 && seq[len(seq)-1] == n
			for i, v := range seq {
				ok = ok && v >= 1 && (i == 0 || v > seq[i-1])
			}
			if !ok {
				t.Errorf("word %q: broker updates %v, want rising counts ending at %d", w, seq, n)
			}
			continue
		}
		ok := int64(len(seq)) == n
		for i, v := range seq {
			ok = ok && v == int64(i+1)
		}
		if !ok {
			t.Errorf("word %q: broker updates %v, want 1..%d", w, seq, n)
		}
	}
	if cached {
		t.Logf("%d updates written; the record cache held back %d", total, held)
	}
}

// recordVersion reads the version of a table update (VersionHeader).
func recordVersion(m *sarama.ConsumerMessage) (uint64, bool) {
	hs := make([]processor.Header, 0, len(m.Headers))
	for _, h := range m.Headers {
		hs = append(hs, processor.Header{Key: string(h.Key), Value: h.Value})
	}
	return processor.RecordVersion(hs)
}

// dslWindowedCount counts the records of in per key in 1 s tumbling
// windows with 300 ms of grace into the window store "window-counts",
// every update written to out; each window's final count, held back in
// the store "final-counts", to final; the updates held back for 400 ms
// of stream time in a buffer of at most 3 entries (emitted early when
// full), in the store "limited-counts", to limited; keys in Kafka
// Streams' windowed key format. The records dropped as late go to late
// as they came.
func dslWindowedCount(in, out, final, limited, late string) *kstream.Builder {
	w := kstream.Tumbling(time.Second).Grace(300 * time.Millisecond)
	b := kstream.NewBuilder()
	counts := b.Stream("events", in, serde.String(), serde.String()).
		GroupByKey().
		WindowedBy(w).
		LateTo(late, serde.String()).
		Count("window-counts")
	counts.ToStream(kstream.WindowedKey).
		To(out, kstream.WindowedSerde(serde.String(), w.Size()), serde.Int64())
	counts.Suppress("final-counts", kstream.UntilWindowCloses()).
		ToStream(kstream.WindowedKey, kstream.Named("final-tostream")).
		To(final, kstream.WindowedSerde(serde.String(), w.Size()), serde.Int64())
	counts.Suppress("limited-counts", kstream.UntilTimeLimit(400*time.Millisecond, kstream.BufferLimit{MaxRecords: 3}, kstream.EmitEarlyWhenFull)).
		ToStream(kstream.WindowedKey, kstream.Named("limited-tostream")).
		To(limited, kstream.WindowedSerde(serde.String(), w.Size()), serde.Int64())
	return b
}

// TestDSLWindowedCountMatchesWeirtest runs a tumbling windowed count
// with and without suppression on the broker under exactly once, with
// records out of order within the grace period and late ones past it.
// Halfway, the instance stops and a new one takes over with an empty
// state directory, so the stores (window store and suppression buffers)
// are restored from their changelogs. The committed output of every
// topic must be weirtest's on the same input, record by record (key,
// window, count, timestamp; the late records as they came): every update
// once, every final and time-limited count once, none lost or repeated
// across the restart; and both must count the same late records. One
// partition, so that the broker's task sees the records in weirtest's
// order. The second half starts with a record in order, so this test
// does not depend on the stream time being restored (that has
// TestStreamTimeSurvivesARestart).
func TestDSLWindowedCountMatchesWeirtest(t *testing.T) {
	t.Parallel()
	c := kafka.Cluster(t)
	in, out, final, limited, late, app := windowedTopics(t, c)
	outputs := []string{out, final, limited, late}

	events := windowedEvents(400)
	const split = 200 // in order: 200%11 == 2, 200%13 == 5
	format := windowedFormat(t, late)
	want, wantLate := windowedWant(t, events, in, out, final, limited, late, app)

	// The same on the broker, in two instances one after the other.
	admin, err := sarama.NewClusterAdmin(c.Brokers, c.SaramaConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	var dropped float64
	for _, part := range [][2]int{{0, split}, {split, len(events)}} {
		var msgs []*sarama.ProducerMessage
		for i := part[0]; i < part[1]; i++ {
			e := events[i]
			msgs = append(msgs, &sarama.ProducerMessage{Topic: in, Key: sarama.StringEncoder(e.key), Value: sarama.StringEncoder(strconv.Itoa(i)), Timestamp: e.ts})
		}
		kafka.Produce(t, c, msgs...)
		cfg := eosFailureConfig(c, app, t) // a new, empty state directory
		a := start(t, dslWindowedCount(in, out, final, limited, late), cfg)
		waitLagZero(t, c, admin, app, in)
		if err := a.stop(t); err != nil {
			t.Fatal(err)
		}
		dropped += lateDropped(t, cfg.Metrics.(*prometheus.Registry))
	}
	compareWindowedOutputs(t, c, outputs, want, format)
	if dropped != wantLate {
		t.Errorf("broker dropped %v late records, weirtest %v", dropped, wantLate)
	}
}

// windowedTopics creates the one-partition topics of dslWindowedCount
// for test t and returns their names and an application id.
func windowedTopics(t *testing.T, c *kafka.Env) (in, out, final, limited, late, app string) {
	in, out, final, app = c.Name(t, "in"), c.Name(t, "out"), c.Name(t, "final"), c.Name(t, "app")
	limited, late = c.Name(t, "limited"), c.Name(t, "late")
	for _, topic := range []string{in, out, final, limited, late} {
		c.CreateTopic(t, topic, 1, nil)
	}
	return in, out, final, limited, late, app
}

// windowedEvent is an input record of the windowed DSL tests: a key and
// an event time; its value is its index.
type windowedEvent struct {
	key string
	ts  time.Time
}

// windowedEvents returns n events for five keys, 25 ms apart from ten
// minutes ago (the broker keeps such timestamps), aligned to a second:
// every eleventh 200 ms out of order (mostly within the 300 ms grace),
// every thirteenth 2 s late.
func windowedEvents(n int) []windowedEvent {
	base := time.Now().Add(-10 * time.Minute).Truncate(time.Second)
	var events []windowedEvent
	for i := range n {
		ts := base.Add(time.Duration(i*25) * time.Millisecond)
		switch {
		case i%11 == 5:
			ts = ts.Add(-200 * time.Millisecond)
		case i%13 == 7:
			ts = ts.Add(-2 * time.Second)
		}
		events = append(events, windowedEvent{fmt.Sprintf("user-%d", i%5), ts})
	}
	return events
}

// windowedFormat returns a renderer of the records of dslWindowedCount's
// outputs: a windowed count as "key[start,end)=count@ts", a record of the
// late topic as it came, "key=value@ts".
func windowedFormat(t *testing.T, late string) func(topic string, key, value []byte, ts time.Time) string {
	return func(topic string, key, value []byte, ts time.Time) string {
		if topic == late {
			return fmt.Sprintf("%s=%s@%d", key, value, ts.UnixMilli())
		}
		w, err := kstream.WindowedSerde(serde.String(), time.Second).Deserialize(topic, key)
		if err != nil {
			t.Fatalf("%s: key % x: %v", topic, key, err)
		}
		n, err := serde.Int64().Deserialize(topic, value)
		if err != nil {
			t.Fatalf("%s: value % x: %v", topic, value, err)
		}
		return fmt.Sprintf("%s[%d,%d)=%d@%d", w.Key, w.Start.UnixMilli(), w.End.UnixMilli(), n, ts.UnixMilli())
	}
}

// windowedWant runs dslWindowedCount on events in weirtest and returns
// each output topic's records, rendered by windowedFormat, and the late
// records it counted. It fails the test unless every output has records.
func windowedWant(t *testing.T, events []windowedEvent, in, out, final, limited, late, app string) (map[string][]string, float64) {
	t.Helper()
	reg := prometheus.NewRegistry()
	d, err := weirtest.New(dslWindowedCount(in, out, final, limited, late), weirtest.Config{ApplicationID: app, Metrics: reg})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	pipe := weirtest.Input(d, in, serde.String(), serde.String())
	for i, e := range events {
		if err := pipe.Pipe(e.key, strconv.Itoa(i), e.ts); err != nil {
			t.Fatal(err)
		}
	}
	format := windowedFormat(t, late)
	want := map[string][]string{}
	for _, topic := range []string{out, final, limited, late} {
		recs, err := weirtest.Output(d, topic, serde.Bytes(), serde.Bytes()).ReadAll()
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range recs {
			want[topic] = append(want[topic], format(topic, r.Key, r.Value, r.Timestamp))
		}
	}
	wantLate := lateDropped(t, reg)
	if wantLate == 0 || len(want[out]) == 0 || len(want[final]) == 0 || len(want[limited]) == 0 || len(want[late]) == 0 {
		t.Fatalf("weirtest: %d updates, %d final counts, %d limited counts, %v late records (%d written); the input should have all of them",
			len(want[out]), len(want[final]), len(want[limited]), wantLate, len(want[late]))
	}
	return want, wantLate
}

// compareWindowedOutputs reads each of the one-partition topics outputs
// (read_committed, up to a sentinel it writes), renders its records with
// format and fails the test unless they are want[topic], in order.
func compareWindowedOutputs(t *testing.T, c *kafka.Env, outputs []string, want map[string][]string, format func(string, []byte, []byte, time.Time) string) {
	t.Helper()
	for _, topic := range outputs {
		writeSentinels(t, c, topic, 1)
		var have []string
		for _, m := range readToSentinels(t, c, topic, 1, sarama.ReadCommitted) {
			have = append(have, format(topic, m.Key, m.Value, m.Timestamp))
		}
		t.Logf("%s: weirtest %d records, broker %d", topic, len(want[topic]), len(have))
		if !slices.Equal(have, want[topic]) {
			i := firstDiff(have, want[topic])
			t.Errorf("%s: broker wrote %d records, weirtest %d; first difference at %d: %q, want %q",
				topic, len(have), len(want[topic]), i, at(have, i), at(want[topic], i))
		}
	}
}

// at returns s[i], or "(none)" past its end.
func at(s []string, i int) string {
	if i < len(s) {
		return s[i]
	}
	return "(none)"
}

// lateDropped returns weir_records_late_total summed over tasks.
func lateDropped(t *testing.T, reg *prometheus.Registry) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	n := 0.0
	for _, mf := range mfs {
		if mf.GetName() == "weir_records_late_total" {
			for _, m := range mf.GetMetric() {
				n += m.GetCounter().GetValue()
			}
		}
	}
	return n
}

// firstDiff returns the first index at which a and b differ.
func firstDiff(a, b []string) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// TestDSLCachedWindowedCountIsExact: a windowed count with no
// Suppress(UntilWindowCloses) behind it forwards through its record
// cache, under exactly once on three partitions with two threads. Each
// window's committed counts must rise strictly and end at the window's
// count in the input (none lost, none counted twice), and the output may
// hold fewer records than the input (the cache's point; logged).
func TestDSLCachedWindowedCountIsExact(t *testing.T) {
	t.Parallel()
	c := kafka.Cluster(t)
	in, out, app := c.Name(t, "in"), c.Name(t, "out"), c.Name(t, "app")
	const partitions = 3
	c.CreateTopic(t, in, partitions, nil)
	c.CreateTopic(t, out, partitions, nil)
	w := kstream.Tumbling(time.Second).Grace(time.Hour)
	b := kstream.NewBuilder()
	b.Stream("events", in, serde.String(), serde.String()).
		GroupByKey().
		WindowedBy(w).
		Count("window-counts").
		ToStream(kstream.WindowedKey).
		Map(func(k kstream.Windowed[string], n int64) (string, int64) {
			return fmt.Sprintf("%s@%d", k.Key, k.Start.UnixMilli()), n
		}).
		To(out, serde.String(), serde.Int64())

	base := time.Now().Add(-time.Minute).Truncate(time.Second)
	want := map[string]int64{}
	var msgs []*sarama.ProducerMessage
	for i := range 3000 {
		key := fmt.Sprintf("k%d", i%17)
		ts := base.Add(time.Duration(i) * 3 * time.Millisecond)
		want[fmt.Sprintf("%s@%d", key, ts.Truncate(time.Second).UnixMilli())]++
		msgs = append(msgs, &sarama.ProducerMessage{Topic: in, Key: sarama.StringEncoder(key), Value: sarama.StringEncoder("x"), Timestamp: ts})
	}
	kafka.Produce(t, c, msgs...)
	cfg := eosFailureConfig(c, app, t)
	cfg.Threads = 2
	cfg.CacheMaxBytes = 10 << 20
	a := start(t, b, cfg)
	waitWordCounts(t, c, out, want)
	if err := a.stop(t); err != nil {
		t.Fatal(err)
	}
	writeSentinels(t, c, out, partitions)
	checkWordUpdates(t, out, readToSentinels(t, c, out, partitions, sarama.ReadCommitted), want, true)
}

// TestDSLSlidingCountMatchesWeirtest: a sliding-window count on the
// broker, under exactly once on one partition, ends with weirtest's count
// for every window, and writes weirtest's updates in weirtest's order.
func TestDSLSlidingCountMatchesWeirtest(t *testing.T) {
	t.Parallel()
	c := kafka.Cluster(t)
	in, out, app := c.Name(t, "in"), c.Name(t, "out"), c.Name(t, "app")
	c.CreateTopic(t, in, 1, nil)
	c.CreateTopic(t, out, 1, nil)
	w := kstream.Sliding(50 * time.Millisecond).Grace(time.Hour)
	top := func() *kstream.Builder {
		b := kstream.NewBuilder()
		b.Stream("events", in, serde.String(), serde.String()).
			GroupByKey().
			SlidingWindowedBy(w).
			Count("sliding-counts").
			ToStream(kstream.WindowedKey).
			To(out, kstream.WindowedSerde(serde.String(), w.Difference()), serde.Int64())
		return b
	}
	base := time.Now().Add(-time.Minute).Truncate(time.Second)
	var msgs []*sarama.ProducerMessage
	d, err := weirtest.New(top(), weirtest.Config{ApplicationID: app})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	pipe := weirtest.Input(d, in, serde.String(), serde.String())
	for i := range 600 {
		key := fmt.Sprintf("k%d", i%5)
		ts := base.Add(time.Duration(i*7%400) * time.Millisecond) // out of order, within the grace
		msgs = append(msgs, &sarama.ProducerMessage{Topic: in, Key: sarama.StringEncoder(key), Value: sarama.StringEncoder("x"), Timestamp: ts})
		if err := pipe.Pipe(key, "x", ts); err != nil {
			t.Fatal(err)
		}
	}
	wantRecs, err := weirtest.Output(d, out, serde.Bytes(), serde.Bytes()).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	kafka.Produce(t, c, msgs...)
	a := start(t, top(), eosFailureConfig(c, app, t))
	got := kafka.ReadAll(t, c, out, sarama.ReadCommitted, func(got []*sarama.ConsumerMessage) bool { return len(got) >= len(wantRecs) })
	if err := a.stop(t); err != nil {
		t.Fatal(err)
	}
	if len(got) != len(wantRecs) {
		t.Fatalf("broker wrote %d updates, weirtest %d", len(got), len(wantRecs))
	}
	for i, m := range got {
		if !bytes.Equal(m.Key, wantRecs[i].Key) || !bytes.Equal(m.Value, wantRecs[i].Value) || !m.Timestamp.Equal(wantRecs[i].Timestamp) {
			t.Fatalf("update %d: broker %x=%x@%v, weirtest %x=%x@%v", i, m.Key, m.Value, m.Timestamp, wantRecs[i].Key, wantRecs[i].Value, wantRecs[i].Timestamp)
		}
	}
	t.Logf("%d sliding-window updates equal weirtest's", len(got))
}
