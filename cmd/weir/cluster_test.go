package main

// Tests of the commands against a real broker (weirtest/kafka.Cluster: the
// cluster of `make kafka-up`, or Testcontainers).

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/processor"
	"github.com/weirstream/weir/schema"
	"github.com/weirstream/weir/serde"
	"github.com/weirstream/weir/weirtest/kafka"
)

// countTopology counts records per key in the store "counts" and writes
// each count to out; extra stores are attached as they are.
func countTopology(in, out string, keys serde.Serde[string], extra ...processor.StoreSpec) *processor.Topology {
	counts := processor.KeyValue("counts", keys, serde.Int64())
	tp := processor.NewTopology()
	src := tp.AddSource("in", in, serde.String(), serde.String())
	p := tp.AddProcessor("count", func() processor.Processor[string, string, string, int64] { return &counter{spec: counts} }, src)
	tp.AddStore(counts, p)
	for _, s := range extra {
		tp.AddStore(s, p)
	}
	tp.AddSink("out", out, serde.String(), serde.Int64(), p)
	return tp
}

// counter counts records per key; each count carries its version
// (processor.VersionHeader), as a DSL table's updates do.
type counter struct {
	spec  *processor.KeyValueSpec[string, int64]
	store processor.KeyValueStore[string, int64]
}

func (c *counter) Init(ctx processor.Context[string, int64]) error {
	s, err := c.spec.Open(ctx)
	c.store = s
	return err
}

func (c *counter) Process(ctx processor.Context[string, int64], rec processor.Record[string, string]) error {
	n, _, err := c.store.Get(rec.Key)
	if err != nil {
		return err
	}
	if err := c.store.Put(rec.Key, n+1); err != nil {
		return err
	}
	return ctx.Forward(processor.Record[string, int64]{Key: rec.Key, Value: n + 1, Timestamp: rec.Timestamp,
		Headers: processor.StampVersion(nil, ctx.NextVersion())})
}

func (c *counter) Close() error { return nil }

// otherKeys is a string serde of another type than serde.String: a
// different key serde for the upgrade check.
type otherKeys struct{}

func (otherKeys) Serialize(_ string, v string) ([]byte, error)   { return []byte(v), nil }
func (otherKeys) Deserialize(_ string, b []byte) (string, error) { return string(b), nil }

// app is one application of a test: its topics, id and state directory.
type app struct {
	c       *kafka.Env
	in, out string
	id, dir string
}

func newApp(t *testing.T) *app {
	c := kafka.Cluster(t)
	a := &app{c: c, in: c.Name(t, "cli-in"), out: c.Name(t, "cli-out"), id: c.Name(t, "cli-app"), dir: t.TempDir()}
	c.CreateTopic(t, a.in, 2, nil)
	c.CreateTopic(t, a.out, 2, nil)
	t.Cleanup(func() {
		admin := c.Admin(t)
		for _, topic := range []string{a.id + "-topology", a.id + "-counts-changelog"} {
			_ = admin.DeleteTopic(topic)
		}
	})
	return a
}

// start runs the app's count topology until stop is called; reg, when
// not nil, gets its metrics.
func (a *app) start(t *testing.T, reg ...*prometheus.Registry) (stop func()) {
	t.Helper()
	cfg := weir.Config{ApplicationID: a.id, Brokers: a.c.Brokers, StateDir: a.dir}
	if len(reg) > 0 {
		cfg.Metrics = reg[0]
	}
	w, err := weir.New(countTopology(a.in, a.out, serde.String()), cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	go func() { stopped <- w.Run(ctx) }()
	kafka.WaitRunning(t, w)
	return func() {
		cancel()
		if err := <-stopped; err != nil {
			t.Errorf("Run: %v", err)
		}
	}
}

// produce writes one record per key, at ts.
func (a *app) produce(t *testing.T, partition int32, ts time.Time, keys ...string) {
	t.Helper()
	var msgs []*sarama.ProducerMessage
	for _, k := range keys {
		msgs = append(msgs, &sarama.ProducerMessage{Topic: a.in, Partition: partition, Key: sarama.StringEncoder(k), Value: sarama.StringEncoder("x"), Timestamp: ts})
	}
	cfg := a.c.SaramaConfig()
	cfg.Producer.Partitioner = sarama.NewManualPartitioner
	p, err := sarama.NewSyncProducer(a.c.Brokers, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := p.SendMessages(msgs); err != nil {
		t.Fatal(err)
	}
}

// outputs reads the output until it holds n records and returns them.
func (a *app) outputs(t *testing.T, n int) []*sarama.ConsumerMessage {
	t.Helper()
	return kafka.ReadAll(t, a.c, a.out, sarama.ReadCommitted, func(got []*sarama.ConsumerMessage) bool { return len(got) >= n })
}

// versions returns the smallest and largest version of ms, failing the
// test for a record without one.
func versions(t *testing.T, ms []*sarama.ConsumerMessage) (lo, hi uint64) {
	t.Helper()
	for i, m := range ms {
		hs := make([]processor.Header, 0, len(m.Headers))
		for _, h := range m.Headers {
			hs = append(hs, processor.Header{Key: string(h.Key), Value: h.Value})
		}
		v, ok := processor.RecordVersion(hs)
		if !ok {
			t.Fatalf("%s/%d@%d has no version", m.Topic, m.Partition, m.Offset)
		}
		if i == 0 || v < lo {
			lo = v
		}
		hi = max(hi, v)
	}
	return lo, hi
}

func keys(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%02d", prefix, i)
	}
	return out
}

// describe reports what the test produced: lag and the age of the oldest
// unread record per partition, the group's state, the store.
func TestDescribeReportsLagAndOldestUnread(t *testing.T) {
	t.Parallel()
	a := newApp(t)
	stop := a.start(t)
	a.produce(t, 0, time.Now(), keys("a", 10)...)
	a.outputs(t, 10)
	stop()
	old := time.Now().Add(-time.Hour)
	a.produce(t, 0, old, keys("b", 5)...)
	// Partition 1's oldest unread record is from a clock an hour ahead:
	// its age is 0, not negative (which the table showed as "forever").
	a.produce(t, 1, time.Now().Add(time.Hour), keys("c", 1)...)

	code, out, errOut := weirCmd(t, "describe", "-brokers", strings.Join(a.c.Brokers, ","), "-app", a.id, "-o", "json")
	if code != exitOK {
		t.Fatalf("describe = %d: %s", code, errOut)
	}
	var r describeReport
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if !r.Descriptor || r.Group.State != "Empty" || len(r.Group.Members) != 0 {
		t.Fatalf("group: %+v (descriptor %v)", r.Group, r.Descriptor)
	}
	var p0 *partitionRow
	for i := range r.Partitions {
		if r.Partitions[i].Topic == a.in && r.Partitions[i].Partition == 0 {
			p0 = &r.Partitions[i]
		}
	}
	if p0 == nil {
		t.Fatalf("no row for %s/0: %+v", a.in, r.Partitions)
	}
	for _, p := range r.Partitions {
		if p.Topic == a.in && p.Partition == 1 && (p.Lag != 1 || p.AgeMs != 0) {
			t.Fatalf("%s/1, its oldest unread an hour ahead of the clock: lag %d, age %d ms; want 1, 0", a.in, p.Lag, p.AgeMs)
		}
	}
	if p0.Lag != 5 || p0.Committed != p0.End-5 {
		t.Fatalf("%s/0: lag %d, committed %d, end %d; want lag 5", a.in, p0.Lag, p0.Committed, p0.End)
	}
	if age := time.Duration(p0.AgeMs) * time.Millisecond; age < 59*time.Minute || age > 61*time.Minute || !p0.OldestUnread.Equal(old.Truncate(time.Millisecond)) {
		t.Fatalf("%s/0: oldest unread %v, age %v; want %v, about an hour", a.in, p0.OldestUnread, age, old)
	}
	if p0.RetentionMs > 0 && p0.HeadroomMs != p0.RetentionMs-p0.AgeMs {
		t.Fatalf("%s/0: headroom %d with retention %d and age %d", a.in, p0.HeadroomMs, p0.RetentionMs, p0.AgeMs)
	}
	if len(r.Stores) != 1 || r.Stores[0].Store != "counts" || r.Stores[0].Partitions != 2 || r.Stores[0].Records < 10 {
		t.Fatalf("stores: %+v", r.Stores)
	}
	code, table, _ := weirCmd(t, "describe", "-brokers", strings.Join(a.c.Brokers, ","), "-app", a.id)
	if code != exitOK || !strings.Contains(table, a.in) || !strings.Contains(table, "counts") {
		t.Fatalf("table = %d:\n%s", code, table)
	}
}

// reset refuses while an instance runs and changes nothing; a dry run
// changes nothing; a reset rewinds the input, deletes the changelog and
// makes the next start wipe its local state, so the counts are
// recomputed from scratch.
func TestResetReplaysFromScratch(t *testing.T) {
	t.Parallel()
	a := newApp(t)
	brokers := strings.Join(a.c.Brokers, ",")
	stop := a.start(t)
	a.produce(t, 0, time.Now(), keys("k", 10)...)
	first := a.outputs(t, 10)

	// While it runs, describe shows its member and tasks.
	code, out, errOut := weirCmd(t, "describe", "-brokers", brokers, "-app", a.id, "-o", "json")
	var r describeReport
	if err := json.Unmarshal([]byte(out), &r); code != exitOK || err != nil || len(r.Group.Members) != 1 || strings.Join(r.Group.Members[0].Tasks, " ") != "0_0 0_1" {
		t.Fatalf("describe of the running application = %d, %v: %s%s", code, err, out, errOut)
	}

	before := committedOffsets(t, a)
	if code, _, errOut := weirCmd(t, "reset", "-brokers", brokers, "-app", a.id, "-to-earliest"); code != exitRefused || !strings.Contains(errOut, "member") {
		t.Fatalf("reset while running = %d: %s", code, errOut)
	}
	stop()
	after := committedOffsets(t, a)
	if fmt.Sprint(before) != fmt.Sprint(after) || !topicExists(t, a, a.id+"-counts-changelog") {
		t.Fatalf("a refused reset changed offsets %v -> %v, or the changelog", before, after)
	}

	// Dry runs of the other modes plan from the committed offsets (10 on
	// partition 0) and from the records' times.
	code, out, errOut = weirCmd(t, "reset", "-brokers", brokers, "-app", a.id, "-shift-by", "-3", "-dry-run")
	if code != exitOK || !strings.Contains(out, fmt.Sprintf("offset %s/0: 10 -> 7", a.in)) {
		t.Fatalf("-shift-by -3 dry run = %d: %s%s", code, out, errOut)
	}
	code, out, errOut = weirCmd(t, "reset", "-brokers", brokers, "-app", a.id, "-to-datetime", time.Now().Add(time.Hour).UTC().Format(time.RFC3339), "-dry-run")
	if code != exitOK || !strings.Contains(out, fmt.Sprintf("offset %s/0: 10 -> 10", a.in)) {
		t.Fatalf("-to-datetime (after every record) dry run = %d: %s%s", code, out, errOut)
	}
	code, out, errOut = weirCmd(t, "reset", "-brokers", brokers, "-app", a.id, "-to-earliest", "-dry-run")
	if code != exitOK || !strings.Contains(out, "dry run") || !strings.Contains(out, a.id+"-counts-changelog") {
		t.Fatalf("dry run = %d: %s%s", code, out, errOut)
	}
	if fmt.Sprint(committedOffsets(t, a)) != fmt.Sprint(after) || !topicExists(t, a, a.id+"-counts-changelog") {
		t.Fatal("a dry run changed something")
	}

	code, out, errOut = weirCmd(t, "reset", "-brokers", brokers, "-app", a.id, "-to-earliest")
	if code != exitOK {
		t.Fatalf("reset = %d: %s%s", code, out, errOut)
	}
	for p, off := range committedOffsets(t, a) {
		if off != 0 {
			t.Fatalf("after the reset, %s/%d is committed at %d, not 0", a.in, p, off)
		}
	}
	kafka.Eventually(t, 30*time.Second, 0, func() (bool, string) {
		return !topicExists(t, a, a.id+"-counts-changelog"), "the changelog still exists"
	})

	// The same state directory: the restart wipes it by itself, so every
	// key is counted 1 again (kept state would count 2), and its stores
	// restore as having no state, not as having a checkpoint the new
	// changelog does not hold.
	reg := prometheus.NewRegistry()
	stop = a.start(t, reg)
	defer stop()
	got := a.outputs(t, 20)
	// The recomputed counts carry larger versions than those they
	// replace, so that a sink applying only newer updates takes them.
	_, lastBefore := versions(t, first)
	var recomputed []*sarama.ConsumerMessage
	for _, m := range got {
		if !slices.ContainsFunc(first, func(f *sarama.ConsumerMessage) bool { return f.Partition == m.Partition && f.Offset == m.Offset }) {
			recomputed = append(recomputed, m)
		}
	}
	if firstAfter, _ := versions(t, recomputed); len(recomputed) != 10 || firstAfter <= lastBefore {
		t.Fatalf("%d recomputed counts, versions from %d; want 10, above the %d before the reset", len(recomputed), firstAfter, lastBefore)
	}
	last := map[string]int64{}
	for _, m := range got {
		n, err := serde.Int64().Deserialize(a.out, m.Value)
		if err != nil {
			t.Fatal(err)
		}
		last[string(m.Key)] = n
	}
	for _, k := range keys("k", 10) {
		if last[k] != 1 {
			t.Fatalf("after the reset %s counted %d, want 1 (from scratch): %v", k, last[k], last)
		}
	}
	if len(got) != 20 {
		t.Fatalf("%d output records, want 20", len(got))
	}
	full := map[string]float64{}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "weir_restores_full_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "reason" {
					full[l.GetValue()] += m.GetCounter().GetValue()
				}
			}
		}
	}
	if full["no_state"] < 1 || full["checkpoint_out_of_range"] != 0 {
		t.Fatalf("full restores by reason after the reset: %v; want no_state only (the local state deleted at start)", full)
	}
}

// check-upgrade reports an added store as compatible and a changed key
// serde as refused (exit 1).
func TestCheckUpgrade(t *testing.T) {
	t.Parallel()
	a := newApp(t)
	brokers := strings.Join(a.c.Brokers, ",")
	stop := a.start(t)
	stop()
	descriptor := func(keys serde.Serde[string], extra ...processor.StoreSpec) string {
		w, err := weir.New(countTopology(a.in, a.out, keys, extra...), weir.Config{ApplicationID: a.id, Brokers: a.c.Brokers})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		path := filepath.Join(t.TempDir(), "new.json")
		if err := os.WriteFile(path, []byte(w.Describe().String()), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	code, out, errOut := weirCmd(t, "check-upgrade", "-brokers", brokers, "-app", a.id, "-describe", descriptor(serde.String(), processor.KeyValue("seen", serde.String(), serde.String())))
	if code != exitOK || !strings.Contains(out, `store "seen": new`) || !strings.Contains(out, "compatible") {
		t.Fatalf("added store = %d: %s%s", code, out, errOut)
	}
	code, out, errOut = weirCmd(t, "check-upgrade", "-brokers", brokers, "-app", a.id, "-describe", descriptor(otherKeys{}))
	if code != exitRefused || !strings.Contains(out, `store "counts": key serde`) {
		t.Fatalf("changed key serde = %d: %s%s", code, out, errOut)
	}
}

func committedOffsets(t *testing.T, a *app) map[int32]int64 {
	t.Helper()
	resp, err := a.c.Admin(t).ListConsumerGroupOffsets(a.id, map[string][]int32{a.in: {0, 1}})
	if err != nil {
		t.Fatal(err)
	}
	out := map[int32]int64{}
	for p, b := range resp.Blocks[a.in] {
		out[p] = b.Offset
	}
	return out
}

func topicExists(t *testing.T, a *app, topic string) bool {
	t.Helper()
	topics, err := a.c.Admin(t).ListTopics()
	if err != nil {
		t.Fatal(err)
	}
	_, ok := topics[topic]
	return ok
}

// fork refuses while the source runs; a fork of the stopped source,
// started on the same input with its own output, gives the same results
// as the source continued: its state and offsets were copied.
func TestForkContinuesLikeTheSource(t *testing.T) {
	t.Parallel()
	a := newApp(t)
	brokers := strings.Join(a.c.Brokers, ",")
	batch := func() {
		a.produce(t, 0, time.Now(), keys("k", 10)...)
		a.produce(t, 1, time.Now(), keys("j", 10)...)
	}
	stop := a.start(t)
	batch()
	a.outputs(t, 20)
	b := &app{c: a.c, in: a.in, out: a.c.Name(t, "cli-fork-out"), id: a.c.Name(t, "cli-fork"), dir: t.TempDir()}
	a.c.CreateTopic(t, b.out, 2, nil)
	t.Cleanup(func() {
		admin := a.c.Admin(t)
		for _, topic := range []string{b.id + "-topology", b.id + "-counts-changelog"} {
			_ = admin.DeleteTopic(topic)
		}
	})
	if code, _, errOut := weirCmd(t, "fork", "-brokers", brokers, "-from", a.id, "-to", b.id); code != exitRefused || !strings.Contains(errOut, "member") {
		t.Fatalf("fork of a running application = %d: %s", code, errOut)
	}
	if topicExists(t, a, b.id+"-topology") || topicExists(t, a, b.id+"-counts-changelog") {
		t.Fatal("a refused fork created topics")
	}
	stop()
	code, out, errOut := weirCmd(t, "fork", "-brokers", brokers, "-from", a.id, "-to", b.id)
	if code != exitOK || !strings.Contains(out, "verified") || !strings.Contains(out, b.id+"-counts-changelog") {
		t.Fatalf("fork = %d: %s%s", code, out, errOut)
	}
	if code, _, errOut := weirCmd(t, "fork", "-brokers", brokers, "-from", a.id, "-to", b.id); code != exitRefused || !strings.Contains(errOut, "never ran") {
		t.Fatalf("a second fork to the same id = %d: %s", code, errOut)
	}

	batch()
	stop = a.start(t)
	// Both batches: records arrive interleaved across the output's two
	// partitions, but each key's in order, so its last is the second
	// batch's.
	source := a.outputs(t, 40)
	stop()
	stop = b.start(t)
	fork := b.outputs(t, 20)
	stop()
	last := func(ms []*sarama.ConsumerMessage) map[string]int64 {
		out := map[string]int64{}
		for _, m := range ms {
			n, err := serde.Int64().Deserialize(a.out, m.Value)
			if err != nil {
				t.Fatal(err)
			}
			out[string(m.Key)] = n
		}
		return out
	}
	// A rollback to the fork: its updates supersede those of the
	// source's continued run, which it replaces.
	_, abandoned := versions(t, source)
	if first, _ := versions(t, fork); first <= abandoned {
		t.Fatalf("the fork's versions start at %d, not above the source's %d", first, abandoned)
	}
	want, got := last(source), last(fork)
	if len(want) != 20 || fmt.Sprint(want) != fmt.Sprint(got) {
		t.Fatalf("the fork counted %v; the source continued counted %v", got, want)
	}
	if want["k00"] != 2 {
		t.Fatalf("counts after the second batch: %v; want 2 each", want)
	}
}

// inspect shows a store's current contents from its changelog, decoded by
// the descriptor's serdes.
func TestInspectShowsTheStore(t *testing.T) {
	t.Parallel()
	a := newApp(t)
	stop := a.start(t)
	a.produce(t, 0, time.Now(), "x", "y", "x")
	a.outputs(t, 3)
	stop()
	brokers := strings.Join(a.c.Brokers, ",")
	code, out, errOut := weirCmd(t, "inspect", "-brokers", brokers, "-app", a.id, "-store", "counts", "-o", "json", "-registry", "")
	if code != exitOK {
		t.Fatalf("inspect = %d: %s", code, errOut)
	}
	var rows []entry
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	got := map[string]any{}
	for _, r := range rows {
		got[r.Key] = r.Value
	}
	if len(got) != 2 || got["x"] != float64(2) || got["y"] != float64(1) {
		t.Fatalf("store contents %v; want x=2, y=1", got)
	}
	code, out, _ = weirCmd(t, "inspect", "-brokers", brokers, "-app", a.id, "-store", "counts", "-key", "y", "-registry", "", "-o", "json")
	if err := json.Unmarshal([]byte(out), &rows); code != exitOK || err != nil || len(rows) != 1 || rows[0].Key != "y" {
		t.Fatalf("inspect -key y = %d, %v: %s", code, err, out)
	}
	code, out, _ = weirCmd(t, "inspect", "-brokers", brokers, "-app", a.id, "-store", "counts", "-registry", "")
	if code != exitOK || !strings.Contains(out, "KEY") || !strings.Contains(out, "2 key(s) from "+a.id+"-counts-changelog") {
		t.Fatalf("inspect as a table = %d:\n%s", code, out)
	}
	if code, _, errOut := weirCmd(t, "inspect", "-brokers", brokers, "-app", a.id, "-store", "nope"); code != exitUsage || !strings.Contains(errOut, "counts") {
		t.Fatalf("inspect of an unknown store = %d: %s", code, errOut)
	}
}

// profile is the value of the Avro store of TestCheckUpgradeAsksTheRegistry.
type profile struct {
	Name string `avro:"name"`
}

// check-upgrade asks the registry about the new version's Avro store
// schemas: an added field with a default passes, an added field without
// one is refused.
func TestCheckUpgradeAsksTheRegistry(t *testing.T) {
	t.Parallel()
	a := newApp(t)
	reg, err := schema.New(schema.Config{URL: a.c.RegistryURL})
	if err != nil {
		t.Fatal(err)
	}
	build := func(text string) weir.Topology {
		values, err := serde.Avro[profile](serde.AvroConfig{Registry: reg, Schema: text})
		if err != nil {
			t.Fatal(err)
		}
		return countTopology(a.in, a.out, serde.String(), processor.KeyValue("profiles", serde.String(), values))
	}
	const v1 = `{"type":"record","name":"Profile","fields":[{"name":"name","type":"string"}]}`
	cfg := weir.Config{ApplicationID: a.id, Brokers: a.c.Brokers, StateDir: a.dir, Registry: schema.Config{URL: a.c.RegistryURL}}
	w, err := weir.New(build(v1), cfg)
	if err != nil {
		t.Fatal(err)
	}
	kafka.Run(t, w) // registers v1 under <app>-profiles-value, BACKWARD_TRANSITIVE
	check := func(text string) (int, string) {
		t.Helper()
		next, err := weir.New(build(text), weir.Config{ApplicationID: a.id, Brokers: a.c.Brokers, Registry: cfg.Registry})
		if err != nil {
			t.Fatal(err)
		}
		defer next.Close()
		path := filepath.Join(t.TempDir(), "new.json")
		if err := os.WriteFile(path, []byte(next.Describe().String()), 0o644); err != nil {
			t.Fatal(err)
		}
		code, out, errOut := weirCmd(t, "check-upgrade", "-brokers", strings.Join(a.c.Brokers, ","), "-app", a.id, "-describe", path, "-registry", a.c.RegistryURL)
		return code, out + errOut
	}
	if code, out := check(`{"type":"record","name":"Profile","fields":[{"name":"name","type":"string"},{"name":"tier","type":"string","default":"basic"}]}`); code != exitOK || !strings.Contains(out, "schema compatible") {
		t.Fatalf("a compatible schema = %d:\n%s", code, out)
	}
	// The refusal says what helps: not Config.AllowDropState, which does
	// not lift a registry's refusal.
	if code, out := check(`{"type":"record","name":"Profile","fields":[{"name":"name","type":"string"},{"name":"tier","type":"string"}]}`); code != exitRefused || !strings.Contains(out, "schema refused") ||
		strings.Contains(out, "unless Config.AllowDropState") || !strings.Contains(out, "does not lift it") {
		t.Fatalf("an incompatible schema = %d:\n%s", code, out)
	}
}

// A partition range that holds no committed record (an aborted
// transaction's record and the markers) has the digest of an empty range,
// so that a fork copying such a range of a repartition topic verifies.
func TestReadRangeOfMarkersOnlyIsEmpty(t *testing.T) {
	t.Parallel()
	c := kafka.Cluster(t)
	topic := c.Name(t, "markers")
	c.CreateTopic(t, topic, 1, nil)
	cfg := c.SaramaConfig()
	cfg.Producer.Idempotent = true
	cfg.Producer.RequiredAcks = sarama.WaitForAll
	cfg.Net.MaxOpenRequests = 1
	cfg.Producer.Transaction.ID = c.Name(t, "txn")
	p, err := sarama.NewSyncProducer(c.Brokers, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := p.BeginTxn(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := p.SendMessage(&sarama.ProducerMessage{Topic: topic, Value: sarama.StringEncoder("aborted")}); err != nil {
		t.Fatal(err)
	}
	if err := p.AbortTxn(); err != nil {
		t.Fatal(err)
	}
	cl, err := connect(common{brokers: strings.Join(c.Brokers, ",")})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.close()
	var end int64
	kafka.Eventually(t, 30*time.Second, 50*time.Millisecond, func() (bool, string) {
		_, end, err = cl.offsets(topic, 0)
		return err == nil && end == 2, fmt.Sprintf("end offset %d (%v); want 2: the record and the abort marker", end, err)
	})
	got, err := readRange(context.Background(), cl, topic, 0, 0, end, nil)
	if err != nil || got != (digest{}) {
		t.Fatalf("readRange over an aborted record and its marker = %+v, %v; want the empty digest", got, err)
	}
}
