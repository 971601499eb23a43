package console

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/weirstream/weir/internal/graph"
	"github.com/weirstream/weir/internal/metrics"
)

// fakeBackend is a Backend whose answers the test sets.
type fakeBackend struct {
	mu      sync.Mutex
	raw     Raw
	top     Topology
	ends    map[TopicPartition]int64
	hosts   []Host
	gen     int32
	allow   func(*http.Request) error
	details bool
}

func (f *fakeBackend) Raw() Raw {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.raw
}

func (f *fakeBackend) set(raw Raw) {
	f.mu.Lock()
	f.raw = raw
	f.mu.Unlock()
}

func (f *fakeBackend) Topology() Topology { return f.top }

func (f *fakeBackend) LogEnds(_ context.Context, tps []TopicPartition) map[TopicPartition]int64 {
	out := map[TopicPartition]int64{}
	for _, tp := range tps {
		if e, ok := f.ends[tp]; ok {
			out[tp] = e
		}
	}
	return out
}

func (f *fakeBackend) Hosts() ([]Host, int32) { return f.hosts, f.gen }

func (f *fakeBackend) Authorize(req *http.Request) error {
	if f.allow == nil {
		return nil
	}
	return f.allow(req)
}

func (f *fakeBackend) Details(*http.Request) bool { return f.details }

// testConfig is a console's configuration for tests: a history of n
// samples a second apart.
func testConfig(n int) Config {
	return Config{SampleInterval: time.Second, HistorySamples: n, MaxErrors: 5, PeerTimeout: time.Second, PeerScheme: "http"}
}

// wordCount is a word count's topology, as the App describes it.
func wordCount() Topology {
	return Topology{ApplicationID: "wc", Subtopologies: []Subtopology{
		{ID: 0, Partitions: 2, Nodes: []Node{
			{Name: "lines", Kind: "source", Topic: "in", Children: []string{"split"}},
			{Name: "split", Kind: "processor", Children: []string{"by-word-sink"}},
			{Name: "by-word-sink", Kind: "sink", Topic: "wc-by-word-repartition", Internal: true},
		}},
		{ID: 1, Partitions: 2, Nodes: []Node{
			{Name: "by-word-source", Kind: "source", Topic: "wc-by-word-repartition", Internal: true, Children: []string{"counts"}},
			{Name: "counts", Kind: "processor", Stores: []string{"counts"}, Children: []string{"out"}},
			{Name: "out", Kind: "sink", Topic: "out"},
		}},
	}, Stores: []TopoStore{{Name: "counts", Type: "key-value", Changelog: "wc-counts-changelog", Subtopology: 1, Partitions: 2, Users: []string{"counts"}}}}
}

// rawAt is an instance at t, thread 0 busy for busy of its elapsed time,
// reading partition 0 of "in" with lag, having processed n records and
// committed c transactions.
func rawAt(t time.Time, elapsed, busy time.Duration, lag int64, n, c float64) Raw {
	return Raw{
		Time: t, Addr: "127.0.0.1:1", ProcessID: "p1", ApplicationID: "wc", State: "running", Version: "devel", Guarantee: "exactly_once",
		Threads: []RawThread{{Thread: 0, Busy: busy, Idle: elapsed - busy, Backpressured: busy / 2}},
		Tasks: []RawTask{
			{ID: "0_0", Subtopology: 0, Partition: 0, Thread: 0, StreamTime: t, Partitions: []RawPartition{
				{Topic: "in", Partition: 0, LogEnd: 1000, Position: 1000 - lag, Committed: 1000 - lag, Retention: time.Hour},
			}},
			{ID: "1_0", Subtopology: 1, Partition: 0, Thread: 0, StreamTime: t},
		},
		Checkpoints: []RawCheckpoint{{Store: "counts", Partition: 0, Offset: 40}},
		StoreBytes:  map[string]int64{"counts": 4096},
		Figures: metrics.Figures{
			ProcessedByTask: map[string]float64{"0_0": n, "1_0": 2 * n},
			WrittenByTopic:  map[string]float64{"out": n},
			TxnByResult:     map[string]float64{"committed": c, "aborted": 1},
			CommitSeconds: metrics.Histogram{Sum: 0.01 * c, Count: c, Buckets: []metrics.Bucket{
				{Le: 0.008, Count: 0}, {Le: 0.016, Count: c}, {Le: 0.032, Count: c},
			}},
			RestoredByStore: map[string]float64{"counts/0": 40},
		},
	}
}

// The embedded page stays under its size budget and loads nothing from
// elsewhere: no URL but the SVG namespace's.
func TestAssetsAreSmallAndSelfContained(t *testing.T) {
	t.Parallel()
	n, err := AssetBytes()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("embedded assets: %d bytes", n)
	if n == 0 || n >= MaxAssetBytes {
		t.Errorf("embedded assets take %d bytes; the budget is under %d", n, MaxAssetBytes)
	}
	err = fs.WalkDir(assets, "assets", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(assets, path)
		if err != nil {
			return err
		}
		text := strings.ReplaceAll(string(b), "http://www.w3.org/2000/svg", "")
		for _, bad := range []string{"http://", "https://", "//cdn", "@import"} {
			if strings.Contains(text, bad) {
				t.Errorf("%s contains %q: the page must load nothing from elsewhere", path, bad)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// The ring keeps the last n values pushed, oldest first, however many
// were pushed.
func TestRingKeepsTheLast(t *testing.T) {
	t.Parallel()
	r := newRing[int](3)
	if got := r.all(); len(got) != 0 {
		t.Fatalf("empty ring holds %v", got)
	}
	for i := range 10 {
		r.push(i)
		want := []int{}
		for j := max(0, i-2); j <= i; j++ {
			want = append(want, j)
		}
		if got := r.all(); !slices.Equal(got, want) {
			t.Fatalf("after pushing 0..%d: %v, want %v", i, got, want)
		}
	}
	if r.size() != 3 {
		t.Errorf("size %d, want 3", r.size())
	}
}

// The history of a partition's lag holds at most HistorySamples samples
// and the present, however long the sampler ran.
func TestHistoryIsBounded(t *testing.T) {
	t.Parallel()
	b := &fakeBackend{top: wordCount()}
	c := New(b, testConfig(4), NewEvents(5))
	start := time.Unix(1_700_000_000, 0)
	for i := range 10 {
		b.set(rawAt(start.Add(time.Duration(i)*time.Second), time.Duration(i+1)*time.Second, 0, int64(i), 0, 0))
		c.Sample(context.Background())
	}
	b.set(rawAt(start.Add(10*time.Second), 11*time.Second, 0, 10, 0, 0))
	in := c.Instance(false)
	if len(in.Partitions) != 1 {
		t.Fatalf("partitions %+v, want one", in.Partitions)
	}
	h := in.Partitions[0].History
	if len(h) != 5 {
		t.Fatalf("history %v: %d points, want the 4 samples kept and the present", h, len(h))
	}
	for i, p := range h {
		if want := int64(6 + i); p[1] != want || p[0] != start.Add(time.Duration(want)*time.Second).UnixMilli() {
			t.Errorf("point %d = %v, want lag %d at second %d", i, p, want, want)
		}
	}
	if in.HistorySamples != 4 || in.SampleInterval != 1 {
		t.Errorf("history_samples %d, sample_interval %v; want 4 and 1", in.HistorySamples, in.SampleInterval)
	}
	if in.Partitions[0].Risk != "rising" {
		t.Errorf("risk %q of a lag that grows, want rising", in.Partitions[0].Risk)
	}
}

// An instance's answer has every documented field, with rates computed
// over three sample intervals.
func TestInstanceShape(t *testing.T) {
	t.Parallel()
	b := &fakeBackend{top: wordCount(), ends: map[TopicPartition]int64{{"wc-counts-changelog", 0}: 50}}
	c := New(b, testConfig(10), NewEvents(5))
	start := time.Unix(1_700_000_000, 0)
	for i := range 4 {
		b.set(rawAt(start.Add(time.Duration(i)*time.Second), time.Duration(i+1)*time.Second, time.Duration(i+1)*time.Second/2, 5, float64(100*i), float64(10*i)))
		c.Sample(context.Background())
	}
	// Now is 3 s past the first sample: the rates compare with it.
	in := c.Instance(false)
	js, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(js, &m); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"addr", "process_id", "application_id", "state", "version", "guarantee", "time",
		"sample_interval_seconds", "history_samples", "rate_window_seconds", "rebalance", "threads", "tasks",
		"partitions", "stores", "commits", "records", "failures", "errors"} {
		if _, ok := m[key]; !ok {
			t.Errorf("the answer has no %q: %s", key, js)
		}
	}
	if in.RateWindow != 3 {
		t.Fatalf("rate window %v s, want 3", in.RateWindow)
	}
	if th := in.Threads[0]; th.BusyShare != 0.5 || th.BackpressuredShare != 0.25 || th.Tasks != 2 {
		t.Errorf("thread %+v, want busy 0.5, backpressured 0.25, 2 tasks", th)
	}
	if got := in.Records.BySubtopology; got["0"] != 100 || got["1"] != 200 {
		t.Errorf("records by sub-topology %v, want 0: 100/s, 1: 200/s", got)
	}
	if in.Records.ProcessedPerSecond != 300 || in.Records.WrittenPerSecond["out"] != 100 {
		t.Errorf("records %+v, want 300/s processed and 100/s written to out", in.Records)
	}
	if in.Commits.PerSecond != 10 || in.Commits.LatencyMean != 10 || in.Commits.LatencyP99 != 16 {
		t.Errorf("commits %+v, want 10/s, mean 10 ms, p99 16 ms", in.Commits)
	}
	if len(in.Commits.History) != 3 {
		t.Errorf("commit history %v, want a rate between each of the 4 samples", in.Commits.History)
	}
	if len(in.Tasks) != 2 || in.Tasks[0].ID != "0_0" || in.Tasks[0].RecordsPerSecond != 100 || in.Tasks[0].Kind != "active" {
		t.Errorf("tasks %+v", in.Tasks)
	}
	want := []Store{{Name: "counts", Type: "key-value", Changelog: "wc-counts-changelog", Bytes: 4096, Partitions: []StorePartition{
		{Partition: 0, Role: "active", Checkpoint: 40, ChangelogEnd: 50, Restored: 40, Remaining: -1, StandbyLag: -1},
	}}}
	if got, _ := json.Marshal(in.Stores); !bytes.Equal(got, must(json.Marshal(want))) {
		t.Errorf("stores %s, want %s", got, must(json.Marshal(want)))
	}
	if p := in.Partitions[0]; p.Lag != 5 || p.Risk != "ok" || p.Headroom == nil || *p.Headroom != 3600 || p.Task != "0_0" {
		t.Errorf("partition %+v", p)
	}
}

func must(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}

// Partitions at risk come first: those whose unread records are close
// to retention, then those whose lag grows, then the rest by lag.
func TestPartitionsAtRiskFirst(t *testing.T) {
	t.Parallel()
	h := func(v float64) *float64 { return &v }
	ps := []Partition{
		{Topic: "a", Partition: 0, Lag: 5, Risk: "ok"},
		{Topic: "a", Partition: 1, Lag: 50, Risk: "ok"},
		{Topic: "b", Partition: 0, Lag: 1, Risk: "rising"},
		{Topic: "c", Partition: 0, Lag: 1, Risk: "high", Headroom: h(10)},
		{Topic: "c", Partition: 1, Lag: 1, Risk: "high", Headroom: h(5)},
	}
	slices.SortFunc(ps, comparePartitions)
	var got []string
	for _, p := range ps {
		got = append(got, p.Topic+"/"+string(rune('0'+p.Partition)))
	}
	if want := []string{"c/1", "c/0", "b/0", "a/1", "a/0"}; !slices.Equal(got, want) {
		t.Errorf("order %v, want %v", got, want)
	}
}

// A restore's progress is measured against the most it was seen to have
// left, and its ETA from the rate it applies records at.
func TestRestoreProgress(t *testing.T) {
	t.Parallel()
	b := &fakeBackend{top: wordCount()}
	c := New(b, testConfig(10), NewEvents(5))
	start := time.Unix(1_700_000_000, 0)
	restoring := func(i int, remaining int64) Raw {
		r := rawAt(start.Add(time.Duration(i)*time.Second), time.Duration(i+1)*time.Second, 0, 0, 0, 0)
		r.Tasks[1].Restoring = true
		r.Tasks[1].Restores = []RawRestore{{Store: "counts", Partition: 0, Remaining: remaining}}
		return r
	}
	for i, rem := range []int64{1000, 900, 800, 700} {
		b.set(restoring(i, rem))
		c.Sample(context.Background())
	}
	in := c.Instance(false)
	task := in.Tasks[slices.IndexFunc(in.Tasks, func(t Task) bool { return t.ID == "1_0" })]
	if task.State != "restoring" || len(task.Restores) != 1 {
		t.Fatalf("task %+v, want restoring one store", task)
	}
	r := task.Restores[0]
	if r.Total != 1000 || math.Abs(r.Progress-0.3) > 1e-9 || r.RatePerSecond != 100 || r.ETASeconds != 7 {
		t.Errorf("restore %+v, want total 1000, progress 0.3, 100/s, ETA 7 s", r)
	}
	if sp := in.Stores[0].Partitions[0]; sp.Role != "restoring" || sp.Remaining != 700 {
		t.Errorf("store partition %+v, want restoring with 700 left", sp)
	}
}

// Standby and warm-up copies are listed after the active tasks, with
// their lags; a lag nobody knows is -1.
func TestStandbysListed(t *testing.T) {
	t.Parallel()
	b := &fakeBackend{top: wordCount()}
	r := rawAt(time.Unix(1_700_000_000, 0), time.Second, 0, 0, 0, 0)
	r.Standbys = []RawStandby{
		{ID: "1_1", Subtopology: 1, Partition: 1, Warmup: true, Lags: map[string]int64{"counts": UnknownLag}},
		{ID: "1_0", Subtopology: 1, Partition: 0, Lags: map[string]int64{"counts": 3}},
	}
	b.set(r)
	in := New(b, testConfig(10), NewEvents(5)).Instance(false)
	var got []string
	for _, t := range in.Tasks {
		got = append(got, t.ID+" "+t.Kind)
	}
	if want := []string{"0_0 active", "1_0 active", "1_0 standby", "1_1 warmup"}; !slices.Equal(got, want) {
		t.Errorf("tasks %v, want %v", got, want)
	}
	if lag := in.Tasks[3].StandbyLag["counts"]; lag != -1 {
		t.Errorf("unknown standby lag shown as %d, want -1", lag)
	}
}

// The console keeps the last warnings and errors logged, newest first,
// with their attributes; an error's text only for details; records below
// warning level, and a processor's own lines, pass to the handler as
// before and are not kept.
func TestEventsCapture(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	ev := NewEvents(3)
	log := slog.New(ev.Capture(slog.NewTextHandler(&out, &slog.HandlerOptions{Level: slog.LevelInfo}))).With("thread", 1)
	log.Info("assignment", "tasks", 2)
	log.WithGroup("g").Warn("skipping a record", "topic", "in", "partition", 3, "offset", 42, "error", errors.New("cannot decode value"))
	log.Error("thread stopped", "error", "boom")
	log.Log(graph.UserLine(context.Background()), slog.LevelError, "a processor's own line", "value", "secret")
	if !strings.Contains(out.String(), "assignment") || !strings.Contains(out.String(), "skipping a record") || !strings.Contains(out.String(), "processor's own line") {
		t.Errorf("the handler wrapped did not get every line:\n%s", out.String())
	}
	got := ev.Last(true)
	if len(got) != 2 || got[0].Message != "thread stopped" || got[0].Error != "boom" || got[0].Level != "ERROR" {
		t.Fatalf("events %+v, want the error then the warning", got)
	}
	w := got[1]
	if w.Error != "cannot decode value" || w.Attrs["thread"] != "1" || w.Attrs["g.topic"] != "in" || w.Attrs["g.offset"] != "42" {
		t.Errorf("warning %+v", w)
	}
	for _, e := range ev.Last(false) {
		if e.Error != "" {
			t.Errorf("event %+v carries its error text without details", e)
		}
	}
	for i := range 5 {
		log.Warn(strings.Repeat("x", 1000), "n", i)
	}
	got = ev.Last(false)
	if len(got) != 3 || got[0].Attrs["n"] != "4" || len(got[0].Message) > maxEventMessage+len("…") {
		t.Errorf("after 7 warnings: %d kept (want 3), newest %+v", len(got), got[0].Attrs)
	}
}

// Every request passes the authorizer: refused is 403, for the page as
// for the API. Only GET and HEAD are served; an unknown path is 404.
func TestHandlerAuthorizes(t *testing.T) {
	t.Parallel()
	b := &fakeBackend{top: wordCount(), raw: rawAt(time.Now(), time.Second, 0, 0, 0, 0)}
	b.allow = func(req *http.Request) error {
		if req.Header.Get("Authorization") != "Bearer ok" {
			return errors.New("no")
		}
		return nil
	}
	srv := httptest.NewServer(New(b, testConfig(10), NewEvents(5)))
	defer srv.Close()
	do := func(method, path, token string) *http.Response {
		req, _ := http.NewRequest(method, srv.URL+path, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	for _, path := range []string{Path, Path + "console.js", InstancePath, ClusterPath, TopologyPath} {
		if code := do("GET", path, "").StatusCode; code != http.StatusForbidden {
			t.Errorf("GET %s without credentials: %d, want 403", path, code)
		}
		if code := do("GET", path, "wrong").StatusCode; code != http.StatusForbidden {
			t.Errorf("GET %s refused: %d, want 403", path, code)
		}
		resp := do("GET", path, "ok")
		if resp.StatusCode != http.StatusOK {
			t.Errorf("GET %s allowed: %d, want 200", path, resp.StatusCode)
		}
		if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") {
			t.Errorf("GET %s: Content-Security-Policy %q", path, csp)
		}
	}
	if resp := do("GET", Path, "ok"); !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
		t.Errorf("the page's type is %q", resp.Header.Get("Content-Type"))
	}
	if code := do("POST", InstancePath, "ok").StatusCode; code != http.StatusMethodNotAllowed {
		t.Errorf("POST: %d, want 405", code)
	}
	for _, path := range []string{APIPath + "nothing", Path + "nothing.js", Path + "assets/console.js", Path + "../go.mod"} {
		if code := do("GET", path, "ok").StatusCode; code != http.StatusNotFound {
			t.Errorf("GET %s: %d, want 404", path, code)
		}
	}
}

// The cluster view lists this instance first, then every other instance
// of the host map with its answer or why it has none: a refusal, a
// console that is off, and an instance that does not answer within the
// peer timeout. The peers get the credentials hook's header.
func TestClusterAsksPeers(t *testing.T) {
	t.Parallel()
	peer := &fakeBackend{top: wordCount(), raw: rawAt(time.Now(), time.Second, 0, 0, 0, 0)}
	peer.raw.Addr = "peer"
	peer.allow = func(req *http.Request) error {
		if req.Header.Get("Authorization") != "Bearer instance" {
			return errors.New("who are you")
		}
		return nil
	}
	ok := httptest.NewServer(New(peer, testConfig(10), NewEvents(5)))
	defer ok.Close()
	refusing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusForbidden) }))
	defer refusing.Close()
	off := httptest.NewServer(http.NotFoundHandler())
	defer off.Close()
	release := make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { <-release }))
	defer slow.Close()
	defer close(release)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gone := ln.Addr().String()
	ln.Close()

	host := func(u string) string { return strings.TrimPrefix(u, "http://") }
	self := &fakeBackend{top: wordCount(), raw: rawAt(time.Now(), time.Second, 0, 0, 0, 0), gen: 7, hosts: []Host{
		{Addr: host(slow.URL)}, {Addr: "127.0.0.1:1", Active: []string{"0_0", "1_0"}}, {Addr: host(ok.URL), Active: []string{"0_1"}},
		{Addr: host(refusing.URL)}, {Addr: host(off.URL)}, {Addr: gone}, {Addr: "not an address"},
	}}
	self.raw.Addr = "127.0.0.1:1"
	cfg := testConfig(10)
	cfg.PeerTimeout = 300 * time.Millisecond
	cfg.PeerCredentials = func(req *http.Request) error {
		req.Header.Set("Authorization", "Bearer instance")
		return nil
	}
	start := time.Now()
	cl := New(self, cfg, NewEvents(5)).Cluster(context.Background(), false)
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("the cluster view took %v with a peer timeout of 300ms", took)
	}
	status := map[string]string{}
	for i, m := range cl.Members {
		status[m.Addr] = m.Status
		if i == 0 && (!m.Self || m.Addr != "127.0.0.1:1" || !slices.Equal(m.Active, []string{"0_0", "1_0"})) {
			t.Errorf("first member %+v, want this instance with its host map tasks", m)
		}
		if (m.Status == "ok") != (m.Instance != nil) {
			t.Errorf("member %s: status %s with instance %v", m.Addr, m.Status, m.Instance != nil)
		}
	}
	want := map[string]string{
		"127.0.0.1:1": "ok", host(ok.URL): "ok", host(refusing.URL): "refused", host(off.URL): "off",
		host(slow.URL): "unreachable", gone: "unreachable", "not an address": "error",
	}
	for addr, s := range want {
		if status[addr] != s {
			t.Errorf("member %s: status %q, want %q (all: %v)", addr, status[addr], s, status)
		}
	}
	if cl.Generation != 7 || len(cl.Members) != len(want) {
		t.Errorf("generation %d and %d members, want 7 and %d", cl.Generation, len(cl.Members), len(want))
	}
}

// The cluster view hands a request without details no error text, from
// this instance or another.
func TestClusterStripsErrorsWithoutDetails(t *testing.T) {
	t.Parallel()
	peerEvents := NewEvents(5)
	slog.New(peerEvents.Capture(slog.DiscardHandler)).Warn("transaction aborted", "error", "secret broker address")
	peer := &fakeBackend{top: wordCount(), raw: rawAt(time.Now(), time.Second, 0, 0, 0, 0), details: true}
	srv := httptest.NewServer(New(peer, testConfig(10), peerEvents))
	defer srv.Close()
	selfEvents := NewEvents(5)
	slog.New(selfEvents.Capture(slog.DiscardHandler)).Warn("transaction aborted", "error", "secret broker address")
	self := &fakeBackend{top: wordCount(), raw: rawAt(time.Now(), time.Second, 0, 0, 0, 0), hosts: []Host{{Addr: strings.TrimPrefix(srv.URL, "http://")}}}
	c := New(self, testConfig(10), selfEvents)
	for _, details := range []bool{true, false} {
		js, err := json.Marshal(c.Cluster(context.Background(), details))
		if err != nil {
			t.Fatal(err)
		}
		if n := strings.Count(string(js), "secret broker address"); details && n != 2 || !details && n != 0 {
			t.Errorf("details %v: the error text shows %d times, want %d", details, n, map[bool]int{true: 2}[details])
		}
		if strings.Count(string(js), "transaction aborted") != 2 {
			t.Errorf("details %v: the messages are missing: %s", details, js)
		}
	}
}

// Before an instance has threads, tasks or samples, its answer has
// empty lists, not nulls, so that the page need not tell them apart.
func TestEmptyInstanceHasNoNulls(t *testing.T) {
	t.Parallel()
	b := &fakeBackend{top: Topology{Subtopologies: []Subtopology{}, Stores: []TopoStore{}}, raw: Raw{Time: time.Now()}}
	js, err := json.Marshal(New(b, testConfig(3), NewEvents(3)).Instance(false))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(js), "null") {
		t.Errorf("an empty instance's answer has nulls: %s", js)
	}
}
