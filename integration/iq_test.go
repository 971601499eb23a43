package integration

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
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
	mux.Handle(ktable.HandlerPath, ktable.Handler(app))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return func() { _ = srv.Close() }
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
	for path, status := range map[string]int{
		ktable.HandlerPath + "nope/keys/" + base64.RawURLEncoding.EncodeToString([]byte("k")): http.StatusNotFound,
		ktable.HandlerPath + "counts/keys/***":                                                http.StatusBadRequest,
		ktable.HandlerPath + "counts":                                                         http.StatusBadRequest,
	} {
		resp, err := http.Get("http://" + addrs[0] + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != status {
			t.Errorf("GET %s = HTTP %d, want %d", path, resp.StatusCode, status)
		}
	}

	// B stops; its handler still listens, and answers 503.
	if err := insts[1].stop(t); err != nil {
		t.Fatal(err)
	}
	for k := range want {
		resp, err := http.Get("http://" + addrs[1] + ktable.HandlerPath + "counts/keys/" + base64.RawURLEncoding.EncodeToString([]byte(k)))
		if err != nil {
			t.Fatal(err)
		}
		var body struct {
			Found  bool   `json:"found"`
			Reason string `json:"reason"`
		}
		err = json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusServiceUnavailable || body.Found || body.Reason != weir.StoreNotRunning || resp.Header.Get("Retry-After") == "" {
			t.Fatalf("stopped B answered %s with HTTP %d %+v (%v), want a 503 %q with Retry-After", k, resp.StatusCode, body, err, weir.StoreNotRunning)
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
	view.WithStandbyReads(100)
	for _, k := range onB {
		n, found, err := view.Lookup(ctx, k)
		if err != nil || !found || n != want[k] {
			t.Fatalf("Lookup(%s) from the standby = %d, %v, %v; want %d", k, n, found, err, want[k])
		}
		if _, _, err := view.WithStandbyReads(-1).Get(k); !isUnavailable(err, weir.StoreNotHere) {
			t.Fatalf("A's Get(%s) without standby reads = %v, want %s", k, err, weir.StoreNotHere)
		}
		view.WithStandbyReads(100)
	}
	t.Logf("%d keys of B's partitions answered from A's standbys while B was unreachable", len(onB))

	// A's handler: with max_lag from its standby, without a 503.
	k := onB[0]
	u := "http://" + addrs[0] + ktable.HandlerPath + "counts/keys/" + base64.RawURLEncoding.EncodeToString([]byte(k))
	for _, c := range []struct {
		query  string
		status int
	}{{"", http.StatusServiceUnavailable}, {"?max_lag=10", http.StatusOK}, {"?max_lag=-1", http.StatusBadRequest}, {"?max_lag=x", http.StatusBadRequest}} {
		resp, err := http.Get(u + c.query)
		if err != nil {
			t.Fatal(err)
		}
		var body struct {
			Found bool   `json:"found"`
			Value []byte `json:"value"`
		}
		err = json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		if resp.StatusCode != c.status || err != nil {
			t.Errorf("GET %s%s = HTTP %d (%v), want %d", k, c.query, resp.StatusCode, err, c.status)
			continue
		}
		if c.status == http.StatusOK {
			if n, err := serde.Int64().Deserialize("counts", body.Value); err != nil || !body.Found || n != want[k] {
				t.Errorf("GET %s%s = %+v, want %d", k, c.query, body, want[k])
			}
		}
	}
}
