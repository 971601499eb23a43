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
	brokers        []string
	workloads      []string
	peers          []string
	guarantees     []string
	lines          int // wordcount
	records        int // count, windowed
	restoreRecords int
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
	lines := fs.Int("lines", 200_000, "wordcount: input lines of 10 words")
	records := fs.Int("records", 1_000_000, "count and windowed: input records")
	restoreRecords := fs.Int("restore-records", 5_000_000, "restore: keys in the store restored (weir and Kafka Streams, exactly once)")
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
	o := &options{rounds: *rounds, lines: *lines, records: *records, restoreRecords: *restoreRecords, partitions: int32(*partitions), commit: *commit, timeout: *timeout,
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
	if o.lines <= 0 || o.records <= 0 || o.partitions <= 0 || o.rounds <= 0 {
		errs = append(errs, errors.New("-lines, -records, -partitions and -rounds must be positive"))
	}
	return o, errors.Join(errs...)
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// run measures every workload, peer and guarantee and prints the table.
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
	for _, name := range o.workloads {
		input := prefix + "-" + name + "-in"
		if err := c.createTopic(input, o.partitions); err != nil {
			return err
		}
		base := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
		var w *workload
		switch name {
		case "wordcount":
			w = wordCount(input, o.lines, base)
		case "count":
			w = countPerKey(input, o.records, base)
		case "windowed":
			w = windowedCount(input, o.records, base)
		case "join":
			w = streamTableJoin(input, o.records, base)
			if err := c.createTopic(tableTopic(input), o.partitions, "cleanup.policy", "compact"); err != nil {
				return err
			}
			if err := c.produce(w.table); err != nil {
				return fmt.Errorf("%s: producing the table: %w", name, err)
			}
		case "restore":
			w = restoreInput(input, o.restoreRecords, base)
		}
		if err := c.produce(w.records); err != nil {
			return fmt.Errorf("%s: producing the input: %w", name, err)
		}
		fmt.Fprintf(os.Stderr, "peers: %s: %d input records produced\n", name, len(w.records))
		for round := range o.rounds {
			for _, g := range o.guarantees {
				for _, peer := range roundOrder(o.peers, round) {
					if peer == "goka" && (g != "at_least_once" || name == "windowed" || name == "join") {
						continue
					}
					run := fmt.Sprintf("%s-%s-%s-%s-r%d", prefix, name, peer, g, round)
					if waited := waitBrokerQuiet(ctx, o); waited >= brokerQuietMax {
						fmt.Fprintf(os.Stderr, "peers: the broker was still busy after %v; running anyway\n", waited.Round(time.Second))
					}
					var r result
					var err error
					if name == "restore" {
						if peer == "goka" || g != o.guarantees[0] {
							continue // weir and Kafka Streams, once: a restore does not depend on the guarantee
						}
						r, err = measureRestore(ctx, o, c, self, peer, g, w, input, run)
					} else {
						r, err = measure(ctx, o, c, self, peer, g, w, input, run)
					}
					if err != nil {
						return fmt.Errorf("%s, %s, %s, round %d: %w", name, peer, g, round+1, err)
					}
					r.round = round + 1
					fmt.Fprintf(os.Stderr, "peers: %s\n", r.summary())
					results = append(results, r)
				}
			}
		}
		w.records = nil // let the input go before the next workload's
	}
	table := report(o, results, started)
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
