// Command bench measures weir's runtime against a real Kafka broker, side by
// side with plain sarama clients doing the same work in the same process and
// the same run, so that the ratios between them hold on a noisy machine.
//
// It loads a fresh topic with a sarama AsyncProducer, then reads it back with
// a bare sarama consumer group, with a weir application that only counts
// records, and with a weir application that copies them to an output topic.
// The sarama transactional passthrough (not in the default set, txn.go)
// copies the topic with sarama's transactional producer, the bare peer of
// weir's exactly-once passthrough.
// The count workload (not in the default set, count.go) runs a weir
// application that counts records per key in a key-value store and emits
// the counts, under exactly-once and at-least-once in the same run, and
// reads the commit latency from weir's metrics.
// The restore workload (not in the default set) measures how fast weir
// rebuilds a key-value store from changelogs of -restore-records records,
// next to a bare sarama read of the same changelog (restore.go).
// The aborts workload (not in the default set) runs three exactly-once
// weir instances and makes the broker refuse K of their output records,
// to count the rebalances each aborted transaction costs (aborts.go).
// The rescale workload (not in the default set, rescale.go) times
// `weir rescale` on a stopped application whose store holds
// -rescale-records entries.
// The join workload (not in the default set, join.go) measures a
// stream-table join written with package kstream over a table of
// -join-table-keys keys against the DSL count of the same stream.
// The failover workload (not in the default set, failover.go) kills one of
// three instances and measures how long its partitions make no progress,
// without and with a standby per task.
// Every run uses new topics, consumer groups and application ids and deletes
// them at the end, also when it fails. See README.md for the workloads and
// the figures measured on the project's machine.
//
// Usage:
//
//	cd bench && go run . [-records 1000000] [-value-size 100] [-partitions 4] [-json]
//	cd bench && go run . -guarantee exactly_once -workloads sarama-txn-passthrough,weir-passthrough [-rounds 3]
//	cd bench && go run . -workloads count [-records 1000000] [-rounds 2]
//	cd bench && go run . -workloads restore [-restore-records 1000000,5000000] [-restore-concurrency 2,4]
//	cd bench && go run . -workloads aborts [-records 200000] [-aborts 5]
//	cd bench && go run . -workloads join [-records 1000000] [-join-table-keys 100000] [-rounds 3]
//	cd bench && go run . -workloads rescale [-rescale-records 5000000] [-rescale-partitions 8] [-rounds 2]
//	cd bench && go run . -workloads failover -partitions 6 [-failover-keys 3000000] [-rounds 2]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/IBM/sarama"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/processor"
	"github.com/weirstream/weir/serde"
)

// keySize is the length of every record key the load writes.
const keySize = 16

// Workload names accepted by -workloads, in the order they run.
const (
	wlSarama            = "sarama"
	wlSource            = "weir-source"
	wlSaramaPassthrough = "sarama-passthrough"
	wlSaramaTxn         = "sarama-txn-passthrough"
	wlPassthrough       = "weir-passthrough"
	wlLoad              = "load" // runs before the read workloads; accepted in -workloads for clarity
	wlRestore           = "restore"
	wlCount             = "count"
	wlAborts            = "aborts"
	wlWordcount         = "wordcount"
	wlJoin              = "join"
	wlRescale           = "rescale"
	wlFailover          = "failover"
)

// allWorkloads are the read workloads of the load's topic, the default.
var allWorkloads = []string{wlSarama, wlSource, wlSaramaPassthrough, wlPassthrough}

// readOrder are all the read workloads of the load's topic, in the order
// they run: the default ones and the sarama transactional passthrough.
var readOrder = []string{wlSarama, wlSource, wlSaramaPassthrough, wlSaramaTxn, wlPassthrough}

// knownWorkloads are all the workloads, in the order they run.
var knownWorkloads = append(slices.Clone(readOrder), wlCount, wlRestore, wlRescale, wlAborts, wlWordcount, wlJoin, wlFailover)

// options are the parsed command-line flags.
type options struct {
	registryURL    string // "" leaves out the count workload's Avro store variant
	brokers        []string
	records        int64
	valueSize      int
	partitions     int32
	threads        int
	guarantee      weir.Guarantee
	workloads      []string
	rounds         int
	commitInterval time.Duration
	timeout        time.Duration
	verify         bool
	sharedClient   bool
	json           bool
	profiling      profiling
	logLevel       string

	restoreRecords     []int64
	restoreConcurrency []int

	// rescaleRecords are the rescale workload's store sizes;
	// rescalePartitions its new partition count (0: twice -partitions);
	// weirCLI the weir command it runs ("" builds ../cmd/weir).
	rescaleRecords    []int64
	rescalePartitions int
	weirCLI           string

	aborts       int
	abortsWindow time.Duration
	// partitionsSet tells whether -partitions was given: the aborts
	// workload has a default of its own.
	partitionsSet bool

	// wcInstances is the wordcount workload's instance count.
	wcInstances int
	// wcVariants are the wordcount variants to run, in wcVariants' order.
	wcVariants []wcVariant

	// joinTableKeys is the join workload's table size.
	joinTableKeys int64

	// failoverKeys is the failover workload's store size.
	failoverKeys int64
}

func main() {
	if os.Getenv(failoverChildEnv) != "" {
		os.Exit(runFailoverChild()) // an instance of the failover workload
	}
	opts, err := parseFlags(os.Args[1:], os.Getenv("WEIR_BOOTSTRAP_SERVERS"), os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err = run(ctx, opts, os.Stdout)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench: FAILED:", err)
		os.Exit(1)
	}
}

// parseFlags parses args; defaultBrokers is WEIR_BOOTSTRAP_SERVERS.
func parseFlags(args []string, defaultBrokers string, errOut io.Writer) (*options, error) {
	if defaultBrokers == "" {
		defaultBrokers = "127.0.0.1:19092"
	}
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(errOut)
	brokers := fs.String("brokers", defaultBrokers, "bootstrap servers, comma-separated (default: $WEIR_BOOTSTRAP_SERVERS, else 127.0.0.1:19092)")
	records := fs.Int64("records", 1_000_000, "records to load and to read back in every workload")
	valueSize := fs.Int("value-size", 100, "bytes per record value (keys are 16 bytes)")
	partitions := fs.Int("partitions", 4, "partitions of the input and output topics")
	threads := fs.Int("threads", 1, "weir stream threads; the sarama group runs as many members")
	guarantee := fs.String("guarantee", "at_least_once", "weir processing guarantee: at_least_once or exactly_once")
	workloads := fs.String("workloads", strings.Join(allWorkloads, ","), "comma-separated workloads to measure: "+strings.Join(knownWorkloads, ", "))
	restoreRecords := fs.String("restore-records", "1000000,5000000", "restore workload: comma-separated changelog sizes, in records")
	restoreConcurrency := fs.String("restore-concurrency", "2,4", "restore workload: comma-separated values of weir's Config.Stores.MaxConcurrentRestores to measure")
	rescaleRecords := fs.String("rescale-records", "5000000", "rescale workload: comma-separated store sizes, in entries")
	rescalePartitions := fs.Int("rescale-partitions", 0, "rescale workload: the partition count to rescale to (default twice -partitions)")
	weirCLI := fs.String("weir-cli", "", "rescale workload: the weir command to run (default: built from ../cmd/weir)")
	aborts := fs.Int("aborts", 5, "aborts workload: bad input records, each an output record the broker refuses (an aborted transaction); 0 is a baseline without injection")
	abortsWindow := fs.Duration("aborts-window", 0, "aborts workload: stop this long after the first bad record is processed, even with input left, and report what happened until then; 0 runs until every input record is committed (bounded by -timeout)")
	wcInstances := fs.Int("wc-instances", 1, "wordcount workload: weir instances (each with -threads threads) sharing the work")
	wcVariantNames := fs.String("wc-variants", "", "wordcount workload: the variants to run, a comma list of their labels (default all: "+wcVariantLabels()+")")
	failoverKeys := fs.Int64("failover-keys", 3_000_000, "failover workload: entries of the store, loaded into its changelog")
	joinTableKeys := fs.Int64("join-table-keys", 100_000, "join workload: keys of the table topic; the stream's keys are drawn uniformly from them")
	rounds := fs.Int("rounds", 1, "times to repeat the measured workloads, interleaved; ratios use the medians")
	commitInterval := fs.Duration("commit-interval", 100*time.Millisecond, "weir Config.CommitInterval; 0 means weir's default for the guarantee (30s at least once)")
	timeout := fs.Duration("timeout", 5*time.Minute, "bound on each workload's wait for its records")
	verify := fs.Bool("verify", true, "after the passthrough, count the output topic's committed records (not timed)")
	sharedClient := fs.Bool("sarama-shared-client", false, "in the sarama passthrough, share one client (one broker connection) between group and producer, as a weir thread does")
	jsonOut := fs.Bool("json", false, "print machine-readable JSON instead of the table")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of each measured workload to PREFIX-<workload>.pprof")
	trace := fs.Bool("trace", false, "with -cpuprofile, also write an execution trace of each measured workload to PREFIX-<workload>.trace (go tool trace; its -pprof=sync and -pprof=sched show where the stream threads wait)")
	logLevel := fs.String("log", "off", "weir's logs on stderr: off, info or debug (debug adds sarama's)")
	registryURL := fs.String("registry", os.Getenv("WEIR_SCHEMA_REGISTRY_URL"), "schema registry URL (Confluent-compatible API) for the count workload's Avro store variant, which is left out without one (default: $WEIR_SCHEMA_REGISTRY_URL)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}

	o := &options{
		records:           *records,
		valueSize:         *valueSize,
		partitions:        int32(*partitions),
		threads:           *threads,
		rounds:            *rounds,
		commitInterval:    *commitInterval,
		timeout:           *timeout,
		verify:            *verify,
		sharedClient:      *sharedClient,
		json:              *jsonOut,
		profiling:         profiling{prefix: *cpuProfile, trace: *trace},
		logLevel:          *logLevel,
		aborts:            *aborts,
		abortsWindow:      *abortsWindow,
		wcInstances:       *wcInstances,
		joinTableKeys:     *joinTableKeys,
		failoverKeys:      *failoverKeys,
		registryURL:       *registryURL,
		rescalePartitions: *rescalePartitions,
		weirCLI:           *weirCLI,
	}
	fs.Visit(func(f *flag.Flag) { o.partitionsSet = o.partitionsSet || f.Name == "partitions" })
	var errs []error
	for b := range strings.SplitSeq(*brokers, ",") {
		if b = strings.TrimSpace(b); b != "" {
			o.brokers = append(o.brokers, b)
		}
	}
	if len(o.brokers) == 0 {
		errs = append(errs, errors.New("-brokers: empty"))
	}
	if o.records < 1 {
		errs = append(errs, fmt.Errorf("-records: %d is below 1", o.records))
	}
	if o.valueSize < 0 {
		errs = append(errs, fmt.Errorf("-value-size: negative (%d)", o.valueSize))
	}
	if *partitions < 1 || *partitions > 10_000 {
		errs = append(errs, fmt.Errorf("-partitions: %d is not in [1, 10000]", *partitions))
	}
	if o.threads < 1 {
		errs = append(errs, fmt.Errorf("-threads: %d is below 1", o.threads))
	}
	if o.rounds < 1 {
		errs = append(errs, fmt.Errorf("-rounds: %d is below 1", o.rounds))
	}
	if o.failoverKeys < 1 {
		errs = append(errs, fmt.Errorf("-failover-keys: %d is not positive", o.failoverKeys))
	}
	if o.joinTableKeys < 1 || o.joinTableKeys > 1<<31-1 {
		errs = append(errs, fmt.Errorf("-join-table-keys: %d is not in [1, %d]", o.joinTableKeys, 1<<31-1))
	}
	if o.commitInterval < 0 {
		errs = append(errs, fmt.Errorf("-commit-interval: negative (%v)", o.commitInterval))
	}
	if o.timeout <= 0 {
		errs = append(errs, fmt.Errorf("-timeout: %v is not positive", o.timeout))
	}
	g, err := weir.ParseGuarantee(*guarantee)
	if err != nil {
		errs = append(errs, fmt.Errorf("-guarantee: %w", err))
	}
	o.guarantee = g
	if o.workloads, err = parseWorkloads(*workloads); err != nil {
		errs = append(errs, fmt.Errorf("-workloads: %w", err))
	}
	if o.restoreRecords, err = parsePositives[int64](*restoreRecords); err != nil {
		errs = append(errs, fmt.Errorf("-restore-records: %w", err))
	}
	if o.restoreConcurrency, err = parsePositives[int](*restoreConcurrency); err != nil {
		errs = append(errs, fmt.Errorf("-restore-concurrency: %w", err))
	}
	if o.rescaleRecords, err = parsePositives[int64](*rescaleRecords); err != nil {
		errs = append(errs, fmt.Errorf("-rescale-records: %w", err))
	}
	if *rescalePartitions < 0 || *rescalePartitions > 10_000 || (*rescalePartitions > 0 && *rescalePartitions <= *partitions) {
		errs = append(errs, fmt.Errorf("-rescale-partitions: %d is not above -partitions (%d) and at most 10000", *rescalePartitions, *partitions))
	}
	if o.wcVariants, err = parseWcVariants(*wcVariantNames); err != nil {
		errs = append(errs, fmt.Errorf("-wc-variants: %w", err))
	}
	if slices.Contains(o.workloads, wlAborts) {
		errs = append(errs, o.checkAborts()...)
	}
	switch o.logLevel {
	case "off", "info", "debug":
	default:
		errs = append(errs, fmt.Errorf("-log: %q is not off, info or debug", o.logLevel))
	}
	return o, errors.Join(errs...)
}

// parseWorkloads parses the -workloads list, keeping the canonical order.
func parseWorkloads(s string) ([]string, error) {
	want := map[string]bool{}
	for w := range strings.SplitSeq(s, ",") {
		w = strings.TrimSpace(w)
		switch {
		case w == "" || w == wlLoad:
		case slices.Contains(knownWorkloads, w):
			want[w] = true
		default:
			return nil, fmt.Errorf("unknown workload %q (want %s)", w, strings.Join(knownWorkloads, ", "))
		}
	}
	var out []string
	for _, w := range knownWorkloads {
		if want[w] {
			out = append(out, w)
		}
	}
	return out, nil
}

// parsePositives parses a comma-separated list of positive integers.
func parsePositives[T int | int64](s string) ([]T, error) {
	var out []T
	for f := range strings.SplitSeq(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil || n < 1 || int64(T(n)) != n {
			return nil, fmt.Errorf("%q is not a positive integer", f)
		}
		out = append(out, T(n))
	}
	if len(out) == 0 {
		return nil, errors.New("empty")
	}
	return out, nil
}

// readWorkloads returns the selected workloads that read the load's topic.
func (o *options) readWorkloads() []string {
	return slices.DeleteFunc(slices.Clone(o.workloads), func(w string) bool { return !slices.Contains(readOrder, w) })
}

// logger returns the logger weir applications get, and turns on sarama's
// global logger at debug level.
func (o *options) logger() *slog.Logger {
	switch o.logLevel {
	case "info":
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	case "debug":
		sarama.Logger = log.New(os.Stderr, "[sarama] ", log.LstdFlags|log.Lmicroseconds)
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return nil
}

// run loads the input, measures the workloads, prints the report to out
// and removes everything it created.
func run(ctx context.Context, o *options, out io.Writer) (err error) {
	logger := o.logger()
	progress := func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "bench: "+format+"\n", args...)
	}

	if err := checkWeirConfig(o); err != nil {
		return err
	}
	if err := checkAbortsConfig(o); err != nil {
		return err
	}
	c, err := connect(o.brokers)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := c.cleanup(); cerr != nil {
			err = errors.Join(err, cerr)
		}
	}()

	stamp := time.Now().UTC().Format("20060102-150405.000")
	stamp = strings.ReplaceAll(stamp, ".", "-")
	prefix := "weir-bench-" + stamp
	input := prefix + "-in"

	reads := o.readWorkloads()
	counts := slices.Contains(o.workloads, wlCount)
	rep := &report{
		Date:           time.Now().UTC().Format(time.RFC3339),
		Brokers:        strings.Join(o.brokers, ","),
		KeyBytes:       keySize,
		ValueBytes:     o.valueSize,
		Partitions:     o.partitions,
		Threads:        o.threads,
		Guarantee:      o.guarantee.String(),
		CommitInterval: commitIntervalLabel(o),
		Rounds:         o.rounds,
	}
	rep.fillHost()
	if len(reads) > 0 || counts {
		rep.Records = o.records
		progress("creating %s (%d partitions) and loading %d records", input, o.partitions, o.records)
		if err := c.createTopic(ctx, input, o.partitions); err != nil {
			return err
		}
		res, err := runLoad(ctx, o, c, input)
		if err != nil {
			return err
		}
		rep.add(res)
		progress("%s", res.summary())
	}

	for round := 1; round <= o.rounds && (len(reads) > 0 || counts); round++ {
		for _, w := range reads {
			if err := ctx.Err(); err != nil {
				return fmt.Errorf("interrupted: %w", err)
			}
			id := fmt.Sprintf("%s-%s-r%d", prefix, w, round)
			var res *result
			switch w {
			case wlSarama:
				res, err = runSaramaGroup(ctx, o, c, input, id, round)
			case wlSource:
				res, err = runWeir(ctx, o, c, logger, input, "", id, round)
			case wlSaramaPassthrough:
				output := id + "-out"
				if err = c.createTopic(ctx, output, o.partitions); err == nil {
					res, err = runSaramaPassthrough(ctx, o, c, input, output, id, round)
				}
			case wlSaramaTxn:
				output := id + "-out"
				if err = c.createTopic(ctx, output, o.partitions); err == nil {
					res, err = runSaramaTxnPassthrough(ctx, o, c, input, output, id, round)
				}
			case wlPassthrough:
				output := id + "-out"
				if err = c.createTopic(ctx, output, o.partitions); err == nil {
					res, err = runWeir(ctx, o, c, logger, input, output, id, round)
				}
			}
			if err != nil {
				return err
			}
			rep.add(res)
			progress("%s", res.summary())
		}
		if counts {
			if err := runCounts(ctx, o, c, logger, input, prefix, round, rep, progress); err != nil {
				return err
			}
		}
	}
	rep.computeRatios()
	rep.computeCountRatios()
	if slices.Contains(o.workloads, wlRestore) {
		if err := runRestores(ctx, o, c, logger, prefix, rep, progress); err != nil {
			return err
		}
		rep.computeRestoreRatios()
	}
	if slices.Contains(o.workloads, wlRescale) {
		if err := runRescales(ctx, o, c, logger, prefix, rep, progress); err != nil {
			return err
		}
	}
	if slices.Contains(o.workloads, wlWordcount) {
		if len(reads) == 0 && !counts && !slices.Contains(o.workloads, wlRestore) && !slices.Contains(o.workloads, wlAborts) {
			// The header describes the wordcount workload alone.
			rep.Records, rep.Partitions, rep.Guarantee = o.records, o.wcPartitions(), "exactly_once and at_least_once"
		}
		if err := runWordcounts(ctx, o, c, logger, prefix, rep, progress); err != nil {
			return err
		}
	}
	if slices.Contains(o.workloads, wlJoin) {
		if rep.Records == 0 {
			rep.Records = o.records
		}
		if err := runJoins(ctx, o, c, logger, prefix, rep, progress); err != nil {
			return err
		}
	}
	if slices.Contains(o.workloads, wlFailover) {
		if len(reads) == 0 && !counts && !slices.Contains(o.workloads, wlRestore) && !slices.Contains(o.workloads, wlJoin) && !slices.Contains(o.workloads, wlAborts) {
			// The header describes the failover workload alone.
			rep.Records, rep.Partitions, rep.Guarantee = o.failoverKeys, o.partitions, weir.ExactlyOnce.String()
		}
		if err := runFailovers(ctx, o, c, prefix, rep, progress); err != nil {
			return err
		}
	}
	if slices.Contains(o.workloads, wlAborts) {
		if len(reads) == 0 && !counts && !slices.Contains(o.workloads, wlRestore) && !slices.Contains(o.workloads, wlJoin) {
			// The header describes the aborts workload alone.
			rep.Records, rep.Partitions, rep.Guarantee = o.records, o.abortsPartitions(), weir.ExactlyOnce.String()
		}
		if err := runAbortsRounds(ctx, o, c, logger, prefix, rep, progress); err != nil {
			return err
		}
	}
	if o.json {
		return rep.writeJSON(out)
	}
	return rep.writeTable(out)
}

func commitIntervalLabel(o *options) string {
	if o.commitInterval == 0 {
		return "default"
	}
	return o.commitInterval.String()
}

// checkWeirConfig fails fast, before anything is loaded, when weir would
// refuse the configuration the weir workloads use (such as a guarantee
// that is not available yet).
func checkWeirConfig(o *options) error {
	if !slices.Contains(o.workloads, wlSource) && !slices.Contains(o.workloads, wlPassthrough) && !slices.Contains(o.workloads, wlRestore) && !slices.Contains(o.workloads, wlJoin) && !slices.Contains(o.workloads, wlRescale) {
		return nil
	}
	t := processor.NewTopology()
	t.AddSource("in", "weir-bench-check", serde.Bytes(), serde.Bytes())
	_, err := weir.New(t, weir.Config{
		ApplicationID:  "weir-bench-check",
		Brokers:        o.brokers,
		Guarantee:      o.guarantee,
		Threads:        o.threads,
		CommitInterval: o.commitInterval,
	})
	if err != nil {
		return fmt.Errorf("weir rejects the configuration: %w", err)
	}
	return nil
}
