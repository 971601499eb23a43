package integration

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/IBM/sarama"
	cdplog "github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/kstream"
	"github.com/weirstream/weir/serde"
	"github.com/weirstream/weir/weirtest/kafka"
)

// consoleChildEnv makes the test binary run a word count instance with
// its console on (runConsoleChild) instead of the tests; its value is the
// consoleChild configuration as JSON.
const consoleChildEnv = "WEIR_IT_CONSOLE_CHILD"

// consoleScreenshotsEnv names a directory for TestConsoleInBrowser's
// screenshots; without it they go to the test's artifact directory
// (t.ArtifactDir: kept under -outputdir with go test -artifacts, else
// removed after the test).
const consoleScreenshotsEnv = "WEIR_CONSOLE_SCREENSHOTS"

// consoleChild configures one instance of the console test.
type consoleChild struct {
	Brokers  []string
	App      string
	In, Out  string
	StateDir string
	Token    string        // the bearer token the instances' authorizer wants
	Slow     time.Duration // the time the split step takes per line
}

// consoleWordCount is the console test's word count: the DSL word count
// (dslWordCount) whose split step takes slow per line, so that input
// produced at once is processed more slowly than it arrives.
func consoleWordCount(in, out string, slow time.Duration) *kstream.Builder {
	b := kstream.NewBuilder()
	b.Stream("lines", in, serde.String(), serde.String()).
		FlatMapValues(func(line string) []string {
			time.Sleep(slow)
			return strings.Fields(line)
		}, kstream.Named("split")).
		GroupBy("by-word", func(_, w string) string { return w }, serde.String(), serde.String()).
		Count("counts").
		ToStream().
		To(out, serde.String(), serde.Int64())
	return b
}

// runConsoleChild runs one word count instance with its console on: it
// listens on a port of its own, advertises it, prints {"addr": ...} on
// stdout once it serves, and runs until SIGTERM.
func runConsoleChild() int {
	var cc consoleChild
	if err := json.Unmarshal([]byte(os.Getenv(consoleChildEnv)), &cc); err != nil {
		fmt.Fprintf(os.Stderr, "console child: bad %s: %v\n", consoleChildEnv, err)
		return 2
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, "console child:", err)
		return 1
	}
	bearer := "Bearer " + cc.Token
	cfg := weir.Config{
		ApplicationID: cc.App, Brokers: cc.Brokers, StateDir: cc.StateDir, Threads: 1,
		CommitInterval: 100 * time.Millisecond,
		Consumer:       weir.ConsumerConfig{SessionTimeout: 6 * time.Second, HeartbeatInterval: 500 * time.Millisecond},
		AdvertisedAddr: ln.Addr().String(),
		Logger:         slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})),
		// The console and its error texts for whoever has the token: the
		// test's browser, and the other instances (PeerCredentials).
		Authorizer: weir.AuthorizerFunc(func(req *http.Request, r weir.Resource) error {
			if req.Header.Get("Authorization") != bearer {
				return errors.New("no token")
			}
			if r == weir.ConsoleResource || r == weir.HealthDetails {
				return nil
			}
			return errors.New("the console only")
		}),
		Console: weir.ConsoleConfig{Enabled: true, SampleInterval: time.Second, PeerCredentials: func(req *http.Request) error {
			req.Header.Set("Authorization", bearer)
			return nil
		}},
	}
	app, err := weir.New(consoleWordCount(cc.In, cc.Out, cc.Slow), cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "console child: weir.New:", err)
		return 1
	}
	srv := &http.Server{Handler: app.Handler(), ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	defer srv.Close()
	_ = json.NewEncoder(os.Stdout).Encode(map[string]string{"addr": ln.Addr().String()})
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	if err := app.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "console child: Run:", err)
		return 1
	}
	return 0
}

// consoleInstance is a running child of the console test.
type consoleInstance struct {
	cmd  *exec.Cmd
	addr string
	log  string
	done chan struct{}
}

// startConsoleChild starts an instance and waits until it serves.
func startConsoleChild(t *testing.T, cc consoleChild, log string) *consoleInstance {
	t.Helper()
	in := &consoleInstance{log: log}
	addr := make(chan string, 1)
	in.cmd, in.done = spawnInstance(t, consoleChildEnv, cc, log, func(b []byte) {
		var line struct{ Addr string }
		if json.Unmarshal(b, &line) == nil && line.Addr != "" {
			select {
			case addr <- line.Addr:
			default: // the first one counts
			}
		}
	})
	t.Cleanup(func() {
		_ = in.cmd.Process.Kill()
		<-in.done
	})
	select {
	case in.addr = <-addr:
	case <-in.done:
		t.Fatalf("instance exited before it served; its log ends with:\n%s", logTail(log, 30))
	case <-time.After(time.Minute):
		t.Fatalf("instance did not serve within a minute; its log ends with:\n%s", logTail(log, 30))
	}
	return in
}

// chromiumPath finds Chromium: Debian's package installs it as chromium.
func chromiumPath() (string, error) {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p, nil
		}
	}
	return "", errors.New("no chromium, chromium-browser or google-chrome on PATH (Debian: apt-get install chromium)")
}

// browser is a headless Chromium page that records every error its
// JavaScript throws or logs, and every error the browser logs for it (a
// failed request, a refused script).
type browser struct {
	ctx  context.Context
	mu   sync.Mutex
	errs []string
}

func newBrowser(t *testing.T, path string, headers map[string]any) *browser {
	t.Helper()
	opts := append(slices.Clone(chromedp.DefaultExecAllocatorOptions[:]),
		chromedp.ExecPath(path), chromedp.NoSandbox, chromedp.DisableGPU, chromedp.WindowSize(1440, 960))
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(allocCtx)
	t.Cleanup(func() {
		cancel()
		cancelAlloc()
	})
	b := &browser{ctx: ctx}
	// The first call starts the browser, and must have no timeout: it
	// would stop the browser.
	err := chromedp.Listen(ctx, func(ev any) {
		var msg string
		switch ev := ev.(type) {
		case *runtime.EventExceptionThrown:
			d := ev.ExceptionDetails
			msg = fmt.Sprintf("exception at %s:%d: %s", d.URL, d.LineNumber+1, d.Text)
			if d.Exception != nil {
				msg += " " + d.Exception.Description
			}
		case *runtime.EventConsoleAPICalled:
			if ev.Type == runtime.ConsoleAPICalledTypeError || ev.Type == runtime.ConsoleAPICalledTypeAssert {
				var args []string
				for _, a := range ev.Args {
					args = append(args, string(a.Value)+a.Description)
				}
				msg = "console." + string(ev.Type) + ": " + strings.Join(args, " ")
			}
		case *cdplog.EventEntryAdded:
			if ev.Entry.Level == cdplog.EntryLevelError {
				msg = fmt.Sprintf("browser log (%s): %s %s", ev.Entry.Source, ev.Entry.Text, ev.Entry.URL)
			}
		}
		if msg != "" {
			b.mu.Lock()
			b.errs = append(b.errs, msg)
			b.mu.Unlock()
		}
	})
	if err != nil {
		t.Fatalf("starting chromium: %v", err)
	}
	if _, err := chromedp.Call(ctx, network.SetExtraHTTPHeaders, network.SetExtraHTTPHeadersParams{Headers: network.Headers(headers)}); err != nil {
		t.Fatalf("setting the page's headers: %v", err)
	}
	return b
}

// errors returns the errors recorded so far.
func (b *browser) errors() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.errs)
}

// do runs actions in the page, failing the test on an error.
func (b *browser) do(t *testing.T, what string, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, time.Minute)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// eval evaluates js in the page.
func eval[T any](t *testing.T, b *browser, js string) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 20*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](js))
	if err != nil {
		t.Fatalf("evaluating %q: %v", js, err)
	}
	return v
}

// page shows the console's page name (its hash) and waits until it drew
// itself.
func (b *browser) page(t *testing.T, name string) {
	t.Helper()
	eval[bool](t, b, fmt.Sprintf("location.hash = %q; true", name))
	kafka.Eventually(t, 10*time.Second, 100*time.Millisecond, func() (bool, string) {
		drawn := eval[bool](t, b, fmt.Sprintf(`(() => { const p = document.getElementById('page-%s'); return p.classList.contains('active') && p.childElementCount > 0; })()`, name))
		return drawn, "page " + name + " not drawn"
	})
}

// screenshot saves the whole page as name.png in dir.
func (b *browser) screenshot(t *testing.T, dir, name string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	buf, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	path := filepath.Join(dir, name+".png")
	if err := os.WriteFile(path, buf, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// consoleTasks is the task table as the page shows it: instance by task,
// for the active tasks, with the instances listed.
type consoleTasks struct {
	Rows  [][2]string       `json:"rows"`  // [task, instance] of each active task's row
	Cards map[string]string `json:"cards"` // instance -> status
}

const tasksJS = `(() => ({
  rows: [...document.querySelectorAll('#tasks tr[data-kind="active"]')].map((r) => [r.dataset.task, r.dataset.instance]),
  cards: Object.fromEntries([...document.querySelectorAll('#instances .card')].map((c) => [c.dataset.instance, c.dataset.status])),
}))()`

// exactlyOnce reports whether the table lists every task of want once,
// and only on instances of alive, all of which answer.
func (ct consoleTasks) exactlyOnce(want []string, alive []string) (bool, string) {
	seen := map[string][]string{}
	for _, r := range ct.Rows {
		seen[r[0]] = append(seen[r[0]], r[1])
	}
	for _, id := range want {
		if len(seen[id]) != 1 {
			return false, fmt.Sprintf("task %s listed on %v (rows %v, instances %v)", id, seen[id], ct.Rows, ct.Cards)
		}
		if !slices.Contains(alive, seen[id][0]) {
			return false, fmt.Sprintf("task %s listed on %s, not a live instance (rows %v)", id, seen[id][0], ct.Rows)
		}
	}
	if len(ct.Rows) != len(want) {
		return false, fmt.Sprintf("%d active rows, want %d: %v", len(ct.Rows), len(want), ct.Rows)
	}
	if len(ct.Cards) != len(alive) {
		return false, fmt.Sprintf("instances %v, want %v", ct.Cards, alive)
	}
	for _, a := range alive {
		if ct.Cards[a] != "ok" {
			return false, fmt.Sprintf("instance %s is %q, want ok (instances %v)", a, ct.Cards[a], ct.Cards)
		}
	}
	return true, ""
}

// TestConsoleInBrowser runs a three-instance word count on the broker,
// each instance serving its console, and reads one instance's console in
// headless Chromium: the topology graph has the word count's nodes and
// edges; the task table lists every task exactly once across the
// instances; the lag of the input rises while lines are produced faster
// than the instances split them, and falls back once they caught up; a
// killed instance shows as unreachable, then leaves the view, and its
// tasks show on the others. The page's JavaScript logs no error in all
// that. Screenshots of each page go to WEIR_CONSOLE_SCREENSHOTS, or the
// test's artifact directory.
func TestConsoleInBrowser(t *testing.T) {
	t.Parallel()
	chromium, err := chromiumPath()
	if err != nil {
		if ci, _ := strconv.ParseBool(os.Getenv("CI")); ci {
			t.Fatalf("%v; with CI=true the browser test does not skip", err)
		}
		t.Skipf("skipping the browser test: %v", err)
	}
	c := kafka.Cluster(t)
	shots := os.Getenv(consoleScreenshotsEnv)
	if shots == "" {
		shots = t.ArtifactDir()
	} else if err := os.MkdirAll(shots, 0o755); err != nil {
		t.Fatal(err)
	}
	in, out, app := c.Name(t, "console-in"), c.Name(t, "console-out"), c.Name(t, "console-app")
	c.CreateTopic(t, in, 4, nil)
	c.CreateTopic(t, out, 4, nil)
	token := make([]byte, 16)
	if _, err := rand.Read(token); err != nil {
		t.Fatal(err)
	}
	cc := consoleChild{Brokers: c.Brokers, App: app, In: in, Out: out, Token: hex.EncodeToString(token), Slow: 3 * time.Millisecond}
	dir := t.TempDir()
	instances := make([]*consoleInstance, 3)
	for i := range instances {
		cc.StateDir = filepath.Join(dir, fmt.Sprintf("state-%d", i))
		instances[i] = startConsoleChild(t, cc, filepath.Join(dir, fmt.Sprintf("instance-%d.log", i)))
	}
	t.Cleanup(func() {
		if t.Failed() {
			for i, inst := range instances {
				t.Logf("instance %d (%s) log ends with:\n%s", i, inst.addr, logTail(inst.log, 40))
			}
		}
	})
	var addrs []string
	for _, inst := range instances {
		addrs = append(addrs, inst.addr)
	}
	base := "http://" + instances[0].addr + "/weir/"

	// Without the token the console is refused.
	resp, err := http.Get(base + "api/cluster")
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("GET api/cluster without the token: %d, want 403", resp.StatusCode)
	}

	b := newBrowser(t, chromium, map[string]any{"Authorization": "Bearer " + cc.Token})
	b.do(t, "opening "+base, chromedp.Navigate(base+"#topology"))

	// The topology: every node, store and edge of the word count.
	sink := "counts-to-" + out
	wantNodes := []string{"by-word", "by-word-sink", "by-word-source", "counts", "counts-tostream", sink, "lines", "split", "store:counts"}
	wantEdges := []string{"by-word->by-word-sink", "by-word-sink->by-word-source", "by-word-source->counts", "counts->counts-tostream",
		"counts->store:counts", "counts-tostream->" + sink, "lines->split", "split->by-word"}
	slices.Sort(wantNodes)
	slices.Sort(wantEdges)
	kafka.Eventually(t, time.Minute, 200*time.Millisecond, func() (bool, string) {
		g := eval[struct {
			Nodes []string `json:"nodes"`
			Edges []string `json:"edges"`
		}](t, b, `(() => ({
		  nodes: [...document.querySelectorAll('#topology-svg g.node')].map((n) => n.dataset.node).sort(),
		  edges: [...document.querySelectorAll('#topology-svg path.edge')].map((e) => e.dataset.from + '->' + e.dataset.to).sort(),
		}))()`)
		return slices.Equal(g.Nodes, wantNodes) && slices.Equal(g.Edges, wantEdges),
			fmt.Sprintf("graph nodes %v edges %v; want nodes %v edges %v", g.Nodes, g.Edges, wantNodes, wantEdges)
	})
	repartition := eval[string](t, b, `document.querySelector('#topology-svg path.edge.repartition').dataset.topic`)
	if want := app + "-by-word-repartition"; repartition != want {
		t.Errorf("the repartition edge is labelled %q, want %q", repartition, want)
	}
	b.do(t, "clicking the node counts", chromedp.Click(chromedp.CSS(`#topology-svg g.node[data-node="counts"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#details-list[data-selected="node:counts"]`)))

	// The tasks: 4 partitions, 2 sub-topologies, each task exactly once.
	var tasks []string
	for sub := range 2 {
		for p := range 4 {
			tasks = append(tasks, fmt.Sprintf("%d_%d", sub, p))
		}
	}
	b.page(t, "instances")
	kafka.Eventually(t, 2*time.Minute, 250*time.Millisecond, func() (bool, string) {
		return eval[consoleTasks](t, b, tasksJS).exactlyOnce(tasks, addrs)
	})
	t.Logf("screenshot %s", b.screenshot(t, shots, "console-instances"))

	// Lag rises while lines arrive faster than the split step takes them
	// (3 ms a line), then falls back to nothing.
	b.page(t, "lag")
	lines := make([]*sarama.ProducerMessage, 8000)
	for i := range lines {
		lines[i] = &sarama.ProducerMessage{Topic: in, Key: sarama.StringEncoder(fmt.Sprintf("line-%d", i)),
			Value: sarama.StringEncoder(fmt.Sprintf("the quick brown fox %d jumps over the lazy dog %d", i%50, i%7))}
	}
	kafka.Produce(t, c, lines...)
	inputLag := fmt.Sprintf(`[...document.querySelectorAll('#lag tr[data-topic=%q]')].reduce((a, r) => a + Math.max(0, Number(r.dataset.lag)), 0)`, in)
	var peak int
	kafka.Eventually(t, time.Minute, 200*time.Millisecond, func() (bool, string) {
		lag := eval[int](t, b, inputLag)
		peak = max(peak, lag)
		return lag >= 1000, fmt.Sprintf("the input's lag on the page is %d, want it to rise to 1000 or more", lag)
	})
	if !eval[bool](t, b, `document.querySelector('#lag svg.spark polyline') !== null`) {
		t.Error("no lag sparkline is drawn")
	}
	t.Logf("screenshot %s", b.screenshot(t, shots, "console-lag"))
	b.page(t, "topology")
	kafka.Eventually(t, 30*time.Second, 250*time.Millisecond, func() (bool, string) {
		label := eval[string](t, b, `document.querySelector('#topology-svg g.node[data-node="split"] text.sub').textContent`)
		return strings.Contains(label, "/s · busy") && !strings.HasPrefix(label, "0.0/s"), "split's label is " + label
	})
	t.Logf("screenshot %s", b.screenshot(t, shots, "console-topology"))
	b.page(t, "lag")
	kafka.Eventually(t, 3*time.Minute, 250*time.Millisecond, func() (bool, string) {
		lag := eval[int](t, b, inputLag)
		rows := eval[int](t, b, fmt.Sprintf(`document.querySelectorAll('#lag tr[data-topic=%q]').length`, in))
		peak = max(peak, lag)
		return lag == 0 && rows == 4, fmt.Sprintf("the input's lag on the page is %d over %d partitions, want 0 over 4", lag, rows)
	})
	t.Logf("the input's lag peaked at %d on the page and fell back to 0", peak)
	b.page(t, "commits")
	if commitRows := eval[int](t, b, `document.querySelectorAll('#commits tbody tr').length`); commitRows != 3 {
		t.Errorf("the commits table has %d rows, want one per instance", commitRows)
	}
	t.Logf("screenshot %s", b.screenshot(t, shots, "console-commits"))
	b.page(t, "state")
	if storeRows := eval[int](t, b, `document.querySelectorAll('#stores tr[data-store="counts"]').length`); storeRows < 4 {
		t.Errorf("the state table has %d rows of store counts, want its 4 partitions at least", storeRows)
	}
	t.Logf("screenshot %s", b.screenshot(t, shots, "console-state"))

	// A killed instance shows as unreachable until the group drops it;
	// then it is gone and its tasks show on the other two.
	b.page(t, "instances")
	killed := instances[2]
	if err := killed.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-killed.done
	sawUnreachable := false
	kafka.Eventually(t, 2*time.Minute, 200*time.Millisecond, func() (bool, string) {
		ct := eval[consoleTasks](t, b, tasksJS)
		if ct.Cards[killed.addr] == "unreachable" {
			sawUnreachable = true
		}
		return ct.exactlyOnce(tasks, addrs[:2])
	})
	if !sawUnreachable {
		t.Error("the killed instance never showed as unreachable before the group dropped it")
	}
	t.Logf("screenshot %s", b.screenshot(t, shots, "console-after-kill"))

	if status := eval[string](t, b, `document.getElementById('status').className`); status != "status" {
		t.Errorf("the page's status line is in error: %s", eval[string](t, b, `document.getElementById('status').textContent`))
	}
	if errs := b.errors(); len(errs) > 0 {
		t.Errorf("the page logged %d errors:\n%s", len(errs), strings.Join(errs, "\n"))
	}
	// Under -race the instances report races in their logs, and go on.
	for i, inst := range instances {
		if log, err := os.ReadFile(inst.log); err == nil && strings.Contains(string(log), "WARNING: DATA RACE") {
			t.Errorf("instance %d's log reports a data race:\n%s", i, logTail(inst.log, 60))
		}
	}
}
