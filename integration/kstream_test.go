package integration

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/weirstream/weir/integration/harness"
	"github.com/weirstream/weir/kstream"
	"github.com/weirstream/weir/serde"
	"github.com/weirstream/weir/weirtest"
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
	c := harness.Get(t)
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
	harness.Produce(t, c, msgs...)
	cfg := eosFailureConfig(c, app, t)
	cfg.Threads = 2
	a := start(t, dslWordCount(in, out), cfg)
	admin, err := sarama.NewClusterAdmin(c.Brokers, c.SaramaConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	harness.Eventually(t, 90*time.Second, 100*time.Millisecond, func() (bool, string) {
		lag := inputLag(t, c, admin, app, in)
		return lag == 0, fmt.Sprintf("input lag %d", lag)
	})
	// The words' records pass the repartition topic in later
	// transactions: wait until every word's committed count has reached
	// weirtest's, then stop and read the whole output.
	harness.ReadAll(t, c, out, sarama.ReadCommitted, func(got []*sarama.ConsumerMessage) bool {
		reached := map[string]bool{}
		for _, m := range got {
			if n, err := serde.Int64().Deserialize(out, m.Value); err == nil && n == want[string(m.Key)] {
				reached[string(m.Key)] = true
			}
		}
		return len(reached) == len(want)
	})
	if err := a.stop(t); err != nil {
		t.Fatal(err)
	}
	writeSentinels(t, c, out, partitions)
	got := readToSentinels(t, c, out, partitions, sarama.ReadCommitted)

	updates := map[string][]int64{}
	for _, m := range got {
		n, err := serde.Int64().Deserialize(out, m.Value)
		if err != nil {
			t.Fatalf("%s/%d@%d: %v", out, m.Partition, m.Offset, err)
		}
		updates[string(m.Key)] = append(updates[string(m.Key)], n)
	}
	if gotWords, wantWords := slices.Sorted(maps.Keys(updates)), slices.Sorted(maps.Keys(want)); !slices.Equal(gotWords, wantWords) {
		t.Fatalf("broker counted words %v, weirtest %v", gotWords, wantWords)
	}
	for w, n := range want {
		seq := updates[w]
		ok := int64(len(seq)) == n
		for i, v := range seq {
			ok = ok && v == int64(i+1)
		}
		if !ok {
			t.Errorf("word %q: broker updates %v, want 1..%d (weirtest's final count)", w, seq, n)
		}
	}
}
