package integration

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/weirtest/kafka"
)

// TestScaleOutWithWarmups scales an exactly-once count from one instance
// to two and then to three while input flows. The first instance holds
// every task's store (5,000 keys per partition); a new one holds nothing.
// The tasks that move to it must never restore in full: the leader keeps
// them where they run while warm-ups copy their stores on the new
// instance, and moves them once the warm-ups have caught up (in a
// probing rebalance, or in a rebalance the scale-out starts anyway).
// After each step the group must be balanced, with no warm-ups left, and
// at the end the committed counts exact. Without warm-ups (MaxWarmups
// -1) the same scale-out restores the moved stores in full.
func TestScaleOutWithWarmups(t *testing.T) {
	t.Parallel()
	c := kafka.Cluster(t)
	const partitions, preload, keys = 6, 30_000, 300
	in, out, app, b := countApp(t, c, partitions)
	preKey := func(i int) string { return fmt.Sprintf("pre-%05d", i) }
	msgs := make([]*sarama.ProducerMessage, 0, preload)
	for i := range preload {
		msgs = append(msgs, &sarama.ProducerMessage{Topic: in, Key: sarama.StringEncoder(preKey(i)), Value: sarama.StringEncoder("v")})
	}
	kafka.Produce(t, c, msgs...)

	const acceptable = 1_000
	regs := make([]*prometheus.Registry, 3)
	restores := make([]*restoreCounter, 3)
	insts := make([]*instance, 3)
	startSlot := func(i int) {
		regs[i], restores[i] = prometheus.NewRegistry(), &restoreCounter{}
		cfg := baseConfig(c, app, t)
		cfg.Guarantee = weir.ExactlyOnce
		cfg.CommitInterval = 100 * time.Millisecond
		cfg.AcceptableRecoveryLag = acceptable
		cfg.Stores.RestoreListener = restores[i]
		cfg.Metrics = regs[i]
		insts[i] = start(t, b, cfg)
	}
	admin := c.Admin(t)
	startSlot(0)
	kafka.Eventually(t, 2*time.Minute, 100*time.Millisecond, func() (bool, string) {
		if lag := inputLag(t, c, admin, app, in); lag != 0 {
			return false, fmt.Sprintf("%d input records not committed", lag)
		}
		return len(insts[0].app.Tasks()) == partitions, "the first instance does not run every task"
	})
	sent, stopInput := feedKeys(t, c, in, keys)
	defer stopInput()

	watch := watchCommits(admin, app, in, partitions)
	defer watch.stop()

	// Scale out in two steps: to two instances, where only a probing
	// rebalance can move a task once its warm-up has caught up (nothing
	// else changes in the group), then to three.
	for _, step := range []struct {
		add, each int
	}{{1, 3}, {2, 2}} {
		scaled := time.Now()
		probesBefore := counterSum(t, regs[:step.add], "weir_probing_rebalances_total", map[string]string{"result": "started"})
		watch.reset()
		startSlot(step.add)
		n := step.add + 1
		quiet := settled(t, c, app, in, partitions)
		var warmupsSeen int
		kafka.Eventually(t, 3*time.Minute, 100*time.Millisecond, func() (bool, string) {
			counts := make([]int, n)
			for i, inst := range insts[:n] {
				for _, ti := range inst.app.Tasks() {
					if !ti.Restoring {
						counts[i]++
					}
				}
			}
			warm := 0
			for _, reg := range regs[:n] {
				lags, err := standbyLags(reg)
				if err != nil {
					t.Fatal(err)
				}
				warm += len(lags)
			}
			warmupsSeen = max(warmupsSeen, warm)
			if slices.Max(counts) != step.each || slices.Min(counts) != step.each {
				return false, fmt.Sprintf("instances run %v tasks (%d warm-ups), want %d each", counts, warm, step.each)
			}
			if warm != 0 {
				return false, fmt.Sprintf("%d warm-ups left", warm)
			}
			return quiet()
		})
		balanced := time.Since(scaled)
		probes := counterSum(t, regs[:n], "weir_probing_rebalances_total", map[string]string{"result": "started"}) - probesBefore
		t.Logf("scaled to %d instances: balanced after %.1f s, %v probing rebalances, up to %d warm-ups at once; longest pause per partition %v",
			n, balanced.Seconds(), probes, warmupsSeen, roundAll(watch.pauses()))
		if warmupsSeen == 0 {
			t.Errorf("scaling to %d instances: the new instance never held a warm-up", n)
		}
		if n == 2 && probes == 0 {
			t.Errorf("scaling to 2 instances: no probing rebalance was started, yet the tasks moved")
		}
		r := restores[step.add]
		r.mu.Lock()
		if full := r.full.Load(); full != 0 {
			t.Errorf("new instance %d restored %d stores in full: %v; want none (warm-ups)", step.add, full, r.fulls)
		}
		r.mu.Unlock()
		t.Logf("new instance %d restored %d records once its tasks moved (the warm-ups' tails)", step.add, r.records.Load())
		if got := r.records.Load(); got > int64(2*step.each*acceptable) {
			t.Errorf("new instance %d restored %d records, more than its warm-ups could have been behind", step.add, got)
		}
	}
	watch.stop()
	stopInput()

	want := map[string]int64{}
	for i := range preload {
		want[preKey(i)] = 1
	}
	for i := range sent() {
		want[fmt.Sprintf("k%03d", i%keys)]++
	}
	readExactCounts(t, c, out, want)
}
