// Command peers runs the same stateful workloads with weir, Kafka Streams
// 4.4 and goka against one Kafka broker, one after another on the same
// pre-produced input, checks each run's output for the exact final counts
// before its figures count, and writes a table of rates, CPU and peak RSS
// with the ratios weir/peer (see bench/README.md, "Peers").
//
//	go run . -brokers 127.0.0.1:19092
//
// Each peer runs as a process of its own (this binary's run-weir and
// run-goka commands, and java for Kafka Streams), so its CPU time and peak
// RSS are its own.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"
)

func main() {
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case "run-weir":
			exit(runWeir(os.Args[2:]))
		case "run-goka":
			exit(runGoka(os.Args[2:]))
		}
	}
	o, err := parseFlags(os.Args[1:], os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "peers:", err)
		os.Exit(2)
	}
	exit(run(context.Background(), o, os.Stdout))
}

func exit(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "peers:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

type options struct {
	brokers    []string
	workloads  []string
	peers      []string
	guarantees []string
	// caches are the record cache sizes, in bytes, every wordcount, count,
	// windowed and join run of weir and Kafka Streams runs at, once each (0:
	// no cache, every update forwarded); goka, which has none, runs once.
	// The restore workload runs at the first.
	caches []int64
	lines  int // wordcount
	// wordcountWords are the wordcount workload's vocabularies: it runs
	// once per distinct-word count, each on an input of its own.
	wordcountWords []int
	records        int // count, windowed, join
	// restoreRecords are the restore workload's store sizes, one run each.
	restoreRecords []int
	partitions     int32
	commit         time.Duration
	timeout        time.Duration
	// rounds is how often each workload, guarantee and peer runs. The
	// machine's noise moves single runs by a third; the ratios compare
	// medians, and the peers take turns at going first, so that neither
	// always meets the broker right after another peer's load.
	rounds      int
	kstreams    string // the Maven project, built
	java        string
	kstreamsLog string // the Kafka Streams peer's slf4j-simple level
	results     string // directory for the table; "" prints only
	// brokerPID is the local broker's process, whose CPU time each run
	// reports (the broker shares the machine's cores with the peer); 0:
	// not reported.
	brokerPID int
}

var (
	allWorkloads  = []string{"wordcount", "count", "windowed", "join", "restore"}
	allPeers      = []string{"weir", "kstreams", "goka"}
	allGuarantees = []string{"exactly_once", "at_least_once"}
)

func parseFlags(args []string, errOut io.Writer) (*options, error) {
	fs := flag.NewFlagSet("peers", flag.ContinueOnError)
	fs.SetOutput(errOut)
	brokers := fs.String("brokers", envOr("WEIR_BOOTSTRAP_SERVERS", "127.0.0.1:19092"), "bootstrap servers (default $WEIR_BOOTSTRAP_SERVERS)")
	workloads := fs.String("workloads", strings.Join(allWorkloads, ","), "workloads: "+strings.Join(allWorkloads, ", "))
	peers := fs.String("peers", strings.Join(allPeers, ","), "peers: "+strings.Join(allPeers, ", ")+" (goka: at least once, wordcount and count)")
	guarantees := fs.String("guarantees", strings.Join(allGuarantees, ","), "processing guarantees")
	caches := fs.String("caches", "10485760", "record cache sizes in bytes, comma-separated: every wordcount, count, windowed and join run of weir (Config.CacheMaxBytes) and Kafka Streams (statestore.cache.max.bytes) runs once per size, 0 forwarding every update; goka has no cache and runs once; restore runs at the first size")
	lines := fs.Int("lines", 200_000, "wordcount: input lines of 10 words")
	wordcountWords := fs.String("wordcount-words", "10000", "wordcount: distinct words the lines are drawn from, comma-separated: one input and one run per count")
	records := fs.Int("records", 1_000_000, "count, windowed and join: input records")
	restoreRecords := fs.String("restore-records", "5000000", "restore: keys in the store restored, comma-separated: one run per size (weir and Kafka Streams, at the first guarantee and the first cache size)")
	partitions := fs.Int("partitions", 6, "partitions of every topic")
	commit := fs.Duration("commit-interval", 100*time.Millisecond, "commit interval of every peer and guarantee")
	timeout := fs.Duration("timeout", 10*time.Minute, "bound on each run")
	rounds := fs.Int("rounds", 1, "runs of every workload, guarantee and peer; the peers' order alternates from round to round and the ratios compare medians")
	kstreams := fs.String("kstreams", "kstreams", "the Kafka Streams peer's Maven project, built with mvn package")
	java := fs.String("java", "java", "the java command")
	kstreamsLog := fs.String("kstreams-log", "warn", "the Kafka Streams peer's log level (slf4j-simple: error, warn, info, debug)")
	results := fs.String("results", "", "directory to write the table to (peers-<time>.md); empty prints it only")
	brokerPIDFile := fs.String("broker-pid-file", "", "file holding the local broker's PID (make kafka-up writes one next to env.sh): each run reports the broker's CPU time too")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	o := &options{rounds: *rounds, lines: *lines, records: *records, partitions: int32(*partitions), commit: *commit, timeout: *timeout,
		kstreams: *kstreams, java: *java, kstreamsLog: *kstreamsLog, results: *results}
	o.brokers = strings.Split(*brokers, ",")
	var errs []error
	if *brokerPIDFile != "" {
		b, err := os.ReadFile(*brokerPIDFile)
		if err == nil {
			o.brokerPID, err = strconv.Atoi(strings.TrimSpace(string(b)))
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("-broker-pid-file: %w", err))
		}
	}
	list := func(name, v string, known []string) []string {
		var out []string
		for s := range strings.SplitSeq(v, ",") {
			if s = strings.TrimSpace(s); s == "" {
				continue
			}
			if !slices.Contains(known, s) {
				errs = append(errs, fmt.Errorf("-%s: unknown %q (want %s)", name, s, strings.Join(known, ", ")))
			}
			out = append(out, s)
		}
		return out
	}
	o.workloads = list("workloads", *workloads, allWorkloads)
	o.peers = list("peers", *peers, allPeers)
	o.guarantees = list("guarantees", *guarantees, allGuarantees)
	var err error
	if o.caches, err = numbers[int64]("caches", *caches, 0); err != nil {
		errs = append(errs, err)
	}
	if o.wordcountWords, err = numbers[int]("wordcount-words", *wordcountWords, 1); err != nil {
		errs = append(errs, err)
	}
	if o.restoreRecords, err = numbers[int]("restore-records", *restoreRecords, 1); err != nil {
		errs = append(errs, err)
	}
	if o.lines <= 0 || o.records <= 0 || o.partitions <= 0 || o.rounds <= 0 {
		errs = append(errs, errors.New("-lines, -records, -partitions and -rounds must be positive"))
	}
	return o, errors.Join(errs...)
}

// numbers parses the comma-separated integers of flag name, none below
// least: decimal digits only, blanks around commas ignored, none twice (a
// point run twice would be one row of the ratios with two medians' worth
// of runs), at least one.
func numbers[N int | int64](name, v string, least N) ([]N, error) {
	var out []N
	var errs []error
	for s := range strings.SplitSeq(v, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		n, err := strconv.ParseInt(s, 10, 64)
		switch {
		case err != nil || N(n) < least || int64(N(n)) != n || !isDigits(s):
			errs = append(errs, fmt.Errorf("-%s: %q is not an integer of at least %d", name, s, least))
		case slices.Contains(out, N(n)):
			errs = append(errs, fmt.Errorf("-%s: %d given twice", name, n))
		default:
			out = append(out, N(n))
		}
	}
	if len(out) == 0 && len(errs) == 0 {
		errs = append(errs, fmt.Errorf("-%s: no value", name))
	}
	return out, errors.Join(errs...)
}

// isDigits reports whether s is decimal digits only (ParseInt also takes
// a sign).
func isDigits(s string) bool {
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// run measures every workload at each of its points, and every guarantee,
// cache size and peer on each, and prints the table.
func run(ctx context.Context, o *options, out io.Writer) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	c, err := newCluster(o.brokers)
	if err != nil {
		return err
	}
	defer c.close()
	prefix := fmt.Sprintf("peers-%d", time.Now().Unix())
	started := time.Now()
	if slices.Contains(o.guarantees, "exactly_once") {
		warm := prefix + "-warm-up"
		if err := c.createTopic(warm, 1); err != nil {
			return err
		}
		if err := c.warmTransactions(warm); err != nil {
			return fmt.Errorf("warming up transactions: %w", err)
		}
	}
	var results []result
	var abouts []string
	for _, name := range o.workloads {
		for _, keys := range points(o, name) {
			rs, about, err := runPoint(ctx, o, c, self, prefix, name, keys)
			if err != nil {
				return err
			}
			results, abouts = append(results, rs...), append(abouts, about)
		}
	}
	table := report(o, results, abouts, started)
	fmt.Fprint(out, table)
	if o.results == "" {
		return nil
	}
	if err := os.MkdirAll(o.results, 0o755); err != nil {
		return err
	}
	path := filepath.Join(o.results, fmt.Sprintf("peers-%s.md", started.UTC().Format("20060102-150405")))
	if err := os.WriteFile(path, []byte(table), 0o644); err != nil {
		return err
	}
	fmt.Fprintln(os.Stderr, "peers: wrote", path)
	return nil
}

// points returns the key spaces workload runs at, one input each: the
// wordcount's vocabularies, the restore's store sizes, and the fixed key
// count of the others.
func points(o *options, workload string) []int {
	switch workload {
	case "wordcount":
		return o.wordcountWords
	case "restore":
		return o.restoreRecords
	case "windowed":
		return []int{windowedKeys}
	case "join":
		return []int{joinTableKeys}
	}
	return []int{countKeys}
}

// runPoint produces the input of workload at one point of its key space
// and measures every round, guarantee, cache size and peer on it. It
// returns the runs measured, the workload's description and the first
// error, which ends the benchmark.
func runPoint(ctx context.Context, o *options, c *cluster, self, prefix, name string, keys int) ([]result, string, error) {
	input := fmt.Sprintf("%s-%s-%d-in", prefix, name, keys)
	if err := c.createTopic(input, o.partitions); err != nil {
		return nil, "", err
	}
	base := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	var w *workload
	switch name {
	case "wordcount":
		w = wordCount(input, o.lines, keys, base)
	case "count":
		w = countPerKey(input, o.records, base)
	case "windowed":
		w = windowedCount(input, o.records, base)
	case "join":
		w = streamTableJoin(input, o.records, base)
		if err := c.createTopic(tableTopic(input), o.partitions, "cleanup.policy", "compact"); err != nil {
			return nil, "", err
		}
		if err := c.produce(slices.Values(w.table)); err != nil {
			return nil, "", fmt.Errorf("%s: producing the table: %w", name, err)
		}
	case "restore":
		w = restoreInput(input, keys, base)
	}
	if err := c.produce(w.input); err != nil {
		return nil, "", fmt.Errorf("%s: producing the input: %w", name, err)
	}
	fmt.Fprintf(os.Stderr, "peers: %s: %d input records produced\n", name, w.inputs)
	var results []result
	for round := range o.rounds {
		for _, g := range o.guarantees {
			for i, size := range o.caches {
				for _, peer := range roundOrder(o.peers, round) {
					if !runs(name, peer, g, i, o.guarantees[0]) {
						continue
					}
					cache := size
					if peer == "goka" {
						cache = noCache
					}
					run := fmt.Sprintf("%s-%s-%d-%s-%s-c%s-r%d", prefix, name, keys, peer, g, cacheName(cache), round)
					if waited := waitBrokerQuiet(ctx, o); waited >= brokerQuietMax {
						fmt.Fprintf(os.Stderr, "peers: the broker was still busy after %v; running anyway\n", waited.Round(time.Second))
					}
					var r result
					var err error
					if name == "restore" {
						r, err = measureRestore(ctx, o, c, self, peer, g, cache, w, input, run)
					} else {
						r, err = measure(ctx, o, c, self, peer, g, cache, w, input, run)
					}
					if err != nil {
						return nil, "", fmt.Errorf("%s at %d keys, %s, %s, cache %s, round %d: %w", name, keys, peer, g, cacheLabel(cache), round+1, err)
					}
					r.round = round + 1
					fmt.Fprintf(os.Stderr, "peers: %s\n", r.summary())
					results = append(results, r)
				}
			}
		}
	}
	return results, w.about, nil
}

// runs reports whether peer runs workload under guarantee at the cache
// size of index cacheIndex in -caches: goka at least once and on
// wordcount and count only, and once (it has no cache); restore on weir
// and Kafka Streams, once (a restore depends on neither the guarantee nor
// the cache), under first, the first guarantee given.
func runs(workload, peer, guarantee string, cacheIndex int, first string) bool {
	switch {
	case peer == "goka":
		return cacheIndex == 0 && guarantee == "at_least_once" && (workload == "wordcount" || workload == "count")
	case workload == "restore":
		return cacheIndex == 0 && guarantee == first
	}
	return true
}

// roundOrder is the order the peers run in during round (from 0): as
// given in even rounds, reversed in odd ones.
func roundOrder(peers []string, round int) []string {
	if round%2 == 0 {
		return peers
	}
	r := slices.Clone(peers)
	slices.Reverse(r)
	return r
}

// machine describes where the figures were measured.
func machine() string {
	host, _ := os.Hostname()
	return fmt.Sprintf("%s, %d CPUs, %s/%s, %s", host, runtime.NumCPU(), runtime.GOOS, runtime.GOARCH, runtime.Version())
}

// command returns the process of peer for one run.
func command(o *options, self, peer string, a peerArgs) (*exec.Cmd, error) {
	switch peer {
	case "weir":
		return exec.Command(self, append([]string{"run-weir"}, a.list()...)...), nil
	case "goka":
		return exec.Command(self, append([]string{"run-goka"}, a.list()...)...), nil
	case "kstreams":
		classes := filepath.Join(o.kstreams, "target", "classes")
		if _, err := os.Stat(classes); err != nil {
			return nil, fmt.Errorf("the Kafka Streams peer is not built (cd %s && mvn -q package): %w", o.kstreams, err)
		}
		cp := classes + string(os.PathListSeparator) + filepath.Join(o.kstreams, "target", "lib", "*")
		// Warnings and errors on stderr, which a failed run shows.
		return exec.Command(o.java, append([]string{"-Dorg.slf4j.simpleLogger.defaultLogLevel=" + o.kstreamsLog, "-cp", cp, "weir.peers.Main"}, a.list()...)...), nil
	}
	return nil, fmt.Errorf("unknown peer %q", peer)
}
