package main

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/weirstream/weir/kstream"
	"github.com/weirstream/weir/processor"
	"github.com/weirstream/weir/serde"
	"github.com/weirstream/weir/weirtest/kafka"
)

// regroupedCount counts in's records per value, through a repartition
// topic (GroupBy), and writes every count to out.
func regroupedCount(in, out string) *kstream.Builder {
	b := kstream.NewBuilder()
	b.Stream("in", in, serde.String(), serde.String()).
		GroupBy("by-value", func(_, v string) string { return v }, serde.String(), serde.String()).
		Count("counts").ToStream().To(out, serde.String(), serde.Int64())
	return b
}

// sinkRow is what a sink keeps of a key.
type sinkRow struct {
	epoch, version uint64
	n              int64
}

// header returns the value of the header key of m, and whether it has it.
func header(m *sarama.ConsumerMessage, key string) (string, bool) {
	for _, h := range m.Headers {
		if string(h.Key) == key {
			return string(h.Value), true
		}
	}
	return "", false
}

// A sink that applies the documented rule (processor.ReplayHeader) never
// moves a key back across `weir reset -to-earliest`, and ends with the
// counts of all the input; one that compares versions alone moves every
// key back to 1 during the replay. The replay mark travels through the
// repartition topic, and ends where the application stood before the
// reset.
func TestReplayAfterResetNeverRegressesASink(t *testing.T) {
	t.Parallel()
	c := kafka.Cluster(t)
	in, out, app := c.Name(t, "rp-in"), c.Name(t, "rp-out"), c.Name(t, "rp-app")
	c.CreateTopic(t, in, 2, nil)
	c.CreateTopic(t, out, 2, nil)
	cleanupApps(t, c, app)
	ks := keys("v", 10)
	values := func() []*sarama.ProducerMessage {
		var msgs []*sarama.ProducerMessage
		for i, k := range ks {
			msgs = append(msgs, &sarama.ProducerMessage{Topic: in, Key: sarama.StringEncoder(strconv.Itoa(i)), Value: sarama.StringEncoder(k), Timestamp: time.Now()})
		}
		return msgs
	}
	want := map[string]int64{}
	for range 3 {
		kafka.Produce(t, c, values()...)
		for _, k := range ks {
			want[k]++
		}
	}
	stop := runApp(t, regroupedCount(in, out), rescaleConfig(c, app, t.TempDir()))
	counts(t, c, out, serde.String(), want)
	stop()

	brokers := strings.Join(c.Brokers, ",")
	code, plan, errOut := weirCmd(t, "reset", "-brokers", brokers, "-app", app, "-to-earliest")
	if code != exitOK || !strings.Contains(plan, "a replay up to") {
		t.Fatalf("reset = %d: %s%s", code, plan, errOut)
	}
	kafka.Produce(t, c, values()...)
	for _, k := range ks {
		want[k]++
	}
	stop = runApp(t, regroupedCount(in, out), rescaleConfig(c, app, t.TempDir()))
	defer stop()
	counts(t, c, out, serde.String(), want) // every key's last count is 4

	got := kafka.ReadAll(t, c, out, sarama.ReadCommitted, func(got []*sarama.ConsumerMessage) bool { return len(got) == 3*len(ks)+4*len(ks) })
	rule, naive := map[string]sinkRow{}, map[string]sinkRow{}
	var replayed, after, naiveBack int
	for _, m := range got {
		k := string(m.Key)
		n, err := serde.Int64().Deserialize(out, m.Value)
		if err != nil {
			t.Fatal(err)
		}
		v, ok := header(m, processor.VersionHeader)
		version, err := strconv.ParseUint(v, 10, 64)
		if !ok || err != nil {
			t.Fatalf("%s=%d carries no version: %v", k, n, m.Headers)
		}
		var epoch uint64
		if e, ok := header(m, processor.EpochHeader); ok {
			epoch, _ = strconv.ParseUint(e, 10, 64)
		}
		_, replay := header(m, processor.ReplayHeader)
		switch {
		case replay:
			replayed++
			if epoch != 1 || n > 3 {
				t.Fatalf("%s=%d marked as a replay with epoch %d; want only the recomputed counts 1..3, epoch 1", k, n, epoch)
			}
		case epoch == 1:
			after++
		}
		u := sinkRow{epoch: epoch, version: version, n: n}
		if row, ok := rule[k]; !ok || (replay && row.epoch == epoch && row.version < version) || (!replay && row.version < version) {
			if ok && u.n < row.n {
				t.Fatalf("the sink following the rule moved %s back from %d to %d", k, row.n, u.n)
			}
			rule[k] = u
		}
		if row, ok := naive[k]; !ok || row.version < version {
			if ok && u.n < row.n {
				naiveBack++
			}
			naive[k] = u
		}
	}
	if naiveBack != len(ks) {
		t.Errorf("a sink comparing versions alone moved %d keys back; want every one of the %d (the replay starts from 1)", naiveBack, len(ks))
	}
	if replayed != 3*len(ks) || after != len(ks) {
		t.Fatalf("%d updates marked as a replay, %d after it; want %d and %d", replayed, after, 3*len(ks), len(ks))
	}
	for _, k := range ks {
		if rule[k].n != want[k] {
			t.Errorf("the sink following the rule ends with %s=%d, want %d", k, rule[k].n, want[k])
		}
	}
}
