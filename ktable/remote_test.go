package ktable

import (
	"context"
	"encoding/base64"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/processor"
	"github.com/weirstream/weir/serde"
)

var owner = weir.KeyOwner{Store: "s", Partition: 0, Task: "0_0"}

// An address that is not a plain host:port (a member may advertise
// anything) is refused before any request: no member can point a lookup
// at a path of its choosing, such as a cloud metadata endpoint.
func TestAskRefusesAnAddressThatIsNotHostPort(t *testing.T) {
	t.Parallel()
	for _, addr := range []string{"evil/x?:80", "169.254.169.254:80/latest/meta-data/?leak=", "user@h:80"} {
		_, err := ask(context.Background(), defaultForwarding(), owner, addr, query{Op: "get", Key: []byte("k")}, -1)
		var su *weir.StoreUnavailableError
		if !errors.As(err, &su) || su.Reason != weir.StoreUnreachable || !strings.Contains(err.Error(), "host:port") {
			t.Errorf("ask(%q) = %v; want it unreachable for its address", addr, err)
		}
	}
}

// A redirect is never followed, whatever the view's client says: the
// answer must be the addressed instance's own.
func TestAskFollowsNoRedirect(t *testing.T) {
	t.Parallel()
	var reached atomic.Int32
	elsewhere := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		reached.Add(1)
		_, _ = io.WriteString(w, `{"found":true,"value":"Zm9yZ2Vk"}`)
	}))
	defer elsewhere.Close()
	redirecting := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, elsewhere.URL+HandlerPath+"s", http.StatusTemporaryRedirect)
	}))
	defer redirecting.Close()
	addr := strings.TrimPrefix(redirecting.URL, "http://")
	v := &View[string, string]{fw: defaultForwarding()}
	v = v.WithClient(&http.Client{}) // a client that would follow redirects
	for _, fw := range []forwarding{defaultForwarding(), v.fw} {
		a, err := ask(context.Background(), fw, owner, addr, query{Op: "get", Key: []byte("k")}, -1)
		if err == nil {
			t.Fatalf("a redirected lookup answered %+v", a)
		}
	}
	if n := reached.Load(); n != 0 {
		t.Fatalf("the redirect was followed %d times", n)
	}
}

// Keys travel in the request's body, never in its URL (which proxies and
// servers log), and never in the error of a failed lookup; the view's
// credentials hook runs on every forwarded request; an answer over the
// bound is refused.
func TestAskKeepsKeysOutOfURLsAndErrors(t *testing.T) {
	t.Parallel()
	key := []byte("secret-customer-42")
	enc := base64.StdEncoding.EncodeToString(key)
	var gotURL, gotBody, gotAuth string
	big := false
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		gotURL, gotBody, gotAuth = r.URL.String(), string(b), r.Header.Get("Authorization")
		if big {
			_, _ = io.WriteString(w, `{"found":true,"value":"`+strings.Repeat("A", maxAnswerBytes)+`"}`)
			return
		}
		w.WriteHeader(http.StatusInternalServerError)
		_, _ = io.WriteString(w, `{"error":"boom"}`)
	}))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	fw := defaultForwarding()
	fw.credentials = func(r *http.Request) error { r.Header.Set("Authorization", "Bearer t0ken"); return nil }
	_, err := ask(context.Background(), fw, owner, addr, query{Op: "get", Key: key}, -1)
	if err == nil {
		t.Fatal("a 500 answer was taken for a value")
	}
	if gotURL != HandlerPath+"s" {
		t.Errorf("the request went to %q, want %q", gotURL, HandlerPath+"s")
	}
	for _, s := range []string{gotURL, err.Error()} {
		if strings.Contains(s, string(key)) || strings.Contains(s, enc) || strings.Contains(s, base64.RawURLEncoding.EncodeToString(key)) {
			t.Errorf("%q holds the key", s)
		}
	}
	if !strings.Contains(gotBody, enc) {
		t.Errorf("the body %q does not carry the key", gotBody)
	}
	if gotAuth != "Bearer t0ken" {
		t.Errorf("the credentials hook did not run: Authorization %q", gotAuth)
	}
	big = true
	if _, err := ask(context.Background(), fw, owner, addr, query{Op: "get", Key: key}, -1); err == nil || !strings.Contains(err.Error(), "over") {
		t.Errorf("an answer over %d bytes = %v; want it refused", maxAnswerBytes, err)
	}
}

// The handler serves only the stores ServeStores names (any other is
// 404, as an unknown one) and only to requests the application's
// authorizer allows (403, and always without an authorizer), before it
// reads anything; it takes POST only.
func TestHandlerServesOnlyWhatIsAllowed(t *testing.T) {
	t.Parallel()
	top := processor.NewTopology()
	src := top.AddSource("in", "in", serde.String(), serde.String())
	p := top.AddProcessor("p", processor.Func(func(processor.Context[string, string], processor.Record[string, string]) error { return nil }), src)
	top.AddStore(processor.KeyValue("s", serde.String(), serde.String()), p)
	top.AddStore(processor.KeyValue("private", serde.String(), serde.String()), p)
	deny := weir.AuthorizerFunc(func(*http.Request, weir.Resource) error { return errors.New("no") })
	onlyS := weir.AuthorizerFunc(func(_ *http.Request, r weir.Resource) error {
		if r == weir.StoreResource("s") {
			return nil
		}
		return errors.New("no")
	})
	for _, c := range []struct {
		name   string
		auth   weir.Authorizer
		opts   []HandlerOption
		store  string
		method string
		want   int
	}{
		{"no store named", weir.AllowAll, nil, "s", http.MethodPost, http.StatusNotFound},
		{"a store not named", weir.AllowAll, []HandlerOption{ServeStores("s")}, "private", http.MethodPost, http.StatusNotFound},
		{"no authorizer", nil, []HandlerOption{ServeStores("s")}, "s", http.MethodPost, http.StatusForbidden},
		{"refused", deny, []HandlerOption{ServeStores("s", "private")}, "s", http.MethodPost, http.StatusForbidden},
		{"refused for another store", onlyS, []HandlerOption{ServeStores("s", "private")}, "private", http.MethodPost, http.StatusForbidden},
		{"GET", weir.AllowAll, []HandlerOption{ServeStores("s")}, "s", http.MethodGet, http.StatusMethodNotAllowed},
		// Allowed: it reads, and the App is not running.
		{"allowed", onlyS, []HandlerOption{ServeStores("s")}, "s", http.MethodPost, http.StatusServiceUnavailable},
	} {
		app, err := weir.New(top, weir.Config{ApplicationID: "a", Brokers: []string{"127.0.0.1:1"}, StateDir: t.TempDir(),
			Logger: slog.New(slog.DiscardHandler), Authorizer: c.auth})
		if err != nil {
			t.Fatal(err)
		}
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(c.method, HandlerPath+c.store, strings.NewReader(`{"op":"get","key":"aw=="}`))
		Handler(app, c.opts...).ServeHTTP(rec, req)
		if rec.Code != c.want && !(c.want == http.StatusServiceUnavailable && rec.Code == http.StatusNotFound) {
			t.Errorf("%s: HTTP %d %s, want %d", c.name, rec.Code, rec.Body, c.want)
		}
		if c.want == http.StatusServiceUnavailable && (rec.Code == http.StatusForbidden || strings.Contains(rec.Body.String(), "no such store")) {
			t.Errorf("%s: refused: HTTP %d %s", c.name, rec.Code, rec.Body)
		}
	}
}

// FuzzQueryAnswer: another instance's answer is untrusted bytes; a view
// takes it, or fails with an error, never panics. The same bytes as a
// query reach a handler, which answers without a panic.
func FuzzQueryAnswer(f *testing.F) {
	f.Add([]byte(`{"found":true,"value":"dg=="}`), 200)
	f.Add([]byte(`{"windows":[{"start":1,"value":"dg=="}],"entries":[{"key":"aw==","value":""}],"more":true}`), 200)
	f.Add([]byte(`{"reason":"restoring","partition":-5}`), 503)
	f.Add([]byte(`{"op":"scan","partition":-1,"lo":"aw==","max_lag":-1}`), 200)
	var body atomic.Value
	var status atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(int(status.Load()))
		_, _ = w.Write(body.Load().([]byte))
	}))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	top := processor.NewTopology()
	src := top.AddSource("in", "in", serde.String(), serde.String())
	p := top.AddProcessor("p", processor.Func(func(processor.Context[string, string], processor.Record[string, string]) error { return nil }), src)
	top.AddStore(processor.KeyValue("s", serde.String(), serde.String()), p)
	app, err := weir.New(top, weir.Config{ApplicationID: "a", Brokers: []string{"127.0.0.1:1"}, StateDir: f.TempDir(),
		Logger: slog.New(slog.DiscardHandler), Authorizer: weir.AllowAll})
	if err != nil {
		f.Fatal(err)
	}
	h := Handler(app, ServeStores("s"))
	f.Fuzz(func(t *testing.T, b []byte, code int) {
		if code < 200 || code > 599 {
			code = 200
		}
		body.Store(b)
		status.Store(int64(code))
		_, _ = ask(context.Background(), defaultForwarding(), owner, addr, query{Op: "get", Key: []byte("k")}, -1)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, HandlerPath+"s", strings.NewReader(string(b))))
		if rec.Code == http.StatusOK {
			t.Fatalf("a handler whose App is not running answered 200 to %q", b)
		}
	})
}
