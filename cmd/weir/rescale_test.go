package main

// Tests of weir rescale against a real broker. The continued run of the
// count test is killed with SIGKILL: it runs in a child process (this
// test binary, see rescaleChild).

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/internal/statelog"
	"github.com/weirstream/weir/kstream"
	"github.com/weirstream/weir/serde"
	"github.com/weirstream/weir/weirtest/kafka"
)

// rescaleChildEnv makes the test binary run rescaleChild instead of the
// tests (see TestMain).
const rescaleChildEnv = "WEIR_CLI_RESCALE_CHILD"

// dslCount counts the records of in per key in the store "counts" and
// writes every count to out; window, when above 0, counts per tumbling
// window of that size into the window store "windowed" instead (keys
// written as kstream.WindowedSerde).
func dslCount(in, out string, window time.Duration) *kstream.Builder {
	b := kstream.NewBuilder()
	s := b.Stream("in", in, serde.String(), serde.String())
	if window > 0 {
		s.GroupByKey().WindowedBy(kstream.Tumbling(window)).Count("windowed").
			ToStream(kstream.WindowedKey).To(out, kstream.WindowedSerde(serde.String(), window), serde.Int64())
		return b
	}
	s.GroupByKey().Count("counts").ToStream().To(out, serde.String(), serde.Int64())
	return b
}

// rescaleConfig is the configuration of the tests' applications: exactly
// once, short commits, a session timeout that lets a killed member go
// within seconds.
func rescaleConfig(c *kafka.Env, app, dir string) weir.Config {
	return weir.Config{ApplicationID: app, Brokers: c.Brokers, StateDir: dir, CommitInterval: 100 * time.Millisecond,
		Consumer: weir.ConsumerConfig{SessionTimeout: 6 * time.Second, HeartbeatInterval: 500 * time.Millisecond}}
}

// rescaleChild runs dslCount with the topics, id and state directory of
// its WEIR_CLI_ environment until SIGTERM.
func rescaleChild() int {
	get := func(k string) string { return os.Getenv("WEIR_CLI_" + k) }
	cfg := weir.Config{ApplicationID: get("APP"), Brokers: strings.Split(get("BROKERS"), ","), StateDir: get("STATE_DIR"),
		CommitInterval: 100 * time.Millisecond, Consumer: weir.ConsumerConfig{SessionTimeout: 6 * time.Second, HeartbeatInterval: 500 * time.Millisecond}}
	app, err := weir.New(dslCount(get("IN"), get("OUT"), 0), cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	if err := app.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// startRescaleChild starts rescaleChild in a process of its own, killed
// when the test ends.
func startRescaleChild(t *testing.T, env map[string]string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), rescaleChildEnv+"=1")
	for k, v := range env {
		cmd.Env = append(cmd.Env, "WEIR_CLI_"+k+"="+v)
	}
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
	})
	return cmd
}

// runApp runs top as cfg's application until stop is called.
func runApp(t *testing.T, top *kstream.Builder, cfg weir.Config) (stop func()) {
	t.Helper()
	w, err := weir.New(top, cfg)
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

// keyed returns one record per key of in, at ts.
func keyed(topic string, ts time.Time, keys ...string) []*sarama.ProducerMessage {
	out := make([]*sarama.ProducerMessage, len(keys))
	for i, k := range keys {
		out[i] = &sarama.ProducerMessage{Topic: topic, Key: sarama.StringEncoder(k), Value: sarama.StringEncoder("x"), Timestamp: ts}
	}
	return out
}

// counts reads topic's committed records until every key of want has its
// count there, and returns every key's counts in order.
func counts(t *testing.T, c *kafka.Env, topic string, keys serde.Serde[string], want map[string]int64) map[string][]int64 {
	t.Helper()
	var seqs map[string][]int64
	kafka.ReadAll(t, c, topic, sarama.ReadCommitted, func(got []*sarama.ConsumerMessage) bool {
		seqs = map[string][]int64{}
		for _, m := range got {
			k, err := keys.Deserialize(topic, m.Key)
			if err != nil {
				t.Fatal(err)
			}
			n, err := serde.Int64().Deserialize(topic, m.Value)
			if err != nil {
				t.Fatal(err)
			}
			seqs[k] = append(seqs[k], n)
		}
		for k, n := range want {
			if s := seqs[k]; len(s) == 0 || s[len(s)-1] != n {
				return false
			}
		}
		return true
	})
	return seqs
}

func growTopic(t *testing.T, c *kafka.Env, topic string, n int32) {
	t.Helper()
	if err := c.Admin(t).CreatePartitions(topic, n, nil, false); err != nil {
		t.Fatal(err)
	}
}

// A count application on 3 partitions counts part of the input and
// stops; the input grows to 6 partitions; rescale moves it to a new id,
// which counts the rest of the input (on old and new partitions), killed
// with SIGKILL midway and restarted. Every key's counts, from both
// applications' outputs, are 1, 2, ... its number of records: nothing
// lost, nothing counted twice, each key's state where its records go.
func TestRescaleCountContinuesExactly(t *testing.T) {
	t.Parallel()
	c := kafka.Cluster(t)
	in, out, out2 := c.Name(t, "rs-in"), c.Name(t, "rs-out"), c.Name(t, "rs-out2")
	from, to := c.Name(t, "rs-app"), c.Name(t, "rs-app2")
	c.CreateTopic(t, in, 3, nil)
	c.CreateTopic(t, out, 3, nil)
	c.CreateTopic(t, out2, 6, nil)
	cleanupApps(t, c, from, to)
	ks := keys("k", 60)
	want := map[string]int64{}
	for _, k := range ks {
		want[k] = 2
	}
	kafka.Produce(t, c, keyed(in, time.Now(), ks...)...)
	kafka.Produce(t, c, keyed(in, time.Now(), ks...)...)
	stop := runApp(t, dslCount(in, out, 0), rescaleConfig(c, from, t.TempDir()))
	first := counts(t, c, out, serde.String(), want)
	stop()

	growTopic(t, c, in, 6)
	brokers := strings.Join(c.Brokers, ",")
	code, plan, errOut := weirCmd(t, "rescale", "-brokers", brokers, "-from", from, "-to", to, "-partitions", "6", "-dry-run")
	if code != exitOK || !strings.Contains(plan, "new partition: from its start") || !strings.Contains(plan, "store counts (key-value)") {
		t.Fatalf("dry run = %d: %s%s", code, plan, errOut)
	}
	code, done, errOut := weirCmd(t, "rescale", "-brokers", brokers, "-from", from, "-to", to, "-partitions", "6")
	if code != exitOK || !strings.Contains(done, "rescaled counts: 60 keys into 6 partitions") {
		t.Fatalf("rescale = %d: %s%s", code, done, errOut)
	}
	t.Log(done)
	// The count's values keep their timestamps: every record of the
	// copy carries the header that says its timestamp is its value's.
	for _, m := range kafka.ReadAll(t, c, to+"-counts-changelog", sarama.ReadCommitted, func(got []*sarama.ConsumerMessage) bool { return len(got) == len(ks) }) {
		if !slices.ContainsFunc(m.Headers, func(h *sarama.RecordHeader) bool { return string(h.Key) == statelog.TimeHeader }) {
			t.Fatalf("the rescaled changelog's record %s/%d@%d lacks %s: the restore would lose its value's timestamp", m.Topic, m.Partition, m.Offset, statelog.TimeHeader)
		}
	}

	// The rest of the input, in rounds, each key once per round: Kafka's
	// partitioner now spreads the keys over 6 partitions.
	env := map[string]string{"BROKERS": brokers, "APP": to, "STATE_DIR": t.TempDir(), "IN": in, "OUT": out2}
	child := startRescaleChild(t, env)
	const rounds = 6
	for r := range rounds {
		kafka.Produce(t, c, keyed(in, time.Now(), ks...)...)
		for _, k := range ks {
			want[k]++
		}
		if r == 2 {
			// Once part of it is counted, kill the instance and start another.
			partial := map[string]int64{ks[0]: want[ks[0]] - 2}
			counts(t, c, out2, serde.String(), partial)
			if err := child.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			startRescaleChild(t, env)
		}
	}
	second := counts(t, c, out2, serde.String(), want)
	for _, k := range ks {
		seq := append(append([]int64(nil), first[k]...), second[k]...)
		for i, n := range seq {
			if n != int64(i+1) {
				t.Fatalf("key %s: counts %v (before the rescale %v), want 1..%d", k, seq, first[k], want[k])
			}
		}
		if int64(len(seq)) != want[k] {
			t.Fatalf("key %s: %d counts, want %d", k, len(seq), want[k])
		}
	}
	// Keys went to the new partitions too.
	parts := map[int32]bool{}
	for _, m := range kafka.ReadAll(t, c, in, sarama.ReadCommitted, func(got []*sarama.ConsumerMessage) bool {
		return int64(len(got)) == int64(len(ks))*(2+rounds)
	}) {
		parts[m.Partition] = true
	}
	if !parts[3] && !parts[4] && !parts[5] {
		t.Fatalf("no input record in the new partitions: %v", parts)
	}
}

// A window open before the rescale closes after it with the full count:
// the windows moved with their keys.
func TestRescaleKeepsWindowsOpen(t *testing.T) {
	t.Parallel()
	c := kafka.Cluster(t)
	in, out, out2 := c.Name(t, "rsw-in"), c.Name(t, "rsw-out"), c.Name(t, "rsw-out2")
	from, to := c.Name(t, "rsw-app"), c.Name(t, "rsw-app2")
	c.CreateTopic(t, in, 2, nil)
	c.CreateTopic(t, out, 2, nil)
	c.CreateTopic(t, out2, 4, nil)
	cleanupApps(t, c, from, to)
	const window = time.Hour
	at := time.Now().Truncate(window).Add(time.Minute) // one window for every record
	ks := keys("w", 20)
	wkeys := kstream.WindowedSerde(serde.String(), window)
	want := map[string]int64{}
	for _, k := range ks {
		want[k] = 1
	}
	kafka.Produce(t, c, keyed(in, at, ks...)...)
	stop := runApp(t, dslCount(in, out, window), rescaleConfig(c, from, t.TempDir()))
	countsW(t, c, out, wkeys, want)
	stop()

	growTopic(t, c, in, 4)
	code, done, errOut := weirCmd(t, "rescale", "-brokers", strings.Join(c.Brokers, ","), "-from", from, "-to", to, "-partitions", "4")
	if code != exitOK || !strings.Contains(done, "rescaled windowed: 20 keys into 4 partitions") {
		t.Fatalf("rescale = %d: %s%s", code, done, errOut)
	}
	kafka.Produce(t, c, keyed(in, at.Add(time.Second), ks...)...)
	for _, k := range ks {
		want[k] = 2
	}
	stop = runApp(t, dslCount(in, out2, window), rescaleConfig(c, to, t.TempDir()))
	defer stop()
	got := countsW(t, c, out2, wkeys, want)
	for _, k := range ks {
		if s := got[k]; len(s) != 1 || s[0] != 2 {
			t.Fatalf("window of %s after the rescale counted %v, want [2] (1 before, 1 after)", k, s)
		}
	}
}

// countsW is counts for windowed keys, by their key.
func countsW(t *testing.T, c *kafka.Env, topic string, keys serde.Serde[kstream.Windowed[string]], want map[string]int64) map[string][]int64 {
	t.Helper()
	return counts(t, c, topic, windowedKeys{keys}, want)
}

// windowedKeys reads a windowed key as its key.
type windowedKeys struct {
	s serde.Serde[kstream.Windowed[string]]
}

func (w windowedKeys) Serialize(string, string) ([]byte, error) {
	return nil, fmt.Errorf("not used")
}

func (w windowedKeys) Deserialize(topic string, b []byte) (string, error) {
	k, err := w.s.Deserialize(topic, b)
	return k.Key, err
}

// Refusals exit 1 with the reason, and create nothing for the new id.
func TestRescaleRefusals(t *testing.T) {
	t.Parallel()
	c := kafka.Cluster(t)
	brokers := strings.Join(c.Brokers, ",")
	in, out := c.Name(t, "rsr-in"), c.Name(t, "rsr-out")
	from, to := c.Name(t, "rsr-app"), c.Name(t, "rsr-app2")
	c.CreateTopic(t, in, 2, nil)
	c.CreateTopic(t, out, 2, nil)
	cleanupApps(t, c, from, to)
	kafka.Produce(t, c, keyed(in, time.Now(), keys("r", 10)...)...)
	want := map[string]int64{}
	for _, k := range keys("r", 10) {
		want[k] = 1
	}
	unchangedFor := func(why, to string) {
		t.Helper()
		topics, err := c.Admin(t).ListTopics()
		if err != nil {
			t.Fatal(err)
		}
		for name := range topics {
			if strings.HasPrefix(name, to+"-") {
				t.Fatalf("%s: a refused rescale created %s", why, name)
			}
		}
		if got, err := (&cluster{admin: c.Admin(t)}).committed(to); err != nil || len(got) > 0 {
			t.Fatalf("%s: a refused rescale committed %v (%v)", why, got, err)
		}
	}
	unchanged := func(why string) { t.Helper(); unchangedFor(why, to) }
	refusedWith := func(why string, args []string, reason string) {
		t.Helper()
		code, out, errOut := weirCmd(t, append([]string{"rescale", "-brokers", brokers, "-from", from, "-to", to, "-partitions", "4"}, args...)...)
		if code != exitRefused || !strings.Contains(errOut, reason) {
			t.Fatalf("%s: rescale = %d, want 1 naming %q: %s%s", why, code, reason, out, errOut)
		}
		unchanged(why)
	}

	stop := runApp(t, dslCount(in, out, 0), rescaleConfig(c, from, t.TempDir()))
	counts(t, c, out, serde.String(), want)
	refusedWith("members running", nil, "member")
	stop()
	// An input the old count (2) grows itself (TestRescaleSuppression...);
	// one of a third count is refused.
	growTopic(t, c, in, 3)
	refusedWith("input of neither count", nil, "neither the application's 2 nor the new 4")
	growTopic(t, c, in, 4)
	// A record the application has not consumed: rescale cannot tell
	// whether it was written before the partitions were added.
	manual := c.SaramaConfig()
	manual.Producer.Partitioner = sarama.NewManualPartitioner
	p, err := sarama.NewSyncProducer(c.Brokers, manual)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := p.SendMessage(&sarama.ProducerMessage{Topic: in, Partition: 0, Key: sarama.StringEncoder("old"), Value: sarama.StringEncoder("x")}); err != nil {
		t.Fatal(err)
	}
	_ = p.Close()
	refusedWith("unread input", nil, "-allow-unread")
	if code, out, errOut := weirCmd(t, "rescale", "-brokers", brokers, "-from", from, "-to", to, "-partitions", "4", "-allow-unread", "-dry-run"); code != exitOK || !strings.Contains(out, "-allow-unread") {
		t.Fatalf("-allow-unread dry run = %d: %s%s", code, out, errOut)
	}
	unchanged("dry run")

	// A store of the Processor API not declared keyed by the partitioning
	// key, and a repartition topic with unconsumed records.
	a := &app{c: c, in: c.Name(t, "rsr-papi-in"), out: c.Name(t, "rsr-papi-out"), id: c.Name(t, "rsr-papi"), dir: t.TempDir()}
	c.CreateTopic(t, a.in, 2, nil)
	c.CreateTopic(t, a.out, 2, nil)
	cleanupApps(t, c, a.id, a.id+"-2")
	a.start(t)()
	growTopic(t, c, a.in, 4)
	code, outText, errOut := weirCmd(t, "rescale", "-brokers", brokers, "-from", a.id, "-to", a.id+"-2", "-partitions", "4")
	if code != exitRefused || !strings.Contains(errOut, `store "counts" is not declared keyed`) {
		t.Fatalf("Processor API store = %d: %s%s", code, outText, errOut)
	}
	unchangedFor("Processor API store", a.id+"-2")

	r := c.Name(t, "rsr-rep")
	rin, rout := c.Name(t, "rsr-rep-in"), c.Name(t, "rsr-rep-out")
	c.CreateTopic(t, rin, 2, nil)
	c.CreateTopic(t, rout, 2, nil)
	cleanupApps(t, c, r, r+"-2")
	b := kstream.NewBuilder()
	b.Stream("in", rin, serde.String(), serde.String()).
		GroupBy("by-value", func(_ string, v string) string { return v }, serde.String(), serde.String()).
		Count("by-value-counts").ToStream().To(rout, serde.String(), serde.Int64())
	kafka.Produce(t, c, keyed(rin, time.Now(), "a", "b")...)
	stop = runApp(t, b, rescaleConfig(c, r, t.TempDir()))
	counts(t, c, rout, serde.String(), map[string]int64{"x": 2})
	stop()
	growTopic(t, c, rin, 4)
	kafka.Produce(t, c, &sarama.ProducerMessage{Topic: r + "-by-value-repartition", Key: sarama.StringEncoder("x"), Value: sarama.StringEncoder("x")})
	code, outText, errOut = weirCmd(t, "rescale", "-brokers", brokers, "-from", r, "-to", r+"-2", "-partitions", "4")
	if code != exitRefused || !strings.Contains(errOut, "repartition topic "+r+"-by-value-repartition") {
		t.Fatalf("undrained repartition topic = %d: %s%s", code, outText, errOut)
	}
	unchangedFor("undrained repartition topic", r+"-2")
}

// cleanupApps deletes the applications' internal topics when the test
// ends.
func cleanupApps(t *testing.T, c *kafka.Env, apps ...string) {
	t.Cleanup(func() {
		admin := c.Admin(t)
		topics, err := admin.ListTopics()
		if err != nil {
			return
		}
		for name := range topics {
			for _, a := range apps {
				if strings.HasPrefix(name, a+"-") {
					_ = admin.DeleteTopic(name)
				}
			}
		}
	})
}

// suppressedCount counts in's records per key and tumbling window, and
// writes each window's final count to out once it closes
// (Suppress(UntilWindowCloses)): a topology with a store of the DSL's own.
func suppressedCount(in, out string, window time.Duration) *kstream.Builder {
	b := kstream.NewBuilder()
	b.Stream("in", in, serde.String(), serde.String()).GroupByKey().
		WindowedBy(kstream.Tumbling(window)).Count("windowed").
		Suppress("final", kstream.UntilWindowCloses()).
		ToStream(kstream.WindowedKey).To(out, kstream.WindowedSerde(serde.String(), window), serde.Int64())
	return b
}

// A topology with a suppression rescales in the documented order: -check
// while it runs changes nothing; the rescale copies the counts and the
// suppression's buffer, then adds the input's partitions itself; the new
// id emits each window held back before the rescale once, when it
// closes, with every record of it counted: for the keys without a record
// after the rescale in that window, only the moved buffer holds it.
func TestRescaleSuppressionInTheDocumentedOrder(t *testing.T) {
	t.Parallel()
	c := kafka.Cluster(t)
	in, out := c.Name(t, "rss-in"), c.Name(t, "rss-out")
	from, to := c.Name(t, "rss-app"), c.Name(t, "rss-app2")
	c.CreateTopic(t, in, 2, nil)
	c.CreateTopic(t, out, 4, nil)
	cleanupApps(t, c, from, to)
	brokers := strings.Join(c.Brokers, ",")
	const window = time.Minute
	at := time.Now().Add(-time.Hour).Truncate(window) // every record of a key in one window
	ks := keys("s", 20)
	kafka.Produce(t, c, keyed(in, at, ks...)...)
	stop := runApp(t, suppressedCount(in, out, window), rescaleConfig(c, from, t.TempDir()))
	// The records are counted and held back (the window is open): wait
	// until the buffer's changelog has every key.
	kafka.ReadAll(t, c, from+"-final-changelog", sarama.ReadCommitted, func(got []*sarama.ConsumerMessage) bool { return len(got) >= len(ks) })

	code, check, errOut := weirCmd(t, "rescale", "-brokers", brokers, "-from", from, "-to", to, "-partitions", "4", "-check")
	if code != exitOK || !strings.Contains(check, "can be rescaled") || !strings.Contains(check, "stop every instance") || !strings.Contains(check, "adds the partitions of "+in) {
		t.Fatalf("rescale -check while %s runs = %d: %s%s", from, code, check, errOut)
	}
	if n := partitionCount(t, c, in); n != 2 {
		t.Fatalf("-check changed the input: %d partitions", n)
	}
	stop()
	code, done, errOut := weirCmd(t, "rescale", "-brokers", brokers, "-from", from, "-to", to, "-partitions", "4")
	if code != exitOK || !strings.Contains(done, "rescaled final: 20 keys into 4 partitions") || !strings.Contains(done, "added partitions to input topic "+in+": 2 -> 4") {
		t.Fatalf("rescale = %d: %s%s", code, done, errOut)
	}
	if n := partitionCount(t, c, in); n != 4 {
		t.Fatalf("after the rescale the input has %d partitions, want 4", n)
	}

	// One more record in the window for half of the keys, then one per
	// key two windows later: every task's stream time passes the window's
	// end.
	kafka.Produce(t, c, keyed(in, at.Add(time.Second), ks[:10]...)...)
	kafka.Produce(t, c, keyed(in, at.Add(2*window), ks...)...)
	stop = runApp(t, suppressedCount(in, out, window), rescaleConfig(c, to, t.TempDir()))
	defer stop()
	want := map[string]int64{}
	for i, k := range ks {
		want[k] = 1
		if i < 10 {
			want[k] = 2
		}
	}
	got := countsW(t, c, out, kstream.WindowedSerde(serde.String(), window), want)
	for _, k := range ks {
		if s := got[k]; len(s) != 1 || s[0] != want[k] {
			t.Fatalf("the window of %s was emitted as %v; want once, [%d]", k, s, want[k])
		}
	}
}

func partitionCount(t *testing.T, c *kafka.Env, topic string) int {
	t.Helper()
	md, err := c.Admin(t).DescribeTopics([]string{topic})
	if err != nil || len(md) != 1 {
		t.Fatalf("describe %s: %v", topic, err)
	}
	return len(md[0].Partitions)
}
