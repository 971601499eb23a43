package main

// The restore workload: how fast weir rebuilds a key-value store from its
// changelog, next to a bare sarama read of the same topic.
//
// For each size in -restore-records it creates the changelog of a weir
// application's key-value store itself (compacted, -partitions
// partitions; weir accepts an existing changelog with the right partition
// count and policy) and fills it with a sarama AsyncProducer: distinct
// 16-byte keys, -value-size values, murmur2 partitioning. The
// application's input topic exists and stays empty. Then, per round:
//
//  1. a bare sarama read of the changelog: read_committed
//     PartitionConsumers, one per partition, until the high watermarks;
//  2. for each -restore-concurrency (Config.Stores.MaxConcurrentRestores):
//     weir on an empty state directory (a full restore), weir again on the
//     same directory (a restart: the checkpoints say there is nothing to
//     replay), and weir after the application's state directory was
//     deleted (a full restore again).
//
// A weir restore is measured with a weir.RestoreListener from the first
// OnRestoreStart to the last OnRestoreEnd over the store partitions; the
// records are those OnRestoreEnd reports. The time from app.Run to the
// first OnRestoreStart (connecting, checking topics, joining the group) is
// reported apart.

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/changelog"
	"github.com/weirstream/weir/internal/statelog"
	"github.com/weirstream/weir/processor"
	"github.com/weirstream/weir/serde"
)

// restoreStore is the restore workload's key-value store; its changelog is
// "<application id>-kv-changelog".
var restoreStore = processor.KeyValue("kv", serde.Bytes(), serde.Bytes())

// The kinds of restore run, in the order they run.
const (
	restoreSarama  = "sarama read"
	restoreFull    = "full (empty state dir)"
	restoreRestart = "restart (same state dir)"
	restoreDeleted = "full (state dir deleted)"
)

// restoreResult is one measured restore, or the sarama read it is
// compared with.
type restoreResult struct {
	// Changelog is the number of records in the changelog topic.
	Changelog int64  `json:"changelog_records"`
	Run       string `json:"run"`
	// Concurrency is Config.Stores.MaxConcurrentRestores; 0 for the sarama
	// read.
	Concurrency int `json:"max_concurrent_restores,omitempty"`
	Round       int `json:"round"`
	// Records is what the restore replayed (the sum of OnRestoreEnd's
	// records) or the sarama read received.
	Records int64 `json:"records"`
	// Bytes is the key and value bytes of Records, as loaded.
	Bytes int64 `json:"bytes"`
	// Partitions is how many store partitions finished restoring, and
	// FullPartitions how many of them weir restored in full.
	Partitions     int `json:"partitions"`
	FullPartitions int `json:"full_partitions"`
	// StartupSeconds is from app.Run to the first OnRestoreStart (for the
	// sarama read: from NewConsumer to the first ConsumePartition).
	StartupSeconds float64 `json:"startup_seconds"`
	// Seconds is from the first OnRestoreStart to the last OnRestoreEnd
	// (for the sarama read: from the first ConsumePartition to the last
	// record of the last partition).
	Seconds float64 `json:"restore_seconds"`
	// Rate and MBRate are Records and Bytes over Seconds.
	Rate   float64 `json:"records_per_second"`
	MBRate float64 `json:"mb_per_second"`
	// VsSarama is Rate over the median rate of the round's sarama reads of
	// the same changelog.
	VsSarama float64 `json:"vs_sarama_read,omitempty"`
	// CPUSeconds is the process's CPU time from the start of startup to
	// the end; CPUPerMillion scales it to a million records restored.
	CPUSeconds    float64 `json:"cpu_seconds"`
	CPUPerMillion float64 `json:"cpu_seconds_per_million_records,omitempty"`
	// CloseSeconds is how long app.Close (or closing the consumer) took.
	CloseSeconds float64 `json:"close_seconds"`
	// Verified is the number of keys found in the store after the restore
	// (Badger opened after the application stopped); nil if not checked.
	Verified *int64 `json:"verified_store_keys,omitempty"`
	Note     string `json:"note,omitempty"`
}

func (r *restoreResult) finish() {
	if r.Seconds > 0 {
		r.Rate = float64(r.Records) / r.Seconds
		r.MBRate = float64(r.Bytes) / r.Seconds / 1e6
	}
	if r.Records > 0 {
		r.CPUPerMillion = r.CPUSeconds / float64(r.Records) * 1e6
	}
}

func (r *restoreResult) label() string {
	if r.Concurrency == 0 {
		return fmt.Sprintf("%d: %s", r.Changelog, r.Run)
	}
	return fmt.Sprintf("%d: weir %s, %d concurrent", r.Changelog, r.Run, r.Concurrency)
}

func (r *restoreResult) summary() string {
	s := fmt.Sprintf("%s (round %d): %d records in %.2fs: %.0f records/s, %.1f MB/s; startup %.2fs; %.2f CPU s; close %.2fs",
		r.label(), r.Round, r.Records, r.Seconds, r.Rate, r.MBRate, r.StartupSeconds, r.CPUSeconds, r.CloseSeconds)
	if r.Note != "" {
		s += "; " + r.Note
	}
	return s
}

// runRestores runs the restore workload for every -restore-records size.
func runRestores(ctx context.Context, o *options, c *cluster, logger *slog.Logger, prefix string, rep *report, progress func(string, ...any)) error {
	for _, n := range o.restoreRecords {
		app := fmt.Sprintf("%s-restore-%d", prefix, n)
		input := app + "-in"
		topic := app + "-" + restoreStore.Name() + "-changelog"
		progress("creating %s (compacted) and %s (%d partitions each), loading %d records into the changelog", topic, input, o.partitions, n)
		if err := c.createTopicConfig(ctx, topic, o.partitions, map[string]*string{"cleanup.policy": new("compact")}); err != nil {
			return err
		}
		if err := c.createTopic(ctx, input, o.partitions); err != nil {
			return err
		}
		load, hwm, err := loadTopic(ctx, o, c, topic, n, fmt.Sprintf("load-restore-%d", n), fmt.Sprintf("load changelog %d (sarama AsyncProducer)", n))
		if err != nil {
			return err
		}
		rep.add(load)
		progress("%s", load.summary())
		c.addGroup(app)

		for round := 1; round <= o.rounds; round++ {
			var runs []*restoreResult
			res, err := runSaramaRead(ctx, o, topic, hwm, n, round)
			if err != nil {
				return err
			}
			runs = append(runs, res)
			progress("%s", res.summary())
			for _, conc := range o.restoreConcurrency {
				dir, err := c.stateDir()
				if err != nil {
					return err
				}
				for _, kind := range []string{restoreFull, restoreRestart, restoreDeleted} {
					if err := ctx.Err(); err != nil {
						return fmt.Errorf("interrupted: %w", err)
					}
					if kind == restoreDeleted {
						if err := os.RemoveAll(filepath.Join(dir, app)); err != nil {
							return fmt.Errorf("deleting the state directory: %w", err)
						}
					}
					verify := o.verify && round == 1 && kind == restoreFull && conc == o.restoreConcurrency[0]
					res, err := runWeirRestore(ctx, o, logger, app, input, dir, kind, conc, n, hwm, round, verify)
					if err != nil {
						return err
					}
					runs = append(runs, res)
					progress("%s", res.summary())
				}
			}
			// Compare with this round's sarama read: the rounds are where
			// the machine's mood changes.
			base := runs[0].Rate
			for _, r := range runs[1:] {
				if base > 0 && r.Run != restoreRestart {
					r.VsSarama = r.Rate / base
				}
			}
			rep.Restores = append(rep.Restores, runs...)
		}
	}
	return nil
}

// runSaramaRead reads topic from its start with one read_committed
// PartitionConsumer per partition until each reaches its high watermark
// hwm[p].
func runSaramaRead(ctx context.Context, o *options, topic string, hwm []int64, n int64, round int) (*restoreResult, error) {
	name := fmt.Sprintf("sarama read %d", n)
	sc := saramaConfig("weir-bench-read")
	sc.Consumer.IsolationLevel = sarama.ReadCommitted
	sc.Consumer.Return.Errors = true

	m, err := startMeasurement(o.profiling, fmt.Sprintf("restore-%d-sarama", n), round)
	if err != nil {
		return nil, err
	}
	defer m.stop()
	begin := time.Now()
	consumer, err := sarama.NewConsumer(o.brokers, sc)
	if err != nil {
		return nil, fmt.Errorf("%s: consumer: %w", name, err)
	}
	start := time.Now()
	readCtx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	var (
		wg             sync.WaitGroup
		records, bytes atomic.Int64
		lastMu         sync.Mutex
		last           time.Time
	)
	errc := make(chan error, len(hwm))
	var pcs []sarama.PartitionConsumer
	for p, end := range hwm {
		if end <= 0 {
			continue
		}
		pc, err := consumer.ConsumePartition(topic, int32(p), sarama.OffsetOldest)
		if err != nil {
			errc <- fmt.Errorf("partition %d: %w", p, err)
			cancel()
			break
		}
		pcs = append(pcs, pc)
		wg.Go(func() {
			var k, b int64
			defer func() {
				records.Add(k)
				bytes.Add(b)
			}()
			for {
				select {
				case msg := <-pc.Messages():
					k++
					b += int64(len(msg.Key) + len(msg.Value))
					if msg.Offset >= end-1 {
						now := time.Now()
						lastMu.Lock()
						if now.After(last) {
							last = now
						}
						lastMu.Unlock()
						return
					}
				case perr := <-pc.Errors():
					errc <- fmt.Errorf("partition %d: %w", p, perr.Err)
					cancel()
					return
				case <-readCtx.Done():
					return
				}
			}
		})
	}
	wg.Wait()
	cpu, perr := m.stop()
	closeStart := time.Now()
	for _, pc := range pcs {
		pc.AsyncClose()
	}
	cerr := withTimeout(closeTimeout, consumer.Close)
	closeTime := time.Since(closeStart)
	select {
	case err := <-errc:
		return nil, fmt.Errorf("%s: %w", name, err)
	default:
	}
	if records.Load() < n {
		if err := readCtx.Err(); err != nil && ctx.Err() == nil {
			return nil, fmt.Errorf("%s: timed out after %v with %d of %d records (raise -timeout if the machine is just slow)", name, o.timeout, records.Load(), n)
		}
		return nil, fmt.Errorf("%s: stopped with %d of %d records: %w", name, records.Load(), n, ctx.Err())
	}
	if err := errors.Join(perr, cerr); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	r := &restoreResult{
		Changelog:      n,
		Run:            restoreSarama,
		Round:          round,
		Records:        records.Load(),
		Bytes:          bytes.Load(),
		Partitions:     len(pcs),
		StartupSeconds: start.Sub(begin).Seconds(),
		Seconds:        last.Sub(start).Seconds(),
		CPUSeconds:     cpu.Seconds(),
		CloseSeconds:   closeTime.Seconds(),
		Note:           "read_committed PartitionConsumers, one per partition, sarama's default fetch sizes (1 MiB per partition)",
	}
	r.finish()
	return r, nil
}

// restoreWatch is the weir.RestoreListener of a measured restore.
type restoreWatch struct {
	start time.Time
	want  int // store partitions

	mu       sync.Mutex
	first    time.Duration // first OnRestoreStart, since start
	last     time.Duration // last OnRestoreEnd, since start
	started  int
	full     map[int32]bool
	ended    map[int32]int64
	records  int64
	finished chan struct{}

	batched atomic.Int64 // records in OnBatchRestored, for progress
	batches atomic.Int64 // OnBatchRestored calls: one per applied fetch
}

func newRestoreWatch(partitions int) *restoreWatch {
	return &restoreWatch{want: partitions, full: map[int32]bool{}, ended: map[int32]int64{}, finished: make(chan struct{})}
}

func (w *restoreWatch) OnRestoreStart(_ string, p int32, _, _ int64, full bool) {
	now := time.Since(w.start)
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.started == 0 {
		w.first = now
	}
	w.started++
	// A restart whose checkpoint is out of range starts again in full.
	w.full[p] = w.full[p] || full
}

func (w *restoreWatch) OnBatchRestored(_ string, _ int32, _ int64, n int) {
	w.batched.Add(int64(n))
	w.batches.Add(1)
}

func (w *restoreWatch) OnRestoreEnd(_ string, p int32, records int64, _ time.Duration) {
	now := time.Since(w.start)
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, again := w.ended[p]; again {
		return // a rebalance gave the partition back; the first restore counts
	}
	w.ended[p] = records
	w.records += records
	w.last = now
	if len(w.ended) == w.want {
		close(w.finished)
	}
}

// wait waits until every store partition has restored, Run fails, ctx
// ends or timeout passes.
func (w *restoreWatch) wait(ctx context.Context, what string, expect int64, timeout time.Duration, runErr <-chan error) error {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(10 * time.Second)
	defer tick.Stop()
	status := func() string {
		w.mu.Lock()
		defer w.mu.Unlock()
		return fmt.Sprintf("%d of %d partitions restored, %d of %d records", len(w.ended), w.want, w.batched.Load(), expect)
	}
	for {
		select {
		case <-w.finished:
			return nil
		case err := <-runErr:
			if err == nil {
				err = errors.New("Run returned early")
			}
			return fmt.Errorf("%s: %s: %w", what, status(), err)
		case <-tick.C:
			fmt.Fprintf(os.Stderr, "bench: %s: %s after %v\n", what, status(), time.Since(w.start).Round(time.Second))
		case <-deadline.C:
			return fmt.Errorf("%s: timed out after %v with %s (raise -timeout if the machine is just slow)", what, timeout, status())
		case <-ctx.Done():
			return fmt.Errorf("%s: interrupted with %s: %w", what, status(), ctx.Err())
		}
	}
}

// restoreTopology is the restore and rescale workloads' application: its
// one processor opens the store and ignores its (empty) input. The store
// is declared keyed by the input's keys (its entries are loaded murmur2
// partitioned, as a store keyed like its input is), which the rescale
// workload's `weir rescale` requires.
func restoreTopology(input string) *processor.Topology {
	t := processor.NewTopology()
	src := t.AddSource("in", input, serde.Bytes(), serde.Bytes())
	keep := t.AddProcessor("keep", func() processor.Processor[[]byte, []byte, []byte, []byte] { return &keeper{} }, src)
	t.AddStore(restoreStore, keep)
	t.KeyedByPartition(restoreStore.Name())
	return t
}

type keeper struct {
	store processor.KeyValueStore[[]byte, []byte]
}

func (k *keeper) Init(ctx processor.Context[[]byte, []byte]) error {
	s, err := restoreStore.Open(ctx)
	k.store = s
	return err
}

func (k *keeper) Process(processor.Context[[]byte, []byte], processor.Record[[]byte, []byte]) error {
	return nil
}

func (k *keeper) Close() error { return nil }

// runWeirRestore starts application app on state directory dir, measures
// its restore and stops it. With verify, it then opens the stopped
// instance's Badger database and checks that every partition of the
// store holds the changelog's keys.
func runWeirRestore(ctx context.Context, o *options, logger *slog.Logger, app, input, dir, kind string, conc int, n int64, hwm []int64, round int, verify bool) (*restoreResult, error) {
	name := fmt.Sprintf("weir restore %d, %s, %d concurrent", n, kind, conc)
	watch := newRestoreWatch(int(o.partitions))
	a, err := weir.New(restoreTopology(input), weir.Config{
		ApplicationID:  app,
		Brokers:        o.brokers,
		StateDir:       dir,
		Guarantee:      o.guarantee,
		Threads:        o.threads,
		CommitInterval: o.commitInterval,
		Logger:         logger,
		Stores:         weir.StoresConfig{MaxConcurrentRestores: conc, RestoreListener: watch},
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	profile := map[string]string{restoreFull: "full", restoreRestart: "restart", restoreDeleted: "deleted"}[kind]
	m, err := startMeasurement(o.profiling, fmt.Sprintf("restore-%d-c%d-%s", n, conc, profile), round)
	if err != nil {
		return nil, err
	}
	defer m.stop()
	runErr := make(chan error, 1)
	watch.start = time.Now()
	go func() { runErr <- a.Run(context.Background()) }()

	expect := n
	if kind == restoreRestart {
		expect = 0
	}
	werr := watch.wait(ctx, name, expect, o.timeout, runErr)
	cpu, perr := m.stop()

	closeStart := time.Now()
	cerr := withTimeout(closeTimeout, a.Close)
	closeTime := time.Since(closeStart)
	if cerr == nil && werr == nil {
		select {
		case err := <-runErr:
			if err != nil {
				cerr = fmt.Errorf("Run: %w", err)
			}
		case <-time.After(5 * time.Second):
			cerr = errors.New("Run did not return 5s after Close")
		}
	}
	if err := errors.Join(werr, perr); err != nil {
		return nil, err
	}
	if cerr != nil {
		return nil, fmt.Errorf("%s: stopping the application: %w", name, cerr)
	}

	watch.mu.Lock()
	full := 0
	for _, f := range watch.full {
		if f {
			full++
		}
	}
	r := &restoreResult{
		Changelog:      n,
		Run:            kind,
		Concurrency:    conc,
		Round:          round,
		Records:        watch.records,
		Bytes:          watch.records * int64(keySize+o.valueSize),
		Partitions:     len(watch.ended),
		FullPartitions: full,
		StartupSeconds: watch.first.Seconds(),
		Seconds:        (watch.last - watch.first).Seconds(),
		CPUSeconds:     cpu.Seconds(),
		CloseSeconds:   closeTime.Seconds(),
		Note:           fmt.Sprintf("records per partition %v", perPartition(watch.ended, o.partitions)),
	}
	if b := watch.batches.Load(); b > 0 {
		r.Note += fmt.Sprintf("; %d batches applied, %.0f records each on average", b, float64(watch.batched.Load())/float64(b))
	}
	watch.mu.Unlock()
	r.finish()

	switch {
	case kind != restoreRestart && r.Records != n:
		return nil, fmt.Errorf("%s: restored %d records, want %d", name, r.Records, n)
	case kind == restoreRestart && full > 0:
		// Not an error of the bench: report what weir did.
		r.Note += fmt.Sprintf("; UNEXPECTED: %d partitions restored in full", full)
	}
	if verify {
		keys, err := countStoreKeys(filepath.Join(dir, app, "state"), o.partitions, hwm)
		if err != nil {
			return nil, fmt.Errorf("%s: verifying the store: %w", name, err)
		}
		r.Verified = &keys
	}
	return r, nil
}

// perPartition lists m's values by partition.
func perPartition(m map[int32]int64, partitions int32) []int64 {
	out := make([]int64, partitions)
	for p, n := range m {
		if p >= 0 && p < partitions {
			out[p] = n
		}
	}
	return out
}

// countStoreKeys opens a stopped instance's state and counts the keys of
// every partition of the restore store, which must equal the partition's
// record count in the changelog (its keys are distinct).
func countStoreKeys(path string, partitions int32, hwm []int64) (int64, error) {
	db, err := statelog.Open(path, changelog.Options{})
	if err != nil {
		return 0, err
	}
	defer db.Close()
	var total int64
	var errs []error
	for p := range partitions {
		space := db.Space(restoreStore.Name(), p)
		var keys int64
		for range space.Range(nil, nil) {
			keys++
		}
		if err := space.Err(); err != nil {
			return 0, fmt.Errorf("partition %d: %w", p, err)
		}
		if keys != hwm[p] {
			errs = append(errs, fmt.Errorf("partition %d holds %d keys, the changelog %d records", p, keys, hwm[p]))
		}
		total += keys
	}
	return total, errors.Join(errs...)
}

// restoreRatio compares weir's full restores at one concurrency with the
// sarama reads of the same changelog, using medians over rounds.
type restoreRatio struct {
	Changelog   int64   `json:"changelog_records"`
	Concurrency int     `json:"max_concurrent_restores"`
	Weir        float64 `json:"weir_records_per_second"`
	Sarama      float64 `json:"sarama_records_per_second"`
	Ratio       float64 `json:"ratio"`
}

// computeRestoreRatios fills rep.RestoreRatios: the median of the full
// restores (both kinds) over the median of the sarama reads.
func (r *report) computeRestoreRatios() {
	type key struct {
		n    int64
		conc int
	}
	rates := map[key][]float64{}
	var order []key
	for _, res := range r.Restores {
		if res.Run == restoreRestart {
			continue
		}
		k := key{res.Changelog, res.Concurrency}
		if _, ok := rates[k]; !ok {
			order = append(order, k)
		}
		rates[k] = append(rates[k], res.Rate)
	}
	for _, k := range order {
		if k.conc == 0 {
			continue
		}
		base := median(rates[key{k.n, 0}])
		if base == 0 {
			continue
		}
		w := median(rates[k])
		r.RestoreRatios = append(r.RestoreRatios, restoreRatio{Changelog: k.n, Concurrency: k.conc, Weir: w, Sarama: base, Ratio: w / base})
	}
	slices.SortStableFunc(r.RestoreRatios, func(a, b restoreRatio) int {
		return cmp.Or(cmp.Compare(a.Changelog, b.Changelog), cmp.Compare(a.Concurrency, b.Concurrency))
	})
}
