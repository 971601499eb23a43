// Command enrich joins every order with its customer and its product and
// writes the enriched order. It is built on weir's DSL (package kstream):
// the orders stream is left-joined with the customers topic read as a
// table (by key, the customer id) and then with the products topic read
// as a global table (by the product id in the order's value).
//
// Input records:
//   - orders: key = customer id (UTF-8), value = JSON {"id": "...",
//     "product": "...", "qty": <int>}.
//   - customers: key = customer id, value = JSON {"name": "...",
//     "tier": "..."}; a null value deletes the customer.
//   - products: key = product id, value = JSON {"name": "...",
//     "price": <int cents>}; a null value deletes the product. Every
//     instance reads all of its partitions, so orders need no repartition
//     by product.
//
// Output records: one per order, key = customer id, value = JSON
// {"order": "...", "customer": "...", "name": "...", "tier": "...",
// "product": "...", "product_name": "...", "qty": <n>, "total": <qty *
// price, cents>}. An order is written also when its customer or its
// product is unknown: an unknown (never created, or deleted) customer
// gives "name": "" and "tier": "unknown", an unknown product
// "product_name": "" and "total": 0. An order is joined with the tables
// as the application has read them when it processes the order; a later
// customer or product update does not change an order already written.
//
// An order with a null value is skipped by the join (logged at debug
// level), as Kafka Streams skips a null value. An order or customer that
// does not deserialize (not JSON, a field of the wrong type) stops the
// application with
// the record's coordinates, weir's default policy (Fail). A product is
// stored as it is read, so one that does not deserialize stops the
// application at the first order that looks it up, with that order's
// coordinates (a processing error, whose default policy is Fail too). An
// order with a null key is written with a null key, as one of an unknown
// customer.
//
// With no flags it starts an embedded broker, produces sample customers
// and products, then sample orders, prints the enriched orders and exits.
// With -brokers it runs against that cluster until SIGINT or SIGTERM,
// creating the topics that are missing.
package main

import (
	"cmp"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/examples/internal/kafkaio"
	"github.com/weirstream/weir/weirtest/kafka"
)

// main runs the command and exits with status 1 on an error.
func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "enrich:", err)
		os.Exit(1)
	}
}

// options are the command line, a contract that scripts rely on.
type options struct {
	describe  bool // -describe: print the descriptor and exit
	brokers   string
	orders    string
	customers string
	products  string
	output    string
	appID     string
	stateDir  string
	guarantee string
}

// parseFlags parses the command line args (without the program name).
func parseFlags(args []string) (options, error) {
	var o options
	fs := flag.NewFlagSet("enrich", flag.ContinueOnError)
	fs.StringVar(&o.brokers, "brokers", "", "comma-separated bootstrap servers; empty starts an embedded broker with sample data")
	fs.StringVar(&o.orders, "orders", "orders", `orders topic: key = customer id, value = JSON {"id": "...", "product": "...", "qty": <int>}`)
	fs.StringVar(&o.customers, "customers", "customers", `customers topic, read as a table: key = customer id, value = JSON {"name": "...", "tier": "..."}, null deletes`)
	fs.StringVar(&o.products, "products", "products", `products topic, read as a global table: key = product id, value = JSON {"name": "...", "price": <int cents>}, null deletes`)
	fs.StringVar(&o.output, "output", "enriched-orders", `output topic: key = customer id, value = JSON {"order", "customer", "name", "tier", "product", "product_name", "qty", "total"}`)
	fs.StringVar(&o.appID, "app-id", "enrich", "application id (consumer group, internal topic prefix)")
	fs.StringVar(&o.stateDir, "state-dir", "", "directory for local state, kept across restarts (default: a new temporary directory per run, removed at exit; state is then rebuilt from the changelogs and the products topic at start)")
	fs.StringVar(&o.guarantee, "guarantee", "exactly_once", "processing guarantee: exactly_once or at_least_once")
	fs.BoolVar(&o.describe, "describe", false, kafkaio.DescribeFlag)
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	topics := map[string]string{}
	for _, t := range []struct{ flag, topic string }{
		{"-orders", o.orders}, {"-customers", o.customers}, {"-products", o.products}, {"-output", o.output},
	} {
		if t.topic == "" {
			return o, fmt.Errorf("%s: empty topic name", t.flag)
		}
		if other, ok := topics[t.topic]; ok {
			return o, fmt.Errorf("%s and %s: the same topic %q", other, t.flag, t.topic)
		}
		topics[t.topic] = t.flag
	}
	return o, nil
}

// params returns the topology's parameters.
func (o options) params() params {
	return params{orders: o.orders, customers: o.customers, products: o.products, output: o.output}
}

// run parses the command line and runs the embedded sample or, with
// -brokers, the application until SIGINT or SIGTERM.
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
		dir, err := os.MkdirTemp("", "weir-enrich-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		cfg.StateDir = dir
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := ensureTopics(cfg.Brokers, o); err != nil {
		return err
	}
	app, err := weir.New(Topology(o.params(), probes{}), cfg)
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "enrich: joining orders from %s with customers from %s and products from %s, writing enriched orders to %s; Ctrl-C stops\n",
		o.orders, o.customers, o.products, o.output)
	return app.Run(ctx)
}

// ensureTopics creates the topics that are missing and says which. The
// orders and customers topics are joined by key and must have the same
// partition count (weir checks it at start): a missing one of the
// orders, customers and output topics gets the partition count of the
// first of them, in that order, that exists, kafkaio.DefaultPartitions
// if none does. The products topic, global, may have any count: a
// missing one gets kafkaio.DefaultPartitions. The customers and products
// topics are created compacted, as tables' topics should be.
func ensureTopics(brokers []string, o options) error {
	created, err := kafkaio.EnsureCopartitioned("enrich", brokers,
		kafkaio.Topic{Name: o.orders}, kafkaio.Topic{Name: o.customers, Compact: true}, kafkaio.Topic{Name: o.output})
	if err == nil {
		var more []string
		more, err = kafkaio.EnsureCopartitioned("enrich", brokers, kafkaio.Topic{Name: o.products, Compact: true})
		created = append(created, more...)
	}
	for _, t := range created {
		fmt.Fprintf(os.Stderr, "enrich: created topic %s\n", t)
	}
	return err
}

// config is the application's configuration, without brokers. An order
// or customer that does not deserialize stops the application with its
// coordinates (weir's default policy, Fail), and so does an order whose
// product does not deserialize (a processing error, Fail too): skipping
// an order would lose it without a trace, and skipping a customer or
// product update would enrich later orders with stale data.
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
	customers, products, orders int
	enriched                    []kafkaio.Record
}

// runEmbedded enriches the sample orders on an embedded broker and
// prints them.
func runEmbedded(w io.Writer, o options, cfg weir.Config) error {
	cluster, err := kafka.StartEmbedded(kafkaio.DefaultPartitions, o.orders, o.customers, o.products, o.output)
	if err != nil {
		return err
	}
	defer cluster.Close()
	fmt.Fprintf(w, "enrich: embedded broker; producing %d customer records to %s and %d products to %s, then %d orders to %s; enriched orders to %s\n",
		len(sampleCustomers()), o.customers, len(sampleProducts()), o.products, len(sampleOrders()), o.orders, o.output)
	r, err := enrichSample(cluster.Brokers(), o, cfg)
	if err != nil {
		return err
	}
	printReport(w, o, r)
	return nil
}

// enrichSample runs the sample on brokers and reads the enriched orders
// back from the output topic. The result is the same on every run
// because no order is produced before the tables are complete:
//
//   - the products are produced before the application starts, and a
//     global table is restored to the end of its topic before any task
//     starts;
//   - the customers are produced before the application starts too, but
//     a table is read as any input is, so the orders are produced only
//     once the table has applied every customer record (the customer
//     probe).
//
// It then waits until every order is enriched, stops the application
// (which commits) and reads the output.
func enrichSample(brokers []string, o options, cfg weir.Config) (report, error) {
	cfg.Brokers = brokers
	dir, err := os.MkdirTemp("", "weir-enrich-")
	if err != nil {
		return report{}, err
	}
	defer os.RemoveAll(dir)
	cfg.StateDir = dir

	customers, products, orders := records(sampleCustomers()), records(sampleProducts()), records(sampleOrders())
	if err := kafkaio.Produce("enrich", brokers, o.customers, customers); err != nil {
		return report{}, err
	}
	if err := kafkaio.Produce("enrich", brokers, o.products, products); err != nil {
		return report{}, err
	}
	// Buffered for every record, so that the probes never block a task.
	applied := make(chan struct{}, len(customers))
	enriched := make(chan struct{}, len(orders))
	app, err := weir.New(Topology(o.params(), probes{
		customer: func() { notify(applied) },
		enriched: func() { notify(enriched) },
	}), cfg)
	if err != nil {
		return report{}, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- app.Run(ctx) }()
	timeout := time.After(2 * time.Minute)
	// Every sample customer record changes the table (see
	// sampleCustomers), so the table passes on one change per record.
	if err := await(applied, len(customers), "customer records applied", done, timeout); err != nil {
		return report{}, err
	}
	if err := kafkaio.Produce("enrich", brokers, o.orders, orders); err != nil {
		return report{}, err
	}
	if err := await(enriched, len(orders), "orders enriched", done, timeout); err != nil {
		return report{}, err
	}
	cancel() // Run commits, so every enriched order is in the output topic
	if err := <-done; err != nil {
		return report{}, err
	}
	r := report{customers: len(customers), products: len(products), orders: len(orders)}
	r.enriched, err = kafkaio.ReadCommitted("enrich", brokers, o.output, len(orders), 30*time.Second)
	return r, err
}

// await waits for n signals on c. It fails if the application stops
// (done) or timeout passes first; what names the signals in the error.
func await(c <-chan struct{}, n int, what string, done <-chan error, timeout <-chan time.Time) error {
	for i := 0; i < n; i++ {
		select {
		case <-c:
		case err := <-done:
			return fmt.Errorf("stopped after %d of %d %s: %w", i, n, what, err)
		case <-timeout:
			return fmt.Errorf("%d of %d %s in 2 minutes", i, n, what)
		}
	}
	return nil
}

// printReport prints the enriched orders in event-time order, one line
// each, and how many had an unknown customer or product.
func printReport(w io.Writer, o options, r report) {
	type line struct {
		at time.Time
		e  Enriched
	}
	var lines []line
	unknownCustomers, unknownProducts := 0, 0
	for _, rec := range r.enriched {
		var e Enriched
		if json.Unmarshal(rec.Value, &e) != nil {
			continue
		}
		lines = append(lines, line{rec.Timestamp, e})
		if e.Tier == UnknownTier {
			unknownCustomers++
		}
		if e.ProductName == "" {
			unknownProducts++
		}
	}
	// The output's partitions are read interleaved: sort by event time,
	// then by order id.
	slices.SortStableFunc(lines, func(a, b line) int {
		return cmp.Or(a.at.Compare(b.at), cmp.Compare(a.e.Order, b.e.Order))
	})
	fmt.Fprintf(w, "enrich: applied %d customer records and %d products, then enriched %d orders: %d with an unknown customer, %d with an unknown product\n",
		r.customers, r.products, r.orders, unknownCustomers, unknownProducts)
	fmt.Fprintf(w, "%d enriched orders in %s, in event-time order:\n", len(lines), o.output)
	for _, l := range lines {
		e := l.e
		name, product := e.Name, e.ProductName
		if e.Tier == UnknownTier {
			name = "(unknown customer)"
		}
		if product == "" {
			product = "(unknown product)"
		}
		fmt.Fprintf(w, "  %-5s %-7s %-18s %-7s %3d x %-5s %-20s %9s\n",
			e.Order, e.Customer, name, e.Tier, e.Qty, e.Product, product, cents(e.Total))
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

// notify sends on c if it has room. A record processed again after a
// failure calls a probe again; once c is full, the run has seen enough.
func notify(c chan<- struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}
