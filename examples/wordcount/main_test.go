package main

import (
	"bytes"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/examples/internal/kafkaio"
)

func TestWords(t *testing.T) {
	t.Parallel()
	got := strings.Join(Words("The river's bend—Weir, weir; 42 times!"), ",")
	if got != "the,river,s,bend,weir,weir,times" {
		t.Errorf("Words = %s", got)
	}
}

func TestFlagsKeepTheirContract(t *testing.T) {
	t.Parallel()
	o, err := parseFlags(nil)
	if err != nil {
		t.Fatal(err)
	}
	if o.brokers != "" || o.input != "text-input" || o.output != "word-counts" || o.appID != "wordcount" || o.threads != 1 || o.guarantee != "exactly_once" {
		t.Errorf("defaults changed: %+v", o)
	}
	o, err = parseFlags([]string{"-brokers", "a:1,b:2", "-input", "i", "-output", "o", "-app-id", "x",
		"-state-dir", "/s", "-threads", "3", "-guarantee", "at_least_once", "-metrics-addr", ":9"})
	if err != nil || o.brokers != "a:1,b:2" || o.threads != 3 || o.metricsAddr != ":9" || o.stateDir != "/s" {
		t.Errorf("parseFlags = %+v, %v", o, err)
	}
	if o, err := parseFlags([]string{"-metrics-addr", ":9", "-advertised-addr", "h:9"}); err != nil || o.advertise != "h:9" {
		t.Errorf("parseFlags(-advertised-addr) = %+v, %v", o, err)
	}
	if _, err := parseFlags([]string{"-advertised-addr", "h:9"}); err == nil {
		t.Error("-advertised-addr without -metrics-addr was accepted")
	}
	if o, _ := parseFlags(nil); !o.console {
		t.Error("-console is off by default; -metrics-addr alone should serve the console")
	}
	if o, err := parseFlags([]string{"-metrics-addr", ":9", "-console=false"}); err != nil || o.console {
		t.Errorf("parseFlags(-console=false) = %+v, %v", o, err)
	}
}

// What -metrics-addr serves holds the operator console, which the
// example's authorizer opens as it opens the counts, and only when the
// console is on.
func TestMetricsAddrServesTheConsole(t *testing.T) {
	t.Parallel()
	for _, on := range []bool{true, false} {
		app, err := weir.New(Topology("lines", "counts", nil), weir.Config{ApplicationID: "wc", Brokers: []string{"127.0.0.1:1"},
			StateDir: t.TempDir(), Authorizer: countsOnly(on), Console: weir.ConsoleConfig{Enabled: on}})
		if err != nil {
			t.Fatal(err)
		}
		h, err := handler(app, true)
		if err != nil {
			t.Fatal(err)
		}
		for _, path := range []string{"/weir/", "/weir/api/topology"} {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
			if want := map[bool]int{true: 200, false: 404}[on]; rec.Code != want {
				t.Errorf("console %v: GET %s = %d, want %d", on, path, rec.Code, want)
			}
		}
	}
}

// TestEmbeddedRunCountsEveryWord runs the example as `make demo` does and
// checks every count against one computed here.
func TestEmbeddedRunCountsEveryWord(t *testing.T) {
	o, _ := parseFlags(nil)
	cluster, err := startEmbedded(o.input, o.output)
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	got, err := countOn(t, cluster.Brokers(), o)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{}
	for _, l := range sampleText() {
		for _, w := range Words(l) {
			want[w]++
		}
	}
	if len(got) != len(want) {
		t.Errorf("%d words counted, want %d", len(got), len(want))
	}
	for w, n := range want {
		if got[w] != n {
			t.Errorf("count of %q = %d, want %d", w, got[w], n)
		}
	}
	var out bytes.Buffer
	printTop(&out, got, 3)
	if !strings.Contains(out.String(), "the") {
		t.Errorf("top words do not start with 'the':\n%s", out.String())
	}
}

func countOn(t *testing.T, brokers []string, o options) (map[string]int64, error) {
	t.Helper()
	return countSample(brokers, o, weir.Config{ApplicationID: o.appID, Guarantee: weir.ExactlyOnce})
}

// -describe prints the descriptor weir writes to "<app-id>-topology",
// without a broker.
func TestDescribeFlagPrintsTheDescriptor(t *testing.T) {
	t.Parallel()
	o, err := parseFlags([]string{"-describe", "-app-id", "wc"})
	if err != nil || !o.describe {
		t.Fatalf("parseFlags = %+v, %v", o, err)
	}
	var out strings.Builder
	if err := kafkaio.Describe(&out, Topology(o.input, o.output, nil), weir.Config{ApplicationID: o.appID}); err != nil {
		t.Fatal(err)
	}
	d, err := weir.ParseDescriptor([]byte(out.String()))
	if err != nil {
		t.Fatal(err)
	}
	if d.ApplicationID != "wc" || len(d.Stores) != 1 || d.Stores[0].Name != "counts" || d.Stores[0].Changelog != "wc-counts-changelog" {
		t.Fatalf("descriptor: %s", out.String())
	}
}
