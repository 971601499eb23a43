package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"text/tabwriter"
	"time"

	"github.com/IBM/sarama"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/kstream"
	"github.com/weirstream/weir/serde"
)

// The join workload (-workloads join, not in the default set) measures a
// stream-table join written with package kstream against the DSL count of
// the same stream, in the same run. A table topic holds -join-table-keys
// keys (recordKey(0), recordKey(1), ...; values of joinRowSize bytes) and
// a stream topic -records records whose keys are drawn uniformly, seeded,
// from the table's keys; both have -partitions partitions and are loaded
// with murmur2, so they are co-partitioned. In every round:
//
//   - join: the table must be whole before the stream is measured. An
//     instance of the join application first runs on the table topic and
//     an empty stream topic of the same partition count until the group
//     has committed every table record (lag 0 on the table topic), then
//     stops. A second instance with the same application id and state
//     directory, whose stream source is the real stream topic, is the one
//     measured: its table is in its store (restored from local state, or
//     from its changelog before any record is processed), and its table
//     offsets are at the end.
//   - count: the DSL count of the same stream topic (GroupByKey, Count
//     without record cache, ToStream), a fresh application.
//
// Both run with -guarantee, -commit-interval and -threads, Config's
// CacheMaxBytes left at 0 (no record cache) and a Peek before the sink
// that counts the records reaching it: each stream record gives exactly
// one output record in both. The output of each is then checked record
// by record.

// joinRowSize is the size of the table's values: "row-" and 16 digits.
const joinRowSize = 20

// joinKeySeed seeds the draw of the stream's keys, so that every run with
// the same -records and -join-table-keys loads the same stream.
const joinKeySeed = 12

// joinRow returns the table's value of key index i: joinRowSize bytes.
func joinRow(i int64) []byte { return fmt.Appendf(make([]byte, 0, joinRowSize), "row-%016d", i) }

// joinStreamKeys draws, for each of records stream records, the index of
// its key among the table's keys, uniformly in [0, keys).
func joinStreamKeys(records, keys int64, seed uint64) []int32 {
	rng := rand.New(rand.NewPCG(seed, seed^0x9E3779B97F4A7C15))
	out := make([]int32, records)
	for i := range out {
		out[i] = int32(rng.Int64N(keys))
	}
	return out
}

// joinValueSize is the size of a stream value: -value-size, at least the
// 8 bytes of the record's index.
func joinValueSize(valueSize int) int { return max(valueSize, 8) }

// joinStreamValue returns stream record i's value: i in 8 bytes big endian,
// then filler up to size bytes.
func joinStreamValue(i int64, size int) []byte {
	v := make([]byte, size)
	binary.BigEndian.PutUint64(v, uint64(i))
	for j := 8; j < size; j++ {
		v[j] = 'a' + byte(j%26)
	}
	return v
}

// joinStreamIndex returns the index of the stream record whose value (or
// join result, which starts with it) is v.
func joinStreamIndex(v []byte) (int64, bool) {
	if len(v) < 8 {
		return 0, false
	}
	return int64(binary.BigEndian.Uint64(v)), true
}

// joinValues is the join's joiner: the stream value followed by the row.
func joinValues(_ string, v []byte, row string) []byte {
	out := make([]byte, 0, len(v)+len(row))
	return append(append(out, v...), row...)
}

// joinTopology is the measured stream-table join: the table read from
// tableTopic, every record of streamTopic joined with its row and written
// to output; seen is called with every result before the sink.
func joinTopology(tableTopic, streamTopic, output string, seen func()) weir.Topology {
	b := kstream.NewBuilder()
	table := b.Table("table", tableTopic, serde.String(), serde.String())
	b.Stream("stream", streamTopic, serde.String(), serde.Bytes()).
		Join(table, joinValues).
		Peek(func(string, []byte) { seen() }).
		To(output, serde.String(), serde.Bytes())
	return b
}

// joinCountTopology is the DSL count the join is compared with: every
// record of streamTopic counted per key, without record cache, and each
// new count written to output; seen is called with every count before
// the sink.
func joinCountTopology(streamTopic, output string, seen func()) weir.Topology {
	b := kstream.NewBuilder()
	b.Stream("stream", streamTopic, serde.String(), serde.Bytes()).
		GroupByKey().
		Count("counts", kstream.WithoutCache()).
		ToStream().
		Peek(func(string, int64) { seen() }).
		To(output, serde.String(), serde.Int64())
	return b
}

// joinInput is the join workload's loaded input.
type joinInput struct {
	table, stream, empty string
	tableKeys            int64
	tableEnds            []int64 // the table topic's end offset per partition
	keys                 []int32 // keys[i]: stream record i's key index
	counts               map[string]int64
}

// joinResult is one measured application of the join workload.
type joinResult struct {
	// App is "join" or "count".
	App            string `json:"app"`
	Guarantee      string `json:"guarantee"`
	CommitInterval string `json:"commit_interval"`
	Round          int    `json:"round"`
	Records        int64  `json:"records"`

	// TableLoadSeconds (join) is how long the first instance took from
	// app.Run until the group had committed every table record;
	// TableRestored is what the measured instance restored into the
	// table's store at start (0: its local state was current).
	TableLoadSeconds float64 `json:"table_load_seconds,omitempty"`
	TableRestored    *int64  `json:"table_restored_records,omitempty"`

	// FirstSeconds is from app.Run to the first output record reaching
	// the sink, ProcessedSeconds to the last; OutputSeconds until the
	// output topic held every record (exactly once: committed).
	FirstSeconds     float64 `json:"first_record_seconds"`
	ProcessedSeconds float64 `json:"processed_seconds"`
	OutputSeconds    float64 `json:"output_complete_seconds"`
	// SteadyRate is records per second from the first to the last;
	// Rate counts from app.Run.
	SteadyRate float64 `json:"steady_records_per_second"`
	Rate       float64 `json:"records_per_second"`
	// CPUPerMillion is the bench process's CPU from app.Run to the last
	// record, per million records.
	CPUPerMillion float64 `json:"cpu_seconds_per_million_records"`
	CloseSeconds  float64 `json:"close_seconds"`

	Commits      uint64             `json:"commits"`
	Transactions map[string]float64 `json:"transactions,omitempty"`

	// OutputRecords is the output's committed records; Check says what
	// the verification found.
	OutputRecords int64  `json:"output_records"`
	Check         string `json:"check"`
}

// joinRatio is the join's rate over the count's in one round, or (Round
// 0) the median of the rounds' ratios; CPU divides the join's CPU per
// record by the count's.
type joinRatio struct {
	Round    int     `json:"round"`
	Steady   float64 `json:"steady"`
	EndToEnd float64 `json:"end_to_end"`
	CPU      float64 `json:"cpu_per_record"`
}

// runJoins loads the join workload's topics, then runs the join and the
// count in every round.
func runJoins(ctx context.Context, o *options, c *cluster, logger *slog.Logger, prefix string, rep *report, progress func(string, ...any)) error {
	in, err := loadJoinInput(ctx, o, c, prefix, rep, progress)
	if err != nil {
		return err
	}
	rep.JoinTableKeys = o.joinTableKeys
	for round := 1; round <= o.rounds; round++ {
		for _, app := range []string{"join", "count"} {
			if err := ctx.Err(); err != nil {
				return fmt.Errorf("interrupted: %w", err)
			}
			res, err := runJoinApp(ctx, o, c, logger, in, app, fmt.Sprintf("%s-join-%s-r%d", prefix, app, round), round, progress)
			if err != nil {
				return err
			}
			rep.Joins = append(rep.Joins, res)
			progress("%s", res.summary())
		}
	}
	rep.computeJoinRatios()
	return nil
}

// loadJoinInput creates and loads the table and stream topics and creates
// the empty stream topic the table is loaded with.
func loadJoinInput(ctx context.Context, o *options, c *cluster, prefix string, rep *report, progress func(string, ...any)) (*joinInput, error) {
	in := &joinInput{
		table:     prefix + "-join-table",
		stream:    prefix + "-join-stream",
		empty:     prefix + "-join-stream-empty",
		tableKeys: o.joinTableKeys,
		keys:      joinStreamKeys(o.records, o.joinTableKeys, joinKeySeed),
	}
	in.counts = make(map[string]int64, min(o.joinTableKeys, o.records))
	for _, k := range in.keys {
		in.counts[string(recordKey(int64(k)))]++
	}
	for _, t := range []string{in.table, in.stream, in.empty} {
		if err := c.createTopic(ctx, t, o.partitions); err != nil {
			return nil, err
		}
	}
	progress("join: loading %d table keys into %s and %d stream records over %d of them into %s (%d partitions)",
		in.tableKeys, in.table, o.records, len(in.counts), in.stream, o.partitions)
	res, ends, err := loadRecords(ctx, o, c, loadSpec{
		topic: in.table, partitions: o.partitions, to: in.tableKeys, valueSize: joinRowSize,
		record: func(i int64) ([]byte, []byte) { return recordKey(i), joinRow(i) },
		name:   "join table load (sarama AsyncProducer)",
	})
	if err != nil {
		return nil, err
	}
	in.tableEnds = ends
	rep.add(res)
	progress("%s", res.summary())
	size := joinValueSize(o.valueSize)
	res, _, err = loadRecords(ctx, o, c, loadSpec{
		topic: in.stream, partitions: o.partitions, to: o.records, valueSize: size,
		record: func(i int64) ([]byte, []byte) { return recordKey(int64(in.keys[i])), joinStreamValue(i, size) },
		name:   "join stream load (sarama AsyncProducer)",
	})
	if err != nil {
		return nil, err
	}
	rep.add(res)
	progress("%s", res.summary())
	return in, nil
}

// joinConfig is the configuration of every application of the join
// workload.
func joinConfig(o *options, logger *slog.Logger, id, dir string, reg prometheus.Registerer) weir.Config {
	return weir.Config{
		ApplicationID:  id,
		Brokers:        o.brokers,
		StateDir:       dir,
		Guarantee:      o.guarantee,
		Threads:        o.threads,
		CommitInterval: o.commitInterval,
		Logger:         logger,
		Metrics:        reg,
	}
}

// loadJoinTable runs the join application id on the table topic and the
// empty stream topic until its group has committed every table record,
// then stops it, and returns the time from app.Run to that point.
func loadJoinTable(ctx context.Context, o *options, c *cluster, logger *slog.Logger, in *joinInput, id, dir, output string) (time.Duration, error) {
	app, err := weir.New(joinTopology(in.table, in.empty, output, func() {}), joinConfig(o, logger, id, dir, nil))
	if err != nil {
		return 0, fmt.Errorf("weir join, table load: %w", err)
	}
	start := time.Now()
	runErr := make(chan error, 1)
	go func() { runErr <- app.Run(context.Background()) }()
	deadline := time.Now().Add(o.timeout)
	var took time.Duration
	for {
		offs, err := c.committedOffsets(id, in.table, o.partitions)
		if err == nil && tableLoaded(offs, in.tableEnds) {
			took = time.Since(start)
			break
		}
		var waitErr error
		select {
		case <-time.After(20 * time.Millisecond):
		case err := <-runErr:
			waitErr = fmt.Errorf("the application stopped: %v", err)
		case <-ctx.Done():
			waitErr = ctx.Err()
		}
		if waitErr == nil && time.Now().After(deadline) {
			waitErr = fmt.Errorf("timed out after %v (committed offsets %v of %v, last error %v)", o.timeout, offs, in.tableEnds, err)
		}
		if waitErr != nil {
			_ = withTimeout(closeTimeout, app.Close)
			return 0, fmt.Errorf("weir join, table load: %w", waitErr)
		}
	}
	if err := stopApp(app, runErr); err != nil {
		return 0, fmt.Errorf("weir join, table load: %w", err)
	}
	return took, nil
}

// tableLoaded reports whether the committed offsets reached the ends.
func tableLoaded(committed, ends []int64) bool {
	if len(committed) != len(ends) {
		return false
	}
	for p := range ends {
		if committed[p] < ends[p] {
			return false
		}
	}
	return true
}

// stopApp closes app and waits for its Run to return.
func stopApp(app *weir.App, runErr <-chan error) error {
	if err := withTimeout(closeTimeout, app.Close); err != nil {
		return fmt.Errorf("stopping the application: %w", err)
	}
	select {
	case err := <-runErr:
		if err != nil {
			return fmt.Errorf("Run: %w", err)
		}
		return nil
	case <-time.After(5 * time.Second):
		return errors.New("Run did not return 5s after Close")
	}
}

// runJoinApp measures app ("join" or "count") on the stream topic under
// application id id, then checks its output.
func runJoinApp(ctx context.Context, o *options, c *cluster, logger *slog.Logger, in *joinInput, app, id string, round int, progress func(string, ...any)) (*joinResult, error) {
	name := "weir " + app
	output := id + "-out"
	if err := c.createTopic(ctx, output, o.partitions); err != nil {
		return nil, err
	}
	c.addGroup(id)
	dir, err := c.stateDir()
	if err != nil {
		return nil, err
	}
	r := &joinResult{App: app, Guarantee: o.guarantee.String(), CommitInterval: commitIntervalLabel(o), Round: round, Records: o.records}
	cnt := newCounter(o.records)
	var top weir.Topology
	var watch *restoreWatch
	cfgState := weir.StoresConfig{}
	if app == "join" {
		c.addTopic(id + "-table-changelog")
		took, err := loadJoinTable(ctx, o, c, logger, in, id, dir, output)
		if err != nil {
			return nil, err
		}
		r.TableLoadSeconds = took.Seconds()
		progress("weir join (round %d): table of %d keys loaded in %.2fs", round, in.tableKeys, r.TableLoadSeconds)
		top = joinTopology(in.table, in.stream, output, cnt.add)
		watch = newRestoreWatch(int(o.partitions))
		cfgState.RestoreListener = watch
	} else {
		c.addTopic(id + "-counts-changelog")
		top = joinCountTopology(in.stream, output, cnt.add)
	}
	reg := &recordingRegisterer{Registry: prometheus.NewRegistry()}
	cfg := joinConfig(o, logger, id, dir, reg)
	cfg.Stores = cfgState
	a, err := weir.New(top, cfg)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}

	m, err := startMeasurement(o.profiling, fmt.Sprintf("join-%s-%s", app, o.guarantee), round)
	if err != nil {
		return nil, err
	}
	defer m.stop()
	runErr := make(chan error, 1)
	cnt.reset()
	if watch != nil {
		watch.start = cnt.start
	}
	go func() { runErr <- a.Run(context.Background()) }()
	deadline := time.Now().Add(o.timeout)
	if err := cnt.waitDone(ctx, name, o.timeout, runErr); err != nil {
		_, _ = m.stop()
		_ = withTimeout(closeTimeout, a.Close)
		return nil, err
	}
	cpu, perr := m.stop()
	outputDone, werr := c.waitOutput(ctx, o, output, cnt, deadline, runErr)
	closeStart := time.Now()
	cerr := stopApp(a, runErr)
	r.CloseSeconds = time.Since(closeStart).Seconds()
	if err := errors.Join(perr, werr, cerr); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}

	r.FirstSeconds = time.Duration(cnt.first.Load()).Seconds()
	r.ProcessedSeconds = time.Duration(cnt.last.Load()).Seconds()
	r.OutputSeconds = outputDone.Seconds()
	if r.ProcessedSeconds > 0 {
		r.Rate = float64(r.Records) / r.ProcessedSeconds
	}
	if steady := r.ProcessedSeconds - r.FirstSeconds; steady > 0 && r.Records > 1 {
		r.SteadyRate = float64(r.Records-1) / steady
	}
	r.CPUPerMillion = cpu.Seconds() / float64(r.Records) * 1e6
	if watch != nil {
		watch.mu.Lock()
		restored := watch.records
		watch.mu.Unlock()
		r.TableRestored = &restored
	}
	var metrics countResult
	if err := metrics.readMetrics(reg); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	r.Commits, r.Transactions = metrics.Commits, metrics.Transactions

	if err := c.verifyJoinApp(ctx, o, in, app, id, output, r); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return r, nil
}

// verifyJoinApp checks, after app stopped, that its group committed the
// whole stream and that its output holds, read_committed up to sentinels,
// exactly one record per stream record: for the join, the record's key
// and its row; for the count, counts whose last value per key is that
// key's count in the stream (so that they sum to -records).
func (c *cluster) verifyJoinApp(ctx context.Context, o *options, in *joinInput, app, id, output string, r *joinResult) error {
	ends, err := c.offsets(in.stream, o.partitions, sarama.ReadUncommitted)
	if err != nil {
		return err
	}
	committed, err := c.committedOffsets(id, in.stream, o.partitions)
	if err != nil {
		return err
	}
	if !tableLoaded(committed, ends) {
		return fmt.Errorf("the group committed offsets %v of %s, whose ends are %v", committed, in.stream, ends)
	}
	sentinels, err := c.writeSentinels(output, o.partitions)
	if err != nil {
		return fmt.Errorf("verifying the output: %w", err)
	}
	var check interface {
		add(key, value []byte)
		result() (string, error)
	}
	if app == "join" {
		check = newJoinCheck(in.keys)
	} else {
		check = newCountCheck(in.counts)
	}
	var n int64
	err = c.readUpTo(ctx, output, sentinels, time.Now().Add(o.timeout), func(p int32, m *sarama.ConsumerMessage) {
		if m.Offset == sentinels[p] {
			return
		}
		n++
		check.add(m.Key, m.Value)
	})
	if err != nil {
		return fmt.Errorf("verifying the output: %w", err)
	}
	r.OutputRecords = n
	r.Check, err = check.result()
	if err != nil {
		return fmt.Errorf("the output %s: %w", output, err)
	}
	if n != o.records {
		return fmt.Errorf("the output %s holds %d committed records, want exactly %d", output, n, o.records)
	}
	return nil
}

// joinCheck checks a join's output: every stream record once, with its
// key and its key's row.
type joinCheck struct {
	keys  []int32
	seen  []uint8 // times each stream record was seen, up to 255
	dups  int64
	bad   int64 // undecodable, unknown index, wrong key or row
	first string
}

func newJoinCheck(keys []int32) *joinCheck {
	return &joinCheck{keys: keys, seen: make([]uint8, len(keys))}
}

func (c *joinCheck) add(key, value []byte) {
	i, ok := joinStreamIndex(value)
	switch {
	case !ok || i < 0 || i >= int64(len(c.keys)):
		c.fail(fmt.Sprintf("a record %q → %q of no stream record", key, value))
		return
	case !bytes.Equal(key, recordKey(int64(c.keys[i]))):
		c.fail(fmt.Sprintf("stream record %d with key %q, want %q", i, key, recordKey(int64(c.keys[i]))))
		return
	case !bytes.HasSuffix(value, joinRow(int64(c.keys[i]))) || len(value) < 8+joinRowSize:
		c.fail(fmt.Sprintf("stream record %d joined with %q, want row %q", i, value[8:], joinRow(int64(c.keys[i]))))
		return
	}
	if c.seen[i] > 0 {
		c.dups++
	}
	if c.seen[i] < 255 {
		c.seen[i]++
	}
}

func (c *joinCheck) fail(what string) {
	if c.bad == 0 {
		c.first = what
	}
	c.bad++
}

func (c *joinCheck) result() (string, error) {
	var missing int64
	for _, s := range c.seen {
		if s == 0 {
			missing++
		}
	}
	if missing > 0 || c.dups > 0 || c.bad > 0 {
		msg := fmt.Sprintf("not one result per stream record: %d missing, %d duplicates, %d wrong", missing, c.dups, c.bad)
		if c.bad > 0 {
			msg += " (first: " + c.first + ")"
		}
		return "", errors.New(msg)
	}
	return fmt.Sprintf("each of %d stream records once, with its key's row", len(c.keys)), nil
}

// countCheck checks a count's output: the last count of every key is its
// count in the stream.
type countCheck struct {
	want map[string]int64
	last map[string]int64
	bad  int64
}

func newCountCheck(want map[string]int64) *countCheck {
	return &countCheck{want: want, last: make(map[string]int64, len(want))}
}

func (c *countCheck) add(key, value []byte) {
	if len(value) != 8 {
		c.bad++
		return
	}
	c.last[string(key)] = int64(binary.BigEndian.Uint64(value))
}

func (c *countCheck) result() (string, error) {
	var sum, want, wrong, extra int64
	for k, n := range c.want {
		want += n
		if c.last[k] != n {
			wrong++
		}
	}
	for k, n := range c.last {
		sum += n
		if _, ok := c.want[k]; !ok {
			extra++
		}
	}
	if wrong > 0 || extra > 0 || c.bad > 0 || sum != want {
		return "", fmt.Errorf("final counts sum to %d, want %d: %d of %d keys wrong, %d keys not in the stream, %d values not 8 bytes",
			sum, want, wrong, len(c.want), extra, c.bad)
	}
	return fmt.Sprintf("final counts of %d keys right, sum %d", len(c.want), sum), nil
}

func (r *joinResult) summary() string {
	s := fmt.Sprintf("weir %s (round %d): steady %.0f records/s (%.0f from app.Run); processed after %.2fs, output complete after %.2fs; %.2f CPU s/M records; %d output records: %s",
		r.App, r.Round, r.SteadyRate, r.Rate, r.ProcessedSeconds, r.OutputSeconds, r.CPUPerMillion, r.OutputRecords, r.Check)
	if r.TableRestored != nil {
		s += fmt.Sprintf("; table restored at start: %d records", *r.TableRestored)
	}
	return s
}

// joinRatios divides each round's join rates (and CPU per record) by its
// count's, and appends the medians of those ratios as Round 0.
func joinRatios(results []*joinResult) []joinRatio {
	type pair struct{ join, count *joinResult }
	byRound := map[int]*pair{}
	var rounds []int
	for _, r := range results {
		p := byRound[r.Round]
		if p == nil {
			p = &pair{}
			byRound[r.Round] = p
			rounds = append(rounds, r.Round)
		}
		if r.App == "join" {
			p.join = r
		} else {
			p.count = r
		}
	}
	var out []joinRatio
	var steady, e2e, cpu []float64
	for _, round := range rounds {
		p := byRound[round]
		if p.join == nil || p.count == nil || p.count.SteadyRate == 0 || p.count.Rate == 0 {
			continue
		}
		q := joinRatio{Round: round, Steady: p.join.SteadyRate / p.count.SteadyRate, EndToEnd: p.join.Rate / p.count.Rate}
		if p.count.CPUPerMillion > 0 {
			q.CPU = p.join.CPUPerMillion / p.count.CPUPerMillion
		}
		out = append(out, q)
		steady, e2e, cpu = append(steady, q.Steady), append(e2e, q.EndToEnd), append(cpu, q.CPU)
	}
	if len(out) > 0 {
		out = append(out, joinRatio{Round: 0, Steady: median(steady), EndToEnd: median(e2e), CPU: median(cpu)})
	}
	return out
}

func (r *report) computeJoinRatios() { r.JoinRatios = joinRatios(r.Joins) }

// writeJoinTable prints the join workload's figures.
func (r *report) writeJoinTable(w io.Writer) error {
	fmt.Fprintf(w, "\njoin (stream-table join over a table of %d keys vs the DSL count of the same stream; %s, commit interval %s):\n",
		r.JoinTableKeys, r.Joins[0].Guarantee, r.Joins[0].CommitInterval)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "app\tround\tsteady rec/s\trec/s\tfirst rec s\tprocessed s\toutput s\tCPU s/M rec\tcommits\ttransactions\toutput recs\ttable load s\ttable restored\tclose s\t\n")
	for _, res := range r.Joins {
		txn := "-"
		if len(res.Transactions) > 0 {
			txn = fmt.Sprintf("%.0f committed / %.0f aborted", res.Transactions["committed"], res.Transactions["aborted"])
		}
		load, restored := "-", "-"
		if res.App == "join" {
			load = fmt.Sprintf("%.2f", res.TableLoadSeconds)
		}
		if res.TableRestored != nil {
			restored = fmt.Sprint(*res.TableRestored)
		}
		fmt.Fprintf(tw, "%s\t%d\t%.0f\t%.0f\t%.2f\t%.2f\t%.2f\t%.2f\t%d\t%s\t%d\t%s\t%s\t%.2f\t\n",
			res.App, res.Round, res.SteadyRate, res.Rate, res.FirstSeconds, res.ProcessedSeconds, res.OutputSeconds,
			res.CPUPerMillion, res.Commits, txn, res.OutputRecords, load, restored, res.CloseSeconds)
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("writing table: %w", err)
	}
	if len(r.JoinRatios) > 0 {
		fmt.Fprintln(w, "\njoin / count:")
		for _, q := range r.JoinRatios {
			label := fmt.Sprintf("round %d", q.Round)
			if q.Round == 0 {
				label = "median"
			}
			fmt.Fprintf(w, "  %-8s steady %.2f   from app.Run %.2f   CPU per record %.2f\n", label, q.Steady, q.EndToEnd, q.CPU)
		}
	}
	for _, res := range r.Joins {
		fmt.Fprintf(w, "  %s (round %d): %s\n", res.App, res.Round, res.Check)
	}
	_, err := fmt.Fprintln(w, "\nsteady = first to last output record reaching the sink; rec/s = app.Run to the last; output s = app.Run until the output topic held every record (exactly once: committed); CPU = the bench process up to the last record; table load s = the first join instance's app.Run until its group committed every table record (not measured in the rates); table restored = records restored into the table's store when the measured instance started; output recs = committed records in the output topic, read up to sentinels.")
	if err != nil {
		return fmt.Errorf("writing table: %w", err)
	}
	return nil
}
