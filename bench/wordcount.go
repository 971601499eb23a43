package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/IBM/sarama"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/kstream"
	"github.com/weirstream/weir/processor"
	"github.com/weirstream/weir/serde"
)

// The wordcount workload (-workloads wordcount, not in the default set) is
// the job of the exactly-once performance issue: lines of ten words from a
// vocabulary of 10,000 are split into words, re-keyed by word through a
// repartition topic and counted in a key-value store, each count update
// written to the output. It runs once per wcVariant (exactly once and at
// least once at the same commit interval), with -threads threads and
// -wc-instances instances, on the same pre-produced input, and counts as
// complete only when the output's last count of every word equals the
// count computed from the input: a run that loses or duplicates a word
// fails. A timeline of input committed and output read per second shows
// stalls. The "DSL" variant runs the same job written with package
// kstream (FlatMapValues, GroupBy, Count), against the Processor API
// topology of the others: the DSL's cost is the ratio of the two
// exactly-once rates. "DSL cached" turns the record cache on (10 MiB, Kafka
// Streams' default), which writes a word's latest count once per commit.

// wcVocabulary is how many distinct words the lines use.
const wcVocabulary = 10_000

// wcWordsPerLine is how many words a line has.
const wcWordsPerLine = 10

// wcVariant is one configuration the wordcount workload runs.
type wcVariant struct {
	Label     string
	Guarantee weir.Guarantee
	Interval  time.Duration
	// DSL runs dslWordcountTopology instead of wordcountTopology.
	DSL bool
	// Cache sets Config.CacheMaxBytes to Kafka Streams' default (10 MiB),
	// so the DSL's count forwards each word's latest count per commit.
	Cache bool
}

// wcVariants run in each round, in this order.
var wcVariants = []wcVariant{
	{Label: "EOS 100ms", Guarantee: weir.ExactlyOnce, Interval: 100 * time.Millisecond},
	{Label: "EOS 100ms DSL", Guarantee: weir.ExactlyOnce, Interval: 100 * time.Millisecond, DSL: true},
	{Label: "EOS 100ms DSL cached", Guarantee: weir.ExactlyOnce, Interval: 100 * time.Millisecond, DSL: true, Cache: true},
	{Label: "EOS 1s DSL cached", Guarantee: weir.ExactlyOnce, Interval: time.Second, DSL: true, Cache: true},
	{Label: "ALOS 100ms", Guarantee: weir.AtLeastOnce, Interval: 100 * time.Millisecond},
}

// wcVariantLabels lists the variants' labels, for the flag's help.
func wcVariantLabels() string {
	labels := make([]string, len(wcVariants))
	for i, v := range wcVariants {
		labels[i] = v.Label
	}
	return strings.Join(labels, ", ")
}

// parseWcVariants returns the variants a comma list of labels names, in
// wcVariants' order; an empty list means all of them.
func parseWcVariants(list string) ([]wcVariant, error) {
	if strings.TrimSpace(list) == "" {
		return wcVariants, nil
	}
	want := map[string]bool{}
	for l := range strings.SplitSeq(list, ",") {
		l = strings.TrimSpace(l)
		if !slices.ContainsFunc(wcVariants, func(v wcVariant) bool { return v.Label == l }) {
			return nil, fmt.Errorf("unknown variant %q (want %s)", l, wcVariantLabels())
		}
		want[l] = true
	}
	var out []wcVariant
	for _, v := range wcVariants {
		if want[v.Label] {
			out = append(out, v)
		}
	}
	return out, nil
}

// wcPoint is one second of a run's timeline.
type wcPoint struct {
	Second         int   `json:"second"`
	InputCommitted int64 `json:"input_committed_lines"`
	OutputRead     int64 `json:"output_records_read"`
}

// wordcountResult is one measured run of the wordcount workload.
type wordcountResult struct {
	Variant   string `json:"variant"`
	Guarantee string `json:"guarantee"`
	Threads   int    `json:"threads"`
	Instances int    `json:"instances"`
	Round     int    `json:"round"`
	Lines     int64  `json:"lines"`
	// Seconds is from the first app.Run to the output holding the final
	// count of every word; LinesPerSecond is Lines over it.
	Seconds        float64 `json:"seconds"`
	LinesPerSecond float64 `json:"lines_per_second"`
	// CPUSeconds is the bench process's CPU (all instances) over Seconds.
	CPUSeconds float64 `json:"cpu_seconds"`
	// OutputRecords is how many count updates the output held when the
	// last count was right.
	OutputRecords int64              `json:"output_records"`
	Transactions  map[string]float64 `json:"transactions,omitempty"`
	// Commits counts the commits of every thread and instance (the
	// final ones of Close included); CommitSeconds is the time they
	// took, summed (weir_commit_duration_seconds); CommitP99 is the
	// largest instance's 99th percentile, in seconds.
	Commits       uint64  `json:"commits"`
	CommitSeconds float64 `json:"commit_seconds"`
	CommitP99     float64 `json:"commit_p99_seconds"`
	// BusySeconds and IdleSeconds split the stream threads' wall time
	// until the output was complete (summed over threads): working
	// (processing, committing) and waiting for records.
	BusySeconds float64   `json:"busy_seconds"`
	IdleSeconds float64   `json:"idle_seconds"`
	Timeline    []wcPoint `json:"timeline"`
}

// wcInput is the pre-produced input and the counts it must give.
type wcInput struct {
	topic string
	lines int64
	want  map[string]int64
}

// produceWordcountInput writes lines random lines of ten words to topic.
func produceWordcountInput(ctx context.Context, o *options, c *cluster, topic string) (*wcInput, error) {
	in := &wcInput{topic: topic, lines: o.records, want: make(map[string]int64, wcVocabulary)}
	rng := rand.New(rand.NewPCG(1, 2))
	sc := saramaConfig("weir-bench-wordcount-load")
	sc.Producer.RequiredAcks = sarama.WaitForLocal
	sc.Producer.Return.Successes = true
	sc.Producer.Partitioner = sarama.NewRoundRobinPartitioner
	p, err := sarama.NewSyncProducer(o.brokers, sc)
	if err != nil {
		return nil, fmt.Errorf("wordcount load: %w", err)
	}
	defer p.Close()
	const batch = 2000
	msgs := make([]*sarama.ProducerMessage, 0, batch)
	var b strings.Builder
	for i := int64(0); i < o.records; i++ {
		b.Reset()
		for j := range wcWordsPerLine {
			w := fmt.Sprintf("w%05d", rng.IntN(wcVocabulary))
			in.want[w]++
			if j > 0 {
				b.WriteByte(' ')
			}
			b.WriteString(w)
		}
		msgs = append(msgs, &sarama.ProducerMessage{Topic: topic, Value: sarama.StringEncoder(b.String())})
		if len(msgs) == batch || i == o.records-1 {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			if err := p.SendMessages(msgs); err != nil {
				return nil, fmt.Errorf("wordcount load: %w", err)
			}
			msgs = msgs[:0]
		}
	}
	return in, nil
}

// wordcountTopology splits lines into words, repartitions by word through
// "<app>-words-repartition" and counts into the store "counts".
func wordcountTopology(input, output string) *processor.Topology {
	counts := processor.KeyValue("counts", serde.String(), serde.Int64())
	t := processor.NewTopology()
	lines := t.AddSource("lines", input, serde.Bytes(), serde.String())
	words := t.AddProcessor("split", processor.Func(func(ctx processor.Context[string, []byte], rec processor.Record[[]byte, string]) error {
		for w := range strings.FieldsSeq(rec.Value) {
			if err := ctx.Forward(processor.Record[string, []byte]{Key: w, Timestamp: rec.Timestamp}); err != nil {
				return err
			}
		}
		return nil
	}), lines)
	byWord := t.AddRepartition("words", serde.String(), serde.Bytes(), words)
	count := t.AddProcessor("count", func() processor.Processor[string, []byte, string, int64] {
		return &wcCounter{spec: counts}
	}, byWord)
	t.AddStore(counts, count)
	t.AddSink("out", output, serde.String(), serde.Int64(), count)
	return t
}

// dslWordcountTopology is wordcountTopology written with package
// kstream, with the same internal topics. As in Kafka Streams' word
// count, the repartition topic carries the word as the value too, where
// the Processor API topology sends an empty value: six bytes a record.
func dslWordcountTopology(input, output string) weir.Topology {
	b := kstream.NewBuilder()
	b.Stream("lines", input, serde.Bytes(), serde.String()).
		FlatMapValues(strings.Fields).
		GroupBy("words", func(_ []byte, w string) string { return w }, serde.String(), serde.String()).
		Count("counts").
		ToStream().
		To(output, serde.String(), serde.Int64())
	return b
}

// wcCounter counts a word in the store and forwards its new count.
type wcCounter struct {
	spec  *processor.KeyValueSpec[string, int64]
	store processor.KeyValueStore[string, int64]
}

func (p *wcCounter) Init(ctx processor.Context[string, int64]) error {
	s, err := p.spec.Open(ctx)
	p.store = s
	return err
}

func (p *wcCounter) Process(ctx processor.Context[string, int64], rec processor.Record[string, []byte]) error {
	n, _, err := p.store.Get(rec.Key)
	if err != nil {
		return err
	}
	n++
	if err := p.store.Put(rec.Key, n); err != nil {
		return err
	}
	return ctx.Forward(processor.Record[string, int64]{Key: rec.Key, Value: n, Timestamp: rec.Timestamp})
}

func (p *wcCounter) Close() error { return nil }

// runWordcounts runs the wordcount workload: the input once, then every
// variant in every round.
func runWordcounts(ctx context.Context, o *options, c *cluster, logger *slog.Logger, prefix string, rep *report, progress func(string, ...any)) error {
	topic := prefix + "-wc-in"
	if err := c.createTopic(ctx, topic, o.wcPartitions()); err != nil {
		return err
	}
	loadStart := time.Now()
	in, err := produceWordcountInput(ctx, o, c, topic)
	if err != nil {
		return err
	}
	progress("wordcount: %d lines of %d words on %d partitions produced in %v", in.lines, wcWordsPerLine, o.wcPartitions(), time.Since(loadStart).Round(time.Millisecond))
	for round := 1; round <= o.rounds; round++ {
		for i, v := range o.wcVariants {
			id := fmt.Sprintf("%s-wc%d-r%d", prefix, i, round)
			res, err := runWordcount(ctx, o, c, logger, v, in, id, round)
			if err != nil {
				return err
			}
			rep.Wordcounts = append(rep.Wordcounts, res)
			progress("weir wordcount %s (round %d): %.0f lines/s, %.1f CPU s, %d output records, transactions %v",
				v.Label, round, res.LinesPerSecond, res.CPUSeconds, res.OutputRecords, res.Transactions)
		}
	}
	return nil
}

// runWordcount runs one variant until the output holds the right final
// count of every word, then stops the instances.
func runWordcount(ctx context.Context, o *options, c *cluster, logger *slog.Logger, v wcVariant, in *wcInput, id string, round int) (*wordcountResult, error) {
	name := "weir wordcount " + v.Label
	output := id + "-out"
	if err := c.createTopic(ctx, output, o.wcPartitions()); err != nil {
		return nil, err
	}
	c.addGroup(id)
	c.addTopic(id + "-words-repartition")
	c.addTopic(id + "-counts-changelog")

	instances := max(o.wcInstances, 1)
	apps := make([]*weir.App, 0, instances)
	regs := make([]*recordingRegisterer, 0, instances)
	for range instances {
		dir, err := c.stateDir()
		if err != nil {
			return nil, err
		}
		reg := &recordingRegisterer{Registry: prometheus.NewRegistry()}
		var top weir.Topology = wordcountTopology(in.topic, output)
		if v.DSL {
			top = dslWordcountTopology(in.topic, output)
		}
		cfg := weir.Config{
			ApplicationID: id, Brokers: o.brokers, StateDir: dir, Guarantee: v.Guarantee,
			Threads: o.threads, CommitInterval: v.Interval, Logger: logger, Metrics: reg,
		}
		if v.Cache {
			cfg.CacheMaxBytes = 10 << 20
		}
		app, err := weir.New(top, cfg)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		apps, regs = append(apps, app), append(regs, reg)
	}

	// A topic just created may not have its leaders yet: retry briefly.
	var reader *countReader
	var err error
	for attempt := 0; ; attempt++ {
		if reader, err = newCountReader(o.brokers, output, in.want); err == nil {
			break
		}
		if attempt == 20 {
			return nil, fmt.Errorf("%s: reading %s: %w", name, output, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
	defer reader.close()

	m, err := startMeasurement(o.profiling, fmt.Sprintf("wordcount-%s", v.Guarantee), round)
	if err != nil {
		return nil, err
	}
	defer m.stop()
	start := time.Now()
	runErr := make(chan error, instances)
	for _, app := range apps {
		go func() { runErr <- app.Run(context.Background()) }()
	}
	stopAll := func() error {
		var errs []error
		for _, app := range apps {
			if err := withTimeout(closeTimeout, app.Close); err != nil {
				errs = append(errs, err)
			}
		}
		return errors.Join(errs...)
	}

	res := &wordcountResult{Variant: v.Label, Guarantee: v.Guarantee.String(), Threads: o.threads, Instances: instances, Round: round, Lines: in.lines}
	admin, err := sarama.NewClusterAdmin(o.brokers, saramaConfig("weir-bench-wordcount-admin"))
	if err != nil {
		_ = stopAll()
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	defer admin.Close()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	deadline := time.After(o.timeout)
	for done := false; !done; {
		select {
		case <-ctx.Done():
			_ = stopAll()
			return nil, fmt.Errorf("%s: interrupted: %w", name, ctx.Err())
		case err := <-runErr:
			_ = stopAll()
			return nil, fmt.Errorf("%s: an instance stopped: %v", name, err)
		case <-deadline:
			read, right := reader.progress()
			_ = stopAll()
			return nil, fmt.Errorf("%s: not complete after %v: %d output records read, %d of %d words right", name, o.timeout, read, right, len(in.want))
		case <-reader.complete:
			done = true
		case <-tick.C:
			read, _ := reader.progress()
			res.Timeline = append(res.Timeline, wcPoint{Second: len(res.Timeline) + 1, InputCommitted: committedSum(admin, id, in.topic, o.wcPartitions()), OutputRead: read})
		}
	}
	took := time.Since(start)
	cpu, perr := m.stop()
	res.OutputRecords, _ = reader.progress()
	for _, reg := range regs {
		busy, idle, err := threadSeconds(reg)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		res.BusySeconds += busy
		res.IdleSeconds += idle
	}
	res.Seconds = took.Seconds()
	res.LinesPerSecond = float64(in.lines) / took.Seconds()
	res.CPUSeconds = cpu.Seconds()
	if err := errors.Join(perr, stopAll()); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	for _, reg := range regs {
		var m countResult
		if err := m.readMetrics(reg); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		res.Commits += m.Commits
		res.CommitSeconds += m.CommitSeconds
		res.CommitP99 = max(res.CommitP99, m.CommitP99)
		for k, v := range m.Transactions {
			if res.Transactions == nil {
				res.Transactions = map[string]float64{}
			}
			res.Transactions[k] += v
		}
	}
	return res, nil
}

// committedSum is the group's committed offsets of topic, summed; -1 when
// they cannot be read.
func committedSum(admin sarama.ClusterAdmin, group, topic string, partitions int32) int64 {
	parts := make([]int32, partitions)
	for p := range partitions {
		parts[p] = p
	}
	resp, err := admin.ListConsumerGroupOffsets(group, map[string][]int32{topic: parts})
	if err != nil {
		return -1
	}
	var sum int64
	for _, p := range parts {
		if b := resp.GetBlock(topic, p); b != nil && b.Offset > 0 {
			sum += b.Offset
		}
	}
	return sum
}

// countReader reads the output topic (read_committed) from the start and
// keeps the last count of every word; complete is closed once every word
// has its expected count.
type countReader struct {
	consumer sarama.Consumer
	complete chan struct{}
	stop     chan struct{}
	wg       sync.WaitGroup

	mu    sync.Mutex
	want  map[string]int64
	last  map[string]int64
	right int
	read  int64
	done  bool
}

func newCountReader(brokers []string, topic string, want map[string]int64) (*countReader, error) {
	sc := saramaConfig("weir-bench-wordcount-check")
	sc.Consumer.IsolationLevel = sarama.ReadCommitted
	sc.Consumer.MaxWaitTime = 50 * time.Millisecond
	consumer, err := sarama.NewConsumer(brokers, sc)
	if err != nil {
		return nil, err
	}
	parts, err := consumer.Partitions(topic)
	if err != nil {
		consumer.Close()
		return nil, err
	}
	r := &countReader{consumer: consumer, complete: make(chan struct{}), stop: make(chan struct{}), want: want, last: make(map[string]int64, len(want))}
	for _, p := range parts {
		pc, err := consumer.ConsumePartition(topic, p, sarama.OffsetOldest)
		if err != nil {
			r.close()
			return nil, err
		}
		r.wg.Go(func() {
			defer pc.Close()
			for {
				select {
				case <-r.stop:
					return
				case m, ok := <-pc.Messages():
					if !ok {
						return
					}
					r.add(string(m.Key), m.Value)
				}
			}
		})
	}
	return r, nil
}

func (r *countReader) add(word string, value []byte) {
	n := int64(-1)
	if len(value) == 8 {
		n = int64(binary.BigEndian.Uint64(value))
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.read++
	old, seen := r.last[word]
	want := r.want[word]
	if seen && old == want {
		r.right--
	}
	r.last[word] = n
	if n == want {
		r.right++
	}
	if !r.done && r.right == len(r.want) {
		r.done = true
		close(r.complete)
	}
}

// progress returns the records read so far and how many words have their
// expected count.
func (r *countReader) progress() (read int64, right int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.read, r.right
}

func (r *countReader) close() {
	close(r.stop)
	r.wg.Wait()
	r.consumer.Close()
}

// writeWordcountTable prints the wordcount results and their timelines.
func (r *report) writeWordcountTable(w io.Writer) error {
	fmt.Fprintf(w, "\nwordcount (%d lines x %d words, %d distinct; split -> repartition by word -> count -> output):\n", r.Wordcounts[0].Lines, wcWordsPerLine, wcVocabulary)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "variant\tthreads\tinstances\tround\tlines/s\tseconds\tCPU s\toutput recs\tbusy s\tidle s\tcommits\tcommitting s\tcommit p99 ms\ttransactions\t\n")
	for _, res := range r.Wordcounts {
		txn := "-"
		if res.Transactions != nil {
			txn = fmt.Sprintf("%.0f committed / %.0f aborted", res.Transactions["committed"], res.Transactions["aborted"])
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%.0f\t%.2f\t%.1f\t%d\t%.1f\t%.1f\t%d\t%.2f\t%.0f\t%s\t\n", res.Variant, res.Threads, res.Instances, res.Round,
			res.LinesPerSecond, res.Seconds, res.CPUSeconds, res.OutputRecords, res.BusySeconds, res.IdleSeconds, res.Commits, res.CommitSeconds, res.CommitP99*1e3, txn)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, res := range r.Wordcounts {
		var pts []string
		for _, p := range res.Timeline {
			pts = append(pts, fmt.Sprintf("%d:%d/%d", p.Second, p.InputCommitted, p.OutputRead))
		}
		fmt.Fprintf(w, "  timeline %s round %d (second:input lines committed/output records read): %s\n", res.Variant, res.Round, strings.Join(pts, " "))
	}
	// The DSL's cost: its rate over the Processor API's, per round, both
	// exactly once with the same threads and instances; and the cached
	// DSL's over it.
	for _, dsl := range r.Wordcounts {
		_, base, ok := strings.Cut(dsl.Variant, " DSL")
		if !ok {
			continue
		}
		base = strings.TrimSuffix(dsl.Variant, " DSL"+base)
		for _, papi := range r.Wordcounts {
			if papi.Variant == base && papi.Round == dsl.Round {
				fmt.Fprintf(w, "  %s / %s round %d: %.2f of the lines/s\n", dsl.Variant, papi.Variant, dsl.Round, dsl.LinesPerSecond/papi.LinesPerSecond)
			}
		}
	}
	return nil
}

// wcPartitions is the wordcount workload's partition count: -partitions
// when given, else 6, as in the measurements.
func (o *options) wcPartitions() int32 {
	if o.partitionsSet {
		return o.partitions
	}
	return 6
}
