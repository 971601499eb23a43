// Command wordcount counts words in a stream of text lines with weir's
// DSL (package kstream): lines are split into lower-cased words, re-keyed
// by word through a repartition topic, and counted in a key-value store;
// every new count is written to the output topic.
//
// With no flags it starts an embedded broker, produces a sample text,
// counts it, prints the most frequent words and exits. With -brokers it
// runs against that cluster until SIGINT or SIGTERM, creating the input and
// output topics if they are missing. With -metrics-addr and
// -advertised-addr every instance answers GET /words/<word> with the
// word's committed count, asking the instance that counts it when that is
// another one. With -metrics-addr every instance also serves weir's
// operator console at /weir/ (-console=false turns it off); with
// -advertised-addr too, each instance's console shows every instance.
//
// Output records: key = the word (UTF-8), value = its running count as an
// 8-byte big-endian int64 (Kafka's LongSerializer format).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/examples/internal/kafkaio"
	"github.com/weirstream/weir/ktable"
	"github.com/weirstream/weir/serde"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "wordcount:", err)
		os.Exit(1)
	}
}

// options are the command line, a contract that scripts rely on.
type options struct {
	describe    bool // -describe: print the descriptor and exit
	brokers     string
	input       string
	output      string
	appID       string
	stateDir    string
	threads     int
	guarantee   string
	metricsAddr string
	advertise   string
	console     bool // -console: serve the operator console at /weir/ on -metrics-addr
}

func parseFlags(args []string) (options, error) {
	var o options
	fs := flag.NewFlagSet("wordcount", flag.ContinueOnError)
	fs.StringVar(&o.brokers, "brokers", "", "comma-separated bootstrap servers; empty starts an embedded broker with sample data")
	fs.StringVar(&o.input, "input", "text-input", "input topic of UTF-8 text lines")
	fs.StringVar(&o.output, "output", "word-counts", "output topic: word -> count (8-byte big-endian int64)")
	fs.StringVar(&o.appID, "app-id", "wordcount", "application id (consumer group, internal topic prefix)")
	fs.StringVar(&o.stateDir, "state-dir", "", "directory for local state, kept across restarts (default: a new temporary directory per run, removed at exit; state is then rebuilt from the changelog at start)")
	fs.IntVar(&o.threads, "threads", 1, "stream threads")
	fs.StringVar(&o.guarantee, "guarantee", "exactly_once", "processing guarantee: exactly_once or at_least_once")
	fs.BoolVar(&o.describe, "describe", false, kafkaio.DescribeFlag)
	fs.StringVar(&o.metricsAddr, "metrics-addr", "", "address to serve /metrics, /healthz and /readyz on, such as :9090 (empty: off; with -brokers)")
	fs.StringVar(&o.advertise, "advertised-addr", "", "host:port other instances reach this one's -metrics-addr at: serves GET /words/<word> (the word's committed count, from whichever instance counts it) and the store queries of other instances (empty: off; needs -metrics-addr)")
	fs.BoolVar(&o.console, "console", true, "serve weir's operator console at /weir/ on -metrics-addr (with -brokers; every instance's, with -advertised-addr)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if o.advertise != "" && o.metricsAddr == "" {
		return o, errors.New("-advertised-addr needs -metrics-addr: the queries are served there")
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	return o, nil
}

func run() error {
	o, err := parseFlags(os.Args[1:])
	if err != nil {
		return err
	}
	guarantee, err := weir.ParseGuarantee(o.guarantee)
	if err != nil {
		return err
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	cfg := weir.Config{
		ApplicationID:  o.appID,
		StateDir:       o.stateDir,
		Threads:        o.threads,
		Guarantee:      guarantee,
		Logger:         logger,
		AdvertisedAddr: o.advertise,
		Authorizer:     countsOnly(o.console),
	}
	if o.describe {
		return kafkaio.Describe(os.Stdout, Topology(o.input, o.output, nil), cfg)
	}
	if o.brokers == "" {
		return runEmbedded(o, cfg)
	}
	cfg.Brokers = strings.Split(o.brokers, ",")
	cfg.Console.Enabled = o.console && o.metricsAddr != ""
	if cfg.StateDir == "" {
		// One instance per state directory: a directory of its own lets
		// several instances run side by side with the default flags.
		dir, err := os.MkdirTemp("", "weir-wordcount-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		cfg.StateDir = dir
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := ensureTopics(cfg.Brokers, o.input, o.output); err != nil {
		return err
	}
	app, err := weir.New(Topology(o.input, o.output, nil), cfg)
	if err != nil {
		return err
	}
	if o.metricsAddr != "" {
		h, err := handler(app, o.advertise != "")
		if err != nil {
			return err
		}
		stop, err := serve(o.metricsAddr, h)
		if err != nil {
			return err
		}
		defer stop()
	}
	fmt.Fprintf(os.Stderr, "wordcount: counting words of %s into %s; Ctrl-C stops\n", o.input, o.output)
	return app.Run(ctx)
}

// countsOnly is the example's authorizer: the word counts are what the
// instances ask each other for, and the example trusts the network they
// listen on with them, and with the operator console when console is set
// (the console's pages and the figures the instances' consoles ask each
// other for); it shows nothing else (no failure text on /healthz, nor
// the text of the errors the console lists). A service would check the
// caller here (a client certificate, a token).
func countsOnly(console bool) weir.Authorizer {
	return weir.AuthorizerFunc(func(_ *http.Request, r weir.Resource) error {
		if r == weir.StoreResource("counts") || console && r == weir.ConsoleResource {
			return nil
		}
		return errors.New("only the word counts and the console are served")
	})
}

// handler is what -metrics-addr serves: the App's /metrics, /healthz and
// /readyz, and with queries the word counts (GET /words/<word>) and the
// store queries of the other instances (ktable.HandlerPath).
func handler(app *weir.App, queries bool) (http.Handler, error) {
	if !queries {
		return app.Handler(), nil
	}
	counts, err := ktable.KeyValue(app, "counts", serde.String(), serde.Int64())
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("/", app.Handler())
	mux.Handle(ktable.HandlerPath, ktable.Handler(app, ktable.ServeStores("counts")))
	mux.HandleFunc("GET /words/{word}", func(w http.ResponseWriter, r *http.Request) {
		word := r.PathValue("word")
		n, _, err := counts.Lookup(r.Context(), word)
		w.Header().Set("Content-Type", "application/json")
		if err != nil {
			// Restoring, moving or unreachable: the client retries.
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusServiceUnavailable)
			_ = json.NewEncoder(w).Encode(map[string]string{"word": word, "error": err.Error()})
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"word": word, "count": n})
	})
	return mux, nil
}

// serve serves h (metrics, /healthz, /readyz) on addr until stop is called.
func serve(addr string, h http.Handler) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("-metrics-addr: %w", err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	fmt.Fprintf(os.Stderr, "wordcount: metrics on http://%s/metrics\n", ln.Addr())
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
	}, nil
}

// runEmbedded counts a sample text on an embedded broker and prints the
// most frequent words.
func runEmbedded(o options, cfg weir.Config) error {
	cluster, err := startEmbedded(o.input, o.output)
	if err != nil {
		return err
	}
	defer cluster.Close()
	counts, err := countSample(cluster.Brokers(), o, cfg)
	if err != nil {
		return err
	}
	printTop(os.Stdout, counts, 10)
	return nil
}

// countSample produces the sample text to brokers, runs the topology
// until every word is counted, and returns the counts read back from the
// output topic.
func countSample(brokers []string, o options, cfg weir.Config) (map[string]int64, error) {
	cfg.Brokers = brokers
	dir, err := os.MkdirTemp("", "weir-wordcount-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	cfg.StateDir = dir

	lines := sampleText()
	if err := produceLines(brokers, o.input, lines); err != nil {
		return nil, err
	}
	want := 0
	for _, l := range lines {
		want += len(Words(l))
	}
	counted := make(chan struct{}, want)
	app, err := weir.New(Topology(o.input, o.output, counted), cfg)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- app.Run(ctx) }()
	timeout := time.After(2 * time.Minute)
	for n := 0; n < want; n++ {
		select {
		case <-counted:
		case err := <-done:
			return nil, fmt.Errorf("stopped after %d of %d words: %w", n, want, err)
		case <-timeout:
			return nil, fmt.Errorf("counted %d of %d words in 2 minutes", n, want)
		}
	}
	cancel() // Run commits, so every count is in the output topic
	if err := <-done; err != nil {
		return nil, err
	}
	return readCounts(brokers, o.output, want)
}
