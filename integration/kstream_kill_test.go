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
	"github.com/weirstream/weir/integration/harness"
)

// dslChildEnv makes the test binary run dslWindowedCount as a weir
// instance (runDSLChild) instead of the tests.
const dslChildEnv = "WEIR_IT_DSL_CHILD"

// runDSLChild runs dslWindowedCount under exactly once with the topics,
// application id and state directory of its WEIR_IT_ environment, until
// SIGTERM.
func runDSLChild() int {
	get := func(k string) string { return os.Getenv("WEIR_IT_" + k) }
	app, err := weir.New(dslWindowedCount(get("IN"), get("OUT"), get("FINAL"), get("LIMITED"), get("LATE")), weir.Config{
		ApplicationID:  get("APP"),
		Brokers:        strings.Split(get("BROKERS"), ","),
		StateDir:       get("STATE_DIR"),
		Guarantee:      weir.ExactlyOnce,
		CommitInterval: 100 * time.Millisecond,
		Consumer:       weir.ConsumerConfig{SessionTimeout: 6 * time.Second, HeartbeatInterval: 500 * time.Millisecond},
	})
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
	c := harness.Get(t)
	in, out, final, limited, late, app := windowedTopics(t, c)
	outputs := []string{out, final, limited, late}
	events := windowedEvents(3000)
	want, _ := windowedWant(t, events, in, out, final, limited, late, app)
	format := windowedFormat(t, late)

	admin, err := sarama.NewClusterAdmin(c.Brokers, c.SaramaConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
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
		harness.Produce(t, c, msgs...)
	}
	committed := func() int64 {
		return harness.EndOffsets(t, c, in)[0] - inputLag(t, c, admin, app, in)
	}

	// Write the input in batches while the first instance runs; kill it
	// once it has committed a third, with more still arriving.
	first, firstDone := startDSLChild(t, env)
	next, killedAt := 0, int64(-1)
	for next < len(events) {
		produce(next, next+100)
		next += 100
		if n := committed(); killedAt < 0 && n >= int64(len(events)/3) {
			if err := first.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			<-firstDone
			killedAt = n
		}
		time.Sleep(20 * time.Millisecond) // a stream, not one burst
	}
	if killedAt < 0 {
		// The instance never got a third of the way while the input
		// was written: kill it now, mid-stream or not.
		if err := first.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		<-firstDone
		killedAt = committed()
	}
	t.Logf("SIGKILL after %d of %d input records committed", killedAt, len(events))

	second, secondDone := startDSLChild(t, env)
	harness.Eventually(t, 120*time.Second, 100*time.Millisecond, func() (bool, string) {
		lag := inputLag(t, c, admin, app, in)
		return lag == 0, fmt.Sprintf("input lag %d", lag)
	})
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
	compareWindowedOutputs(t, c, outputs, want, format)
}
