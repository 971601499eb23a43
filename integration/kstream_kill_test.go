package integration

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/weirtest/kafka"
)

// dslChildEnv makes the test binary run dslWindowedCount as a weir
// instance (runDSLChild) instead of the tests.
const dslChildEnv = "WEIR_IT_DSL_CHILD"

// runDSLChild runs dslWindowedCount, or dslWordCount when WEIR_IT_TOPOLOGY
// is "wordcount" (dslJoins when "joins", deadLetterTopology when
// "deadletter"), under exactly
// once with the topics, application id and state directory of its
// WEIR_IT_ environment, until SIGTERM.
func runDSLChild() int {
	get := func(k string) string { return os.Getenv("WEIR_IT_" + k) }
	var top weir.Topology = dslWindowedCount(get("IN"), get("OUT"), get("FINAL"), get("LIMITED"), get("LATE"))
	var cfg weir.Config
	switch get("TOPOLOGY") {
	case "wordcount":
		top = dslWordCount(get("IN"), get("OUT"))
	case "joins":
		top = dslJoins(get("IN"), get("CUSTOMERS"), get("TIERS"), get("OWNERS"), get("OUT"), get("PROFILE"), get("ACCOUNTS"))
	case "deadletter":
		var err error
		if top, cfg, err = runDeadLetterChild(get); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	case "drill":
		var err error
		if top, cfg, err = runDrillChild(get); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	cfg.ApplicationID = get("APP")
	cfg.Brokers = strings.Split(get("BROKERS"), ",")
	cfg.StateDir = get("STATE_DIR")
	cfg.Guarantee = weir.ExactlyOnce
	cfg.Threads = 2
	cfg.CommitInterval = 100 * time.Millisecond
	cfg.Consumer = weir.ConsumerConfig{SessionTimeout: 6 * time.Second, HeartbeatInterval: 500 * time.Millisecond}
	// Record caching on, as Kafka Streams has it by default: the word
	// count's counts go through it; the windowed count's do not, as a
	// Suppress(UntilWindowCloses) follows it.
	if get("TOPOLOGY") != "drill" { // the drill checks every update
		cfg.CacheMaxBytes = 10 << 20
	}
	app, err := weir.New(top, cfg)
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

// startDSLChild starts runDSLChild in a process of its own, killed when
// the test ends; the returned channel is closed when it has exited.
func startDSLChild(t *testing.T, env map[string]string) (*exec.Cmd, chan struct{}) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), dslChildEnv+"=1")
	for k, v := range env {
		cmd.Env = append(cmd.Env, "WEIR_IT_"+k+"="+v)
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
	return cmd, done
}

// TestDSLWindowedCountSurvivesKill9 runs the windowed DSL topology of
// TestDSLWindowedCountMatchesWeirtest in a process of its own, under
// exactly once, while the input is still being written, kills it with
// SIGKILL once it has committed part of the input, and starts another
// on the same state directory. The committed output of every topic
// (updates, final counts, time-limited counts, late records) must be
// weirtest's on the same input, record by record: nothing the killed
// instance left uncommitted may show, and nothing may be lost or
// repeated.
func TestDSLWindowedCountSurvivesKill9(t *testing.T) {
	t.Parallel()
	c := kafka.Cluster(t)
	in, out, final, limited, late, app := windowedTopics(t, c)
	outputs := []string{out, final, limited, late}
	events := windowedEvents(3000)
	want, _ := windowedWant(t, events, in, out, final, limited, late, app)
	format := windowedFormat(t, late)

	admin := c.Admin(t)
	env := map[string]string{
		"BROKERS": strings.Join(c.Brokers, ","), "APP": app, "STATE_DIR": t.TempDir(),
		"IN": in, "OUT": out, "FINAL": final, "LIMITED": limited, "LATE": late,
	}
	produce := func(from, to int) {
		var msgs []*sarama.ProducerMessage
		for i := from; i < to; i++ {
			e := events[i]
			msgs = append(msgs, &sarama.ProducerMessage{Topic: in, Key: sarama.StringEncoder(e.key), Value: sarama.StringEncoder(strconv.Itoa(i)), Timestamp: e.ts})
		}
		kafka.Produce(t, c, msgs...)
	}
	killMidStream(t, c, admin, env, app, in, len(events), produce)
	finishAfterKill(t, env, func() { waitLagZero(t, c, admin, app, in) })
	compareWindowedOutputs(t, c, outputs, want, format)
}

// killMidStream starts a DSL child with env and writes the n input
// records of application app to topic in, 100 at a time with produce,
// while it runs, from its first commit on; it kills the child with
// SIGKILL once a third of them are committed, with more still arriving
// (or, if the child never got that far, once all are written).
func killMidStream(t *testing.T, c *kafka.Env, admin sarama.ClusterAdmin, env map[string]string, app, in string, n int, produce func(from, to int)) {
	t.Helper()
	committed := func() int64 {
		var sum int64
		for _, end := range kafka.EndOffsets(t, c, in) {
			sum += end
		}
		return sum - inputLag(t, c, admin, app, in)
	}
	first, firstDone := startDSLChild(t, env)
	kill := func() {
		if err := first.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		<-firstDone
		t.Logf("SIGKILL after %d of %d input records committed", committed(), n)
	}
	// The first batch, then wait until the child commits: it must be
	// processing before the stream goes on, or the kill could find it
	// still joining the group, with nothing to lose.
	produce(0, min(100, n))
	kafka.Eventually(t, 60*time.Second, 50*time.Millisecond, func() (bool, string) {
		return committed() > 0, "the first instance has committed nothing yet"
	})
	killed := false
	for next := 100; next < n; next += 100 {
		produce(next, min(next+100, n))
		if !killed && committed() >= int64(n/3) {
			kill()
			killed = true
		}
		time.Sleep(20 * time.Millisecond) // a stream, not one burst
	}
	if !killed {
		kill()
	}
}

// waitLagZero waits until application app has committed all of
// topic in.
func waitLagZero(t *testing.T, c *kafka.Env, admin sarama.ClusterAdmin, app, in string) {
	t.Helper()
	kafka.Eventually(t, 120*time.Second, 100*time.Millisecond, func() (bool, string) {
		lag := inputLag(t, c, admin, app, in)
		return lag == 0, fmt.Sprintf("input lag %d", lag)
	})
}

// finishAfterKill starts a second DSL child with env on the killed one's
// state directory, calls wait, which returns once the child has done its
// work, and stops the child with SIGTERM; it must exit cleanly.
func finishAfterKill(t *testing.T, env map[string]string, wait func()) {
	t.Helper()
	second, secondDone := startDSLChild(t, env)
	wait()
	if err := second.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-secondDone:
	case <-time.After(30 * time.Second):
		t.Fatal("the second instance did not stop on SIGTERM")
	}
	if code := second.ProcessState.ExitCode(); code != 0 {
		t.Fatalf("the second instance exited with %d", code)
	}
}

// TestDSLWordCountSurvivesKill9 runs the DSL word count (a re-key through
// the repartition topic and a count, whose record cache forwards each
// word's latest count at every commit) in a process of its own, with two
// threads on three partitions, under exactly once, kills it with SIGKILL
// mid-stream and lets another instance finish on the same state
// directory. Every word's committed counts must rise strictly and end at
// its count in the input: nothing lost or repeated, though the kill
// leaves transactions open on both the repartition and the output topic,
// and the cache held updates that the killed instance never flushed.
func TestDSLWordCountSurvivesKill9(t *testing.T) {
	t.Parallel()
	c := kafka.Cluster(t)
	in, out, app := c.Name(t, "in"), c.Name(t, "out"), c.Name(t, "app")
	const partitions = 3
	c.CreateTopic(t, in, partitions, nil)
	c.CreateTopic(t, out, partitions, nil)
	words := []string{"alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota", "kappa", "lambda"}
	base := time.Now().Add(-time.Minute).Truncate(time.Millisecond)
	var lines []*sarama.ProducerMessage
	want := map[string]int64{}
	for i := range 3000 {
		ws := []string{words[i%len(words)], words[(i*7)%len(words)], words[(i*i)%len(words)]}
		for _, w := range ws {
			want[w]++
		}
		lines = append(lines, &sarama.ProducerMessage{Topic: in, Key: sarama.StringEncoder(fmt.Sprintf("line-%d", i)),
			Value: sarama.StringEncoder(strings.Join(ws, " ")), Timestamp: base.Add(time.Duration(i) * time.Millisecond)})
	}
	admin := c.Admin(t)
	env := map[string]string{
		"BROKERS": strings.Join(c.Brokers, ","), "APP": app, "STATE_DIR": t.TempDir(),
		"TOPOLOGY": "wordcount", "IN": in, "OUT": out,
	}
	killMidStream(t, c, admin, env, app, in, len(lines), func(from, to int) { kafka.Produce(t, c, lines[from:to]...) })
	// Done when every word has its count: the input's offsets are
	// committed before the words they carry are counted from the
	// repartition topic.
	finishAfterKill(t, env, func() { waitWordCounts(t, c, out, want) })
	writeSentinels(t, c, out, partitions)
	checkWordUpdates(t, out, readToSentinels(t, c, out, partitions, sarama.ReadCommitted), want, true)
}
