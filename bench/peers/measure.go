package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/IBM/sarama"
)

// result is one measured run: a peer running a workload under a
// guarantee until its output held every final count.
type result struct {
	workload, peer, guarantee, unit string
	round                           int // from 1
	// keys is the workload's point on its key space (workload.keys).
	keys int
	// cache is the peer's record cache in bytes, noCache for goka.
	cache  int64
	inputs int
	// Time from the process's start, and from its consumer group's first
	// settled state (members assigned), until the output held every final
	// count.
	total, steady time.Duration
	cpu           time.Duration // the process's user+system CPU until then
	// brokerCPU is the local broker's CPU time over the same span (zero
	// when not known): what the peer's traffic cost the broker, which
	// shares the machine's cores.
	brokerCPU time.Duration
	peakRSS   int64 // the process's VmHWM until then, bytes
	// idleRSS is, for a restore, the RSS of the same peer started again
	// on the restored state once it has processed one record per
	// partition: what it holds idle with the store (0 unknown).
	idleRSS int64
	// commits is how often the peer committed, as it reports at exit
	// (Kafka Streams' commit-total, weir's commit count); -1 unknown.
	commits int64
	outputs int // output records read (read_committed)
}

func (r result) rate() float64 {
	if r.steady <= 0 {
		return 0
	}
	return float64(r.inputs) / r.steady.Seconds()
}

func (r result) summary() string {
	return fmt.Sprintf("%s %s keys %s %s cache %s: %.0f %s/s (%.1f s from start), %.1f CPU s, broker %.1f CPU s, peak RSS %d MiB, %d output records, %d commits",
		r.workload, shortCount(r.keys), r.peer, r.guarantee, cacheLabel(r.cache), r.rate(), r.unit, r.total.Seconds(), r.cpu.Seconds(), r.brokerCPU.Seconds(), r.peakRSS>>20, r.outputs, r.commits)
}

// noCache is the cache of a peer that has none (goka): every update is
// forwarded, as with a cache of 0, but the peer runs once, not per size.
const noCache = -1

// newResult is the result of running peer on w under guarantee with a
// record cache of cache bytes, its figures yet to be measured.
func newResult(w *workload, peer, guarantee string, cache int64) result {
	return result{workload: w.name, peer: peer, guarantee: guarantee, unit: w.unit, keys: w.keys, cache: cache, inputs: w.inputs, commits: -1}
}

// argsFor are the arguments of peer's process on one run.
func argsFor(o *options, workload, app, input, output, guarantee, dir string, cache int64) peerArgs {
	return peerArgs{workload, strings.Join(o.brokers, ","), app, input, output, guarantee, dir, o.commit, max(cache, 0)}
}

// measure starts peer on w's input with a fresh application id and output
// topic and a record cache of cache bytes, reads the output
// (read_committed) until every key has its final count, reads the
// process's CPU and peak RSS, stops it with SIGTERM and checks the
// output: every key's last count exact, and under exactly once no count
// above it at any time (a duplicate). With a cache of 0 the output must
// hold every update (w.updates records at least), and under exactly once
// each key's updates in order, each once.
func measure(ctx context.Context, o *options, c *cluster, self, peer, guarantee string, cache int64, w *workload, input, app string) (result, error) {
	r := newResult(w, peer, guarantee, cache)
	output := app + "-out"
	if err := c.createTopic(output, o.partitions); err != nil {
		return r, err
	}
	dir, err := os.MkdirTemp("", "weir-peers-")
	if err != nil {
		return r, err
	}
	defer os.RemoveAll(dir)
	reader, err := c.newReader(output, o.partitions)
	if err != nil {
		return r, err
	}
	defer reader.close()

	brokerBefore := brokerCPU(o)
	start := time.Now()
	p, err := startPeer(o, self, peer, argsFor(o, w.name, app, input, output, guarantee, dir, cache))
	if err != nil {
		return r, err
	}
	// When the peer's group has settled: the rate counts from there, not
	// from the process's start (a JVM's start, a first join).
	joined := make(chan time.Time, 1)
	joinCtx, stopJoin := context.WithCancel(ctx)
	defer stopJoin()
	go func() { joined <- c.waitStable(joinCtx, app) }()

	check := newOutputCheck(w, guarantee, cache)
	var first time.Time
	err = readUntil(ctx, reader, o.timeout, p, func(m *sarama.ConsumerMessage) (bool, error) {
		if first.IsZero() {
			first = time.Now()
		}
		done, err := check.add(string(m.Key), m.Value)
		if err != nil {
			err = fmt.Errorf("output %s/%d@%d: %w", output, m.Partition, m.Offset, err)
		}
		return done, err
	})
	r.outputs = check.outputs
	if err != nil {
		_ = p.stop()
		return r, fmt.Errorf("%d of %d keys reached their count: %w", check.reached, len(w.want), err)
	}
	done := time.Now()
	r.brokerCPU = brokerCPU(o) - brokerBefore
	stopJoin()
	from := <-joined
	if from.IsZero() || from.After(first) {
		from = first // the group settled after output appeared: count from there
	}
	r.total, r.steady = done.Sub(start), done.Sub(from)
	r.cpu, r.peakRSS, err = usage(p.cmd.Process.Pid)
	if err != nil {
		_ = p.stop()
		return r, err
	}
	if err := p.stop(); err != nil && peer != "kstreams" {
		// The JVM exits with 143 on SIGTERM; the Go peers exit cleanly.
		return r, fmt.Errorf("%s: %v: %s", peer, err, tail(p.out.String()))
	}
	r.commits = reportedCommits(p.out.String())
	return r, check.err()
}

// outputCheck follows a run's output, record by record, against its
// workload's final counts.
type outputCheck struct {
	w         *workload
	guarantee string
	cache     int64
	last      map[string]int64 // every key's latest value
	reached   int              // keys whose latest value is their final count
	outputs   int
	// over holds counts above their key's final one, skipped updates a
	// run without a cache under exactly once wrote out of order, twice
	// or not at all (the first five of each).
	over, skipped []string
}

func newOutputCheck(w *workload, guarantee string, cache int64) *outputCheck {
	return &outputCheck{w: w, guarantee: guarantee, cache: cache, last: map[string]int64{}}
}

// add takes the next output record of a partition and reports whether
// every key now holds its final count. It fails on a record that is not
// a count of the input.
func (c *outputCheck) add(key string, value []byte) (bool, error) {
	c.outputs++
	n, ok := decodeCount(value)
	want, known := c.w.want[key]
	if !ok || !known {
		return false, fmt.Errorf("key %q, value %x: not a count of the input", key, value)
	}
	last := c.last[key]
	if n > want && len(c.over) < 5 {
		c.over = append(c.over, fmt.Sprintf("%s=%d (want %d)", key, n, want))
	}
	// Without a cache every update is forwarded: under exactly once a
	// key's outputs rank 1, 2, 3... (a key's records share a partition,
	// which keeps their order).
	if c.cache == 0 && c.guarantee == "exactly_once" && c.w.rank(n) != c.w.rank(last)+1 && len(c.skipped) < 5 {
		c.skipped = append(c.skipped, fmt.Sprintf("%s: %d after %d", key, n, last))
	}
	if last == want && n != want {
		c.reached--
	}
	if n == want && last != want {
		c.reached++
	}
	c.last[key] = n
	return c.reached == len(c.w.want), nil
}

// err reports what the output, read until every key held its final
// count, got wrong: a count above the input's under exactly once (a
// record counted twice) and, without a cache, fewer records than updates
// (each key's final count comes after its earlier ones, in its
// partition, so every update has been read by then) or, under exactly
// once, an update out of order, twice or missing.
func (c *outputCheck) err() error {
	var errs []error
	if len(c.over) > 0 && c.guarantee == "exactly_once" {
		errs = append(errs, fmt.Errorf("counts above the input's under exactly once (records counted twice): %v", c.over))
	}
	if c.cache == 0 && c.outputs < c.w.updates {
		errs = append(errs, fmt.Errorf("no record cache, yet %d output records for %d updates", c.outputs, c.w.updates))
	}
	if len(c.skipped) > 0 {
		errs = append(errs, fmt.Errorf("no record cache under exactly once, yet updates out of order, twice or missing: %v", c.skipped))
	}
	return errors.Join(errs...)
}

// usage returns a process's user+system CPU time and peak resident set
// (Linux /proc).
func usage(pid int) (time.Duration, int64, error) {
	stat, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0, 0, err
	}
	// Fields after the command name, which ends with the last ')'.
	fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
	if len(fields) < 13 {
		return 0, 0, fmt.Errorf("short /proc/%d/stat", pid)
	}
	utime, _ := strconv.ParseInt(fields[11], 10, 64)
	stime, _ := strconv.ParseInt(fields[12], 10, 64)
	const ticks = 100 // USER_HZ on Linux
	cpu := time.Duration(utime+stime) * time.Second / ticks
	rss, err := statusBytes(pid, "VmHWM")
	return cpu, rss, err
}

// statusBytes returns a size field of the process's /proc status, such as
// VmHWM (peak RSS) or VmRSS, in bytes.
func statusBytes(pid int, field string) (int64, error) {
	status, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(status)) {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("no %s in /proc/%d/status", field, pid)
}

// reportedCommits returns the commit count a stopped peer printed
// ("peer-commits N"), or -1.
func reportedCommits(out string) int64 {
	for line := range strings.Lines(out) {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "peer-commits "); ok {
			if n, err := strconv.ParseInt(rest, 10, 64); err == nil {
				return n
			}
		}
	}
	return -1
}

// brokerCPU returns the local broker's CPU time so far, or zero when its
// process is not known (or gone).
func brokerCPU(o *options) time.Duration {
	if o.brokerPID == 0 {
		return 0
	}
	cpu, _, err := usage(o.brokerPID)
	if err != nil {
		return 0
	}
	return cpu
}

// Bounds of waitBrokerQuiet: the broker counts as quiet once it used less
// than brokerQuietShare of a core over brokerQuietSpan; it is waited for
// brokerQuietMax at most.
const (
	brokerQuietShare = 0.10
	brokerQuietSpan  = time.Second
	brokerQuietMax   = 30 * time.Second
)

// waitBrokerQuiet waits, bounded, until the local broker is idle: after a
// run it goes on working for its peer (compacting changelogs, expiring
// transactional ids and group members), and that work would land on the
// cores of whichever peer runs next. It returns at once when the broker's
// process is not known, and how long it waited.
func waitBrokerQuiet(ctx context.Context, o *options) time.Duration {
	if o.brokerPID == 0 {
		return 0
	}
	start := time.Now()
	for time.Since(start) < brokerQuietMax {
		before := brokerCPU(o)
		select {
		case <-ctx.Done():
			return time.Since(start)
		case <-time.After(brokerQuietSpan):
		}
		if float64(brokerCPU(o)-before) < brokerQuietShare*float64(brokerQuietSpan) {
			break
		}
	}
	return time.Since(start)
}

// tail returns the end of a process's output, for errors.
func tail(s string) string {
	const n = 2000
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}

// measureRestore runs the count topology on w's input (distinct keys) until
// its store holds every key, stops it, deletes its state directory, writes
// one more record and starts it again on the same application id: the time
// from that start until the new record's count is in the output is the
// restore of the whole store from its changelog (and the process's start,
// which the other peer pays too). Its CPU and peak RSS are the restarted
// process's. The peer runs with a record cache of cache bytes throughout.
func measureRestore(ctx context.Context, o *options, c *cluster, self, peer, guarantee string, cache int64, w *workload, input, app string) (result, error) {
	r := newResult(w, peer, guarantee, cache)
	output := app + "-out"
	if err := c.createTopic(output, o.partitions); err != nil {
		return r, err
	}
	dir, err := os.MkdirTemp("", "weir-peers-")
	if err != nil {
		return r, err
	}
	defer os.RemoveAll(dir)
	args := argsFor(o, "count", app, input, output, guarantee, dir, cache)
	reader, err := c.newReader(output, o.partitions)
	if err != nil {
		return r, err
	}
	defer reader.close()

	// Build the store.
	first, err := startPeer(o, self, peer, args)
	if err != nil {
		return r, err
	}
	seen, left := make([]bool, w.keys), w.keys
	if err := readUntil(ctx, reader, o.timeout, first, func(m *sarama.ConsumerMessage) (bool, error) {
		if i, ok := restoreIndex(string(m.Key), w.keys); ok && !seen[i] {
			seen[i] = true
			left--
		}
		return left == 0, nil
	}); err != nil {
		_ = first.stop()
		return r, fmt.Errorf("building the store: %w", err)
	}
	if err := first.stop(); err != nil && peer != "kstreams" {
		return r, err
	}
	// Kafka Streams' members do not leave the group when they close: wait
	// out their session, so that the restart measures the restore and not
	// the wait for a dead member.
	if err := c.waitEmpty(ctx, app, 2*time.Minute); err != nil {
		return r, err
	}
	// Lose the state, add one record, restart.
	if err := os.RemoveAll(dir); err != nil {
		return r, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return r, err
	}
	// One new record per partition, so that the restart is done only when
	// every task has restored its part of the store and processed one. The
	// input is shared with the other peers and rounds, whose markers it
	// holds: each run's are its own (app), or a later run would count a
	// marker twice, already once in the store it built, and wait for a
	// count of 1 for ever.
	markers, err := produceMarkers(o, c, input, "restore-marker-"+app)
	if err != nil {
		return r, err
	}
	brokerBefore := brokerCPU(o)
	start := time.Now()
	second, err := startPeer(o, self, peer, args)
	if err != nil {
		return r, err
	}
	left = len(markers)
	if err := readUntil(ctx, reader, o.timeout, second, func(m *sarama.ConsumerMessage) (bool, error) {
		key := string(m.Key)
		if seen, marker := markers[key]; marker && !seen {
			if n, ok := decodeCount(m.Value); ok && n == 1 {
				markers[key] = true
				left--
			}
		}
		return left == 0, nil
	}); err != nil {
		_ = second.stop()
		return r, fmt.Errorf("restoring: %w", err)
	}
	done := time.Now()
	r.brokerCPU = brokerCPU(o) - brokerBefore
	r.total, r.steady = done.Sub(start), done.Sub(start)
	r.cpu, r.peakRSS, err = usage(second.cmd.Process.Pid)
	if err != nil {
		_ = second.stop()
		return r, err
	}
	if err := second.stop(); err != nil && peer != "kstreams" {
		return r, err
	}
	r.idleRSS, err = idleRSS(ctx, o, c, self, peer, args, reader, input, app)
	return r, err
}

// produceMarkers writes one record per partition of input, keyed
// "<prefix>-<partition>", and returns the keys, none seen yet.
func produceMarkers(o *options, c *cluster, input, prefix string) (map[string]bool, error) {
	markers := map[string]bool{}
	var msgs []*sarama.ProducerMessage
	for p := range o.partitions {
		key := fmt.Sprintf("%s-%d", prefix, p)
		markers[key] = false
		msgs = append(msgs, &sarama.ProducerMessage{Topic: input, Partition: p, Key: sarama.StringEncoder(key), Value: sarama.ByteEncoder(make([]byte, 100))})
	}
	return markers, c.produceTo(msgs)
}

// idleRSS starts peer again on the state its restore left, waits until it
// has counted one more record per partition (no restore is due: the state
// and its checkpoints are there), and returns its RSS then: the baseline
// that a restore's peak RSS is over.
func idleRSS(ctx context.Context, o *options, c *cluster, self, peer string, args peerArgs, reader *reader, input, app string) (int64, error) {
	if err := c.waitEmpty(ctx, app, 2*time.Minute); err != nil {
		return 0, err
	}
	markers, err := produceMarkers(o, c, input, "idle-marker-"+app)
	if err != nil {
		return 0, err
	}
	run, err := startPeer(o, self, peer, args)
	if err != nil {
		return 0, err
	}
	left := len(markers)
	if err := readUntil(ctx, reader, o.timeout, run, func(m *sarama.ConsumerMessage) (bool, error) {
		if seen, marker := markers[string(m.Key)]; marker && !seen {
			markers[string(m.Key)] = true
			left--
		}
		return left == 0, nil
	}); err != nil {
		_ = run.stop()
		return 0, fmt.Errorf("idle after the restore: %w", err)
	}
	rss, err := statusBytes(run.cmd.Process.Pid, "VmRSS")
	if err != nil {
		_ = run.stop()
		return 0, err
	}
	if err := run.stop(); err != nil && peer != "kstreams" {
		return 0, err
	}
	return rss, nil
}

// running is a peer process.
type running struct {
	peer   string
	cmd    *exec.Cmd
	out    *strings.Builder
	exited chan error
}

func startPeer(o *options, self, peer string, a peerArgs) (*running, error) {
	cmd, err := command(o, self, peer, a)
	if err != nil {
		return nil, err
	}
	p := &running{peer: peer, cmd: cmd, out: &strings.Builder{}, exited: make(chan error, 1)}
	var out io.Writer = p.out
	if os.Getenv("WEIR_PEERS_LOG") != "" {
		out = io.MultiWriter(p.out, os.Stderr) // the weir peer's log, as it runs
	}
	cmd.Stdout, cmd.Stderr = out, out // one writer: exec writes from one goroutine
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	go func() { p.exited <- cmd.Wait() }()
	return p, nil
}

// stop sends SIGTERM and waits up to 60 s, then kills.
func (p *running) stop() error {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-p.exited:
		return err
	case <-time.After(60 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
		return fmt.Errorf("%s did not stop within 60 s of SIGTERM", p.peer)
	}
}

// progressEvery is how often readUntil says it is still waiting.
const progressEvery = 15 * time.Second

// readUntil reads output records, passing each to done, until done says
// so or fails, the timeout passes or the peer exits. Every progressEvery
// it prints how many records it has read on standard error.
func readUntil(ctx context.Context, reader *reader, timeout time.Duration, p *running, done func(*sarama.ConsumerMessage) (bool, error)) error {
	started := time.Now()
	deadline := started.Add(timeout)
	lastReport, read := started, 0
	for {
		// A step can take minutes (building or restoring a large store):
		// say it is alive.
		if now := time.Now(); now.Sub(lastReport) >= progressEvery {
			lastReport = now
			fmt.Fprintf(os.Stderr, "peers: %s: %d output records read in %v, still waiting\n", p.peer, read, now.Sub(started).Round(time.Second))
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("not done within %v (last read error: %v); %s said: %s", timeout, reader.lastErr, p.peer, tail(p.out.String()))
		}
		select {
		case err := <-p.exited:
			return fmt.Errorf("%s exited early (%v): %s", p.peer, err, tail(p.out.String()))
		default:
		}
		msgs, err := reader.poll(200 * time.Millisecond)
		if err != nil {
			return err
		}
		read += len(msgs)
		for _, m := range msgs {
			if ok, err := done(m); err != nil || ok {
				return err
			}
		}
	}
}
