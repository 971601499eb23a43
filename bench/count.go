package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/processor"
	"github.com/weirstream/weir/schema"
	"github.com/weirstream/weir/serde"
)

// The count workload (-workloads count, not in the default set) runs a
// stateful weir application on the load's topic: it counts records per key
// in a key-value store and emits (key, count) to an output topic, once per
// countVariant in every round. It compares exactly-once with at-least-once
// and reads the commit latency from weir's own metrics.

// countStoreName is the count workload's store; its changelog is
// "<application id>-counts-changelog".
const countStoreName = "counts"

// countVariant is one configuration the count workload runs.
type countVariant struct {
	// Label names the variant in the table and the ratios.
	Label     string
	Guarantee weir.Guarantee
	// Interval is Config.CommitInterval; 0 is weir's default for the
	// guarantee (100 ms exactly once, 30 s at least once).
	Interval time.Duration
	// AvroStore keeps the counts as Avro records (avroCount, its schema
	// checked against the registry at start) instead of Int64: the cost
	// of Avro state. It runs only with a registry (-registry).
	AvroStore bool
}

// countVariants are the count workload's variants, in the order they run
// in each round.
var countVariants = []countVariant{
	{Label: "EOS (default 100ms)", Guarantee: weir.ExactlyOnce},
	{Label: "ALOS 100ms", Guarantee: weir.AtLeastOnce, Interval: 100 * time.Millisecond},
	{Label: "ALOS (default 30s)", Guarantee: weir.AtLeastOnce},
	{Label: "EOS Avro store", Guarantee: weir.ExactlyOnce, AvroStore: true},
}

// effectiveInterval is the commit interval weir uses for v.
func (v countVariant) effectiveInterval() time.Duration {
	switch {
	case v.Interval > 0:
		return v.Interval
	case v.Guarantee == weir.ExactlyOnce:
		return 100 * time.Millisecond
	default:
		return 30 * time.Second
	}
}

// countResult is one measured run of the count workload.
type countResult struct {
	Variant        string `json:"variant"`
	Guarantee      string `json:"guarantee"`
	CommitInterval string `json:"commit_interval"`
	Round          int    `json:"round"`
	Records        int64  `json:"records"`

	// FirstSeconds is from app.Run to the first record processed.
	FirstSeconds float64 `json:"first_record_seconds"`
	// ProcessedSeconds is from app.Run to the last record processed.
	ProcessedSeconds float64 `json:"processed_seconds"`
	// OutputSeconds is from app.Run until the output topic held every
	// record (exactly once: committed and counted).
	OutputSeconds float64 `json:"output_complete_seconds"`
	// SteadyRate is records per second from the first to the last record
	// processed; Rate counts from app.Run (join included).
	SteadyRate float64 `json:"steady_records_per_second"`
	Rate       float64 `json:"records_per_second"`
	// CPUPerMillion is the bench process's CPU from app.Run to the last
	// record processed, per million records.
	CPUPerMillion float64 `json:"cpu_seconds_per_million_records"`
	CloseSeconds  float64 `json:"close_seconds"`

	// Commits is the sample count of weir_commit_duration_seconds (the
	// final commit of Close included); CommitP50/P99 are its quantiles
	// interpolated in the buckets as histogram_quantile does, and
	// CommitMean its sum over its count, all in seconds.
	Commits    uint64  `json:"commits"`
	CommitP50  float64 `json:"commit_p50_seconds"`
	CommitP99  float64 `json:"commit_p99_seconds"`
	CommitMean float64 `json:"commit_mean_seconds"`
	// CommitSeconds is the histogram's sum: the thread's time spent
	// committing, all threads together.
	CommitSeconds float64 `json:"commit_seconds"`
	// Transactions is weir_transactions_total by result (exactly once).
	Transactions map[string]float64 `json:"transactions,omitempty"`

	// Verified is the output topic's committed record count.
	Verified *int64 `json:"verified_output_records,omitempty"`
	Note     string `json:"note,omitempty"`
}

// countRatio divides the EOS median rate by an ALOS variant's, or the
// Avro store variant's by the EOS (Int64 store) one's.
type countRatio struct {
	Name     string  `json:"name"`
	Steady   float64 `json:"steady"`
	EndToEnd float64 `json:"end_to_end"`
}

// runCounts runs every count variant once, for round round, on input.
func runCounts(ctx context.Context, o *options, c *cluster, logger *slog.Logger, input, prefix string, round int, rep *report, progress func(string, ...any)) error {
	for i, v := range countVariants {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("interrupted: %w", err)
		}
		if v.AvroStore && o.registryURL == "" {
			continue
		}
		id := fmt.Sprintf("%s-count%d-r%d", prefix, i, round)
		output := id + "-out"
		if err := c.createTopic(ctx, output, o.partitions); err != nil {
			return err
		}
		res, err := runCount(ctx, o, c, logger, v, input, output, id, round)
		if err != nil {
			return err
		}
		rep.Counts = append(rep.Counts, res)
		progress("%s", res.summary())
	}
	return nil
}

// runCount runs the counting application of variant v on input until it
// has processed every record, waits for the output, stops it, verifies
// the output and reads its commit metrics.
func runCount(ctx context.Context, o *options, c *cluster, logger *slog.Logger, v countVariant, input, output, id string, round int) (*countResult, error) {
	name := "weir count " + v.Label
	cnt := newCounter(o.records)

	t := processor.NewTopology()
	src := t.AddSource("in", input, serde.String(), serde.Bytes())
	var p processor.Node[string, int64]
	var registry schema.Config
	if v.AvroStore {
		registry = schema.Config{URL: o.registryURL, RetryTimeout: 20 * time.Second}
		reg, err := schema.New(registry)
		if err != nil {
			return nil, err
		}
		values, err := serde.Avro[avroCount](serde.AvroConfig{Registry: reg, Schema: avroCountSchema})
		if err != nil {
			return nil, err
		}
		counts := processor.KeyValue(countStoreName, serde.String(), serde.Serde[avroCount](values))
		p = t.AddProcessor("count", func() processor.Processor[string, []byte, string, int64] {
			return &countProcessor[avroCount]{spec: counts, cnt: cnt,
				count: func(c avroCount) int64 { return c.Count }, wrap: func(n int64) avroCount { return avroCount{Count: n} }}
		}, src)
		t.AddStore(counts, p)
	} else {
		counts := processor.KeyValue(countStoreName, serde.String(), serde.Int64())
		p = t.AddProcessor("count", func() processor.Processor[string, []byte, string, int64] {
			return &countProcessor[int64]{spec: counts, cnt: cnt,
				count: func(n int64) int64 { return n }, wrap: func(n int64) int64 { return n }}
		}, src)
		t.AddStore(counts, p)
	}
	t.AddSink("out", output, serde.String(), serde.Int64(), p)

	dir, err := c.stateDir()
	if err != nil {
		return nil, err
	}
	reg := &recordingRegisterer{Registry: prometheus.NewRegistry()}
	app, err := weir.New(t, weir.Config{
		ApplicationID:  id,
		Brokers:        o.brokers,
		StateDir:       dir,
		Guarantee:      v.Guarantee,
		Threads:        o.threads,
		CommitInterval: v.Interval,
		Logger:         logger,
		Metrics:        reg,
		Registry:       registry,
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	c.addGroup(id)
	c.addTopic(id + "-" + countStoreName + "-changelog")

	// waitOutput and verifyOutput read the guarantee from the options.
	vo := *o
	vo.guarantee = v.Guarantee
	vo.commitInterval = v.Interval

	m, err := startMeasurement(o.profiling, fmt.Sprintf("count-%s-%s", v.Guarantee, v.effectiveInterval()), round)
	if err != nil {
		return nil, err
	}
	defer m.stop()
	runErr := make(chan error, 1)
	cnt.reset()
	go func() { runErr <- app.Run(context.Background()) }()

	deadline := time.Now().Add(o.timeout)
	if err := cnt.waitDone(ctx, name, o.timeout, runErr); err != nil {
		_, _ = m.stop()
		_ = withTimeout(closeTimeout, app.Close)
		return nil, err
	}
	cpu, perr := m.stop()
	outputDone, werr := c.waitOutput(ctx, &vo, output, cnt, deadline, runErr)

	closeStart := time.Now()
	cerr := withTimeout(closeTimeout, app.Close)
	closeTime := time.Since(closeStart)
	if cerr == nil {
		select {
		case err := <-runErr:
			if err != nil {
				cerr = fmt.Errorf("Run: %w", err)
			}
		case <-time.After(5 * time.Second):
			cerr = errors.New("Run did not return 5s after Close")
		}
	} else {
		cerr = fmt.Errorf("stopping the application: %w", cerr)
	}
	if err := errors.Join(perr, werr, cerr); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}

	r := &countResult{
		Variant:          v.Label,
		Guarantee:        v.Guarantee.String(),
		CommitInterval:   v.effectiveInterval().String(),
		Round:            round,
		Records:          o.records,
		FirstSeconds:     time.Duration(cnt.first.Load()).Seconds(),
		ProcessedSeconds: time.Duration(cnt.last.Load()).Seconds(),
		OutputSeconds:    outputDone.Seconds(),
		CloseSeconds:     closeTime.Seconds(),
	}
	if r.ProcessedSeconds > 0 {
		r.Rate = float64(r.Records) / r.ProcessedSeconds
	}
	if steady := r.ProcessedSeconds - r.FirstSeconds; steady > 0 && r.Records > 1 {
		r.SteadyRate = float64(r.Records-1) / steady
	}
	r.CPUPerMillion = cpu.Seconds() / float64(r.Records) * 1e6
	if err := r.readMetrics(reg); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}

	n, err := c.verifyOutput(ctx, &vo, output)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	r.Verified = &n
	switch {
	case n < o.records:
		return nil, fmt.Errorf("%s: the output topic %s holds %d committed records, want %d: records were lost", name, output, n, o.records)
	case n > o.records && v.Guarantee == weir.ExactlyOnce:
		return nil, fmt.Errorf("%s: the output topic %s holds %d committed records, want exactly %d under exactly once", name, output, n, o.records)
	case n > o.records:
		r.Note = fmt.Sprintf("%d duplicates (allowed at least once)", n-o.records)
	}
	return r, nil
}

// avroCount is the Avro store variant's stored value.
type avroCount struct {
	Count int64 `avro:"count"`
}

const avroCountSchema = `{"type":"record","name":"Count","namespace":"weir.bench","fields":[{"name":"count","type":"long"}]}`

// countProcessor counts records per key in its store, whose values are V
// (count and wrap convert), and forwards (key, count).
type countProcessor[V any] struct {
	spec  *processor.KeyValueSpec[string, V]
	store processor.KeyValueStore[string, V]
	cnt   *counter
	count func(V) int64
	wrap  func(int64) V
}

func (p *countProcessor[V]) Init(ctx processor.Context[string, int64]) error {
	s, err := p.spec.Open(ctx)
	p.store = s
	return err
}

func (p *countProcessor[V]) Process(ctx processor.Context[string, int64], rec processor.Record[string, []byte]) error {
	v, _, err := p.store.Get(rec.Key)
	if err != nil {
		return err
	}
	n := p.count(v) + 1
	if err := p.store.Put(rec.Key, p.wrap(n)); err != nil {
		return err
	}
	if err := ctx.Forward(processor.Record[string, int64]{Key: rec.Key, Value: n, Timestamp: rec.Timestamp}); err != nil {
		return err
	}
	p.cnt.add()
	return nil
}

func (p *countProcessor[V]) Close() error { return nil }

// recordingRegisterer is the App's Config.Metrics: a registry that also
// keeps the collectors registered on it, so that after Close the counters
// and histograms can be gathered without the App's scrape-time collector.
// That collector calls App.Snapshot, which after Close reads the closed
// Badger stores' sizes and crashes the process (SIGSEGV in
// badger.(*DB).EstimateSize via weir's internal/local (*State).Sizes);
// gathering the whole registry after Close is not safe.
type recordingRegisterer struct {
	*prometheus.Registry
	collectors []prometheus.Collector
}

func (r *recordingRegisterer) Register(c prometheus.Collector) error {
	if err := r.Registry.Register(c); err != nil {
		return err
	}
	r.collectors = append(r.collectors, c)
	return nil
}

func (r *recordingRegisterer) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}

// gatherUpdated gathers the counters and histograms the App registered,
// leaving out scrape-time collectors.
func (r *recordingRegisterer) gatherUpdated() ([]*dto.MetricFamily, error) {
	reg := prometheus.NewPedanticRegistry()
	for _, c := range r.collectors {
		switch c.(type) {
		case *prometheus.HistogramVec, *prometheus.CounterVec, prometheus.Histogram, prometheus.Counter:
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return reg.Gather()
}

// readMetrics fills in the commit figures from the App's metrics,
// gathered after Close.
func (r *countResult) readMetrics(reg *recordingRegisterer) error {
	families, err := reg.gatherUpdated()
	if err != nil {
		return fmt.Errorf("gathering metrics: %w", err)
	}
	var found bool
	for _, f := range families {
		switch f.GetName() {
		case "weir_commit_duration_seconds":
			found = true
			h := mergeHistograms(f.GetMetric())
			r.Commits = h.count
			r.CommitP50 = h.quantile(0.50)
			r.CommitP99 = h.quantile(0.99)
			r.CommitSeconds = h.sum
			if h.count > 0 {
				r.CommitMean = h.sum / float64(h.count)
			}
		case "weir_transactions_total":
			for _, m := range f.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "result" {
						if r.Transactions == nil {
							r.Transactions = map[string]float64{}
						}
						r.Transactions[l.GetValue()] += m.GetCounter().GetValue()
					}
				}
			}
		}
	}
	if !found {
		return errors.New("no weir_commit_duration_seconds histogram in the App's metrics")
	}
	return nil
}

// threadSeconds returns the seconds the App's threads spent busy and
// idle (weir_thread_seconds_total), scraped from its registry while it
// runs: the gauge is computed at scrape time.
func threadSeconds(reg *recordingRegisterer) (busy, idle float64, err error) {
	families, err := reg.Gather()
	if err != nil {
		return 0, 0, fmt.Errorf("gathering metrics: %w", err)
	}
	for _, f := range families {
		if f.GetName() != "weir_thread_seconds_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				switch {
				case l.GetName() != "state":
				case l.GetValue() == "busy":
					busy += m.GetCounter().GetValue() + m.GetGauge().GetValue()
				case l.GetValue() == "idle":
					idle += m.GetCounter().GetValue() + m.GetGauge().GetValue()
				}
			}
		}
	}
	return busy, idle, nil
}

// histogram is a Prometheus histogram summed over its series: cumulative
// counts per upper bound, in increasing order, without +Inf (count is the
// +Inf bucket).
type histogram struct {
	bounds []float64
	cum    []float64
	count  uint64
	sum    float64
}

// mergeHistograms sums the histograms of a family's series (one per
// thread) bucket by bucket.
func mergeHistograms(ms []*dto.Metric) histogram {
	byBound := map[float64]float64{}
	var h histogram
	for _, m := range ms {
		mh := m.GetHistogram()
		if mh == nil {
			continue
		}
		h.count += mh.GetSampleCount()
		h.sum += mh.GetSampleSum()
		for _, b := range mh.GetBucket() {
			if math.IsInf(b.GetUpperBound(), +1) {
				continue
			}
			byBound[b.GetUpperBound()] += float64(b.GetCumulativeCount())
		}
	}
	for b := range byBound {
		h.bounds = append(h.bounds, b)
	}
	slices.Sort(h.bounds)
	for _, b := range h.bounds {
		h.cum = append(h.cum, byBound[b])
	}
	return h
}

// quantile estimates the q-quantile as Prometheus' histogram_quantile
// does: it finds the bucket holding rank q·count and interpolates
// linearly inside it (from 0 for the first bucket). A rank in the +Inf
// bucket gives the highest finite bound. NaN without observations.
func (h histogram) quantile(q float64) float64 {
	if h.count == 0 || len(h.bounds) == 0 || math.IsNaN(q) {
		return math.NaN()
	}
	q = min(max(q, 0), 1)
	total := float64(h.count)
	rank := q * total
	b := 0
	for b < len(h.bounds) && h.cum[b] < rank {
		b++
	}
	if b == len(h.bounds) {
		return h.bounds[len(h.bounds)-1]
	}
	if b == 0 && h.bounds[0] <= 0 {
		return h.bounds[0]
	}
	start, end, count := 0.0, h.bounds[b], h.cum[b]
	if b > 0 {
		start = h.bounds[b-1]
		count -= h.cum[b-1]
		rank -= h.cum[b-1]
	}
	if count == 0 {
		return end
	}
	return start + (end-start)*(rank/count)
}

func (r *countResult) summary() string {
	s := fmt.Sprintf("weir count %s (round %d): steady %.0f records/s (%.0f incl. join); processed after %.2fs, output complete after %.2fs; %d commits, p50 %.1f ms, p99 %.1f ms",
		r.Variant, r.Round, r.SteadyRate, r.Rate, r.ProcessedSeconds, r.OutputSeconds, r.Commits, r.CommitP50*1e3, r.CommitP99*1e3)
	if len(r.Transactions) > 0 {
		s += fmt.Sprintf("; transactions %s", r.transactionsLabel())
	}
	if r.Verified != nil {
		s += fmt.Sprintf("; output %d records", *r.Verified)
	}
	return s
}

// transactionsLabel prints the transactions by result, or "-".
func (r *countResult) transactionsLabel() string {
	if len(r.Transactions) == 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f committed / %.0f aborted", r.Transactions["committed"], r.Transactions["aborted"])
}

// countMedians returns the median steady and from-start rates of a
// variant over the rounds.
func (r *report) countMedians(label string) (steady, rate float64, ok bool) {
	var s, e []float64
	for _, res := range r.Counts {
		if res.Variant == label {
			s = append(s, res.SteadyRate)
			e = append(e, res.Rate)
		}
	}
	return median(s), median(e), len(s) > 0
}

// computeCountRatios divides the EOS variant's medians by each ALOS
// variant's.
func (r *report) computeCountRatios() {
	eos := countVariants[0]
	es, ee, ok := r.countMedians(eos.Label)
	if !ok {
		return
	}
	for _, v := range countVariants[1:] {
		as, ae, ok := r.countMedians(v.Label)
		if !ok || as == 0 || ae == 0 || es == 0 || ee == 0 {
			continue
		}
		if v.AvroStore {
			r.CountRatios = append(r.CountRatios, countRatio{Name: v.Label + " / " + eos.Label, Steady: as / es, EndToEnd: ae / ee})
			continue
		}
		r.CountRatios = append(r.CountRatios, countRatio{Name: eos.Label + " / " + v.Label, Steady: es / as, EndToEnd: ee / ae})
	}
}
