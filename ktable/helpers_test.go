package ktable

import (
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/processor"
	"github.com/weirstream/weir/serde"
)

// testTopology has a key-value store "kv" (string keys and values), a
// window store "win" (string keys, int64 values) and a session store
// "sess", all used by one processor.
func testTopology() *processor.Topology {
	top := processor.NewTopology()
	src := top.AddSource("in", "in", serde.String(), serde.String())
	p := top.AddProcessor("p", processor.Func(func(processor.Context[string, string], processor.Record[string, string]) error { return nil }), src)
	top.AddStore(processor.KeyValue("kv", serde.String(), serde.String()), p)
	top.AddStore(processor.Window("win", time.Minute, time.Hour, serde.String(), serde.Int64()), p)
	top.AddStore(processor.Session("sess", time.Hour, serde.String(), serde.Int64()), p)
	return top
}

// newApp returns an App of testTopology that is never run: every read of
// its stores is a *weir.StoreUnavailableError (weir.StoreNotRunning).
func newApp(t testing.TB, auth weir.Authorizer, advertised string) *weir.App {
	t.Helper()
	app, err := weir.New(testTopology(), weir.Config{
		ApplicationID:  "ktable-test",
		Brokers:        []string{"127.0.0.1:1"},
		StateDir:       t.TempDir(),
		Logger:         slog.New(slog.DiscardHandler),
		Authorizer:     auth,
		AdvertisedAddr: advertised,
	})
	if err != nil {
		t.Fatal(err)
	}
	return app
}

func kvView(t testing.TB, app *weir.App) *View[string, string] {
	t.Helper()
	v, err := KeyValue(app, "kv", serde.String(), serde.String())
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func winView(t testing.TB, app *weir.App) *WindowView[string, int64] {
	t.Helper()
	v, err := Window(app, "win", serde.String(), serde.Int64())
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// notRunning fails t unless err is a *weir.StoreUnavailableError of store
// with Reason weir.StoreNotRunning.
func notRunning(t testing.TB, what string, err error, store string) {
	t.Helper()
	var su *weir.StoreUnavailableError
	if !errors.As(err, &su) || su.Reason != weir.StoreNotRunning || su.Store != store {
		t.Errorf("%s: error %v (%T); want a *weir.StoreUnavailableError of store %s, reason %q", what, err, err, store, weir.StoreNotRunning)
	}
}

// post sends body to h at path with method and decodes the JSON answer.
func post(t testing.TB, h http.Handler, method, path, body string) (*httptest.ResponseRecorder, answer) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(method, path, strings.NewReader(body)))
	var a answer
	if err := json.Unmarshal(rec.Body.Bytes(), &a); err != nil {
		t.Fatalf("%s %s: HTTP %d, body %q is not an answer: %v", method, path, rec.Code, rec.Body, err)
	}
	if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
		t.Errorf("%s %s: Content-Type %q, want application/json", method, path, ct)
	}
	return rec, a
}

// failing is a serde that can neither serialize nor deserialize.
type failing struct{}

func (failing) Serialize(string, string) ([]byte, error) {
	return nil, errors.New("failing serde")
}

func (failing) Deserialize(string, []byte) (string, error) {
	return "", errors.New("failing serde")
}

func newRecorder() *httptest.ResponseRecorder { return httptest.NewRecorder() }

func newPost(path, body string) *http.Request {
	return httptest.NewRequest(http.MethodPost, path, strings.NewReader(body))
}
