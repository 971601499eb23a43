package weir

import (
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/weirstream/weir/kstream"
	"github.com/weirstream/weir/serde"
)

// consoleApp returns an App of a word count, not running, whose handler
// is served for the test.
func consoleApp(t *testing.T, cc ConsoleConfig, auth Authorizer) (*App, *httptest.Server) {
	t.Helper()
	b := kstream.NewBuilder()
	b.Stream("lines", "text", serde.String(), serde.String()).
		FlatMapValues(strings.Fields, kstream.Named("split")).
		GroupBy("by-word", func(_, w string) string { return w }, serde.String(), serde.String()).
		Count("counts").
		ToStream().
		To("counted", serde.String(), serde.Int64())
	app, err := New(b, Config{ApplicationID: "console-test", Brokers: []string{"127.0.0.1:1"}, StateDir: t.TempDir(),
		Console: cc, Authorizer: auth, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(app.Handler())
	t.Cleanup(srv.Close)
	return app, srv
}

// get returns the status and body of GET path on srv.
func get(t *testing.T, srv *httptest.Server, path string) (int, string) {
	t.Helper()
	resp, err := srv.Client().Get(srv.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

var consolePaths = []string{"/weir/", "/weir/console.js", "/weir/console.css", "/weir/api/instance", "/weir/api/cluster", "/weir/api/topology"}

// The console is off unless the application turns it on: every path under
// /weir/ is then 404, whatever the authorizer says, and the health
// endpoints are as before.
func TestConsoleOffByDefault(t *testing.T) {
	t.Parallel()
	_, srv := consoleApp(t, ConsoleConfig{}, AllowAll)
	for _, path := range consolePaths {
		if code, _ := get(t, srv, path); code != http.StatusNotFound {
			t.Errorf("GET %s with the console off: %d, want 404", path, code)
		}
	}
	if code, body := get(t, srv, "/healthz"); code != http.StatusOK || strings.TrimSpace(body) != "created" {
		t.Errorf("/healthz: %d %q", code, body)
	}
}

// With the console on, every request passes the authorizer with
// ConsoleResource: without an authorizer, or refused, it is 403, as a
// store query is.
func TestConsoleAuthorizes(t *testing.T) {
	t.Parallel()
	_, noAuth := consoleApp(t, ConsoleConfig{Enabled: true}, nil)
	var asked []Resource
	_, refusing := consoleApp(t, ConsoleConfig{Enabled: true}, AuthorizerFunc(func(_ *http.Request, r Resource) error {
		asked = append(asked, r)
		return errors.New("not you")
	}))
	for _, path := range consolePaths {
		if code, body := get(t, noAuth, path); code != http.StatusForbidden || strings.Contains(body, "console-test") {
			t.Errorf("GET %s without an authorizer: %d %q, want 403 and nothing else", path, code, body)
		}
		asked = asked[:0]
		if code, _ := get(t, refusing, path); code != http.StatusForbidden {
			t.Errorf("GET %s refused: %d, want 403", path, code)
		}
		if len(asked) == 0 || asked[0] != ConsoleResource {
			t.Errorf("GET %s asked the authorizer for %v, want %q first", path, asked, ConsoleResource)
		}
	}
}

// Allowed, the console serves its page and its API: the topology with
// its nodes, edges and stores, and the instance's figures before Run.
func TestConsoleServesPageAndAPI(t *testing.T) {
	t.Parallel()
	_, srv := consoleApp(t, ConsoleConfig{Enabled: true}, AuthorizerFunc(func(_ *http.Request, r Resource) error {
		if r == ConsoleResource {
			return nil
		}
		return errors.New("console only")
	}))
	code, page := get(t, srv, "/weir/")
	if code != http.StatusOK || !strings.Contains(page, `<script src="console.js"`) {
		t.Fatalf("GET /weir/: %d %q", code, page)
	}
	code, body := get(t, srv, "/weir/api/topology")
	if code != http.StatusOK {
		t.Fatalf("topology: %d %s", code, body)
	}
	var top struct {
		ApplicationID string `json:"application_id"`
		Subtopologies []struct {
			ID    int `json:"id"`
			Nodes []struct {
				Name     string   `json:"name"`
				Kind     string   `json:"kind"`
				Topic    string   `json:"topic"`
				Internal bool     `json:"internal"`
				Stores   []string `json:"stores"`
				Children []string `json:"children"`
			} `json:"nodes"`
		} `json:"subtopologies"`
		Stores []struct {
			Name        string   `json:"name"`
			Type        string   `json:"type"`
			Changelog   string   `json:"changelog"`
			Subtopology int      `json:"subtopology"`
			Users       []string `json:"users"`
		} `json:"stores"`
	}
	if err := json.Unmarshal([]byte(body), &top); err != nil {
		t.Fatal(err)
	}
	var edges []string
	for _, s := range top.Subtopologies {
		for _, n := range s.Nodes {
			for _, c := range n.Children {
				edges = append(edges, n.Name+"->"+c)
			}
			if n.Internal {
				edges = append(edges, n.Kind+":"+n.Topic)
			}
		}
	}
	want := "lines->split split->by-word by-word->by-word-sink sink:console-test-by-word-repartition " +
		"by-word-source->counts source:console-test-by-word-repartition counts->counts-tostream counts-tostream->counts-to-counted"
	if got := strings.Join(edges, " "); top.ApplicationID != "console-test" || len(top.Subtopologies) != 2 || got != want {
		t.Errorf("topology %s\nedges %s\nwant  %s", body, got, want)
	}
	if len(top.Stores) != 1 || top.Stores[0].Name != "counts" || top.Stores[0].Type != "key-value" ||
		top.Stores[0].Changelog != "console-test-counts-changelog" || top.Stores[0].Subtopology != 1 || top.Stores[0].Users[0] != "counts" {
		t.Errorf("stores %+v", top.Stores)
	}

	code, body = get(t, srv, "/weir/api/instance")
	var in map[string]any
	if code != http.StatusOK || json.Unmarshal([]byte(body), &in) != nil {
		t.Fatalf("instance: %d %s", code, body)
	}
	if in["state"] != "created" || in["application_id"] != "console-test" || in["history_samples"] != float64(defaultConsoleHistory) ||
		in["sample_interval_seconds"] != defaultConsoleSampleInterval.Seconds() {
		t.Errorf("instance %s", body)
	}
	code, body = get(t, srv, "/weir/api/cluster")
	var cl struct {
		Members []struct {
			Self   bool   `json:"self"`
			Status string `json:"status"`
		} `json:"members"`
	}
	if code != http.StatusOK || json.Unmarshal([]byte(body), &cl) != nil || len(cl.Members) != 1 || !cl.Members[0].Self || cl.Members[0].Status != "ok" {
		t.Errorf("cluster: %d %s, want this instance alone", code, body)
	}
}

// The console lists the warnings and errors the App logged; the text of
// their errors goes only to a request also allowed HealthDetails.
func TestConsoleErrorTextNeedsHealthDetails(t *testing.T) {
	t.Parallel()
	details := false
	app, srv := consoleApp(t, ConsoleConfig{Enabled: true}, AuthorizerFunc(func(_ *http.Request, r Resource) error {
		if r == ConsoleResource || r == HealthDetails && details {
			return nil
		}
		return errors.New("no")
	}))
	app.cfg.Logger.Warn("transaction aborted; tasks restart from the committed offsets", "thread", 0, "error", errors.New("broker 10.0.0.7:9092 said no"))
	for _, d := range []bool{false, true} {
		details = d
		_, body := get(t, srv, "/weir/api/instance")
		if !strings.Contains(body, "transaction aborted") {
			t.Errorf("details %v: the warning is missing: %s", d, body)
		}
		if strings.Contains(body, "10.0.0.7") != d {
			t.Errorf("details %v: error text shown %v: %s", d, !d, body)
		}
	}
}

// The console's settings are checked with the rest of the Config, and
// default as documented.
func TestConsoleConfig(t *testing.T) {
	t.Parallel()
	c := Config{ApplicationID: "a", Brokers: []string{"h:1"}, Console: ConsoleConfig{
		SampleInterval: time.Millisecond, HistorySamples: maxConsoleHistory + 1, MaxErrors: -1, PeerTimeout: -time.Second,
	}}
	err := c.Validate()
	for _, field := range []string{"Console.SampleInterval", "Console.HistorySamples", "Console.MaxErrors", "Console.PeerTimeout"} {
		if err == nil || !strings.Contains(err.Error(), "Config."+field) {
			t.Errorf("Validate does not name %s: %v", field, err)
		}
	}
	d := Config{ApplicationID: "a", Brokers: []string{"h:1"}}.withDefaults().Console
	if d.Enabled || d.SampleInterval != 5*time.Second || d.HistorySamples != 120 || d.MaxErrors != 50 || d.PeerTimeout != 2*time.Second {
		t.Errorf("defaults %+v", d)
	}
}
