package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/IBM/sarama"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/internal/topics"
	"github.com/weirstream/weir/processor"
	"github.com/weirstream/weir/serde"
)

// The failover workload (-workloads failover): three weir instances, each a
// process of its own, run a key-value store of -failover-keys entries
// (loaded into its changelog, so the instances start by restoring it)
// while input trickles in; then the instance running task 0_0 is killed
// with SIGKILL and the workload measures, with StandbyReplicas 0 and 1,
// how long each moved partition makes no progress (from the kill until
// the group's committed offset of the partition moves again), what the
// new owners restored, and the longest pause of the partitions that did
// not move.

// failoverChildEnv holds, as JSON, the failoverChild of a bench process
// that must run one instance instead of the benchmark.
const failoverChildEnv = "WEIR_BENCH_FAILOVER_CHILD"

// failoverInstances is the group's size.
const failoverInstances = 3

// failoverTrickle is the input rate, records per second over all
// partitions, while the workload waits and measures.
const failoverTrickle = 600

// failoverSessionTimeout is the instances' Consumer.SessionTimeout: the
// group notices the killed instance after it, with or without standbys.
const failoverSessionTimeout = 6 * time.Second

// failoverChild is what an instance process gets.
type failoverChild struct {
	Brokers  []string
	App      string
	Input    string
	StateDir string
	Standbys int
	Static   bool // Config.StaticMembership
}

// failoverVariant is one way the workload fails an instance over.
type failoverVariant struct {
	standbys int
	// restart starts the killed instance again at once on its state
	// directory; static runs every instance with static membership.
	restart, static bool
}

func (v failoverVariant) String() string {
	switch {
	case v.static:
		return "static, restarted"
	case v.restart:
		return "restarted"
	case v.standbys > 0:
		return fmt.Sprintf("%d standby", v.standbys)
	}
	return "no standby"
}

// failoverVariants are the variants measured: without and with a standby
// (the killed instance stays down), and the killed instance restarted at
// once on its state directory, without and with static membership. With
// WEIR_BENCH_FAILOVER_VARIANTS (a comma list of 0, 1, restart, static)
// only those.
func failoverVariants() []failoverVariant {
	all := map[string]failoverVariant{"0": {}, "1": {standbys: 1}, "restart": {restart: true}, "static": {restart: true, static: true}}
	v := os.Getenv("WEIR_BENCH_FAILOVER_VARIANTS")
	if v == "" {
		return []failoverVariant{all["0"], all["1"], all["restart"], all["static"]}
	}
	var out []failoverVariant
	for f := range strings.SplitSeq(v, ",") {
		if fv, ok := all[strings.TrimSpace(f)]; ok {
			out = append(out, fv)
		}
	}
	return out
}

// failoverReport is a line an instance prints: its tasks and its standby
// lags every 100 ms, or a restore it ran.
type failoverReport struct {
	Tasks []string `json:"tasks,omitempty"`
	// Restoring counts the tasks among them still restoring.
	Restoring int              `json:"restoring,omitempty"`
	Lags      map[string]int64 `json:"lags,omitempty"`
	Restore   *failoverRestore `json:"restore,omitempty"`
}

type failoverRestore struct {
	Partition int32   `json:"partition"`
	Full      bool    `json:"full"`
	Records   int64   `json:"records"`
	Seconds   float64 `json:"seconds"`
}

// failoverResult is one measured failover.
type failoverResult struct {
	Keys     int64  `json:"keys"`
	Variant  string `json:"variant"`
	Standbys int    `json:"standbys"`
	Round    int    `json:"round"`
	// Moved are the killed instance's tasks.
	Moved []string `json:"moved"`
	// ResumeSeconds is the longest time a moved partition made no
	// progress (kill to its first commit after it); RestoreSeconds the
	// longest restore of a moved task, RestoredRecords their sum, Full
	// how many of them restored in full.
	ResumeSeconds   float64 `json:"resume_seconds"`
	RestoreSeconds  float64 `json:"restore_seconds"`
	RestoredRecords int64   `json:"restored_records"`
	Full            int     `json:"full_restores"`
	// OthersPauseSeconds is the longest time a partition that did not
	// move made no progress, from the kill until every partition had
	// resumed.
	OthersPauseSeconds float64 `json:"others_pause_seconds"`
}

func (r *failoverResult) summary() string {
	return fmt.Sprintf("failover of %v (%d keys, %s, round %d): moved partitions resumed after %.2fs at worst; restored %d records (%d full) in %.2fs at worst; the other partitions paused %.2fs at worst",
		r.Moved, r.Keys, r.Variant, r.Round, r.ResumeSeconds, r.RestoredRecords, r.Full, r.RestoreSeconds, r.OthersPauseSeconds)
}

// failoverTopology is the instances' application: each input record is
// written to the store under its key, so that processing goes on changing
// the store the changelog was loaded into.
func failoverTopology(input string) *processor.Topology {
	t := processor.NewTopology()
	src := t.AddSource("in", input, serde.Bytes(), serde.Bytes())
	put := t.AddProcessor("put", func() processor.Processor[[]byte, []byte, []byte, []byte] { return &putter{} }, src)
	t.AddStore(restoreStore, put)
	t.KeyedByPartition(restoreStore.Name())
	return t
}

type putter struct {
	store processor.KeyValueStore[[]byte, []byte]
}

func (p *putter) Init(ctx processor.Context[[]byte, []byte]) error {
	s, err := restoreStore.Open(ctx)
	p.store = s
	return err
}

func (p *putter) Process(_ processor.Context[[]byte, []byte], rec processor.Record[[]byte, []byte]) error {
	return p.store.Put(rec.Key, rec.Value)
}

func (p *putter) Close() error { return nil }

// failoverConfig is an instance's configuration.
func failoverConfig(fc failoverChild, logger *slog.Logger) weir.Config {
	return weir.Config{
		Logger:           logger,
		ApplicationID:    fc.App,
		Brokers:          fc.Brokers,
		StateDir:         fc.StateDir,
		Guarantee:        weir.ExactlyOnce,
		CommitInterval:   100 * time.Millisecond,
		Consumer:         weir.ConsumerConfig{SessionTimeout: failoverSessionTimeout, HeartbeatInterval: 500 * time.Millisecond},
		StandbyReplicas:  fc.Standbys,
		StaticMembership: fc.Static,
	}
}

// restoreReporter prints the end of every restore as a failoverReport.
type restoreReporter struct {
	mu    sync.Mutex
	enc   *json.Encoder
	start map[int32]time.Time
	full  map[int32]bool
}

func (r *restoreReporter) OnRestoreStart(_ string, p int32, _, _ int64, full bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.start[p], r.full[p] = time.Now(), full
}

func (r *restoreReporter) OnBatchRestored(string, int32, int64, int) {}

func (r *restoreReporter) OnRestoreEnd(_ string, p int32, records int64, took time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	_ = r.enc.Encode(failoverReport{Restore: &failoverRestore{Partition: p, Full: r.full[p], Records: records, Seconds: took.Seconds()}})
}

// runFailoverChild runs one instance until SIGTERM; see failoverReport.
func runFailoverChild() int {
	var fc failoverChild
	if err := json.Unmarshal([]byte(os.Getenv(failoverChildEnv)), &fc); err != nil {
		fmt.Fprintf(os.Stderr, "failover instance: bad %s: %v\n", failoverChildEnv, err)
		return 2
	}
	var mu sync.Mutex
	enc := json.NewEncoder(os.Stdout)
	rec := &restoreReporter{enc: enc, start: map[int32]time.Time{}, full: map[int32]bool{}}
	reg := prometheus.NewRegistry()
	level := slog.LevelInfo
	if os.Getenv("WEIR_BENCH_FAILOVER_LOGS") == "debug" {
		level = slog.LevelDebug
	}
	cfg := failoverConfig(fc, slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})))
	cfg.Stores.RestoreListener = rec
	cfg.Metrics = reg
	app, err := weir.New(failoverTopology(fc.Input), cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "failover instance:", err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	go func() {
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for ; ctx.Err() == nil; <-tick.C {
			r := failoverReport{Tasks: []string{}, Lags: map[string]int64{}}
			for _, ti := range app.Tasks() {
				r.Tasks = append(r.Tasks, ti.ID)
				if ti.Restoring {
					r.Restoring++
				}
			}
			if fams, err := reg.Gather(); err == nil {
				for _, f := range fams {
					if f.GetName() != "weir_standby_lag_records" {
						continue
					}
					for _, m := range f.GetMetric() {
						var part string
						for _, l := range m.GetLabel() {
							if l.GetName() == "partition" {
								part = l.GetValue()
							}
						}
						r.Lags[part] = int64(m.GetGauge().GetValue())
					}
				}
			}
			mu.Lock()
			_ = enc.Encode(r)
			mu.Unlock()
		}
	}()
	errc := make(chan error, 1)
	go func() { errc <- app.Run(context.Background()) }()
	select {
	case <-ctx.Done():
		// Stopped by the bench: a static instance leaves the group, so
		// that the group can be deleted at the end.
		if fc.Static {
			lctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := app.Leave(lctx); err != nil {
				fmt.Fprintln(os.Stderr, "failover instance: Leave:", err)
			}
		} else {
			_ = app.Close()
		}
	case err := <-errc:
		errc <- err // Run ended by itself
	}
	if err := <-errc; err != nil {
		fmt.Fprintln(os.Stderr, "failover instance:", err)
		return 1
	}
	return 0
}

// failoverProcess is one running instance, seen from the bench.
type failoverProcess struct {
	cmd  *exec.Cmd
	done chan struct{}

	mu       sync.Mutex
	last     failoverReport
	restores []failoverRestore
}

func startFailoverProcess(fc failoverChild, stderr io.Writer) (*failoverProcess, error) {
	js, err := json.Marshal(fc)
	if err != nil {
		return nil, err
	}
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), failoverChildEnv+"="+string(js))
	cmd.Stderr = stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &failoverProcess{cmd: cmd, done: make(chan struct{})}
	go func() {
		defer close(p.done)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			var r failoverReport
			if json.Unmarshal(sc.Bytes(), &r) != nil {
				continue
			}
			p.mu.Lock()
			if r.Restore != nil {
				p.restores = append(p.restores, *r.Restore)
			} else {
				p.last = r
			}
			p.mu.Unlock()
		}
		_ = cmd.Wait()
	}()
	return p, nil
}

func (p *failoverProcess) report() (failoverReport, []failoverRestore) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.last, slices.Clone(p.restores)
}

func (p *failoverProcess) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop ends the process: SIGTERM, then SIGKILL after a minute.
func (p *failoverProcess) stop() {
	if p.exited() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(time.Minute):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// runFailovers runs the failover workload: for each round, without and
// with one standby.
func runFailovers(ctx context.Context, o *options, c *cluster, prefix string, rep *report, progress func(string, ...any)) error {
	for round := 1; round <= o.rounds; round++ {
		for i, v := range failoverVariants() {
			res, err := runFailover(ctx, o, c, fmt.Sprintf("%s-failover-v%d-r%d", prefix, i, round), v, round, progress)
			if err != nil {
				return err
			}
			rep.Failovers = append(rep.Failovers, res)
			progress("%s", res.summary())
		}
	}
	return nil
}

func runFailover(ctx context.Context, o *options, c *cluster, app string, v failoverVariant, round int, progress func(string, ...any)) (*failoverResult, error) {
	standbys := v.standbys
	res := &failoverResult{Keys: o.failoverKeys, Variant: v.String(), Standbys: standbys, Round: round}
	input := app + "-in"
	changelog := app + "-" + restoreStore.Name() + "-changelog"
	if err := c.createTopicConfig(ctx, changelog, o.partitions, map[string]*string{"cleanup.policy": new("compact")}); err != nil {
		return nil, err
	}
	if err := c.createTopic(ctx, input, o.partitions); err != nil {
		return nil, err
	}
	c.addGroup(app)
	c.addTopic(topics.DescriptorTopic(app))
	if _, _, err := loadTopic(ctx, o, c, changelog, o.failoverKeys, "", fmt.Sprintf("load failover changelog %d", o.failoverKeys)); err != nil {
		return nil, err
	}
	logs, err := os.CreateTemp("", "weir-bench-failover-*.log")
	if err != nil {
		return nil, err
	}
	defer logs.Close()
	if os.Getenv("WEIR_BENCH_FAILOVER_LOGS") == "" {
		defer os.Remove(logs.Name())
	} else {
		progress("failover: the instances log to %s", logs.Name())
	}
	procs := make([]*failoverProcess, failoverInstances)
	dirs := make([]string, failoverInstances)
	defer func() {
		for _, p := range procs {
			if p != nil {
				p.stop()
			}
		}
	}()
	for i := range procs {
		dir, err := c.stateDir()
		if err != nil {
			return nil, err
		}
		dirs[i] = dir
		if procs[i], err = startFailoverProcess(failoverChild{Brokers: o.brokers, App: app, Input: input, StateDir: dir, Standbys: standbys, Static: v.static}, logs); err != nil {
			return nil, err
		}
	}
	failed := func() error {
		for i, p := range procs {
			if p.exited() && p.cmd.ProcessState != nil && p.cmd.ProcessState.ExitCode() != -1 {
				return fmt.Errorf("failover instance %d exited with code %d; instance logs in %s:\n%s", i, p.cmd.ProcessState.ExitCode(), logs.Name(), logTail(logs.Name(), 20))
			}
		}
		return nil
	}

	// Input trickles in from now on, to every partition.
	trickleCtx, stopTrickle := context.WithCancel(ctx)
	trickleErr := make(chan error, 1)
	go func() { trickleErr <- trickle(trickleCtx, o, input, o.failoverKeys) }()
	defer func() {
		stopTrickle()
		<-trickleErr
	}()

	// Every task restored and running, and every standby within a
	// second's input.
	progress("failover (%s): waiting for the %d instances to restore %d keys", v, failoverInstances, o.failoverKeys)
	err = poll(ctx, "failover: waiting for every task and standby", time.Now(), o.timeout, func() (bool, string, error) {
		if err := failed(); err != nil {
			return false, "", err
		}
		tasks, caught, idle := 0, 0, 0
		for _, p := range procs {
			r, _ := p.report()
			tasks += len(r.Tasks) - r.Restoring
			if len(r.Tasks) == 0 {
				idle++ // not joined yet, or the group has not settled
			}
			for _, lag := range r.Lags {
				if lag < failoverTrickle {
					caught++
				}
			}
		}
		want := 0
		if standbys > 0 {
			want = int(o.partitions)
		}
		return tasks == int(o.partitions) && idle == 0 && caught == want, fmt.Sprintf("%d tasks restored and running, %d instances without tasks, %d of %d standbys caught up", tasks, idle, caught, want), nil
	})
	if err != nil {
		return nil, err
	}
	victim := -1
	for i, p := range procs {
		if r, _ := p.report(); slices.Contains(r.Tasks, "0_0") {
			victim, res.Moved = i, r.Tasks
		}
	}
	if victim < 0 {
		return nil, fmt.Errorf("failover: no instance runs task 0_0")
	}
	moved := map[int32]bool{}
	for _, id := range res.Moved {
		p, err := strconv.Atoi(strings.TrimPrefix(id, "0_"))
		if err != nil {
			return nil, fmt.Errorf("failover: task id %q: %w", id, err)
		}
		moved[int32(p)] = true
	}
	before := make([]int, len(procs))
	for i, p := range procs {
		_, rs := p.report()
		before[i] = len(rs)
	}
	parts := make([]int32, o.partitions)
	for i := range parts {
		parts[i] = int32(i)
	}
	committed := func() (map[int32]int64, error) {
		resp, err := c.admin.ListConsumerGroupOffsets(app, map[string][]int32{input: parts})
		if err != nil {
			return nil, err
		}
		out := map[int32]int64{}
		for p, b := range resp.Blocks[input] {
			out[p] = b.Offset
		}
		return out, nil
	}
	last, err := committed()
	if err != nil {
		return nil, err
	}
	lastMove := map[int32]time.Time{}
	killed := time.Now()
	for _, p := range parts {
		lastMove[p] = killed
	}
	if err := procs[victim].cmd.Process.Signal(syscall.SIGKILL); err != nil {
		return nil, err
	}
	<-procs[victim].done
	if v.restart {
		// Started again at once, as a supervisor would, on its state.
		if procs[victim], err = startFailoverProcess(failoverChild{Brokers: o.brokers, App: app, Input: input, StateDir: dirs[victim], Standbys: standbys, Static: v.static}, logs); err != nil {
			return nil, err
		}
		before[victim] = 0
	}
	resumed := map[int32]time.Duration{}
	var othersPause time.Duration
	err = poll(ctx, "failover: waiting for every partition to commit again", killed, o.timeout, func() (bool, string, error) {
		now, err := committed()
		if err != nil {
			return false, "", err
		}
		t := time.Now()
		for _, p := range parts {
			if now[p] > last[p] {
				if moved[p] {
					if _, ok := resumed[p]; !ok {
						resumed[p] = t.Sub(killed)
					}
				} else {
					othersPause = max(othersPause, t.Sub(lastMove[p]))
				}
				last[p], lastMove[p] = now[p], t
			}
		}
		return len(resumed) == len(moved), fmt.Sprintf("%d of %d moved partitions resumed", len(resumed), len(moved)), nil
	})
	if err != nil {
		return nil, err
	}
	for _, d := range resumed {
		res.ResumeSeconds = max(res.ResumeSeconds, d.Seconds())
	}
	res.OthersPauseSeconds = othersPause.Seconds()
	for i, p := range procs {
		if i == victim && !v.restart {
			continue
		}
		_, rs := p.report()
		for _, r := range rs[before[i]:] {
			if !moved[r.Partition] {
				continue
			}
			res.RestoredRecords += r.Records
			res.RestoreSeconds = max(res.RestoreSeconds, r.Seconds)
			if r.Full {
				res.Full++
			}
		}
	}
	return res, nil
}

// trickle writes failoverTrickle records per second to input, spread over
// its partitions by key, until ctx ends.
func trickle(ctx context.Context, o *options, input string, keys int64) error {
	sc := saramaConfig("weir-bench-trickle")
	sc.Producer.Partitioner = sarama.NewMurmur2Partitioner
	sc.Producer.Return.Successes = false
	p, err := sarama.NewAsyncProducer(o.brokers, sc)
	if err != nil {
		return err
	}
	defer p.AsyncClose()
	go func() {
		for range p.Errors() {
		}
	}()
	const tick = 20 * time.Millisecond
	per := failoverTrickle * int(tick) / int(time.Second)
	tk := time.NewTicker(tick)
	defer tk.Stop()
	value := sarama.ByteEncoder(recordValue(o.valueSize))
	var i int64
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tk.C:
		}
		for range per {
			p.Input() <- &sarama.ProducerMessage{Topic: input, Key: sarama.ByteEncoder(recordKey(i % keys)), Value: value}
			i += 7919 // a prime stride: the keys spread over the partitions
		}
	}
}

// logTail returns the last n lines of a file.
func logTail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(%v)", err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

func (r *report) writeFailoverTable(w io.Writer) error {
	fmt.Fprintf(w, "\nfailovers (%d instances, exactly once, session timeout %v, %d input records/s; the instance running task 0_0 killed with SIGKILL):\n", failoverInstances, failoverSessionTimeout, failoverTrickle)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "keys\tvariant\tround\tmoved tasks\tresume s\trestored records\tfull restores\trestore s\tothers' pause s\t\n")
	for _, f := range r.Failovers {
		fmt.Fprintf(tw, "%d\t%s\t%d\t%s\t%.2f\t%d\t%d\t%.2f\t%.2f\t\n", f.Keys, f.Variant, f.Round, strings.Join(f.Moved, " "),
			f.ResumeSeconds, f.RestoredRecords, f.Full, f.RestoreSeconds, f.OthersPauseSeconds)
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("writing table: %w", err)
	}
	_, err := fmt.Fprintln(w, "\nvariant: no standby, 1 standby = the killed instance stays down; restarted = started again at once on its state directory; static = with Config.StaticMembership on every instance. resume s = the longest time a moved partition's committed offset did not move after the kill (session timeout, rebalance, restore, first commit); restored records, full restores and restore s = the new owners' restores of the moved tasks (restore s the longest); others' pause s = the longest time a partition that did not move went without a commit, until every moved one had resumed.")
	if err != nil {
		return fmt.Errorf("writing table: %w", err)
	}
	return nil
}
