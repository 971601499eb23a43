package integration

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/kstream"
	"github.com/weirstream/weir/ktable"
	"github.com/weirstream/weir/serde"
	"github.com/weirstream/weir/weirtest/kafka"
)

// serveStores starts an HTTP server for app's stores on ln (ktable.Handler
// at ktable.HandlerPath), closed when the test ends, or before when the
// function it returns is called.
func serveStores(t *testing.T, ln net.Listener, app *weir.App) (closeServer func()) {
	mux := http.NewServeMux()
	mux.Handle(ktable.HandlerPath, ktable.Handler(app, testStores))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return func() { _ = srv.Close() }
}

// testStores are the stores the query tests serve.
var testStores = ktable.ServeStores("counts", "per-minute", "per-ms")

// postQuery sends body, a query of the Handler's protocol, for store to
// the Handler at addr and returns the status, the decoded answer and the
// Retry-After header.
func postQuery(t *testing.T, addr, store, body string) (status int, a queryAnswer, retryAfter string) {
	t.Helper()
	resp, err := http.Post("http://"+addr+ktable.HandlerPath+store, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	_ = json.NewDecoder(resp.Body).Decode(&a)
	return resp.StatusCode, a, resp.Header.Get("Retry-After")
}

// queryAnswer is the part of a Handler's answer the tests look at.
type queryAnswer struct {
	Found  bool   `json:"found"`
	Value  []byte `json:"value"`
	Reason string `json:"reason"`
}

// keyQuery is the body of a lookup of key k.
func keyQuery(k string, extra string) string {
	b, _ := json.Marshal([]byte(k))
	return `{"op":"get","key":` + string(b) + extra + `}`
}

// countedKeys creates in (4 partitions), produces to it keys k000 to
// k199, key i (i%mod)+1 times, and returns a DSL count of in into store
// "counts" and the counts it must reach.
func countedKeys(t *testing.T, c *kafka.Env, in string, mod int) (*kstream.Builder, map[string]int64) {
	c.CreateTopic(t, in, 4, nil)
	b := kstream.NewBuilder()
	b.Stream("events", in, serde.String(), serde.String()).GroupByKey().Count("counts")
	want := map[string]int64{}
	var msgs []*sarama.ProducerMessage
	for i := range 200 {
		k := fmt.Sprintf("k%03d", i)
		for range i%mod + 1 {
			want[k]++
			msgs = append(msgs, &sarama.ProducerMessage{Topic: in, Key: sarama.StringEncoder(k), Value: sarama.StringEncoder("x")})
		}
	}
	kafka.Produce(t, c, msgs...)
	return b, want
}

// startServing starts two exactly-once instances of top with standbys
// standby replicas, each serving its stores at its advertised address;
// closers[i] stops instance i's server early.
func startServing(t *testing.T, c *kafka.Env, app string, top weir.Topology, standbys int) (insts [2]*instance, addrs [2]string, closers [2]func()) {
	for i := range insts {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addrs[i] = ln.Addr().String()
		cfg := baseConfig(c, app, t)
		cfg.Guarantee = weir.ExactlyOnce
		cfg.AdvertisedAddr = addrs[i]
		cfg.StandbyReplicas = standbys
		insts[i] = start(t, top, cfg)
		closers[i] = serveStores(t, ln, insts[i].app)
	}
	return insts, addrs, closers
}

// TestInteractiveQueriesAcrossInstances: two instances of a DSL count,
// each serving its stores at its advertised address. Every key is read
// through instance A's view with Lookup, the keys of B's partitions over
// HTTP from B, and each answer is the exact committed count (A's local
// Get cannot read B's keys, so the forwarding is what answers). Once B
// stops, its handler answers a retryable 503 (never data from its closed
// store), every Lookup meanwhile is either exact or a
// *weir.StoreUnavailableError, and once A runs every task it answers every
// key again.
func TestInteractiveQueriesAcrossInstances(t *testing.T) {
	t.Parallel()
	c := kafka.Cluster(t)
	in, app := c.Name(t, "in"), c.Name(t, "app")
	b, want := countedKeys(t, c, in, 5)

	insts, addrs, _ := startServing(t, c, app, b, 0)
	a := insts[0].app
	view, err := ktable.KeyValue(a, "counts", serde.String(), serde.Int64())
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	remote := 0
	kafka.Eventually(t, 90*time.Second, 200*time.Millisecond, func() (bool, string) {
		if len(insts[0].app.Tasks()) == 0 || len(insts[1].app.Tasks()) == 0 {
			return false, "an instance has no tasks yet"
		}
		remote = 0
		for k, w := range want {
			n, found, err := view.Lookup(ctx, k)
			if err != nil || !found || n != w {
				return false, fmt.Sprintf("Lookup(%s) = %d, %v, %v; want %d", k, n, found, err, w)
			}
			r, err := a.StoreReader("counts")
			if err != nil {
				t.Fatal(err)
			}
			o, err := r.Owner([]byte(k))
			if err != nil {
				t.Fatal(err)
			}
			if !o.Local {
				if o.Active != addrs[1] {
					return false, fmt.Sprintf("key %s: owner %+v, want instance B at %s", k, o, addrs[1])
				}
				// A cannot read it itself: the answer came from B.
				if _, _, err := view.Get(k); !isUnavailable(err, weir.StoreNotHere) {
					return false, fmt.Sprintf("A's local Get(%s) = %v, want %s", k, err, weir.StoreNotHere)
				}
				remote++
			}
		}
		return remote > 0 && remote < len(want), fmt.Sprintf("%d of %d keys answered by B", remote, len(want))
	})
	t.Logf("%d of %d keys answered by instance B over HTTP", remote, len(want))

	// Malformed requests and unknown stores get clear answers.
	for _, c := range []struct {
		store, body string
		status      int
	}{
		{"nope", keyQuery("k", ""), http.StatusNotFound},
		{"counts", `{"op":"get","key":"***"}`, http.StatusBadRequest},
		{"counts", `not json`, http.StatusBadRequest},
		{"counts", `{"op":"other"}`, http.StatusBadRequest},
		{"counts", `{"op":"windows","key":"aw=="}`, http.StatusBadRequest},
	} {
		if status, _, _ := postQuery(t, addrs[0], c.store, c.body); status != c.status {
			t.Errorf("POST %s %s = HTTP %d, want %d", c.store, c.body, status, c.status)
		}
	}
	// Keys never travel in URLs: a GET is refused.
	if resp, err := http.Get("http://" + addrs[0] + ktable.HandlerPath + "counts"); err != nil {
		t.Fatal(err)
	} else if resp.Body.Close(); resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("GET = HTTP %d, want 405", resp.StatusCode)
	}

	// B stops; its handler still listens, and answers 503.
	if err := insts[1].stop(t); err != nil {
		t.Fatal(err)
	}
	for k := range want {
		status, body, retry := postQuery(t, addrs[1], "counts", keyQuery(k, ""))
		if status != http.StatusServiceUnavailable || body.Found || body.Reason != string(weir.StoreNotRunning) || retry == "" {
			t.Fatalf("stopped B answered %s with HTTP %d %+v, want a 503 %q with Retry-After", k, status, body, weir.StoreNotRunning)
		}
		break // one key shows it: the App is not running
	}
	unavailable := 0
	kafka.Eventually(t, 90*time.Second, 100*time.Millisecond, func() (bool, string) {
		ok := 0
		for k, w := range want {
			n, found, err := view.Lookup(ctx, k)
			var ue *weir.StoreUnavailableError
			switch {
			case errors.As(err, &ue):
				unavailable++
			case err != nil:
				t.Fatalf("Lookup(%s) during the move: %v, want the count or a StoreUnavailableError", k, err)
			case !found || n != w:
				t.Fatalf("Lookup(%s) during the move = %d, %v; want %d: a stale or wrong answer", k, n, found, w)
			default:
				ok++
			}
		}
		return ok == len(want), fmt.Sprintf("%d of %d keys answered", ok, len(want))
	})
	t.Logf("during the move %d lookups were refused as unavailable, none answered wrong", unavailable)
	if n := len(a.Tasks()); n != 4 {
		t.Errorf("A runs %d tasks after B stopped, want all 4", n)
	}
}

// TestLookupFromStandbys: two instances of a DSL count with one standby
// per task, each serving its stores. Instance B's server goes away while
// B still runs its tasks (as when B hangs or is cut off, before the group
// notices): a Lookup of B's keys through A's view is then
// StoreUnreachable, and with standby reads (WithStandbyReads) it answers
// every key exactly from A's standby copies of B's partitions. A's
// handler answers the same with max_lag, and a 503 without.
func TestLookupFromStandbys(t *testing.T) {
	t.Parallel()
	c := kafka.Cluster(t)
	in, app := c.Name(t, "in"), c.Name(t, "app")
	b, want := countedKeys(t, c, in, 3)

	insts, addrs, closers := startServing(t, c, app, b, 1)
	closeB := closers[1]
	a := insts[0].app
	view, err := ktable.KeyValue(a, "counts", serde.String(), serde.Int64())
	if err != nil {
		t.Fatal(err)
	}
	r, err := a.StoreReader("counts")
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	// Every key answered exactly, some by B, and A's standbys of B's
	// partitions caught up.
	var onB []string
	kafka.Eventually(t, 90*time.Second, 200*time.Millisecond, func() (bool, string) {
		onB = onB[:0]
		for k, w := range want {
			n, found, err := view.Lookup(ctx, k)
			if err != nil || !found || n != w {
				return false, fmt.Sprintf("Lookup(%s) = %d, %v, %v; want %d", k, n, found, err, w)
			}
			o, err := r.Owner([]byte(k))
			if err != nil {
				t.Fatal(err)
			}
			if !o.Local {
				if len(o.Standbys) != 1 || o.Standbys[0] != addrs[0] || o.StandbyLag != 0 {
					return false, fmt.Sprintf("key %s: owner %+v, want its standby on A", k, o)
				}
				onB = append(onB, k)
			}
		}
		if len(onB) == 0 || len(onB) == len(want) {
			return false, fmt.Sprintf("%d of %d keys on B", len(onB), len(want))
		}
		for _, k := range onB {
			n, found, err := r.WithStandbyReads(0).Get([]byte(k))
			if err != nil || !found {
				return false, fmt.Sprintf("A's standby read of %s: %v, %v", k, found, err)
			}
			if got, _ := serde.Int64().Deserialize("counts", n); got != want[k] {
				return false, fmt.Sprintf("A's standby has %s = %d, want %d", k, got, want[k])
			}
		}
		return true, ""
	})

	closeB()
	for _, k := range onB {
		if _, _, err := view.Lookup(ctx, k); !isUnavailable(err, weir.StoreUnreachable) {
			t.Fatalf("Lookup(%s) with B unreachable = %v, want %s", k, err, weir.StoreUnreachable)
		}
		break
	}
	view = view.WithStandbyReads(100)
	for _, k := range onB {
		n, found, err := view.Lookup(ctx, k)
		if err != nil || !found || n != want[k] {
			t.Fatalf("Lookup(%s) from the standby = %d, %v, %v; want %d", k, n, found, err, want[k])
		}
		if _, _, err := view.WithStandbyReads(-1).Get(k); !isUnavailable(err, weir.StoreNotHere) {
			t.Fatalf("A's Get(%s) without standby reads = %v, want %s", k, err, weir.StoreNotHere)
		}
	}
	t.Logf("%d keys of B's partitions answered from A's standbys while B was unreachable", len(onB))

	// A's handler: with max_lag from its standby, without a 503.
	k := onB[0]
	for _, c := range []struct {
		query  string
		status int
	}{{"", http.StatusServiceUnavailable}, {`,"max_lag":10`, http.StatusOK}, {`,"max_lag":-1`, http.StatusBadRequest}, {`,"max_lag":"x"`, http.StatusBadRequest}} {
		status, body, _ := postQuery(t, addrs[0], "counts", keyQuery(k, c.query))
		if status != c.status {
			t.Errorf("POST %s%s = HTTP %d, want %d", k, c.query, status, c.status)
			continue
		}
		if c.status == http.StatusOK {
			if n, err := serde.Int64().Deserialize("counts", body.Value); err != nil || !body.Found || n != want[k] {
				t.Errorf("GET %s%s = %+v, want %d", k, c.query, body, want[k])
			}
		}
	}
}

// TestWindowLookupsAcrossInstances: two instances of a windowed DSL
// count, each serving its stores. Every key's windows are read through
// instance A's window view with Lookup, those of B's partitions over HTTP
// from B, each exact (start and count). The handler refuses a range
// holding more windows than one answer carries (413, so a view never
// reads a partial answer), a key route on a window store and a window
// route on a key-value store (400), and a malformed range (400).
func TestWindowLookupsAcrossInstances(t *testing.T) {
	t.Parallel()
	c := kafka.Cluster(t)
	in, app := c.Name(t, "in"), c.Name(t, "app")
	c.CreateTopic(t, in, 4, nil)
	b := kstream.NewBuilder()
	grouped := b.Stream("events", in, serde.String(), serde.String()).GroupByKey()
	// The records arrive out of order across keys: an hour's grace keeps
	// every one.
	grouped.WindowedBy(kstream.Tumbling(time.Minute).Grace(time.Hour)).Count("per-minute")
	grouped.WindowedBy(kstream.Tumbling(time.Millisecond).Grace(time.Hour)).Count("per-ms")
	grouped.Count("counts")

	// Keys k00 to k49: (i%3)+1 records in minute m, one in minute m+1.
	// Key "busy": one record per millisecond, 10,001 windows of per-ms.
	m := time.Now().Add(-10 * time.Minute).Truncate(time.Minute)
	type window struct {
		start time.Time
		n     int64
	}
	want := map[string][]window{}
	var msgs []*sarama.ProducerMessage
	for i := range 50 {
		k := fmt.Sprintf("k%02d", i)
		for range i%3 + 1 {
			msgs = append(msgs, &sarama.ProducerMessage{Topic: in, Key: sarama.StringEncoder(k), Value: sarama.StringEncoder("x"), Timestamp: m.Add(time.Second)})
		}
		msgs = append(msgs, &sarama.ProducerMessage{Topic: in, Key: sarama.StringEncoder(k), Value: sarama.StringEncoder("x"), Timestamp: m.Add(time.Minute + time.Second)})
		want[k] = []window{{m, int64(i%3 + 1)}, {m.Add(time.Minute), 1}}
	}
	const busy = ktable.MaxLookupWindows + 1
	for i := range busy {
		msgs = append(msgs, &sarama.ProducerMessage{Topic: in, Key: sarama.StringEncoder("busy"), Value: sarama.StringEncoder("x"), Timestamp: m.Add(time.Duration(i) * time.Millisecond)})
	}
	kafka.Produce(t, c, msgs...)

	insts, addrs, _ := startServing(t, c, app, b, 0)
	a := insts[0].app
	view, err := ktable.Window(a, "per-minute", serde.String(), serde.Int64())
	if err != nil {
		t.Fatal(err)
	}
	r, err := a.StoreReader("per-minute")
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	remote := 0
	kafka.Eventually(t, 90*time.Second, 200*time.Millisecond, func() (bool, string) {
		if len(insts[0].app.Tasks()) == 0 || len(insts[1].app.Tasks()) == 0 {
			return false, "an instance has no tasks yet"
		}
		remote = 0
		for k, w := range want {
			got, err := view.Lookup(ctx, k, m.Add(-time.Minute), m.Add(2*time.Minute))
			if err != nil {
				return false, fmt.Sprintf("Lookup(%s) = %v", k, err)
			}
			var ws []window
			for _, g := range got {
				ws = append(ws, window{g.Start, g.Value})
			}
			if fmt.Sprint(ws) != fmt.Sprint(w) {
				return false, fmt.Sprintf("Lookup(%s) = %v, want %v", k, ws, w)
			}
			o, err := r.Owner([]byte(k))
			if err != nil {
				t.Fatal(err)
			}
			if !o.Local {
				if o.Active != addrs[1] {
					return false, fmt.Sprintf("key %s: owner %+v, want instance B at %s", k, o, addrs[1])
				}
				remote++
			}
		}
		return remote > 0 && remote < len(want), fmt.Sprintf("%d of %d keys answered by B", remote, len(want))
	})
	t.Logf("%d of %d keys' windows answered by instance B over HTTP", remote, len(want))

	// The busy key's 10,001 windows, at the instance that runs it.
	ms, err := a.StoreReader("per-ms")
	if err != nil {
		t.Fatal(err)
	}
	o, err := ms.Owner([]byte("busy"))
	if err != nil {
		t.Fatal(err)
	}
	owner := addrs[0]
	if !o.Local {
		owner = addrs[1]
	}
	enc, _ := json.Marshal([]byte("busy"))
	rng := fmt.Sprintf(`,"from":%d,"to":%d`, m.UnixMilli(), m.Add(time.Minute).UnixMilli())
	windows := `{"op":"windows","key":` + string(enc) + rng + `}`
	kafka.Eventually(t, 60*time.Second, 200*time.Millisecond, func() (bool, string) {
		status, _, _ := postQuery(t, owner, "per-ms", windows)
		return status == http.StatusRequestEntityTooLarge, fmt.Sprintf("a fetch of %d windows: HTTP %d, want 413", busy, status)
	})
	// A range of fewer windows is answered.
	perMs, err := ktable.Window(a, "per-ms", serde.String(), serde.Int64())
	if err != nil {
		t.Fatal(err)
	}
	got, err := perMs.Lookup(ctx, "busy", m, m.Add(999*time.Millisecond))
	if err != nil || len(got) != 1000 || got[0].Start != m || got[999].Value != 1 {
		t.Fatalf("Lookup(busy) of one second: %d windows (%v), want 1,000", len(got), err)
	}
	// The whole minute: read here without a bound, refused by the other
	// instance.
	all, err := perMs.Lookup(ctx, "busy", m, m.Add(time.Minute))
	switch {
	case o.Local && (err != nil || len(all) != busy):
		t.Fatalf("local Lookup(busy) of the minute: %d windows (%v), want %d", len(all), err, busy)
	case !o.Local && (err == nil || !strings.Contains(err.Error(), "HTTP 413")):
		t.Fatalf("Lookup(busy) of the minute from the other instance: %d windows, %v; want its HTTP 413", len(all), err)
	}
	t.Logf("key busy (%d windows) runs on this instance: %v; a lookup of all of them: %d windows, %v", busy, o.Local, len(all), err)

	for _, c := range []struct{ store, body string }{
		{"per-minute", `{"op":"get","key":` + string(enc) + `}`},
		{"counts", windows},
		{"per-minute", `{"op":"windows","key":` + string(enc) + `,"from":"x","to":1}`},
		{"per-minute", `{"op":"windows","key":` + string(enc) + `,"from":2,"to":1}`},
		{"per-minute", `{"op":"other","key":` + string(enc) + `}`},
	} {
		if status, _, _ := postQuery(t, addrs[0], c.store, c.body); status != http.StatusBadRequest {
			t.Errorf("POST %s %s = HTTP %d, want 400", c.store, c.body, status)
		}
	}
}

// TestScansAcrossInstances: two instances of a DSL count of 6,000 keys
// over 4 partitions, each serving its stores. LookupAll through instance
// A yields every key exactly once with its exact count, the partitions of
// B read page by page from B (each holds more than a page), where A's own
// All yields only A's partitions; LookupRange and LookupPrefix yield
// exactly the keys in their bounds. Malformed scans get a 400.
func TestScansAcrossInstances(t *testing.T) {
	t.Parallel()
	c := kafka.Cluster(t)
	in, app := c.Name(t, "in"), c.Name(t, "app")
	c.CreateTopic(t, in, 4, nil)
	b := kstream.NewBuilder()
	b.Stream("events", in, serde.String(), serde.String()).GroupByKey().Count("counts")
	want := map[string]int64{}
	var msgs []*sarama.ProducerMessage
	for i := range 6000 {
		k := fmt.Sprintf("k%04d", i)
		for range i%2 + 1 {
			want[k]++
			msgs = append(msgs, &sarama.ProducerMessage{Topic: in, Key: sarama.StringEncoder(k), Value: sarama.StringEncoder("x")})
		}
	}
	kafka.Produce(t, c, msgs...)

	insts, addrs, _ := startServing(t, c, app, b, 0)
	a := insts[0].app
	view, err := ktable.KeyValue(a, "counts", serde.String(), serde.Int64())
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	local := 0
	kafka.Eventually(t, 90*time.Second, 200*time.Millisecond, func() (bool, string) {
		if len(insts[0].app.Tasks()) == 0 || len(insts[1].app.Tasks()) == 0 {
			return false, "an instance has no tasks yet"
		}
		got := map[string]int64{}
		dup := 0
		for k, n := range view.LookupAll(ctx) {
			if _, ok := got[k]; ok {
				dup++
			}
			got[k] = n
		}
		if err := view.Err(); err != nil {
			return false, fmt.Sprintf("LookupAll: %v", err)
		}
		if dup > 0 {
			t.Fatalf("LookupAll yielded %d keys twice", dup)
		}
		for k, w := range want {
			if got[k] != w {
				return false, fmt.Sprintf("LookupAll: %d keys; %s = %d, want %d", len(got), k, got[k], w)
			}
		}
		if len(got) != len(want) {
			return false, fmt.Sprintf("LookupAll: %d keys, want %d", len(got), len(want))
		}
		local = 0
		for range view.All() {
			local++
		}
		_ = view.Err() // B's partitions: not here
		return local > 0 && local < len(want), fmt.Sprintf("A's own All yields %d of %d keys", local, len(want))
	})
	t.Logf("LookupAll yielded all %d keys, %d of them from A's own partitions", len(want), local)

	count := func(seq func(func(string, int64) bool)) (map[string]int64, error) {
		got := map[string]int64{}
		for k, n := range seq {
			got[k] = n
		}
		return got, view.Err()
	}
	got, err := count(view.LookupRange(ctx, "k1000", "k1500"))
	if err != nil || len(got) != 500 || got["k1000"] != want["k1000"] || got["k1499"] != want["k1499"] {
		t.Fatalf("LookupRange(k1000, k1500): %d keys (%v), want 500", len(got), err)
	}
	got, err = count(view.LookupPrefix(ctx, "k59"))
	if err != nil || len(got) != 100 || got["k5999"] != want["k5999"] {
		t.Fatalf("LookupPrefix(k59): %d keys (%v), want 100", len(got), err)
	}

	for body, want := range map[string]int{
		`{"op":"scan","partition":"x"}`:           http.StatusBadRequest,
		`{"op":"scan","partition":9}`:             http.StatusBadRequest,
		`{"op":"scan","partition":0,"lo":"***"}`:  http.StatusBadRequest,
		`{"op":"scan","partition":0,"hi":"azAw"}`: http.StatusOK,
	} {
		status, _, _ := postQuery(t, addrs[1], "counts", body)
		if status != want && !(want == http.StatusOK && status == http.StatusServiceUnavailable) {
			t.Errorf("POST %s = HTTP %d, want %d", body, status, want)
		}
	}
}

// TestLookupsOverHTTPS: two instances serving their stores over TLS. A
// view with WithHTTPS (a client trusting their certificate) reads every
// key exactly through instance A, B's keys from B; a view without it
// cannot reach B (plain HTTP to a TLS server) and says so with
// StoreUnreachable.
func TestLookupsOverHTTPS(t *testing.T) {
	t.Parallel()
	c := kafka.Cluster(t)
	in, app := c.Name(t, "in"), c.Name(t, "app")
	b, want := countedKeys(t, c, in, 3)
	var insts [2]*instance
	var client *http.Client
	for i := range insts {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		cfg := baseConfig(c, app, t)
		cfg.Guarantee = weir.ExactlyOnce
		cfg.AdvertisedAddr = ln.Addr().String()
		insts[i] = start(t, b, cfg)
		mux := http.NewServeMux()
		mux.Handle(ktable.HandlerPath, ktable.Handler(insts[i].app, testStores))
		srv := httptest.NewUnstartedServer(mux)
		srv.Listener.Close()
		srv.Listener = ln
		srv.StartTLS() // httptest's certificate names 127.0.0.1
		t.Cleanup(srv.Close)
		client = srv.Client()
	}
	a := insts[0].app
	secure, err := ktable.KeyValue(a, "counts", serde.String(), serde.Int64())
	if err != nil {
		t.Fatal(err)
	}
	secure = secure.WithHTTPS(client)
	plain, err := ktable.KeyValue(a, "counts", serde.String(), serde.Int64())
	if err != nil {
		t.Fatal(err)
	}
	r, err := a.StoreReader("counts")
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	kafka.Eventually(t, 90*time.Second, 200*time.Millisecond, func() (bool, string) {
		if len(insts[0].app.Tasks()) == 0 || len(insts[1].app.Tasks()) == 0 {
			return false, "an instance has no tasks yet"
		}
		remote := 0
		for k, w := range want {
			n, found, err := secure.Lookup(ctx, k)
			if err != nil || !found || n != w {
				return false, fmt.Sprintf("Lookup(%s) over HTTPS = %d, %v, %v; want %d", k, n, found, err, w)
			}
			o, err := r.Owner([]byte(k))
			if err != nil {
				t.Fatal(err)
			}
			if o.Local {
				continue
			}
			remote++
			if _, _, err := plain.Lookup(ctx, k); !isUnavailable(err, weir.StoreUnreachable) {
				return false, fmt.Sprintf("plain HTTP Lookup(%s) of B's key = %v, want %s", k, err, weir.StoreUnreachable)
			}
		}
		return remote > 0, "no key of B's"
	})
}
