package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/kstream"
	"github.com/weirstream/weir/serde"
	"github.com/weirstream/weir/weirtest/kafka"
)

// standbyChildEnv holds, as JSON, the standbyChildConfig of a test binary
// that must run one counting instance instead of tests (runStandbyChild).
const standbyChildEnv = "WEIR_IT_STANDBY_CHILD"

type standbyChildConfig struct {
	Brokers  []string
	App      string
	In, Out  string
	StateDir string
	Standbys int
	// SessionTimeout is Consumer.SessionTimeout; 0 is 6 s.
	SessionTimeout time.Duration
}

// standbyReport is a line a standby child prints on stdout: its tasks and
// standby lags every 100 ms, or one restore it ran.
type standbyReport struct {
	Tasks []string `json:"tasks,omitempty"`
	// Lags maps each standby store partition ("counts/3") to its lag.
	Lags    map[string]int64 `json:"lags,omitempty"`
	Restore *restoreReport   `json:"restore,omitempty"`
}

type restoreReport struct {
	Partition int32 `json:"partition"`
	Full      bool  `json:"full"`
	From, End int64
	Records   int64 `json:"records"`
}

// restorePrinter is a weir.RestoreListener printing every restore's end.
type restorePrinter struct {
	mu    sync.Mutex
	enc   *json.Encoder
	start map[int32]restoreReport
}

func (p *restorePrinter) OnRestoreStart(_ string, partition int32, from, end int64, full bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.start[partition] = restoreReport{Partition: partition, Full: full, From: from, End: end}
}

func (p *restorePrinter) OnBatchRestored(string, int32, int64, int) {}

func (p *restorePrinter) OnRestoreEnd(_ string, partition int32, records int64, _ time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	r := p.start[partition]
	r.Records = records
	_ = p.enc.Encode(standbyReport{Restore: &r})
}

// runStandbyChild counts records per key (a DSL count into store
// "counts") under exactly once until SIGTERM, reporting on stdout.
func runStandbyChild() int {
	var cc standbyChildConfig
	if err := json.Unmarshal([]byte(os.Getenv(standbyChildEnv)), &cc); err != nil {
		fmt.Fprintf(os.Stderr, "standby child: bad %s: %v\n", standbyChildEnv, err)
		return 2
	}
	b := kstream.NewBuilder()
	b.Stream("in", cc.In, serde.String(), serde.String()).GroupByKey().Count("counts").ToStream().To(cc.Out, serde.String(), serde.Int64())
	var out sync.Mutex
	enc := json.NewEncoder(os.Stdout)
	reg := prometheus.NewRegistry()
	session := 6 * time.Second
	if cc.SessionTimeout > 0 {
		session = cc.SessionTimeout
	}
	app, err := weir.New(b, weir.Config{
		Logger:          slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})),
		ApplicationID:   cc.App,
		Brokers:         cc.Brokers,
		StateDir:        cc.StateDir,
		Guarantee:       weir.ExactlyOnce,
		CommitInterval:  100 * time.Millisecond,
		Consumer:        weir.ConsumerConfig{SessionTimeout: session, HeartbeatInterval: 500 * time.Millisecond},
		StandbyReplicas: cc.Standbys,
		Metrics:         reg,
		Stores:          weir.StoresConfig{RestoreListener: &restorePrinter{enc: enc, start: map[int32]restoreReport{}}},
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "standby child: weir.New:", err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	go func() {
		for {
			rep := standbyReport{Tasks: []string{}, Lags: map[string]int64{}}
			for _, ti := range app.Tasks() {
				rep.Tasks = append(rep.Tasks, ti.ID)
			}
			rep.Lags, _ = standbyLags(reg)
			out.Lock()
			_ = enc.Encode(rep)
			out.Unlock()
			if !pause(ctx, 100*time.Millisecond) {
				return
			}
		}
	}()
	if err := app.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "standby child: Run:", err)
		return 1
	}
	return 0
}

// standbyLags returns weir_standby_lag_records of reg by "store/partition".
func standbyLags(reg *prometheus.Registry) (map[string]int64, error) {
	fams, err := reg.Gather()
	if err != nil {
		return nil, err
	}
	lags := map[string]int64{}
	for _, f := range fams {
		if f.GetName() != "weir_standby_lag_records" {
			continue
		}
		for _, m := range f.GetMetric() {
			var store, part string
			for _, l := range m.GetLabel() {
				switch l.GetName() {
				case "store":
					store = l.GetValue()
				case "partition":
					part = l.GetValue()
				}
			}
			lags[store+"/"+part] = int64(m.GetGauge().GetValue())
		}
	}
	return lags, nil
}

// pause waits d, or less if ctx ends first; it reports whether ctx is
// still live.
func pause(ctx context.Context, d time.Duration) bool {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-timer.C:
		return true
	}
}

// standbyChild is one instance process of TestStandbyFailoverAfterKill9.
type standbyChild struct {
	cmd  *exec.Cmd
	log  string
	done chan struct{}

	mu       sync.Mutex
	last     standbyReport
	restores []restoreReport
}

func startStandbyChild(t *testing.T, cc standbyChildConfig, log string) *standbyChild {
	t.Helper()
	js, err := json.Marshal(cc)
	if err != nil {
		t.Fatal(err)
	}
	logFile, err := os.Create(log)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), standbyChildEnv+"="+string(js))
	cmd.Stderr = logFile
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ch := &standbyChild{cmd: cmd, log: log, done: make(chan struct{})}
	go func() {
		defer close(ch.done)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var r standbyReport
			if json.Unmarshal(sc.Bytes(), &r) != nil {
				continue
			}
			ch.mu.Lock()
			if r.Restore != nil {
				ch.restores = append(ch.restores, *r.Restore)
			} else {
				ch.last = r
			}
			ch.mu.Unlock()
		}
		_ = cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-ch.done
		if t.Failed() {
			t.Logf("last lines of %s:\n%s", filepath.Base(log), logTail(log, 30))
		}
	})
	return ch
}

func (ch *standbyChild) report() (standbyReport, []restoreReport) {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	return ch.last, slices.Clone(ch.restores)
}

// TestStandbyFailoverAfterKill9 runs three instances with one standby per
// task, fills their count store (5,000 keys per partition), waits until
// every standby has caught up, and kills the instance owning task 0_0
// with SIGKILL. Its tasks must fail over to the instances holding their
// standbys: each restore starts from the standby's checkpoint, is not
// full and replays at most the standby's lag at the kill (none here: the
// input had stopped). Then more input flows, and the committed counts
// (read_committed) must be exact: 1 per key from the first part, 2 for
// the keys the second part repeats. Without standbys the same failover
// restores every partition in full (5,000 records each).
func TestStandbyFailoverAfterKill9(t *testing.T) {
	t.Parallel()
	c := kafka.Cluster(t)
	in, out, app := c.Name(t, "in"), c.Name(t, "out"), c.Name(t, "app")
	const partitions, keys = 6, 30_000
	c.CreateTopic(t, in, partitions, nil)
	c.CreateTopic(t, out, partitions, nil)
	key := func(i int) string { return fmt.Sprintf("key-%05d", i) }
	msgs := make([]*sarama.ProducerMessage, 0, keys)
	for i := range keys {
		msgs = append(msgs, &sarama.ProducerMessage{Topic: in, Key: sarama.StringEncoder(key(i)), Value: sarama.StringEncoder("v")})
	}
	kafka.Produce(t, c, msgs...)

	dir := t.TempDir()
	children := make([]*standbyChild, 3)
	for i := range children {
		cc := standbyChildConfig{Brokers: c.Brokers, App: app, In: in, Out: out, StateDir: filepath.Join(dir, "state-"+strconv.Itoa(i)), Standbys: 1}
		children[i] = startStandbyChild(t, cc, filepath.Join(dir, fmt.Sprintf("instance-%d.log", i)))
	}
	alive := func(chs []*standbyChild) {
		for i, ch := range chs {
			select {
			case <-ch.done:
				t.Fatalf("instance %d exited by itself; its log ends with:\n%s", i, logTail(ch.log, 30))
			default:
			}
		}
	}
	admin := c.Admin(t)
	// Every input record committed, every task running, every standby
	// caught up.
	kafka.Eventually(t, 2*time.Minute, 200*time.Millisecond, func() (bool, string) {
		alive(children)
		if lag := inputLag(t, c, admin, app, in); lag != 0 {
			return false, fmt.Sprintf("%d input records not committed", lag)
		}
		tasks, standbys := 0, 0
		for _, ch := range children {
			r, _ := ch.report()
			tasks += len(r.Tasks)
			for sp, lag := range r.Lags {
				if lag != 0 {
					return false, fmt.Sprintf("standby %s is %d records behind", sp, lag)
				}
				standbys++
			}
		}
		return tasks == partitions && standbys == partitions, fmt.Sprintf("%d tasks running, %d standbys caught up; want %d of each", tasks, standbys, partitions)
	})
	victim := -1
	for i, ch := range children {
		if r, _ := ch.report(); slices.Contains(r.Tasks, "0_0") {
			victim = i
		}
	}
	if victim < 0 {
		t.Fatal("no instance reports task 0_0")
	}
	vr, _ := children[victim].report()
	moved := vr.Tasks
	var before [3]int
	for i, ch := range children {
		_, rs := ch.report()
		before[i] = len(rs)
	}
	if err := children[victim].cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-children[victim].done
	killed := time.Now()
	survivors := slices.Delete(slices.Clone(children), victim, victim+1)
	t.Logf("killed instance %d (tasks %v)", victim, moved)

	// The survivors take the tasks over; each moved task's restore
	// replays nothing.
	var resumed time.Duration
	kafka.Eventually(t, 2*time.Minute, 100*time.Millisecond, func() (bool, string) {
		alive(survivors)
		var running []string
		for _, ch := range survivors {
			r, _ := ch.report()
			running = append(running, r.Tasks...)
		}
		if len(running) != partitions {
			return false, fmt.Sprintf("survivors run %v", running)
		}
		resumed = time.Since(killed)
		return true, ""
	})
	t.Logf("the survivors ran every task %.1f s after the kill", resumed.Seconds())
	restored := map[int32]restoreReport{}
	for i, ch := range children {
		if i == victim {
			continue
		}
		_, rs := ch.report()
		for _, r := range rs[before[i]:] {
			restored[r.Partition] = r
		}
	}
	for _, id := range moved {
		p, err := strconv.Atoi(strings.TrimPrefix(id, "0_"))
		if err != nil {
			t.Fatalf("task id %q: %v", id, err)
		}
		r, ok := restored[int32(p)]
		switch {
		case !ok:
			t.Errorf("task %s moved, but no survivor reports its restore (restores: %v)", id, restored)
		case r.Full || r.Records > 0:
			t.Errorf("task %s: the new owner restored %d records (full %v, from %d to %d); its standby had caught up, so nothing was left to restore", id, r.Records, r.Full, r.From, r.End)
		default:
			t.Logf("task %s: restored from %d to %d, %d records", id, r.From, r.End, r.Records)
		}
	}

	// The second part: every third key once more.
	var more []*sarama.ProducerMessage
	for i := 0; i < keys; i += 3 {
		more = append(more, &sarama.ProducerMessage{Topic: in, Key: sarama.StringEncoder(key(i)), Value: sarama.StringEncoder("v")})
	}
	kafka.Produce(t, c, more...)
	want := map[string]int64{}
	for i := range keys {
		want[key(i)] = 1
		if i%3 == 0 {
			want[key(i)] = 2
		}
	}
	readExactCounts(t, c, out, want)
}

// TestRestartAfterKill9RemovesItsPredecessor: of two instances with a 45 s
// session timeout (dynamic membership), one is killed with SIGKILL and
// started again at once on its state directory. Its threads remove the
// members their previous incarnation left in the group, so the rebalance
// its join starts does not wait for their sessions to expire: both
// instances run tasks again long before the session timeout.
func TestRestartAfterKill9RemovesItsPredecessor(t *testing.T) {
	t.Parallel()
	c := kafka.Cluster(t)
	in, out, app := c.Name(t, "in"), c.Name(t, "out"), c.Name(t, "app")
	const partitions = 4
	c.CreateTopic(t, in, partitions, nil)
	c.CreateTopic(t, out, partitions, nil)
	dir := t.TempDir()
	cfg := func(i int) standbyChildConfig {
		return standbyChildConfig{Brokers: c.Brokers, App: app, In: in, Out: out, StateDir: filepath.Join(dir, "state-"+strconv.Itoa(i)), SessionTimeout: 45 * time.Second}
	}
	logs := []string{filepath.Join(dir, "instance-0.log"), filepath.Join(dir, "instance-1.log")}
	children := []*standbyChild{startStandbyChild(t, cfg(0), logs[0]), startStandbyChild(t, cfg(1), logs[1])}
	bothRun := func() (bool, string) {
		var n []int
		for _, ch := range children {
			r, _ := ch.report()
			n = append(n, len(r.Tasks))
		}
		return n[0] > 0 && n[1] > 0 && n[0]+n[1] == partitions, fmt.Sprintf("tasks per instance %v", n)
	}
	kafka.Eventually(t, time.Minute, 100*time.Millisecond, bothRun)
	if err := children[1].cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-children[1].done
	killed := time.Now()
	children[1] = startStandbyChild(t, cfg(1), logs[1]+".2")
	// 20 s: well below the 45 s a rebalance would wait for the dead
	// members.
	kafka.Eventually(t, 20*time.Second, 100*time.Millisecond, bothRun)
	t.Logf("both instances ran tasks again %.1f s after the kill (session timeout 45 s)", time.Since(killed).Seconds())
	b, err := os.ReadFile(logs[1] + ".2")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "removed the previous incarnation's member from the group") {
		t.Errorf("the restarted instance did not log removing its predecessor's member:\n%s", logTail(logs[1]+".2", 20))
	}
}
