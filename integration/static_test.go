package integration

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/kstream"
	"github.com/weirstream/weir/serde"
	"github.com/weirstream/weir/weirtest/kafka"
)

// restoreCounter counts the records restored and the full restores that
// had records to read: a full restore of a changelog still empty (a task
// moved before its first commit) costs nothing, and is not counted.
type restoreCounter struct {
	records, full atomic.Int64
	mu            sync.Mutex
	fulls         []string // when and which, for the failure message
}

func (r *restoreCounter) OnRestoreStart(_ string, p int32, from, end int64, full bool) {
	if full && end > from {
		r.full.Add(1)
		r.mu.Lock()
		r.fulls = append(r.fulls, fmt.Sprintf("partition %d from %d to %d at %s", p, from, end, time.Now().Format("15:04:05.000")))
		r.mu.Unlock()
	}
}
func (r *restoreCounter) OnBatchRestored(string, int32, int64, int) {}
func (r *restoreCounter) OnRestoreEnd(_ string, _ int32, records int64, _ time.Duration) {
	r.records.Add(records)
}

// TestRollingRestartWithStaticMembership restarts three exactly-once
// instances with static membership (two with StaticMembership, ids from
// their process ids, one with StaticMemberID) one after the other while input flows,
// each stopped with Close and started again on its state directory within
// the session timeout. The instances that keep running must receive no
// new assignment (the group does not rebalance), a restarted instance
// restores at most its stores' tails (never in full), and the committed
// counts stay exact.
func TestRollingRestartWithStaticMembership(t *testing.T) {
	t.Parallel()
	c := kafka.Cluster(t)
	const partitions, keys = 6, 300
	in, out, app, b := countApp(t, c, partitions)

	type slot struct {
		cfg  weir.Config
		reg  *prometheus.Registry
		inst *instance
	}
	restores := &restoreCounter{}
	slots := make([]*slot, 3)
	startSlot := func(s *slot) {
		s.reg = prometheus.NewRegistry()
		s.cfg.Metrics = s.reg
		s.inst = start(t, b, s.cfg)
	}
	for i := range slots {
		cfg := baseConfig(c, app, t)
		cfg.Guarantee = weir.ExactlyOnce
		cfg.CommitInterval = 100 * time.Millisecond
		if i < 2 {
			cfg.StaticMembership = true // ids from the process id
		} else {
			cfg.StaticMemberID = fmt.Sprintf("instance-%d", i)
		}
		cfg.Consumer = weir.ConsumerConfig{SessionTimeout: 30 * time.Second, HeartbeatInterval: time.Second}
		cfg.Stores.RestoreListener = restores
		slots[i] = &slot{cfg: cfg}
		startSlot(slots[i])
	}
	running := func() bool {
		n := 0
		for _, s := range slots {
			for _, ti := range s.inst.app.Tasks() {
				if !ti.Restoring {
					n++
				}
			}
		}
		return n == partitions
	}
	quiet := settled(t, c, app, in, partitions)
	kafka.Eventually(t, 2*time.Minute, 100*time.Millisecond, func() (bool, string) {
		for _, s := range slots {
			if len(s.inst.app.Tasks()) == 0 {
				return false, "an instance has no tasks"
			}
		}
		if !running() {
			return false, "not every task runs"
		}
		return quiet()
	})

	// Input flows throughout: key i%keys, so every key's count is known.
	sent, stopInput := feedKeys(t, c, in, keys)
	defer stopInput()

	rebalances := func(s *slot) float64 {
		return counterSum(t, []*prometheus.Registry{s.reg}, "weir_rebalances_total", nil)
	}
	fullBefore := restores.full.Load()
	for i, s := range slots {
		others := map[int]float64{}
		for j, o := range slots {
			if j != i {
				others[j] = rebalances(o)
			}
		}
		if err := s.inst.stop(t); err != nil {
			t.Fatalf("instance %d: Run: %v", i, err)
		}
		startSlot(s)
		kafka.Eventually(t, time.Minute, 100*time.Millisecond, func() (bool, string) {
			return len(s.inst.app.Tasks()) > 0 && running(), fmt.Sprintf("instance %d not back with its tasks", i)
		})
		for j, before := range others {
			if after := rebalances(slots[j]); after != before {
				t.Errorf("restarting instance %d gave instance %d %v new assignments: the group rebalanced", i, j, after-before)
			}
		}
	}
	stopInput()
	if n := restores.full.Load() - fullBefore; n != 0 {
		t.Errorf("%d full restores during the rolling restart, want none (each instance kept its state directory)", n)
	}
	t.Logf("the restarts restored %d records in all", restores.records.Load())

	// Exact counts: every key's last committed count is its records.
	total := sent()
	want := map[string]int64{}
	for i := range total {
		want[fmt.Sprintf("k%03d", i%keys)]++
	}
	readExactCounts(t, c, out, want)
}

// TestLeaveHandsTasksOverAtOnce: of two instances with static membership
// and a 45 s session timeout, one stops with App.Leave; the other runs
// every task long before the session timeout would have passed. A plain
// Close keeps the static member's tasks assigned to it (checked first,
// over a few seconds), which is why Leave exists.
func TestLeaveHandsTasksOverAtOnce(t *testing.T) {
	t.Parallel()
	c := kafka.Cluster(t)
	in, app := c.Name(t, "in"), c.Name(t, "app")
	const partitions = 4
	c.CreateTopic(t, in, partitions, nil)
	b := kstream.NewBuilder()
	b.Stream("events", in, serde.String(), serde.String()).GroupByKey().Count("counts")
	var insts []*instance
	var cfgs []weir.Config
	for range 2 {
		cfg := baseConfig(c, app, t)
		cfg.StaticMembership = true
		cfg.Consumer = weir.ConsumerConfig{SessionTimeout: 45 * time.Second, HeartbeatInterval: time.Second}
		cfgs = append(cfgs, cfg)
		insts = append(insts, start(t, b, cfg))
	}
	kafka.Eventually(t, time.Minute, 100*time.Millisecond, func() (bool, string) {
		a, b := len(insts[0].app.Tasks()), len(insts[1].app.Tasks())
		return a > 0 && b > 0 && a+b == partitions, fmt.Sprintf("tasks %d and %d", a, b)
	})
	// Close: the member stays, its tasks with it.
	if err := insts[1].stop(t); err != nil {
		t.Fatal(err)
	}
	// What must not happen is watched for a while: 3 s of a 45 s session.
	watch, stopWatch := context.WithTimeout(context.Background(), 3*time.Second)
	defer stopWatch()
	for pause(watch, 100*time.Millisecond) {
		if n := len(insts[0].app.Tasks()); n == partitions {
			t.Fatalf("after a Close the other instance took every task at once: the static member left the group")
		}
	}
	// Back, then Leave: the tasks move at once.
	insts[1] = start(t, b, cfgs[1])
	kafka.Eventually(t, time.Minute, 100*time.Millisecond, func() (bool, string) {
		a, b := len(insts[1].app.Tasks()), len(insts[0].app.Tasks())
		return a > 0 && a+b == partitions, fmt.Sprintf("tasks %d and %d", b, a)
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	left := time.Now()
	if err := insts[1].app.Leave(ctx); err != nil {
		t.Fatalf("Leave: %v", err)
	}
	kafka.Eventually(t, 20*time.Second, 100*time.Millisecond, func() (bool, string) {
		n := len(insts[0].app.Tasks())
		return n == partitions, fmt.Sprintf("the remaining instance runs %d of %d tasks", n, partitions)
	})
	t.Logf("the remaining instance ran every task %.1f s after Leave (session timeout 45 s)", time.Since(left).Seconds())
}

// TestRollingDeployWithoutStaticMembership replaces three exactly-once
// instances one after the other (each stopped with Close and a new one
// started on its state directory) while input flows, with dynamic
// membership and one standby per task. It reports the rebalances the
// deploy caused and the longest time each partition went without a
// commit, and checks that no store was restored in full (a stopped
// instance's tasks move to their standbys, and come back to the
// replacement, which has their state) and that the committed counts stay
// exact.
func TestRollingDeployWithoutStaticMembership(t *testing.T) {
	t.Parallel()
	c := kafka.Cluster(t)
	const partitions, keys = 6, 300
	in, out, app, b := countApp(t, c, partitions)

	restores := &restoreCounter{}
	var regs []*prometheus.Registry
	cfgs := make([]weir.Config, 3)
	insts := make([]*instance, 3)
	startSlot := func(i int) {
		reg := prometheus.NewRegistry()
		regs = append(regs, reg)
		cfg := cfgs[i]
		cfg.Metrics = reg
		insts[i] = start(t, b, cfg)
	}
	for i := range cfgs {
		cfgs[i] = baseConfig(c, app, t)
		cfgs[i].Guarantee = weir.ExactlyOnce
		cfgs[i].CommitInterval = 100 * time.Millisecond
		cfgs[i].Stores.RestoreListener = restores
		cfgs[i].StandbyReplicas = 1
		startSlot(i)
	}
	running := func() bool {
		n := 0
		for _, in := range insts {
			for _, ti := range in.app.Tasks() {
				if !ti.Restoring {
					n++
				}
			}
		}
		return n == partitions
	}
	standbysCaughtUp := func() (bool, string) {
		n := 0
		for _, reg := range regs[len(regs)-3:] {
			lags, err := standbyLags(reg)
			if err != nil {
				t.Fatal(err)
			}
			for _, lag := range lags {
				if lag > 1000 {
					return false, "a standby is behind"
				}
				n++
			}
		}
		return n == partitions, fmt.Sprintf("%d standbys caught up, want %d", n, partitions)
	}
	// Input flows from before the deploy, so that every changelog holds
	// records and every standby a checkpoint of them.
	sent, stopInput := feedKeys(t, c, in, keys)
	defer stopInput()
	quiet := settled(t, c, app, in, partitions)
	kafka.Eventually(t, 2*time.Minute, 100*time.Millisecond, func() (bool, string) {
		for _, in := range insts {
			if len(in.app.Tasks()) == 0 {
				return false, "an instance has no tasks"
			}
		}
		if !running() {
			return false, "not every task runs"
		}
		if ok, why := standbysCaughtUp(); !ok {
			return false, why
		}
		return quiet()
	})
	fullBefore := restores.full.Load()

	admin := c.Admin(t)
	watch := watchCommits(admin, app, in, partitions)
	defer watch.stop()
	rebalancesBefore := counterSum(t, regs, "weir_rebalances_total", nil)
	deployStart := time.Now()
	for i := range insts {
		if err := insts[i].stop(t); err != nil {
			t.Fatalf("instance %d: Run: %v", i, err)
		}
		startSlot(i)
		kafka.Eventually(t, time.Minute, 100*time.Millisecond, func() (bool, string) {
			if len(insts[i].app.Tasks()) == 0 || !running() {
				return false, fmt.Sprintf("instance %d's replacement not running its share", i)
			}
			// The next instance stops only once every task has its
			// standby again and the group has settled, as a deploy
			// waits for readiness.
			if ok, why := standbysCaughtUp(); !ok {
				return false, why
			}
			return quiet()
		})
	}
	deploy := time.Since(deployStart)
	watch.stop()
	stopInput()
	// Each thread counts the assignments it received: one group
	// rebalance gives every member one (a cooperative hand-over, two).
	assignments := counterSum(t, regs, "weir_rebalances_total", nil) - rebalancesBefore
	pauses := watch.pauses()
	t.Logf("rolling deploy of 3 instances in %.1f s: %v assignments received by the members in all; longest pause per partition %v (longest %.2f s)",
		deploy.Seconds(), assignments, roundAll(pauses), slices.Max(pauses).Seconds())
	if n := restores.full.Load() - fullBefore; n != 0 {
		restores.mu.Lock()
		t.Errorf("%d full restores during the deploy (started %s), want none: every moved task had a standby, every replacement its state directory; full restores: %v",
			n, deployStart.Format("15:04:05.000"), restores.fulls)
		restores.mu.Unlock()
	}
	t.Logf("the deploy restored %d records in all (tails only)", restores.records.Load())

	total := sent()
	want := map[string]int64{}
	for i := range total {
		want[fmt.Sprintf("k%03d", i%keys)]++
	}
	readExactCounts(t, c, out, want)
}

// commitWatch polls a group's committed offsets of one topic every 50 ms
// while a test runs: the longest time each partition's offset went
// without moving is its pause.
type commitWatch struct {
	mu   sync.Mutex
	max  []time.Duration
	stop func() // ends the polling and waits for it (safe to call twice)
}

func watchCommits(admin sarama.ClusterAdmin, group, topic string, partitions int) *commitWatch {
	w := &commitWatch{max: make([]time.Duration, partitions)}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		last := map[int32]int64{}
		moved := map[int32]time.Time{}
		begin := time.Now()
		for pause(ctx, 50*time.Millisecond) {
			got, err := groupCommitted(admin, group, topic, int32(partitions))
			now := time.Now()
			if err != nil {
				continue
			}
			w.mu.Lock()
			for p := range int32(partitions) {
				if _, ok := moved[p]; !ok {
					moved[p] = begin
				}
				if got[p] != last[p] {
					last[p], moved[p] = got[p], now
				}
				w.max[p] = max(w.max[p], now.Sub(moved[p]))
			}
			w.mu.Unlock()
		}
	})
	w.stop = func() { cancel(); wg.Wait() }
	return w
}

// pauses returns each partition's longest pause so far.
func (w *commitWatch) pauses() []time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.max)
}

// reset forgets the pauses so far (not when each partition last moved).
func (w *commitWatch) reset() {
	w.mu.Lock()
	defer w.mu.Unlock()
	clear(w.max)
}

// countApp creates an input and an output topic of partitions partitions
// and returns them, an application id, and a DSL count per key of the
// input into store "counts", written to the output.
func countApp(t *testing.T, c *kafka.Env, partitions int32) (in, out, app string, b *kstream.Builder) {
	in, out, app = c.Name(t, "in"), c.Name(t, "out"), c.Name(t, "app")
	c.CreateTopic(t, in, partitions, nil)
	c.CreateTopic(t, out, partitions, nil)
	b = kstream.NewBuilder()
	b.Stream("events", in, serde.String(), serde.String()).GroupByKey().Count("counts").ToStream().To(out, serde.String(), serde.Int64())
	return in, out, app, b
}

// roundAll rounds durations to 10 ms, for logs.
func roundAll(ds []time.Duration) []time.Duration {
	out := make([]time.Duration, len(ds))
	for i, d := range ds {
		out[i] = d.Round(10 * time.Millisecond)
	}
	return out
}

// feedKeys produces records to in while the test runs, in batches of 50
// every 20 ms, key i%keys for the i-th record. sent returns how many were
// produced; stop ends the feed and waits for it (safe to call twice).
func feedKeys(t *testing.T, c *kafka.Env, in string, keys int) (sent func() int64, stop func()) {
	var n atomic.Int64
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		p := newChunkProducer(t, c)
		for i := 0; ctx.Err() == nil; i += 50 {
			var batch []*sarama.ProducerMessage
			for j := i; j < i+50; j++ {
				batch = append(batch, &sarama.ProducerMessage{Topic: in, Key: sarama.StringEncoder(fmt.Sprintf("k%03d", j%keys)), Value: sarama.StringEncoder("x")})
			}
			if err := p.send(batch); err != nil {
				t.Errorf("producing: %v", err)
				return
			}
			n.Add(50)
			if !pause(ctx, 20*time.Millisecond) {
				return
			}
		}
	})
	return n.Load, func() { cancel(); wg.Wait() }
}

// readExactCounts reads a count topic (read_committed) until every key of
// want has its count, failing at once on a count above it (a duplicate)
// or a value that is not an int64.
func readExactCounts(t *testing.T, c *kafka.Env, out string, want map[string]int64) {
	t.Helper()
	got := map[string]int64{}
	complete := 0
	kafka.ReadAll(t, c, out, sarama.ReadCommitted, func(recs []*sarama.ConsumerMessage) bool {
		if len(recs) == 0 {
			return false
		}
		m := recs[len(recs)-1]
		k := string(m.Key)
		n, err := serde.Int64().Deserialize(out, m.Value)
		if err != nil {
			t.Fatalf("output %s: %v", k, err)
		}
		if n > want[k] {
			t.Fatalf("key %s counted %d, more than its %d records: a duplicate", k, n, want[k])
		}
		if got[k] == want[k] {
			complete--
		}
		if n == want[k] {
			complete++
		}
		got[k] = n
		return complete == len(want)
	})
}

// settled returns a condition that holds once the group is Stable and its
// members' assignments hold every partition of topic: no rebalance is
// under way, and no task is withheld between the two rounds of a
// cooperative hand-over (its partitions are then in nobody's assignment,
// while the member giving it up may still report it running).
func settled(t *testing.T, c *kafka.Env, group, topic string, partitions int) func() (bool, string) {
	admin := c.Admin(t)
	return func() (bool, string) {
		gs, err := admin.DescribeConsumerGroups([]string{group})
		if err != nil || len(gs) != 1 {
			return false, fmt.Sprintf("describing group %s: %v", group, err)
		}
		g := gs[0]
		if g.State != "Stable" {
			return false, "group " + g.State
		}
		n := 0
		for _, m := range g.Members {
			a, err := m.GetMemberAssignment()
			if err != nil {
				return false, fmt.Sprintf("member %s's assignment: %v", m.MemberId, err)
			}
			if a != nil {
				n += len(a.Topics[topic])
			}
		}
		return n == partitions, fmt.Sprintf("%d of %d partitions of %s assigned", n, partitions, topic)
	}
}
