// Command payments keeps a running balance per account from a stream of
// payments, counting each payment once even when it is delivered more
// than once. It is built on weir's DSL (package kstream): a Process step
// drops payments whose id it has seen within -dedup-ttl (a
// processor.TTL store), and an Aggregate sums the rest per account.
//
// Input records: key = account id (UTF-8), value = JSON {"id": "...",
// "amount": <int cents>}, negative amounts for debits. Output records: one
// per counted payment, key = account id, value = JSON {"account": "...",
// "balance": <int cents>}, the balance after that payment.
//
// With no flags it starts an embedded broker, produces sample payments,
// prints the final balances and exits. With -brokers it runs against that
// cluster until SIGINT or SIGTERM, creating the input and output topics
// if they are missing.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/examples/internal/kafkaio"
	"github.com/weirstream/weir/serde"
	"github.com/weirstream/weir/weirtest/kafka"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "payments:", err)
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
	dedupTTL  time.Duration
}

func parseFlags(args []string) (options, error) {
	var o options
	fs := flag.NewFlagSet("payments", flag.ContinueOnError)
	fs.StringVar(&o.brokers, "brokers", "", "comma-separated bootstrap servers; empty starts an embedded broker with sample data")
	fs.StringVar(&o.input, "input", "payments", `input topic: key = account id, value = JSON {"id": "...", "amount": <int cents>}`)
	fs.StringVar(&o.output, "output", "balances", `output topic: key = account id, value = JSON {"account": "...", "balance": <int cents>}`)
	fs.StringVar(&o.appID, "app-id", "payments", "application id (consumer group, internal topic prefix)")
	fs.StringVar(&o.stateDir, "state-dir", "", "directory for local state, kept across restarts (default: a new temporary directory per run, removed at exit; state is then rebuilt from the changelogs at start)")
	fs.StringVar(&o.guarantee, "guarantee", "exactly_once", "processing guarantee: exactly_once or at_least_once")
	fs.BoolVar(&o.describe, "describe", false, kafkaio.DescribeFlag)
	fs.DurationVar(&o.dedupTTL, "dedup-ttl", 10*time.Minute, "how long, in stream time, a payment id is remembered to drop its duplicates; a whole number of milliseconds")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if o.dedupTTL < time.Millisecond || o.dedupTTL%time.Millisecond != 0 {
		return o, fmt.Errorf("-dedup-ttl %v: must be a positive whole number of milliseconds", o.dedupTTL)
	}
	return o, nil
}

func (o options) params() params {
	return params{input: o.input, output: o.output, dedupTTL: o.dedupTTL}
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
		dir, err := os.MkdirTemp("", "weir-payments-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		cfg.StateDir = dir
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	created, err := kafkaio.EnsureTopics("payments", cfg.Brokers, o.input, o.output)
	for _, t := range created {
		fmt.Fprintf(os.Stderr, "payments: created topic %s\n", t)
	}
	if err != nil {
		return err
	}
	app, err := weir.New(Topology(o.params(), probes{}), cfg)
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "payments: reading payments from %s, writing balances to %s, dropping duplicate payment ids seen within %v; Ctrl-C stops\n",
		o.input, o.output, o.dedupTTL)
	return app.Run(ctx)
}

// config is the application's configuration, without brokers. A payment
// that does not deserialize stops the application with its coordinates
// (weir's default policy, Fail): skipping it would make every later
// balance of its account wrong without a trace.
func config(o options) (weir.Config, error) {
	guarantee, err := weir.ParseGuarantee(o.guarantee)
	if err != nil {
		return weir.Config{}, err
	}
	return weir.Config{
		ApplicationID: o.appID,
		StateDir:      o.stateDir,
		Guarantee:     guarantee,
		Logger:        slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}, nil
}

// report is what an embedded run did.
type report struct {
	produced, read int
	balances       []kafkaio.Record
}

// runEmbedded keeps the balances of the sample payments on an embedded
// broker and prints them.
func runEmbedded(w io.Writer, o options, cfg weir.Config) error {
	cluster, err := kafka.StartEmbedded(kafkaio.DefaultPartitions, o.input, o.output)
	if err != nil {
		return err
	}
	defer cluster.Close()
	fmt.Fprintf(w, "payments: embedded broker; producing %d sample payments to %s; balances to %s; dropping duplicate payment ids seen within %v\n",
		len(samplePayments()), o.input, o.output, o.dedupTTL)
	r, err := balanceSample(cluster.Brokers(), o, cfg)
	if err != nil {
		return err
	}
	printReport(w, o, r)
	return nil
}

// balanceSample produces the sample payments to brokers, runs the
// topology until it has read every one, stops it (which commits) and
// reads the balances back from the output topic.
func balanceSample(brokers []string, o options, cfg weir.Config) (report, error) {
	cfg.Brokers = brokers
	dir, err := os.MkdirTemp("", "weir-payments-")
	if err != nil {
		return report{}, err
	}
	defer os.RemoveAll(dir)
	cfg.StateDir = dir

	recs := sampleRecords()
	if err := kafkaio.Produce("payments", brokers, o.input, recs); err != nil {
		return report{}, err
	}
	// Buffered for every record, so that the probes never block a task.
	read := make(chan struct{}, len(recs))
	balanced := make(chan struct{}, len(recs))
	app, err := weir.New(Topology(o.params(), probes{
		read:    func() { notify(read) },
		balance: func() { notify(balanced) },
	}), cfg)
	if err != nil {
		return report{}, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- app.Run(ctx) }()
	timeout := time.After(2 * time.Minute)
	// A payment that passes deduplication goes through the repartition
	// topic before it is summed: wait for its balance too. Every
	// payment is read, and then as many balances written as there are
	// payments that are not duplicates.
	for n := 0; n < len(recs); n++ {
		select {
		case <-read:
		case err := <-done:
			return report{}, fmt.Errorf("stopped after %d of %d payments: %w", n, len(recs), err)
		case <-timeout:
			return report{}, fmt.Errorf("read %d of %d payments in 2 minutes", n, len(recs))
		}
	}
	want := distinctPayments(recs)
	for n := 0; n < want; n++ {
		select {
		case <-balanced:
		case err := <-done:
			return report{}, fmt.Errorf("stopped after %d of %d balances: %w", n, want, err)
		case <-timeout:
			return report{}, fmt.Errorf("wrote %d of %d balances in 2 minutes", n, want)
		}
	}
	cancel() // Run commits, so every balance is in the output topic
	if err := <-done; err != nil {
		return report{}, err
	}
	r := report{produced: len(recs), read: len(recs)}
	r.balances, err = kafkaio.ReadCommitted("payments", brokers, o.output, want, 30*time.Second)
	return r, err
}

// distinctPayments counts the payments of recs that are not duplicates
// of an earlier one (same account and id), as the topology does when
// every duplicate arrives within the TTL.
func distinctPayments(recs []kafkaio.Record) int {
	seen := map[paymentRef]bool{}
	for _, r := range recs {
		p, err := serde.JSON[Payment]().Deserialize("", r.Value)
		if err != nil {
			continue
		}
		seen[paymentRef{Account: string(r.Key), ID: p.ID}] = true
	}
	return len(seen)
}

// printReport prints the final balance of each account.
func printReport(w io.Writer, o options, r report) {
	final := map[string]Balance{}
	for _, rec := range r.balances {
		var b Balance
		if json.Unmarshal(rec.Value, &b) == nil {
			// One account's balances are in one partition, in order:
			// the last one read is the latest.
			final[b.Account] = b
		}
	}
	fmt.Fprintf(w, "payments: read %d payments; counted %d, dropped %d duplicates\n", r.read, len(r.balances), r.read-len(r.balances))
	fmt.Fprintf(w, "%d balance updates in %s; the final balances:\n", len(r.balances), o.output)
	for _, acct := range slices.Sorted(maps.Keys(final)) {
		fmt.Fprintf(w, "  %-10s %12s  %s\n", acct, cents(final[acct].Balance), mustJSON(final[acct]))
	}
}

// cents formats an amount in cents as units with two decimals.
func cents(c int64) string {
	sign := ""
	if c < 0 {
		sign, c = "-", -c
	}
	return fmt.Sprintf("%s%d.%02d", sign, c/100, c%100)
}

func mustJSON(b Balance) []byte {
	v, _ := json.Marshal(b)
	return v
}

// notify sends on c if it has room. A record processed again after a
// failure calls a probe again; once c is full, the run has seen enough.
func notify(c chan<- struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}
