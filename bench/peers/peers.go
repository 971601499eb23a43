package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/IBM/sarama"
	"github.com/lovoo/goka"
	"github.com/lovoo/goka/codec"
	"github.com/lovoo/goka/storage"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/kstream"
	"github.com/weirstream/weir/serde"
)

// peerArgs are what every peer process is started with.
type peerArgs struct {
	workload, brokers, app, input, output, guarantee, stateDir string
	commit                                                     time.Duration
	// cache is the record cache's bound in bytes (weir's
	// Config.CacheMaxBytes, Kafka Streams' statestore.cache.max.bytes); 0:
	// none, every update forwarded, the only size goka, which has no
	// cache, takes.
	cache int64
}

// peerUsage names the arguments of every peer, in order; the Kafka Streams
// peer (kstreams/.../Main.java) says the same.
const peerUsage = "workload brokers app-id input output guarantee state-dir commit-ms cache-bytes"

func (a peerArgs) list() []string {
	return []string{a.workload, a.brokers, a.app, a.input, a.output, a.guarantee, a.stateDir,
		strconv.FormatInt(a.commit.Milliseconds(), 10), strconv.FormatInt(a.cache, 10)}
}

func parsePeerArgs(args []string) (peerArgs, error) {
	names := strings.Fields(peerUsage)
	if len(args) != len(names) {
		return peerArgs{}, fmt.Errorf("want %d arguments (%s), got %d", len(names), peerUsage, len(args))
	}
	var errs []error
	count := func(i int) int64 {
		n, err := strconv.ParseInt(args[i], 10, 64)
		if err != nil || n < 0 || !isDigits(args[i]) {
			errs = append(errs, fmt.Errorf("%s %q: not a non-negative integer", names[i], args[i]))
		}
		return n
	}
	a := peerArgs{args[0], args[1], args[2], args[3], args[4], args[5], args[6], time.Duration(count(7)) * time.Millisecond, count(8)}
	if err := errors.Join(errs...); err != nil {
		return peerArgs{}, err
	}
	return a, nil
}

// untilSIGTERM returns a context that ends on SIGTERM or SIGINT.
func untilSIGTERM() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
}

// runWeir runs a workload with weir's DSL, as the Kafka Streams peer does
// with its own (one thread, the record cache the driver asks for), until
// SIGTERM.
func runWeir(args []string) error {
	a, err := parsePeerArgs(args)
	if err != nil {
		return err
	}
	b := kstream.NewBuilder()
	switch a.workload {
	case "wordcount":
		b.Stream("lines", a.input, serde.String(), serde.String()).
			FlatMapValues(func(line string) []string { return strings.Split(line, " ") }).
			GroupBy("by-word", func(_, w string) string { return w }, serde.String(), serde.String()).
			Count("counts").
			ToStream().
			To(a.output, serde.String(), serde.Int64())
	case "count":
		b.Stream("events", a.input, serde.String(), serde.Bytes()).
			GroupByKey().
			Count("counts").
			ToStream().
			To(a.output, serde.String(), serde.Int64())
	case "windowed":
		b.Stream("events", a.input, serde.String(), serde.Bytes()).
			GroupByKey().
			WindowedBy(kstream.Tumbling(windowSize).Grace(24*time.Hour)).
			Count("window-counts").
			ToStream(kstream.WindowedKey).
			Map(func(w kstream.Windowed[string], n int64) (string, int64) {
				return fmt.Sprintf("%s@%d", w.Key, w.Start.UnixMilli()), n
			}).
			To(a.output, serde.String(), serde.Int64())
	case "join":
		table := b.Table("table", tableTopic(a.input), serde.String(), serde.Int64())
		b.Stream("stream", a.input, serde.String(), serde.Int64()).
			Join(table, func(_ string, rank, row int64) int64 { return rank*1_000_000 + row }).
			To(a.output, serde.String(), serde.Int64())
	default:
		return fmt.Errorf("unknown workload %q", a.workload)
	}
	g, err := weir.ParseGuarantee(a.guarantee)
	if err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	app, err := weir.New(b, weir.Config{
		Metrics:        reg,
		ApplicationID:  a.app,
		Brokers:        strings.Split(a.brokers, ","),
		StateDir:       a.stateDir,
		Guarantee:      g,
		CommitInterval: a.commit,
		// The driver's -caches; 10 MiB, its default, is Kafka Streams'
		// default (weir's is none).
		CacheMaxBytes: a.cache,
		Logger:        peerLogger(),
	})
	if err != nil {
		return err
	}
	if path := profilePath("WEIR_PEERS_CPUPROFILE"); path != "" {
		// A CPU profile of the whole run, for finding where weir's time goes.
		f, err := os.Create(path)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	ctx, stop := untilSIGTERM()
	defer stop()
	if path := profilePath("WEIR_PEERS_HEAPPROFILE"); path != "" {
		go profileHeapPeaks(ctx, path)
	}
	err = app.Run(ctx)
	printCommits(reg)
	return err
}

// profilePath returns the profile file the environment variable env
// names, with "%p" replaced by the process's ID: a workload that starts
// weir more than once (the restore: build, restore, idle) then keeps one
// profile per process.
func profilePath(env string) string {
	return strings.ReplaceAll(os.Getenv(env), "%p", strconv.Itoa(os.Getpid()))
}

// printCommits tells the driver how often the App committed (the count
// of weir_commit_duration_seconds), as the Kafka Streams peer prints its
// commit-total: "peer-commits N" on stderr.
func printCommits(reg *prometheus.Registry) {
	families, err := reg.Gather()
	if err != nil {
		return
	}
	for _, f := range families {
		if f.GetName() != "weir_commit_duration_seconds" {
			continue
		}
		var n uint64
		for _, m := range f.GetMetric() {
			n += m.GetHistogram().GetSampleCount()
		}
		fmt.Fprintf(os.Stderr, "peer-commits %d\n", n)
	}
}

// int64Codec is goka's codec for counts: 8 bytes big-endian, as the other
// peers write them.
type int64Codec struct{}

func (int64Codec) Encode(v any) ([]byte, error) {
	n, ok := v.(int64)
	if !ok {
		return nil, fmt.Errorf("int64Codec: %T", v)
	}
	return binary.BigEndian.AppendUint64(nil, uint64(n)), nil
}

func (int64Codec) Decode(b []byte) (any, error) {
	if len(b) != 8 {
		return nil, fmt.Errorf("int64Codec: %d bytes", len(b))
	}
	return int64(binary.BigEndian.Uint64(b)), nil
}

// runGoka runs the wordcount or count workload with goka (at least once
// only: goka has no transactions), until SIGTERM. Word count re-keys
// through goka's loopback topic; every update is emitted, as goka has no
// record cache.
func runGoka(args []string) error {
	a, err := parsePeerArgs(args)
	if err != nil {
		return err
	}
	if a.guarantee != "at_least_once" {
		return errors.New("goka runs at least once only")
	}
	if a.cache != 0 {
		return errors.New("goka has no record cache: cache-bytes must be 0")
	}
	cfg := goka.DefaultConfig()
	cfg.Version = sarama.V3_0_0_0
	cfg.Consumer.Offsets.Initial = sarama.OffsetOldest
	goka.ReplaceGlobalConfig(cfg)
	tmc := goka.NewTopicManagerConfig()
	tmc.Table.Replication, tmc.Stream.Replication = 1, 1

	count := func(ctx goka.Context, _ any) {
		var n int64
		if v := ctx.Value(); v != nil {
			n = v.(int64)
		}
		n++
		ctx.SetValue(n)
		ctx.Emit(goka.Stream(a.output), ctx.Key(), n)
	}
	var edges []goka.Edge
	switch a.workload {
	case "wordcount":
		edges = []goka.Edge{
			goka.Input(goka.Stream(a.input), new(codec.String), func(ctx goka.Context, msg any) {
				for _, w := range strings.Split(msg.(string), " ") {
					ctx.Loopback(w, "")
				}
			}),
			goka.Loop(new(codec.String), count),
		}
	case "count":
		edges = []goka.Edge{goka.Input(goka.Stream(a.input), new(codec.Bytes), count)}
	default:
		return fmt.Errorf("goka: workload %q is not measured", a.workload)
	}
	edges = append(edges, goka.Output(goka.Stream(a.output), int64Codec{}), goka.Persist(int64Codec{}))
	p, err := goka.NewProcessor(strings.Split(a.brokers, ","), goka.DefineGroup(goka.Group(a.app), edges...),
		goka.WithTopicManagerBuilder(goka.TopicManagerBuilderWithTopicManagerConfig(tmc)),
		goka.WithStorageBuilder(storage.DefaultBuilder(a.stateDir)))
	if err != nil {
		return err
	}
	ctx, stop := untilSIGTERM()
	defer stop()
	return p.Run(ctx)
}

// peerLogger returns the weir peer's logger: weir's log on stderr at the
// level WEIR_PEERS_LOG names (debug, info, warn, error), or none when it is
// unset, as the peer runs in a measurement.
// profileHeapPeaks writes a heap profile to path whenever the heap in use
// has grown by 16 MiB past its last peak, checking every 20 ms until ctx
// ends: the file left holds the live allocations near the run's peak, for
// finding where weir's memory goes. Each write says the heap and the
// process's RSS on stderr.
func profileHeapPeaks(ctx context.Context, path string) {
	var peak uint64
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		if ms.HeapInuse < peak+16<<20 {
			continue
		}
		peak = ms.HeapInuse
		f, err := os.Create(path)
		if err != nil {
			fmt.Fprintln(os.Stderr, "heap profile:", err)
			return
		}
		err = pprof.Lookup("heap").WriteTo(f, 0)
		f.Close()
		rss, _ := statusBytes(os.Getpid(), "VmRSS")
		fmt.Fprintf(os.Stderr, "heap profile: in use %d MiB, heap from the OS %d MiB, RSS %d MiB, %v\n", ms.HeapInuse>>20, ms.HeapSys>>20, rss>>20, err)
	}
}

func peerLogger() *slog.Logger {
	name := os.Getenv("WEIR_PEERS_LOG")
	if name == "" {
		return nil
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(name)); err != nil {
		level = slog.LevelInfo
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
}
