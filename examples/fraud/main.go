// Command fraud raises an alert when a user fails to log in too often:
// it counts each user's failed logins in tumbling windows and, when a
// window closes, writes one alert for every user whose count reached the
// threshold. It is built on weir's DSL (package kstream): a windowed
// count whose updates are suppressed until the window closes.
//
// Input records: key = user id (UTF-8), value = JSON {"ok": false} (other
// fields ignored), event time = the record's timestamp. Windows are
// -window long, aligned to the Unix epoch, start included and end
// excluded. A window closes when the count's stream time on the input
// partition (the largest timestamp of the failed logins it counted)
// reaches its end plus -grace;
// a record for a closed window is late: dropped and counted in
// weir_records_late_total. A value that is not JSON is skipped,
// logged with its coordinates and counted in weir_records_skipped_total.
//
// Output records: one per user and window with at least -threshold
// failed logins, written when the window closes: key = user id, value =
// JSON {"user": "...", "window_start": <ms>, "window_end": <ms>,
// "failures": <n>}.
//
// With no flags it starts an embedded broker, produces sample logins,
// prints the alerts and exits. With -brokers it runs against that cluster
// until SIGINT or SIGTERM, creating the input and output topics if they
// are missing.
package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/examples/internal/kafkaio"
	"github.com/weirstream/weir/serde"
	"github.com/weirstream/weir/weirtest/kafka"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "fraud:", err)
		os.Exit(1)
	}
}

// options are the command line, a contract that scripts rely on.
type options struct {
	describe  bool // -describe: print the descriptor and exit
	brokers   string
	input     string
	output    string
	appID     string
	stateDir  string
	guarantee string
	threshold int
	window    time.Duration
	grace     time.Duration
}

func parseFlags(args []string) (options, error) {
	var o options
	fs := flag.NewFlagSet("fraud", flag.ContinueOnError)
	fs.StringVar(&o.brokers, "brokers", "", "comma-separated bootstrap servers; empty starts an embedded broker with sample data")
	fs.StringVar(&o.input, "input", "logins", `input topic: key = user id, value = JSON {"ok": false}, event time = record timestamp`)
	fs.StringVar(&o.output, "output", "fraud-alerts", `output topic: key = user id, value = JSON {"user", "window_start", "window_end", "failures"}`)
	fs.StringVar(&o.appID, "app-id", "fraud", "application id (consumer group, internal topic prefix)")
	fs.StringVar(&o.stateDir, "state-dir", "", "directory for local state, kept across restarts (default: a new temporary directory per run, removed at exit; state is then rebuilt from the changelogs at start)")
	fs.StringVar(&o.guarantee, "guarantee", "exactly_once", "processing guarantee: exactly_once or at_least_once")
	fs.BoolVar(&o.describe, "describe", false, kafkaio.DescribeFlag)
	fs.IntVar(&o.threshold, "threshold", 5, "failed logins per user and window that raise an alert")
	fs.DurationVar(&o.window, "window", time.Minute, "window size, a whole number of milliseconds")
	fs.DurationVar(&o.grace, "grace", 10*time.Second, "how long after a window's end, in stream time, records for it are still counted")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	var bad []error
	if o.threshold < 1 {
		bad = append(bad, fmt.Errorf("-threshold %d: must be at least 1", o.threshold))
	}
	if o.window < time.Millisecond || o.window%time.Millisecond != 0 {
		bad = append(bad, fmt.Errorf("-window %v: must be a positive whole number of milliseconds", o.window))
	}
	if o.grace < 0 || o.grace%time.Millisecond != 0 {
		bad = append(bad, fmt.Errorf("-grace %v: must be a whole number of milliseconds, 0 or more", o.grace))
	}
	return o, errors.Join(bad...)
}

func (o options) params() params {
	return params{input: o.input, output: o.output, threshold: int64(o.threshold), window: o.window, grace: o.grace}
}

func run() error {
	o, err := parseFlags(os.Args[1:])
	if err != nil {
		return err
	}
	cfg, err := config(o)
	if err != nil {
		return err
	}
	if o.describe {
		return kafkaio.Describe(os.Stdout, Topology(o.params(), probes{}), cfg)
	}
	if o.brokers == "" {
		return runEmbedded(os.Stdout, o, cfg)
	}
	cfg.Brokers = strings.Split(o.brokers, ",")
	if cfg.StateDir == "" {
		// One instance per state directory: a directory of its own lets
		// several instances run side by side with the default flags.
		dir, err := os.MkdirTemp("", "weir-fraud-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		cfg.StateDir = dir
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	created, err := kafkaio.EnsureTopics("fraud", cfg.Brokers, o.input, o.output)
	for _, t := range created {
		fmt.Fprintf(os.Stderr, "fraud: created topic %s\n", t)
	}
	if err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	cfg.Metrics = reg
	app, err := weir.New(Topology(o.params(), probes{}), cfg)
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "fraud: reading logins from %s, writing an alert to %s for %d or more failed logins per user in %v windows (grace %v); Ctrl-C stops\n",
		o.input, o.output, o.threshold, o.window, o.grace)
	err = app.Run(ctx)
	fmt.Fprintf(os.Stderr, "fraud: stopped; since start, records skipped (not JSON): %d; late records dropped (window closed): %d\n",
		counter(reg, "weir_records_skipped_total"), counter(reg, "weir_records_late_total"))
	return err
}

// config is the application's configuration, without brokers.
func config(o options) (weir.Config, error) {
	guarantee, err := weir.ParseGuarantee(o.guarantee)
	if err != nil {
		return weir.Config{}, err
	}
	return weir.Config{
		ApplicationID: o.appID,
		StateDir:      o.stateDir,
		Guarantee:     guarantee,
		// weir's warnings, among them the line of each skipped record
		// (its topic, partition and offset, never its contents).
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		// A login event that is not JSON says nothing about fraud: skip
		// it rather than stop detecting fraud for everyone (weir's
		// default, Fail, stops with the record's coordinates).
		DeserializationErrors: weir.Skip,
	}, nil
}

// report is what an embedded run did.
type report struct {
	produced, read int
	skipped, late  int64
	alerts         []kafkaio.Record
}

// runEmbedded detects fraud in the sample logins on an embedded broker
// and prints the alerts.
func runEmbedded(w io.Writer, o options, cfg weir.Config) error {
	cluster, err := kafka.StartEmbedded(kafkaio.DefaultPartitions, o.input, o.output)
	if err != nil {
		return err
	}
	defer cluster.Close()
	fmt.Fprintf(w, "fraud: embedded broker; producing %d sample logins to %s; alerts to %s at %d or more failed logins per user in %v windows (grace %v)\n",
		len(sampleLogins()), o.input, o.output, o.threshold, o.window, o.grace)
	r, err := detectSample(cluster.Brokers(), o, cfg)
	if err != nil {
		return err
	}
	printReport(w, o, r)
	return nil
}

// detectSample produces the sample logins to brokers, runs the topology
// until it has read every one, stops it (which commits) and reads the
// alerts back from the output topic.
func detectSample(brokers []string, o options, cfg weir.Config) (report, error) {
	cfg.Brokers = brokers
	dir, err := os.MkdirTemp("", "weir-fraud-")
	if err != nil {
		return report{}, err
	}
	defer os.RemoveAll(dir)
	cfg.StateDir = dir
	reg := prometheus.NewRegistry()
	cfg.Metrics = reg

	recs := sampleRecords()
	if err := kafkaio.Produce("fraud", brokers, o.input, recs); err != nil {
		return report{}, err
	}
	// The records the topology will read: those that deserialize.
	want := 0
	for _, r := range recs {
		if _, err := serde.JSON[Login]().Deserialize(o.input, r.Value); err == nil {
			want++
		}
	}
	// Buffered for every record, so that the probe never blocks a task.
	read := make(chan struct{}, want)
	var alerts atomic.Int64
	app, err := weir.New(Topology(o.params(), probes{
		read:  func() { notify(read) },
		alert: func() { alerts.Add(1) },
	}), cfg)
	if err != nil {
		return report{}, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- app.Run(ctx) }()
	timeout := time.After(2 * time.Minute)
	for n := 0; n < want; n++ {
		select {
		case <-read:
		case err := <-done:
			return report{}, fmt.Errorf("stopped after %d of %d logins: %w", n, want, err)
		case <-timeout:
			return report{}, fmt.Errorf("read %d of %d logins in 2 minutes", n, want)
		}
	}
	// A record's windows close in the same step that processes it, so
	// every alert has been emitted; Run commits them as it stops.
	cancel()
	if err := <-done; err != nil {
		return report{}, err
	}
	r := report{produced: len(recs), read: want,
		skipped: counter(reg, "weir_records_skipped_total"), late: counter(reg, "weir_records_late_total")}
	r.alerts, err = kafkaio.ReadCommitted("fraud", brokers, o.output, int(alerts.Load()), 30*time.Second)
	return r, err
}

// counter returns the sum of the counter name over its labels, 0 when
// it has none.
func counter(g prometheus.Gatherer, name string) int64 {
	families, err := g.Gather()
	if err != nil {
		return 0
	}
	var n float64
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			n += m.GetCounter().GetValue()
		}
	}
	return int64(n)
}

// printReport prints the alerts, ordered by window and user.
func printReport(w io.Writer, o options, r report) {
	fmt.Fprintf(w, "fraud: read %d logins; records skipped (not JSON): %d; late records dropped (window closed): %d\n", r.read, r.skipped, r.late)
	alerts := decodeAlerts(r.alerts)
	fmt.Fprintf(w, "%d alerts in %s:\n", len(alerts), o.output)
	for _, a := range alerts {
		v, _ := json.Marshal(a)
		fmt.Fprintf(w, "  %-8s %s-%s UTC  %d failed logins  %s\n", a.User,
			time.UnixMilli(a.WindowStart).UTC().Format(time.TimeOnly), time.UnixMilli(a.WindowEnd).UTC().Format(time.TimeOnly), a.Failures, v)
	}
}

// decodeAlerts decodes the values of recs, ordered by window start and
// user; a value that does not decode is left out.
func decodeAlerts(recs []kafkaio.Record) []Alert {
	var alerts []Alert
	for _, r := range recs {
		var a Alert
		if json.Unmarshal(r.Value, &a) == nil {
			alerts = append(alerts, a)
		}
	}
	slices.SortFunc(alerts, func(a, b Alert) int {
		return cmp.Or(cmp.Compare(a.WindowStart, b.WindowStart), strings.Compare(a.User, b.User))
	})
	return alerts
}

// notify sends on c if it has room. A record processed again after a
// failure calls a probe again; once c is full, the run has seen enough.
func notify(c chan<- struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}
