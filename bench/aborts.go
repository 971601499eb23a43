package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/processor"
	"github.com/weirstream/weir/serde"
)

// The aborts workload (-workloads aborts, not in the default set) measures
// what an aborted transaction costs a group of exactly-once instances: how
// many rebalances (assignments received) each abort causes, and how the
// instances rewind (in place or by rejoining the group).
//
// It injects the aborts from outside, through weir's public API, as
// integration/rewind_test.go's TestAbortRewindsInPlace does: the output
// topic is created with cleanup.policy=delete, the instances start (weir
// reads the topic configurations at start), the topic is altered to
// cleanup.policy=compact, and then input records marked bad make the
// processor emit a record without key, which the broker refuses
// (INVALID_RECORD): weir's own pre-checks, made from the configurations
// read at start, cannot see it, so the transaction holding it aborts.
// With ProductionErrors=Skip the instance drops that record when it
// replays its input, and goes on.

// abortsApps is the number of weir instances the workload runs.
const abortsApps = 3

// abortsDefaultPartitions is the workload's partition count unless
// -partitions is given: two tasks per instance.
const abortsDefaultPartitions = 6

// abortsResult is one measured run of the aborts workload. The counts
// (transactions, rewinds, skipped records, assignments) are over the
// injected phase: from the point the group was stable (every instance
// runs its share of the tasks and the warm-up is committed) to its end,
// summed over the instances.
type abortsResult struct {
	Round      int   `json:"round"`
	Apps       int   `json:"apps"`
	Threads    int   `json:"threads_per_app"`
	Partitions int32 `json:"partitions"`
	// Records is the input, bad records included; Warmup of them are
	// loaded and committed before the injected phase.
	Records int64 `json:"records"`
	Warmup  int64 `json:"warmup_records"`
	// Injected is the number of bad records: -aborts; 0 is a baseline
	// without injection.
	Injected int `json:"injected_aborts"`
	// Complete is whether every input record was committed; false when
	// -aborts-window ended the phase first.
	Complete bool `json:"complete"`

	// StableSeconds is from app.Run to the stable group.
	StableSeconds float64 `json:"stable_seconds"`
	// Seconds is the injected phase: from the start of its load to every
	// input record committed (or the end of -aborts-window).
	Seconds float64 `json:"phase_seconds"`
	// FirstInjectionSeconds is from the start of the phase to the first
	// bad record processed; -1 if none was.
	FirstInjectionSeconds float64 `json:"first_injection_seconds"`
	// CommittedInput is the input records committed at the end of the
	// phase (the group's committed offsets).
	CommittedInput int64 `json:"committed_input_records"`
	// Rate is the input records committed during the phase over Seconds.
	Rate float64 `json:"committed_records_per_second"`
	// Processed counts the processor's calls over the whole run, replays
	// included.
	Processed int64 `json:"processor_calls"`
	// CPUPerMillion is the bench process's CPU over the phase (the load's
	// producer included) per million records of the phase.
	CPUPerMillion float64 `json:"cpu_seconds_per_million_records"`

	// TxnCommitted and TxnAborted are weir_transactions_total by result.
	TxnCommitted float64 `json:"transactions_committed"`
	TxnAborted   float64 `json:"transactions_aborted"`
	// RewindsInPlace and RewindsRejoin are weir_rewinds_total by mode.
	RewindsInPlace float64 `json:"rewinds_in_place"`
	RewindsRejoin  float64 `json:"rewinds_rejoin"`
	// Skipped is weir_records_skipped_total{reason="production"}.
	Skipped float64 `json:"skipped_production"`
	// AssignmentsStable is weir_rebalances_total summed over the
	// instances at the stable point: the assignments of the start.
	AssignmentsStable float64 `json:"assignments_at_stable"`
	// Assignments is weir_rebalances_total received during the phase.
	Assignments float64 `json:"assignments"`
	// AssignmentsPerAbort is Assignments over Injected: the rebalances
	// (as assignments received by any thread) one injected abort costs;
	// 0 without injection.
	AssignmentsPerAbort float64 `json:"assignments_per_injected_abort"`
	// AssignmentsPerAbortedTxn is Assignments over TxnAborted; 0 without
	// an aborted transaction.
	AssignmentsPerAbortedTxn float64 `json:"assignments_per_aborted_transaction"`

	CloseSeconds float64 `json:"close_seconds"`
	// Verified is the output's committed record count, after checking
	// that it holds every committed input record but the bad ones, once.
	Verified *int64 `json:"verified_output_records,omitempty"`
	Note     string `json:"note,omitempty"`
}

// abortsPartitions is the aborts workload's partition count.
func (o *options) abortsPartitions() int32 {
	if o.partitionsSet {
		return o.partitions
	}
	return abortsDefaultPartitions
}

// abortsWarmup is the number of records loaded and committed before the
// injected phase: a tenth of the input, at most 10,000.
func abortsWarmup(records int64) int64 { return min(records/10, 10_000) }

// abortsBad returns the indices of the bad records: injected spread
// evenly over the records after the warm-up, in load order.
func abortsBad(records, warmup int64, injected int) []int64 {
	out := make([]int64, injected)
	for j := range out {
		out[j] = warmup + int64(j+1)*(records-warmup)/int64(injected+1)
	}
	return out
}

// checkAborts reports the flags the aborts workload cannot run with.
func (o *options) checkAborts() []error {
	var errs []error
	if o.aborts < 0 {
		errs = append(errs, fmt.Errorf("-aborts: negative (%d)", o.aborts))
	}
	if o.abortsWindow < 0 {
		errs = append(errs, fmt.Errorf("-aborts-window: negative (%v)", o.abortsWindow))
	}
	if p := o.abortsPartitions(); p < abortsApps {
		errs = append(errs, fmt.Errorf("-partitions: the aborts workload needs at least %d (one per instance), not %d", abortsApps, p))
	}
	if w := abortsWarmup(o.records); w < 1 || o.records-w <= int64(o.aborts) {
		errs = append(errs, fmt.Errorf("-records: %d is too few for the aborts workload: it needs 10 or more, and more than -aborts after the warm-up of a tenth", o.records))
	}
	return errs
}

// abortsConfig is the configuration of each instance.
func abortsConfig(o *options, id, dir string, logger *slog.Logger, metrics prometheus.Registerer) weir.Config {
	return weir.Config{
		ApplicationID:    id,
		Brokers:          o.brokers,
		StateDir:         dir,
		Guarantee:        weir.ExactlyOnce,
		Threads:          o.threads,
		CommitInterval:   o.commitInterval,
		ProductionErrors: weir.Skip,
		Logger:           logger,
		Metrics:          metrics,
	}
}

// checkAbortsConfig fails fast, before anything is created, when weir
// would refuse the aborts workload's configuration.
func checkAbortsConfig(o *options) error {
	if !slices.Contains(o.workloads, wlAborts) {
		return nil
	}
	_, err := weir.New(abortsTopology("weir-bench-check-in", "weir-bench-check-out", &abortsProbe{}),
		abortsConfig(o, "weir-bench-check", "", nil, prometheus.NewRegistry()))
	if err != nil {
		return fmt.Errorf("weir rejects the aborts workload's configuration: %w", err)
	}
	return nil
}

// abortsProbe is what the processor tells the bench: how often it ran and
// when it first saw a bad record.
type abortsProbe struct {
	processed atomic.Int64
	mu        sync.Mutex
	firstBad  time.Time
}

func (p *abortsProbe) bad() {
	p.mu.Lock()
	if p.firstBad.IsZero() {
		p.firstBad = time.Now()
	}
	p.mu.Unlock()
}

// firstBadSince returns the time from start to the first bad record, and
// false before one was seen.
func (p *abortsProbe) firstBadSince(start time.Time) (time.Duration, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.firstBad.IsZero() {
		return 0, false
	}
	return p.firstBad.Sub(start), true
}

// abortsTopology echoes every input record to output; a bad record (value
// badValue) is echoed without key, which the broker refuses once output is
// compacted.
func abortsTopology(input, output string, probe *abortsProbe) *processor.Topology {
	t := processor.NewTopology()
	src := t.AddSource("in", input, serde.Bytes(), serde.Bytes())
	p := t.AddProcessor("echo", processor.Func(func(pc processor.Context[[]byte, []byte], rec processor.Record[[]byte, []byte]) error {
		probe.processed.Add(1)
		if bytes.Equal(rec.Value, badValue) {
			rec.Key = nil
			probe.bad()
		}
		return pc.Forward(rec)
	}), src)
	t.AddSink("out", output, serde.Bytes(), serde.Bytes(), p)
	return t
}

// abortsCounts are the instances' counters that the workload reports,
// summed over the instances.
type abortsCounts struct {
	committed, aborted, inPlace, rejoin, skipped, assignments float64
}

func (a abortsCounts) minus(b abortsCounts) abortsCounts {
	return abortsCounts{a.committed - b.committed, a.aborted - b.aborted, a.inPlace - b.inPlace,
		a.rejoin - b.rejoin, a.skipped - b.skipped, a.assignments - b.assignments}
}

func (a abortsCounts) String() string {
	return fmt.Sprintf("transactions %.0f committed / %.0f aborted, rewinds %.0f in place / %.0f by rejoining, %.0f records skipped, %.0f assignments",
		a.committed, a.aborted, a.inPlace, a.rejoin, a.skipped, a.assignments)
}

// gatherAbortsCounts reads the counters of every instance's registry. It
// gathers only the counters and histograms the App registered (see
// recordingRegisterer), so it is safe before and after Close.
func gatherAbortsCounts(regs []*recordingRegisterer) (abortsCounts, error) {
	var c abortsCounts
	for _, reg := range regs {
		fams, err := reg.gatherUpdated()
		if err != nil {
			return c, fmt.Errorf("gathering metrics: %w", err)
		}
		c.committed += sumCounter(fams, "weir_transactions_total", "result", "committed")
		c.aborted += sumCounter(fams, "weir_transactions_total", "result", "aborted")
		c.inPlace += sumCounter(fams, "weir_rewinds_total", "mode", "in_place")
		c.rejoin += sumCounter(fams, "weir_rewinds_total", "mode", "rejoin")
		c.skipped += sumCounter(fams, "weir_records_skipped_total", "reason", "production")
		c.assignments += sumCounter(fams, "weir_rebalances_total", "", "")
	}
	return c, nil
}

// sumCounter adds up the series of counter family name whose label has
// value; label "" takes every series.
func sumCounter(fams []*dto.MetricFamily, name, label, value string) float64 {
	var sum float64
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			match := label == ""
			for _, l := range m.GetLabel() {
				match = match || l.GetName() == label && l.GetValue() == value
			}
			if match {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}

// abortsApp is one running instance.
type abortsApp struct {
	app    *weir.App
	reg    *recordingRegisterer
	runErr chan error
	// started is set when Run is called; only then is there a Run to
	// wait for.
	started bool
}

// runAbortsRounds runs the aborts workload once per round.
func runAbortsRounds(ctx context.Context, o *options, c *cluster, logger *slog.Logger, prefix string, rep *report, progress func(string, ...any)) error {
	for round := 1; round <= o.rounds; round++ {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("interrupted: %w", err)
		}
		res, err := runAborts(ctx, o, c, logger, fmt.Sprintf("%s-aborts-r%d", prefix, round), round, rep, progress)
		if err != nil {
			return err
		}
		rep.Aborts = append(rep.Aborts, res)
		progress("%s", res.summary())
	}
	return nil
}

// runAborts runs one round of the aborts workload with application id id.
func runAborts(ctx context.Context, o *options, c *cluster, logger *slog.Logger, id string, round int, rep *report, progress func(string, ...any)) (res *abortsResult, err error) {
	const name = "weir aborts"
	partitions := o.abortsPartitions()
	input, output := id+"-in", id+"-out"
	warmup := abortsWarmup(o.records)
	badAt := abortsBad(o.records, warmup, o.aborts)
	bad := make(map[int64]bool, len(badAt))
	for _, i := range badAt {
		bad[i] = true
	}

	progress("%s: creating %s and %s (%d partitions; the output with cleanup.policy=delete), loading %d warm-up records",
		name, input, output, partitions, warmup)
	if err := c.createTopic(ctx, input, partitions); err != nil {
		return nil, err
	}
	if err := c.createTopicConfig(ctx, output, partitions, map[string]*string{"cleanup.policy": new("delete")}); err != nil {
		return nil, err
	}
	c.addGroup(id)
	load, _, err := loadRecords(ctx, o, c, loadSpec{topic: input, partitions: partitions, to: warmup,
		name: fmt.Sprintf("aborts warm-up load r%d (sarama AsyncProducer)", round)})
	if err != nil {
		return nil, err
	}
	load.Round = round
	rep.add(load)

	probe := &abortsProbe{}
	var apps []*abortsApp
	for i := range abortsApps {
		dir, err := c.stateDir()
		if err != nil {
			return nil, err
		}
		reg := &recordingRegisterer{Registry: prometheus.NewRegistry()}
		app, err := weir.New(abortsTopology(input, output, probe), abortsConfig(o, id, dir, logger, reg))
		if err != nil {
			return nil, fmt.Errorf("%s: instance %d: %w", name, i, err)
		}
		apps = append(apps, &abortsApp{app: app, reg: reg, runErr: make(chan error, 1)})
		defer func() {
			if !apps[i].started {
				_ = app.Close() // never ran: nothing to wait for
			}
		}()
	}
	regs := make([]*recordingRegisterer, len(apps))
	for i, a := range apps {
		regs[i] = a.reg
	}

	// stopApps closes every instance, in parallel and bounded, and
	// returns how long it took and the errors of Close and Run. Every
	// return path stops them.
	var stopOnce sync.Once
	var stopTook time.Duration
	var stopErr error
	stopApps := func() (time.Duration, error) {
		stopOnce.Do(func() {
			start := time.Now()
			errs := make([]error, len(apps))
			var wg sync.WaitGroup
			for i, a := range apps {
				if !a.started {
					continue
				}
				wg.Go(func() {
					if err := withTimeout(closeTimeout, a.app.Close); err != nil {
						errs[i] = fmt.Errorf("instance %d: stopping: %w", i, err)
						return
					}
					select {
					case err := <-a.runErr:
						if err != nil {
							errs[i] = fmt.Errorf("instance %d: Run: %w", i, err)
						}
					case <-time.After(5 * time.Second):
						errs[i] = fmt.Errorf("instance %d: Run did not return 5s after Close", i)
					}
				})
			}
			wg.Wait()
			stopTook, stopErr = time.Since(start), errors.Join(errs...)
		})
		return stopTook, stopErr
	}
	defer func() {
		if _, serr := stopApps(); serr != nil && err != nil {
			err = errors.Join(err, serr)
		}
	}()

	// stopped returns the error of an instance whose Run returned.
	stopped := func() error {
		for i, a := range apps {
			select {
			case err := <-a.runErr:
				if err == nil {
					err = errors.New("stopped early")
				}
				a.runErr <- err // stopApps reads it again
				return fmt.Errorf("instance %d: Run: %w", i, err)
			default:
			}
		}
		return nil
	}
	committed := func() (int64, error) {
		offs, err := c.committedOffsets(id, input, partitions)
		if err != nil {
			return 0, err
		}
		var sum int64
		for _, off := range offs {
			sum += max(off, 0)
		}
		return sum, nil
	}

	runStart := time.Now()
	for _, a := range apps {
		a.started = true
		go func() { a.runErr <- a.app.Run(context.Background()) }()
	}

	// The stable point: every instance runs its share of the tasks and
	// the warm-up is committed.
	lo, hi := int(partitions)/abortsApps, (int(partitions)+abortsApps-1)/abortsApps
	err = poll(ctx, name+": waiting for a stable group", runStart, o.timeout, func() (bool, string, error) {
		if err := stopped(); err != nil {
			return false, "", err
		}
		tasks := make([]int, len(apps))
		total := 0
		for i, a := range apps {
			tasks[i] = len(a.app.Tasks())
			total += tasks[i]
		}
		n, err := committed()
		if err != nil {
			return false, "", err
		}
		ok := total == int(partitions) && n == warmup
		for _, t := range tasks {
			ok = ok && t >= lo && t <= hi
		}
		return ok, fmt.Sprintf("tasks per instance %v, %d of %d warm-up records committed", tasks, n, warmup), nil
	})
	if err != nil {
		return nil, err
	}
	stable := time.Since(runStart)
	before, err := gatherAbortsCounts(regs)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	progress("%s: group stable after %.2fs (%s); making %s compacted", name, stable.Seconds(), before, output)
	if err := c.setCompacted(ctx, output); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}

	m, err := startMeasurement(o.profiling, wlAborts, round)
	if err != nil {
		return nil, err
	}
	defer m.stop()
	phaseStart := time.Now()
	load, _, err = loadRecords(ctx, o, c, loadSpec{topic: input, partitions: partitions, from: warmup, to: o.records,
		bad: func(i int64) bool { return bad[i] }, name: fmt.Sprintf("aborts injected-phase load r%d (sarama AsyncProducer, while the instances run)", round)})
	if err != nil {
		return nil, err
	}
	load.Round = round
	rep.add(load)
	progress("%s: loaded %d records with %d bad ones in %.2fs; waiting until every input record is committed", name, o.records-warmup, len(badAt), load.EndSeconds)

	var done int64
	complete := false
	waitFor := "until every input record is committed"
	if o.abortsWindow > 0 {
		waitFor += fmt.Sprintf(" or %v after the first bad record", o.abortsWindow)
	}
	err = poll(ctx, name+": waiting "+waitFor, phaseStart, o.timeout, func() (bool, string, error) {
		if err := stopped(); err != nil {
			return false, "", err
		}
		n, err := committed()
		if err != nil {
			return false, "", err
		}
		done = n
		if n == o.records {
			complete = true
			return true, "", nil
		}
		first, seen := probe.firstBadSince(phaseStart)
		if seen && o.abortsWindow > 0 && time.Since(phaseStart)-first >= o.abortsWindow {
			return true, "", nil
		}
		now, err := gatherAbortsCounts(regs)
		if err != nil {
			return false, "", err
		}
		return false, fmt.Sprintf("%d of %d input records committed; since the stable point: %s", n, o.records, now.minus(before)), nil
	})
	phase := time.Since(phaseStart)
	// The figures are read before any instance stops: stopping one
	// rebalances the others.
	after, gerr := gatherAbortsCounts(regs)
	cpu, perr := m.stop()
	if err = errors.Join(err, gerr, perr); err != nil {
		if gerr == nil {
			err = fmt.Errorf("%w (since the stable point: %s)", err, after.minus(before))
		}
		return nil, err
	}
	closeTook, err := stopApps()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}

	d := after.minus(before)
	r := &abortsResult{
		Round:                 round,
		Apps:                  abortsApps,
		Threads:               o.threads,
		Partitions:            partitions,
		Records:               o.records,
		Warmup:                warmup,
		Injected:              len(badAt),
		Complete:              complete,
		StableSeconds:         stable.Seconds(),
		Seconds:               phase.Seconds(),
		FirstInjectionSeconds: -1,
		CommittedInput:        done,
		Processed:             probe.processed.Load(),
		TxnCommitted:          d.committed,
		TxnAborted:            d.aborted,
		RewindsInPlace:        d.inPlace,
		RewindsRejoin:         d.rejoin,
		Skipped:               d.skipped,
		AssignmentsStable:     before.assignments,
		Assignments:           d.assignments,
		CloseSeconds:          closeTook.Seconds(),
	}
	if len(badAt) > 0 {
		r.AssignmentsPerAbort = d.assignments / float64(len(badAt))
	}
	if d.aborted > 0 {
		r.AssignmentsPerAbortedTxn = d.assignments / d.aborted
	}
	if first, ok := probe.firstBadSince(phaseStart); ok {
		r.FirstInjectionSeconds = first.Seconds()
	}
	if phase > 0 {
		r.Rate = float64(done-warmup) / phase.Seconds()
	}
	if done > warmup {
		r.CPUPerMillion = cpu.Seconds() / float64(done-warmup) * 1e6
	}
	switch {
	case len(badAt) == 0:
		r.Note = fmt.Sprintf("baseline without injection: %d processor calls for %d records", r.Processed, o.records)
	case complete:
		r.Note = fmt.Sprintf("complete: %d processor calls for %d records (%d replayed)", r.Processed, o.records, r.Processed-o.records)
	default:
		r.Note = fmt.Sprintf("INCOMPLETE: stopped %v after the first bad record with %d of %d input records committed", o.abortsWindow, done, o.records)
	}

	if o.verify {
		n, err := c.verifyAbortsOutput(ctx, o, id, input, output, partitions, int64(len(badAt)), complete)
		if err != nil {
			return nil, fmt.Errorf("%s: %w (figures: %s)", name, err, r.summary())
		}
		r.Verified = &n
	}
	return r, nil
}

// poll calls check every 100 ms until it is done, fails, ctx ends or
// timeout has passed since start; it prints check's progress line on
// stderr every 10 s.
func poll(ctx context.Context, what string, start time.Time, timeout time.Duration, check func() (bool, string, error)) error {
	deadline := start.Add(timeout)
	lastReport := time.Now()
	for {
		ok, state, err := check()
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: timed out after %v: %s (raise -timeout if the machine is just slow)", what, timeout, state)
		}
		if time.Since(lastReport) >= 10*time.Second {
			fmt.Fprintf(os.Stderr, "bench: %s: %s after %v\n", what, state, time.Since(start).Round(time.Second))
			lastReport = time.Now()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: interrupted: %s: %w", what, state, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (r *abortsResult) summary() string {
	s := fmt.Sprintf("weir aborts (round %d): %d injected aborts: %.0f transactions aborted, rewinds %.0f in place / %.0f by rejoining, %.0f records skipped; %.0f assignments during the phase (%.2f per injected abort, %.2f per aborted transaction); %.0f input records/s committed over %.2fs",
		r.Round, r.Injected, r.TxnAborted, r.RewindsInPlace, r.RewindsRejoin, r.Skipped, r.Assignments, r.AssignmentsPerAbort, r.AssignmentsPerAbortedTxn, r.Rate, r.Seconds)
	if r.Verified != nil {
		s += fmt.Sprintf("; output %d records, exactly once", *r.Verified)
	}
	return s + "; " + r.Note
}

// writeAbortsTable prints the aborts workload's figures.
func (r *report) writeAbortsTable(w io.Writer) error {
	fmt.Fprintf(w, "\naborts (%d exactly-once instances, ProductionErrors=Skip; bad records become output records without key, which the broker refuses):\n", abortsApps)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "round\tpartitions\trecords\twarm-up\tinjected\tcomplete\tstable s\tphase s\tfirst inj s\tcommitted rec/s\tCPU s/M rec\ttxn committed\ttxn aborted\trewinds in place\trewinds rejoin\tskipped\tassignments at stable\tassignments in phase\tper injected abort\tper aborted txn\toutput recs\tclose s\t")
	for _, res := range r.Aborts {
		verified := "-"
		if res.Verified != nil {
			verified = fmt.Sprint(*res.Verified)
		}
		fmt.Fprintf(tw, "%d\t%d\t%d\t%d\t%d\t%v\t%.2f\t%.2f\t%.2f\t%.0f\t%.2f\t%.0f\t%.0f\t%.0f\t%.0f\t%.0f\t%.0f\t%.0f\t%.2f\t%.2f\t%s\t%.2f\t\n",
			res.Round, res.Partitions, res.Records, res.Warmup, res.Injected, res.Complete, res.StableSeconds, res.Seconds,
			res.FirstInjectionSeconds, res.Rate, res.CPUPerMillion, res.TxnCommitted, res.TxnAborted, res.RewindsInPlace, res.RewindsRejoin,
			res.Skipped, res.AssignmentsStable, res.Assignments, res.AssignmentsPerAbort, res.AssignmentsPerAbortedTxn, verified, res.CloseSeconds)
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("writing table: %w", err)
	}
	for _, res := range r.Aborts {
		if res.Note != "" {
			fmt.Fprintf(w, "  round %d: %s\n", res.Round, res.Note)
		}
	}
	_, err := fmt.Fprintln(w, "\nstable s = app.Run to every instance running its share of the tasks with the warm-up committed (the stable point); phase s = the injected phase, from the start of its load to every input record committed; first inj s = phase start to the first bad record processed; committed rec/s = input records committed in the phase over phase s; the transaction, rewind, skipped and assignment counts are weir's counters summed over the instances, from the stable point to the end of the phase; assignments = weir_rebalances_total (each thread counts the assignments it receives: a thread that rejoins the group receives at least one, a rebalance that reaches every member one per thread, two with a two-step cooperative rebalance); per injected abort = assignments in phase / injected, per aborted txn = assignments in phase / txn aborted (0 when there is none); output recs = committed output records, checked to be every committed good input record once.")
	if err != nil {
		return fmt.Errorf("writing table: %w", err)
	}
	return nil
}
