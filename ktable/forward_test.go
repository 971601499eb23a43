package ktable

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/weirstream/weir"
)

// peer starts a server answering every request with status and body, and
// returns its host:port.
func peer(t *testing.T, status int, contentType, body string) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", contentType)
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

// ask takes a peer's answer: a 200 is decoded, a 503 is a
// *weir.StoreUnavailableError with the answer's reason and the address
// asked, an answer that is not a store answer (HTML, whatever the status)
// is StoreUnreachable saying so, any other status is an error naming it.
func TestAskAnswers(t *testing.T) {
	t.Parallel()
	o := weir.KeyOwner{Store: "s", Partition: 2, Task: "0_2"}
	const html = `<html><body>Bad gateway</body></html>`
	for _, c := range []struct {
		name, ctype, body string
		status            int
		check             func(t *testing.T, addr string, a answer, err error)
	}{
		{"found", "application/json", `{"found":true,"value":"dg=="}`, http.StatusOK, func(t *testing.T, _ string, a answer, err error) {
			if err != nil || !a.Found || string(a.Value) != "v" {
				t.Errorf("= %+v, %v; want found v", a, err)
			}
		}},
		{"not found", "application/json", `{"found":false}`, http.StatusOK, func(t *testing.T, _ string, a answer, err error) {
			if err != nil || a.Found || a.Value != nil {
				t.Errorf("= %+v, %v; want not found", a, err)
			}
		}},
		{"windows", "application/json", `{"found":false,"windows":[{"start":1000,"value":"dg=="},{"start":2000,"value":"dw=="}]}`, http.StatusOK, func(t *testing.T, _ string, a answer, err error) {
			if err != nil || len(a.Windows) != 2 || a.Windows[0].Start != 1000 || string(a.Windows[0].Value) != "v" || a.Windows[1].Start != 2000 || string(a.Windows[1].Value) != "w" {
				t.Errorf("= %+v, %v; want windows at 1000 (v) and 2000 (w)", a, err)
			}
		}},
		{"a page", "application/json", `{"found":false,"entries":[{"key":"aw==","value":"dg=="},{"key":"bA==","value":""}],"more":true}`, http.StatusOK, func(t *testing.T, _ string, a answer, err error) {
			if err != nil || len(a.Entries) != 2 || string(a.Entries[0].Key) != "k" || string(a.Entries[0].Value) != "v" || string(a.Entries[1].Key) != "l" || !a.More {
				t.Errorf("= %+v, %v; want entries k=v, l= and more", a, err)
			}
		}},
		{"unavailable", "application/json", `{"reason":"restoring","task":"0_2","partition":2,"error":"weir: store s, partition 2 (task 0_2): restoring"}`, http.StatusServiceUnavailable, func(t *testing.T, addr string, _ answer, err error) {
			var su *weir.StoreUnavailableError
			if !errors.As(err, &su) || su.Reason != weir.StoreRestoring || su.Store != "s" || su.Task != "0_2" || su.Partition != 2 || su.Instance != addr {
				t.Errorf("= %#v; want restoring, task 0_2, partition 2, instance %s", err, addr)
			} else if !strings.Contains(err.Error(), addr) {
				t.Errorf("%q does not name the instance %s", err, addr)
			}
		}},
		{"not here", "application/json", `{"reason":"not on this instance","task":"0_2","partition":2}`, http.StatusServiceUnavailable, func(t *testing.T, addr string, _ answer, err error) {
			var su *weir.StoreUnavailableError
			if !errors.As(err, &su) || su.Reason != weir.StoreNotHere || su.Instance != addr {
				t.Errorf("= %#v; want not on this instance, instance %s", err, addr)
			}
		}},
		{"HTML 200", "text/html", html, http.StatusOK, func(t *testing.T, addr string, a answer, err error) {
			unreachable(t, addr, a, err, "HTTP 200, not a store answer")
		}},
		{"empty 200", "text/plain", "", http.StatusOK, func(t *testing.T, addr string, a answer, err error) {
			unreachable(t, addr, a, err, "HTTP 200, not a store answer")
		}},
		// Another service's JSON is never taken for "not found", nor a
		// 503 without one of weir's reasons for a store's refusal.
		{"JSON 200 without found", "application/json", `{"status":"ok"}`, http.StatusOK, func(t *testing.T, addr string, a answer, err error) {
			unreachable(t, addr, a, err, "HTTP 200, not a store answer")
		}},
		{"null 200", "application/json", `null`, http.StatusOK, func(t *testing.T, addr string, a answer, err error) {
			unreachable(t, addr, a, err, "HTTP 200, not a store answer")
		}},
		{"JSON 503 without a reason", "application/json", `{"message":"upstream down"}`, http.StatusServiceUnavailable, func(t *testing.T, addr string, a answer, err error) {
			unreachable(t, addr, a, err, "HTTP 503, not a store answer")
		}},
		{"JSON 503 with an unknown reason", "application/json", `{"reason":"bogus"}`, http.StatusServiceUnavailable, func(t *testing.T, addr string, a answer, err error) {
			unreachable(t, addr, a, err, "HTTP 503, not a store answer")
		}},
		{"HTML 500", "text/html", html, http.StatusInternalServerError, func(t *testing.T, addr string, a answer, err error) {
			unreachable(t, addr, a, err, "HTTP 500, not a store answer")
		}},
		// A proxy's 503 is not a store's: it carries no reason.
		{"HTML 503", "text/html", html, http.StatusServiceUnavailable, func(t *testing.T, addr string, a answer, err error) {
			unreachable(t, addr, a, err, "HTTP 503, not a store answer")
		}},
		{"JSON 500", "application/json", `{"error":"boom"}`, http.StatusInternalServerError, func(t *testing.T, addr string, a answer, err error) {
			failed(t, addr, a, err, "answered HTTP 500: boom")
		}},
		{"413", "application/json", `{"error":"the range holds more than 10000 windows"}`, http.StatusRequestEntityTooLarge, func(t *testing.T, addr string, a answer, err error) {
			failed(t, addr, a, err, "answered HTTP 413: the range holds more")
		}},
		{"403", "application/json", `{"error":"not authorized"}`, http.StatusForbidden, func(t *testing.T, addr string, a answer, err error) {
			failed(t, addr, a, err, "answered HTTP 403: not authorized")
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			addr := peer(t, c.status, c.ctype, c.body)
			a, err := ask(t.Context(), defaultForwarding(), o, addr, query{Op: "get", Key: []byte("k")}, -1)
			c.check(t, addr, a, err)
		})
	}
}

func unreachable(t *testing.T, addr string, a answer, err error, says string) {
	t.Helper()
	var su *weir.StoreUnavailableError
	if !errors.As(err, &su) || su.Reason != weir.StoreUnreachable || su.Instance != addr || su.Err == nil || !strings.Contains(err.Error(), says) {
		t.Errorf("= %+v, %v; want unreachable (instance %s) saying %q", a, err, addr, says)
	}
	if a.Found || a.Value != nil {
		t.Errorf("an error with data: %+v", a)
	}
}

func failed(t *testing.T, addr string, a answer, err error, says string) {
	t.Helper()
	var su *weir.StoreUnavailableError
	if err == nil || errors.As(err, &su) || !strings.Contains(err.Error(), says) || !strings.Contains(err.Error(), addr) {
		t.Errorf("= %+v, %v; want an error (not unavailability) naming %s and saying %q", a, err, addr, says)
	}
	if a.Found || a.Value != nil {
		t.Errorf("an error with data: %+v", a)
	}
}

// ask POSTs the query as JSON to HandlerPath + the path-escaped store
// name, with max_lag only when maxLag >= 0.
func TestAskRequest(t *testing.T) {
	t.Parallel()
	type got struct {
		method, path, ctype string
		q                   query
		raw                 map[string]any
	}
	reqs := make(chan got, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		g := got{method: r.Method, path: r.URL.EscapedPath(), ctype: r.Header.Get("Content-Type")}
		_ = json.Unmarshal(b, &g.q)
		_ = json.Unmarshal(b, &g.raw)
		reqs <- g
		_, _ = io.WriteString(w, `{"found":false}`)
	}))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	for _, c := range []struct {
		name     string
		store    string
		q        query
		maxLag   int64
		wantPath string
	}{
		{"get", "counts", query{Op: "get", Key: []byte("k")}, -1, HandlerPath + "counts"},
		{"get with standby lag 0", "counts", query{Op: "get", Key: []byte("k")}, 0, HandlerPath + "counts"},
		{"scan with standby lag 3", "counts", query{Op: "scan", Partition: 4, Lo: []byte("a"), Hi: []byte("b")}, 3, HandlerPath + "counts"},
		{"windows", "per-minute", query{Op: "windows", Key: []byte("k"), From: 1000, To: 2000}, -1, HandlerPath + "per-minute"},
		{"an escaped name", "a b/c?", query{Op: "get", Key: []byte("k")}, -1, HandlerPath + "a%20b%2Fc%3F"},
	} {
		o := weir.KeyOwner{Store: c.store, Task: "0_0"}
		if _, err := ask(t.Context(), defaultForwarding(), o, addr, c.q, c.maxLag); err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		g := <-reqs
		if g.method != http.MethodPost || g.path != c.wantPath || g.ctype != "application/json" {
			t.Errorf("%s: %s %s (%s); want POST %s (application/json)", c.name, g.method, g.path, g.ctype, c.wantPath)
		}
		want := c.q
		if c.maxLag >= 0 {
			want.MaxLag = &c.maxLag
		}
		if g.q.Op != want.Op || string(g.q.Key) != string(want.Key) || g.q.From != want.From || g.q.To != want.To ||
			g.q.Partition != want.Partition || string(g.q.Lo) != string(want.Lo) || string(g.q.Hi) != string(want.Hi) {
			t.Errorf("%s: the peer read %+v; want %+v", c.name, g.q, want)
		}
		_, hasLag := g.raw["max_lag"]
		switch {
		case c.maxLag < 0 && hasLag:
			t.Errorf("%s: max_lag sent without standby reads: %v", c.name, g.raw)
		case c.maxLag >= 0 && (g.q.MaxLag == nil || *g.q.MaxLag != c.maxLag):
			t.Errorf("%s: max_lag %v; want %d", c.name, g.raw["max_lag"], c.maxLag)
		}
	}
}

// An instance that does not answer, a cancelled lookup, and a failing
// credentials hook are errors; only the first two are unreachability,
// and the last sends nothing.
func TestAskFailures(t *testing.T) {
	t.Parallel()
	o := weir.KeyOwner{Store: "s", Partition: 1, Task: "0_1"}
	q := query{Op: "get", Key: []byte("k")}

	closed := httptest.NewServer(http.NotFoundHandler())
	addr := strings.TrimPrefix(closed.URL, "http://")
	closed.Close()
	_, err := ask(t.Context(), defaultForwarding(), o, addr, q, -1)
	var su *weir.StoreUnavailableError
	if !errors.As(err, &su) || su.Reason != weir.StoreUnreachable || su.Instance != addr || su.Err == nil ||
		su.Store != "s" || su.Partition != 1 || su.Task != "0_1" {
		t.Errorf("ask of a closed server = %#v; want unreachable, instance %s, with the owner's partition and the cause", err, addr)
	}

	var reached atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		reached.Add(1)
		_, _ = io.WriteString(w, `{"found":true,"value":"dg=="}`)
	}))
	defer srv.Close()
	live := strings.TrimPrefix(srv.URL, "http://")

	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err = ask(ctx, defaultForwarding(), o, live, q, -1)
	if !errors.As(err, &su) || su.Reason != weir.StoreUnreachable || !errors.Is(err, context.Canceled) {
		t.Errorf("a cancelled ask = %v; want unreachable for context.Canceled", err)
	}

	fw := defaultForwarding()
	fw.credentials = func(*http.Request) error { return errors.New("no token") }
	_, err = ask(t.Context(), fw, o, live, q, -1)
	if err == nil || errors.As(err, &su) || !strings.Contains(err.Error(), "adding credentials: no token") {
		t.Errorf("ask with failing credentials = %v; want a credentials error", err)
	}
	if n := reached.Load(); n != 0 {
		t.Errorf("the instance was reached %d times without credentials or after the lookup was cancelled", n)
	}
}

// A view's forwarding is what its With methods made it: the copy's
// client, scheme and credentials reach the peer, the original's stay as
// they were.
func TestViewCopiesForwardTheirOwnWay(t *testing.T) {
	t.Parallel()
	var auth atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		auth.Store(r.Header.Get("Authorization"))
		_, _ = io.WriteString(w, `{"found":true,"value":"dg=="}`)
	}))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	v := kvView(t, newApp(t, weir.AllowAll, ""))
	q := query{Op: "get", Key: []byte("k")}
	get := func(fw forwarding) (string, error) {
		auth.Store("")
		a, err := ask(t.Context(), fw, owner, addr, q, -1)
		if err == nil && (!a.Found || string(a.Value) != "v") {
			t.Errorf("answer %+v", a)
		}
		return auth.Load().(string), err
	}

	creds := v.WithCredentials(func(r *http.Request) error { r.Header.Set("Authorization", "Bearer t"); return nil })
	if h, err := get(creds.fw); err != nil || h != "Bearer t" {
		t.Errorf("the copy with credentials sent Authorization %q (%v)", h, err)
	}
	if h, err := get(v.fw); err != nil || h != "" {
		t.Errorf("the original sent Authorization %q (%v)", h, err)
	}

	var trips atomic.Int32
	c := &http.Client{Transport: roundTripper(func(r *http.Request) (*http.Response, error) {
		trips.Add(1)
		return http.DefaultTransport.RoundTrip(r)
	})}
	withClient := v.WithClient(c)
	if _, err := get(withClient.fw); err != nil || trips.Load() != 1 {
		t.Errorf("the copy with a client: %v, %d round trips through it; want 1", err, trips.Load())
	}
	if _, err := get(v.fw); err != nil || trips.Load() != 1 {
		t.Errorf("the original: %v, and it used the copy's client (%d round trips)", err, trips.Load())
	}

	// An HTTPS view speaks TLS to a plain HTTP peer: it cannot be
	// answered; the original still is.
	https := v.WithHTTPS(c)
	if _, err := get(https.fw); err == nil {
		t.Error("an HTTPS lookup of a plain HTTP server was answered")
	}
	if _, err := get(v.fw); err != nil {
		t.Errorf("the original after WithHTTPS: %v", err)
	}
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// A view's request to another instance's Handler, end to end: the
// handler's 503 becomes the view's *weir.StoreUnavailableError, its 4xx
// an error naming the status; the store name survives escaping.
func TestAskHandlerRoundTrip(t *testing.T) {
	t.Parallel()
	serve := func(auth weir.Authorizer) string {
		srv := httptest.NewServer(Handler(newApp(t, auth, ""), ServeStores("kv", "win", "a/b")))
		t.Cleanup(srv.Close)
		return strings.TrimPrefix(srv.URL, "http://")
	}
	open := serve(weir.AllowAll)
	closed := serve(nil)
	for _, c := range []struct {
		name, addr, store string
		q                 query
		maxLag            int64
		wantReason        weir.StoreUnavailableReason // or
		wantErr           string
	}{
		{"get", open, "kv", query{Op: "get", Key: []byte("k")}, -1, weir.StoreNotRunning, ""},
		{"get from a standby", open, "kv", query{Op: "get", Key: []byte("k")}, 4, weir.StoreNotRunning, ""},
		{"scan", open, "kv", query{Op: "scan", Partition: 1, Lo: []byte("a")}, -1, weir.StoreNotRunning, ""},
		{"windows", open, "win", query{Op: "windows", Key: []byte("k"), From: 1, To: 2}, -1, weir.StoreNotRunning, ""},
		{"windows from after to", open, "win", query{Op: "windows", Key: []byte("k"), From: 2, To: 1}, -1, "", "answered HTTP 400: from and to"},
		{"windows of a key-value store", open, "kv", query{Op: "windows", Key: []byte("k")}, -1, "", "answered HTTP 400: store kv is read with op"},
		{"a store not served", open, "sess", query{Op: "get", Key: []byte("k")}, -1, "", "answered HTTP 404: no such store here"},
		{"an escaped name", open, "a/b", query{Op: "get", Key: []byte("k")}, -1, "", `answered HTTP 404: weir: no store "a/b"`},
		{"no authorizer", closed, "kv", query{Op: "get", Key: []byte("k")}, -1, "", "answered HTTP 403: not authorized"},
	} {
		o := weir.KeyOwner{Store: c.store, Partition: 1, Task: "0_1"}
		_, err := ask(t.Context(), defaultForwarding(), o, c.addr, c.q, c.maxLag)
		var su *weir.StoreUnavailableError
		if c.wantReason != "" {
			if !errors.As(err, &su) || su.Reason != c.wantReason || su.Instance != c.addr || su.Store != c.store {
				t.Errorf("%s: %v; want unavailable (%s) at %s", c.name, err, c.wantReason, c.addr)
			}
			continue
		}
		if err == nil || errors.As(err, &su) || !strings.Contains(err.Error(), c.wantErr) {
			t.Errorf("%s: %v; want an error saying %q", c.name, err, c.wantErr)
		}
	}
}

// forward asks the active instance; when that fails with unavailability
// and the reader allows standby reads, this instance's standby copy (when
// it holds one), then the other standbys, with the reader's lag bound;
// the active's error when none answers.
func TestForward(t *testing.T) {
	t.Parallel()
	const self = "127.0.0.1:9"
	app := newApp(t, weir.AllowAll, self)
	r, err := app.StoreReader("kv")
	if err != nil {
		t.Fatal(err)
	}
	r5 := r.WithStandbyReads(5)
	activeDown := &weir.StoreUnavailableError{Store: "kv", Partition: 0, Task: "0_0", Reason: weir.StoreUnreachable, Instance: "active:1"}
	notHere := &weir.StoreUnavailableError{Store: "kv", Partition: 0, Task: "0_0", Reason: weir.StoreNotHere}
	boom := errors.New("boom")
	type call struct {
		addr   string
		maxLag int64
	}
	for _, c := range []struct {
		name      string
		r         *weir.StoreReader
		o         weir.KeyOwner
		ctxDone   bool
		local     error            // the local read's error
		remote    map[string]error // by address; missing: answers
		want      string           // the instance that answered; "" for an error
		wantErr   func(error) bool // when want is ""
		wantAsks  []call           // remote calls, in order
		wantLocal bool             // this instance's standby read
	}{
		{name: "the active answers", r: r5,
			o:    weir.KeyOwner{Store: "kv", Task: "0_0", Active: "active:1", Standbys: []string{"sb:1"}},
			want: "active:1", wantAsks: []call{{"active:1", -1}}},
		{name: "no active, no standby reads", r: r,
			o:        weir.KeyOwner{Store: "kv", Partition: 3, Task: "0_3", Standbys: []string{"sb:1"}},
			wantErr:  isReason(weir.StoreMoving, "0_3"),
			wantAsks: nil},
		{name: "the active is down, no standby reads", r: r,
			o:        weir.KeyOwner{Store: "kv", Task: "0_0", Active: "active:1", Standbys: []string{"sb:1"}},
			remote:   map[string]error{"active:1": activeDown},
			wantErr:  func(err error) bool { return err == activeDown },
			wantAsks: []call{{"active:1", -1}}},
		{name: "the active fails otherwise", r: r5,
			o:        weir.KeyOwner{Store: "kv", Task: "0_0", Active: "active:1", Standbys: []string{"sb:1"}},
			remote:   map[string]error{"active:1": boom},
			wantErr:  func(err error) bool { return err == boom },
			wantAsks: []call{{"active:1", -1}}},
		{name: "a standby answers", r: r5,
			o:        weir.KeyOwner{Store: "kv", Task: "0_0", Active: "active:1", Standbys: []string{"sb:1", "sb:2"}},
			remote:   map[string]error{"active:1": activeDown},
			want:     "sb:1",
			wantAsks: []call{{"active:1", -1}, {"sb:1", 5}}},
		{name: "the second standby answers", r: r5,
			o:        weir.KeyOwner{Store: "kv", Task: "0_0", Active: "active:1", Standbys: []string{"sb:1", "sb:2"}},
			remote:   map[string]error{"active:1": activeDown, "sb:1": boom},
			want:     "sb:2",
			wantAsks: []call{{"active:1", -1}, {"sb:1", 5}, {"sb:2", 5}}},
		{name: "no active, a standby answers", r: r5,
			o:        weir.KeyOwner{Store: "kv", Task: "0_0", Standbys: []string{"sb:1"}},
			want:     "sb:1",
			wantAsks: []call{{"sb:1", 5}}},
		{name: "this instance's standby answers first", r: r5,
			o:        weir.KeyOwner{Store: "kv", Task: "0_0", Active: "active:1", Standbys: []string{"a:1", self}},
			remote:   map[string]error{"active:1": activeDown},
			want:     self,
			wantAsks: []call{{"active:1", -1}}, wantLocal: true},
		{name: "this instance's standby fails, not asked over HTTP", r: r5,
			o:        weir.KeyOwner{Store: "kv", Task: "0_0", Active: "active:1", Standbys: []string{self, "z:1"}},
			local:    notHere,
			remote:   map[string]error{"active:1": activeDown},
			want:     "z:1",
			wantAsks: []call{{"active:1", -1}, {"z:1", 5}}, wantLocal: true},
		{name: "none answers: the active's error", r: r5,
			o:        weir.KeyOwner{Store: "kv", Task: "0_0", Active: "active:1", Standbys: []string{"sb:1", self}},
			local:    notHere,
			remote:   map[string]error{"active:1": activeDown, "sb:1": notHere},
			wantErr:  func(err error) bool { return err == activeDown },
			wantAsks: []call{{"active:1", -1}, {"sb:1", 5}}, wantLocal: true},
		{name: "cancelled: no standby asked", r: r5, ctxDone: true,
			o:        weir.KeyOwner{Store: "kv", Task: "0_0", Active: "active:1", Standbys: []string{"sb:1", self}},
			remote:   map[string]error{"active:1": activeDown},
			wantErr:  func(err error) bool { return err == activeDown },
			wantAsks: []call{{"active:1", -1}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			if c.ctxDone {
				cancel()
			}
			var asks []call
			locals := 0
			a, from, err := forward(ctx, c.r, c.o,
				func() (answer, error) {
					locals++
					if c.local != nil {
						return answer{}, c.local
					}
					return answer{Found: true, Value: []byte(self)}, nil
				},
				func(addr string, maxLag int64) (answer, error) {
					asks = append(asks, call{addr, maxLag})
					if err := c.remote[addr]; err != nil {
						return answer{}, err
					}
					return answer{Found: true, Value: []byte(addr)}, nil
				})
			if c.want != "" {
				if err != nil || from != c.want || !a.Found || string(a.Value) != c.want {
					t.Errorf("= %+v from %q, %v; want the answer of %s", a, from, err, c.want)
				}
			} else if a.Found || from != "" || !c.wantErr(err) {
				t.Errorf("= %+v from %q, %v; want an error", a, from, err)
			}
			if len(asks) != len(c.wantAsks) {
				t.Fatalf("asked %v; want %v", asks, c.wantAsks)
			}
			for i := range asks {
				if asks[i] != c.wantAsks[i] {
					t.Fatalf("asked %v; want %v", asks, c.wantAsks)
				}
			}
			if want := map[bool]int{true: 1}[c.wantLocal]; locals != want {
				t.Errorf("read this instance's standby %d times; want %d", locals, want)
			}
		})
	}
}

func isReason(reason weir.StoreUnavailableReason, task string) func(error) bool {
	return func(err error) bool {
		var su *weir.StoreUnavailableError
		return errors.As(err, &su) && su.Reason == reason && su.Task == task
	}
}
