package integration

import (
	"fmt"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/weirstream/weir/weirtest/kafka"
)

// TestCommitsDoNotRaceRebalances: two exactly-once instances process a
// steady input while a third joins and leaves the group three times. A
// member's commit must never carry the generation the group is leaving
// (it waits for its new assignment, on a producer connection of its own),
// so no transaction aborts, and every input record is echoed exactly once.
//
// It runs alone (not in parallel): a rebalance slowed past half the
// transaction timeout by a loaded machine lets a commit go ahead, by
// design, and would abort.
func TestCommitsDoNotRaceRebalances(t *testing.T) {
	c := kafka.Cluster(t)
	in, out, app := c.Name(t, "in"), c.Name(t, "out"), c.Name(t, "app")
	const partitions = 6
	c.CreateTopic(t, in, partitions, nil)
	c.CreateTopic(t, out, partitions, nil)

	var regs []*prometheus.Registry
	newCfg := func() *instance {
		cfg := eosFailureConfig(c, app, t)
		cfg.StateDir = t.TempDir()
		regs = append(regs, cfg.Metrics.(*prometheus.Registry))
		return start(t, coordEcho(in, out), cfg)
	}
	a, b := newCfg(), newCfg()

	// A steady input for the whole test: 100 records every 20 ms.
	stop := make(chan struct{})
	produced := make(chan int, 1)
	go func() {
		n := 0
		defer func() { produced <- n }()
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			var msgs []*sarama.ProducerMessage
			for range 100 {
				msgs = append(msgs, &sarama.ProducerMessage{Topic: in, Key: sarama.StringEncoder(fmt.Sprintf("key-%d", n%97)), Value: sarama.StringEncoder(fmt.Sprint(n))})
				n++
			}
			kafka.Produce(t, c, msgs...)
		}
	}()
	kafka.Eventually(t, 60*time.Second, 100*time.Millisecond, func() (bool, string) {
		na, nb := len(a.app.Tasks()), len(b.app.Tasks())
		return na == 3 && nb == 3, fmt.Sprintf("tasks: %d and %d", na, nb)
	})

	for round := range 3 {
		x := newCfg()
		kafka.Eventually(t, 60*time.Second, 100*time.Millisecond, func() (bool, string) {
			n := len(x.app.Tasks())
			return n == 2, fmt.Sprintf("round %d: the joining instance runs %d tasks", round, n)
		})
		if err := x.stop(t); err != nil {
			t.Fatalf("round %d: Run = %v", round, err)
		}
		kafka.Eventually(t, 60*time.Second, 100*time.Millisecond, func() (bool, string) {
			na, nb := len(a.app.Tasks()), len(b.app.Tasks())
			return na == 3 && nb == 3, fmt.Sprintf("round %d: tasks back to %d and %d", round, na, nb)
		})
	}
	close(stop)
	total := <-produced

	kafka.Eventually(t, 90*time.Second, 200*time.Millisecond, func() (bool, string) {
		got, err := groupCommitted(c.Admin(t), app, in, partitions)
		if err != nil {
			return false, err.Error()
		}
		var sum int64
		for _, off := range got {
			sum += max(off, 0)
		}
		return sum == int64(total), fmt.Sprintf("committed %d of %d", sum, total)
	})
	aborted := counterSum(t, regs, "weir_transactions_total", map[string]string{"result": "aborted"})
	committedTxns := counterSum(t, regs, "weir_transactions_total", map[string]string{"result": "committed"})
	t.Logf("%d records; %v transactions committed, %v aborted over three joins and leaves", total, committedTxns, aborted)
	if aborted != 0 {
		t.Errorf("%v transactions aborted while members joined and left; commits must wait for the new generation", aborted)
	}
	for _, inst := range []*instance{a, b} {
		if err := inst.stop(t); err != nil {
			t.Fatalf("Run = %v", err)
		}
	}
	writeSentinels(t, c, out, partitions)
	seen := map[string]int{}
	for _, m := range readToSentinels(t, c, out, partitions, sarama.ReadCommitted) {
		seen[string(m.Value)]++
	}
	dups := 0
	for _, n := range seen {
		if n > 1 {
			dups++
		}
	}
	if len(seen) != total || dups > 0 {
		t.Fatalf("%d distinct inputs echoed of %d, %d more than once", len(seen), total, dups)
	}
}
