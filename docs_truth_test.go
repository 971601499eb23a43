package weir

import (
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/weirstream/weir/internal/metrics"
)

// docFiles returns the README and docs/*.md, each file's text.
func docFiles(t *testing.T) map[string]string {
	t.Helper()
	names, err := filepath.Glob("docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, name := range append([]string{"README.md"}, names...) {
		b, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		out[name] = string(b)
	}
	return out
}

var (
	fencedBlock = regexp.MustCompile("(?s)```.*?```")
	inlineCode  = regexp.MustCompile("`([^`]+)`")
)

// inlineSpans returns the back-quoted spans of a Markdown text outside
// fenced blocks, each with its line breaks folded into spaces.
func inlineSpans(text string) []string {
	text = fencedBlock.ReplaceAllString(text, "")
	var out []string
	for _, m := range inlineCode.FindAllStringSubmatch(text, -1) {
		if strings.Contains(m[1], "\n\n") {
			continue
		}
		out = append(out, strings.Join(strings.Fields(m[1]), " "))
	}
	return out
}

// logLike matches a back-quoted span that reads as a message: two words
// or more, lower case first, none of code's punctuation.
var logLike = regexp.MustCompile(`^[a-z][a-z0-9 ,;:'./()%_-]*$`)

// commandLike matches a span that is a command line or an expression, not
// a message: it starts with a command, a path or a metric, or passes a
// flag.
var commandLike = regexp.MustCompile(`^(make|go|weir|bench|kafka-[a-z-]+\.sh|integration/env/\S+\.sh|examples/\S+|weir_\S+) |\s-[a-z]`)

// notOurs are messages the docs quote that other code prints, or that
// weir builds from parts, with where they come from.
var notOurs = map[string]string{
	"i/o timeout": "Go's net package, through sarama",
	"client has run out of available brokers": "sarama's ErrOutOfBrokers",
	"cannot decode key: ...":                  "graph.DecodeError: \"cannot decode \" + the stage",
	"cannot decode value: ...":                "graph.DecodeError: \"cannot decode \" + the stage",
	"cannot decode timestamp: ...":            "graph.DecodeError: \"cannot decode \" + the stage",
	"weir: assign: keeping tasks with their caught-up owners while warm-ups catch up": "assign.Strategy's logger prefixes \"weir: assign: \" to the message",
}

// TestDocsQuoteWhatTheCodeSays: the log lines, messages, metric names,
// Config fields and make targets that the README and docs/ quote exist: a
// runbook that tells operators to alert on a line the code never prints
// is an alert that never fires. (The CLI's flags are checked in cmd/weir,
// TestDocumentedFlagsExist.)
func TestDocsQuoteWhatTheCodeSays(t *testing.T) {
	t.Parallel()
	docs := docFiles(t)
	src := goSource(t)

	t.Run("messages", func(t *testing.T) {
		for file, text := range docs {
			for _, span := range inlineSpans(text) {
				if len(strings.Fields(span)) < 2 || !logLike.MatchString(span) || notOurs[span] != "" || commandLike.MatchString(span) {
					continue
				}
				for _, part := range strings.Split(span, "...") {
					if part = strings.Trim(part, " ."); part != "" && !strings.Contains(src, part) {
						t.Errorf("%s quotes `%s`, which no Go source of weir says", file, span)
						break
					}
				}
			}
		}
	})

	t.Run("metrics", func(t *testing.T) {
		registered := registeredMetrics(t)
		name := regexp.MustCompile(`\bweir_[a-z0-9_]+`)
		for file, text := range docs {
			for _, m := range name.FindAllString(text, -1) {
				base := m
				for _, suffix := range []string{"_bucket", "_sum", "_count"} {
					if s, ok := strings.CutSuffix(m, suffix); ok && registered[s] {
						base = s
					}
				}
				if !registered[base] {
					t.Errorf("%s names the metric %s, which weir does not register", file, m)
				}
			}
		}
	})

	t.Run("config", func(t *testing.T) {
		field := regexp.MustCompile(`\bConfig((?:\.[A-Z][A-Za-z0-9]*)+)`)
		for file, text := range docs {
			for _, m := range field.FindAllStringSubmatch(text, -1) {
				if err := resolveField(reflect.TypeFor[Config](), strings.Split(m[1][1:], ".")); err != "" {
					t.Errorf("%s names Config%s: %s", file, m[1], err)
				}
			}
		}
	})

	t.Run("make targets", func(t *testing.T) {
		mk, err := os.ReadFile("Makefile")
		if err != nil {
			t.Fatal(err)
		}
		target := regexp.MustCompile(`(?m)^([a-z][a-z0-9-]*):`)
		targets := map[string]bool{}
		for _, m := range target.FindAllStringSubmatch(string(mk), -1) {
			targets[m[1]] = true
		}
		use := regexp.MustCompile("`make ([a-z][a-z0-9-]*)")
		for file, text := range docs {
			for _, m := range use.FindAllStringSubmatch(text, -1) {
				if !targets[m[1]] {
					t.Errorf("%s gives `make %s`, which the Makefile has no target for", file, m[1])
				}
			}
		}
	})
}

// resolveField reports why path (field names) does not name a field, or
// method, of typ; "" when it does.
func resolveField(typ reflect.Type, path []string) string {
	for i, name := range path {
		for typ.Kind() == reflect.Pointer {
			typ = typ.Elem()
		}
		if _, ok := reflect.PointerTo(typ).MethodByName(name); ok && i == len(path)-1 {
			return ""
		}
		if typ.Kind() != reflect.Struct {
			return typ.String() + " has no fields"
		}
		f, ok := typ.FieldByName(name)
		if !ok {
			return typ.String() + " has no field or method " + name
		}
		typ = f.Type
	}
	return ""
}

// goSource returns weir's non-test Go source, every module's, with string
// literals joined across + so that a message split over lines reads
// whole.
func goSource(t *testing.T) string {
	t.Helper()
	var b strings.Builder
	err := filepath.WalkDir(".", func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		b.Write(src)
		b.WriteByte('\n')
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return regexp.MustCompile(`"\s*\+\s*"`).ReplaceAllString(b.String(), "")
}

// registeredMetrics returns the names of every metric weir registers:
// those of metrics.New and the build info.
func registeredMetrics(t *testing.T) map[string]bool {
	t.Helper()
	rec := &recordingRegisterer{}
	if _, err := metrics.New(rec, "app", emptySource{}); err != nil {
		t.Fatal(err)
	}
	if err := rec.Register(metrics.NewBuildInfo("app", metrics.Build{})); err != nil {
		t.Fatal(err)
	}
	fq := regexp.MustCompile(`fqName: "([^"]+)"`)
	names := map[string]bool{}
	for _, c := range rec.collectors {
		ch := make(chan *prometheus.Desc, 64)
		go func() { c.Describe(ch); close(ch) }()
		for d := range ch {
			if m := fq.FindStringSubmatch(d.String()); m != nil {
				names[m[1]] = true
			}
		}
	}
	if len(names) < 10 {
		t.Fatalf("found only %d metric names: %v", len(names), names)
	}
	return names
}

// recordingRegisterer keeps what is registered with it.
type recordingRegisterer struct{ collectors []prometheus.Collector }

func (r *recordingRegisterer) Register(c prometheus.Collector) error {
	r.collectors = append(r.collectors, c)
	return nil
}

func (r *recordingRegisterer) MustRegister(cs ...prometheus.Collector) {
	r.collectors = append(r.collectors, cs...)
}

func (r *recordingRegisterer) Unregister(prometheus.Collector) bool { return true }

type emptySource struct{}

func (emptySource) Snapshot() metrics.Snapshot { return metrics.Snapshot{} }
