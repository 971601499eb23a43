package integration

// The zombie scenario of exactly-once: an instance stalls (here SIGSTOP, in
// production a long GC pause or a frozen VM) with a transaction open, the
// group gives its tasks to another instance, and then the stalled instance
// wakes up and tries to commit what it processed before the stall. Its
// transaction carries the group generation it was a member of (KIP-447),
// which is stale by then, so the group coordinator must refuse it; were it
// accepted, every record the survivor has redone would be in the output
// twice.

import (
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/weirtest/kafka"
)

// Sizes of TestExactlyOnceZombieIsFenced. The input is produced in chunks
// of zombieChunk with a pause after each, so production goes on for about
// 20 s: before the stall, during it and after the zombie wakes up.
const (
	zombieRecords    = 40_000
	zombieKeys       = 1000
	zombieChunk      = 2000
	zombieChunkPause = 600 * time.Millisecond
	// zombieSlot runs two stream threads (eosThreads), so two transactional
	// producers are fenced at once; survivorSlot runs one, which then owns
	// all eosPartitions tasks.
	zombieSlot   = 1
	survivorSlot = 0
)

// zombieMark is the note the test writes to the zombie's log when it sends
// SIGCONT: what the zombie logs after it is what it did once awake.
const zombieMark = "SIGCONT"

// TestExactlyOnceZombieIsFenced runs two instances in their own processes
// while input is produced, freezes one with SIGSTOP while it processes,
// keeps it frozen past its session timeout (6 s) until the other instance
// has taken over its tasks and committed progress on its partitions, then
// resumes it. The woken zombie must not commit: it either aborts its
// transaction and rejoins, or stops with an error; it must not panic.
//
// What proves the fencing: the zombie is frozen at a moment when its
// transaction is open with records in echo (the partition's last stable
// offset is below its high watermark, and stays there); at the end, a
// read_uncommitted reader finds those records at those offsets and a
// read_committed reader none of them: the zombie's transaction was
// aborted, not committed. And the read_committed output holds every input
// record exactly once (the verifier), although the survivor processed the
// zombie's uncommitted records a second time.
//
// Like TestExactlyOnceUnderKill9 it does not run in parallel: it loads both
// cores, and a starved survivor would stretch the rebalance it waits for.
func TestExactlyOnceZombieIsFenced(t *testing.T) {
	c := kafka.Cluster(t)
	in, echo, aggOut, app := c.Name(t, "in"), c.Name(t, "echo"), c.Name(t, "agg-out"), c.Name(t, "app")
	for _, topic := range []string{in, echo, aggOut} {
		c.CreateTopic(t, topic, eosPartitions, nil)
	}
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, seed>>1))

	base := eosChildConfig{Brokers: c.Brokers, App: app, In: in, Echo: echo, AggOut: aggOut, Guarantee: weir.ExactlyOnce}
	cfg := base.weirConfig(nil)
	cfg.StateDir, cfg.Threads = t.TempDir(), 1
	if _, err := weir.New(eosTopology(in, echo, aggOut), cfg); err != nil {
		t.Fatalf("weir.New: %v", err)
	}

	started := time.Now()
	cl := newEOSCluster(t, base, 2)
	zombie, survivor := cl.children[zombieSlot], cl.children[survivorSlot]
	pid := zombie.cmd.Process.Pid
	// Runs before newEOSCluster's cleanup kills the processes: no stopped
	// process is left behind, whatever failed.
	t.Cleanup(func() {
		if !zombie.exited() {
			_ = syscall.Kill(pid, syscall.SIGCONT)
		}
	})
	waitSplit(t, cl, 60*time.Second)
	t.Logf("2 instances running after %v: zombie %v, survivor %v",
		time.Since(started).Round(time.Millisecond), zombie.reportedTasks(), survivor.reportedTasks())

	msgs := eosInput(in, zombieRecords, zombieKeys, rng)
	producer := newChunkProducer(t, c)
	produced := make(chan error, 1)
	go func() {
		for from := 0; from < len(msgs); from += zombieChunk {
			if err := producer.send(msgs[from:min(from+zombieChunk, len(msgs))]); err != nil {
				produced <- fmt.Errorf("chunk at %d: %w", from, err)
				return
			}
			// The pause paces the load, it waits for nothing.
			time.Sleep(zombieChunkPause)
		}
		produced <- nil
	}()

	// Wait until the zombie processes: it has committed on each of its
	// partitions and has a backlog on them, 200 records together (a
	// backlog on each at once may never be seen when it keeps up with
	// the load). Then freeze it in a transaction.
	admin := c.Admin(t)
	zombieParts := taskPartitions(t, zombie.reportedTasks())
	kafka.Eventually(t, 30*time.Second, 50*time.Millisecond, func() (bool, string) {
		cl.checkAlive()
		ends := kafka.EndOffsets(t, c, in)
		got, err := groupCommitted(admin, app, in, eosPartitions)
		if err != nil {
			return false, err.Error()
		}
		var backlog int64
		for _, p := range zombieParts {
			if got[p] <= 0 {
				return false, fmt.Sprintf("zombie partition %d: nothing committed (end %d)", p, ends[p])
			}
			backlog += ends[p] - got[p]
		}
		return backlog >= 200, fmt.Sprintf("zombie partitions %v: backlog %d", zombieParts, backlog)
	})
	zombie.expected = true // from now on its exit is judged below, not by checkAlive
	open, stopped := freezeInTransaction(t, c, echo, pid, zombieParts)
	cl.note(zombieSlot, "SIGSTOP pid %d (tasks %v, open transaction in echo %v)", pid, zombie.reportedTasks(), open)
	atStop, err := groupCommitted(admin, app, in, eosPartitions)
	if err != nil {
		t.Fatalf("committed offsets at SIGSTOP: %v", err)
	}
	t.Logf("SIGSTOP zombie pid %d with tasks %v, its open transaction holds echo offsets %v; committed input offsets %v, %d input records not committed",
		pid, zombie.reportedTasks(), open, atStop, inputLag(t, c, admin, app, in))

	// The group expels the zombie after its session timeout and gives its
	// tasks to the survivor, which must then commit past where the zombie
	// had committed on each of its partitions.
	kafka.Eventually(t, 45*time.Second, 50*time.Millisecond, func() (bool, string) {
		cl.checkAlive()
		tasks := survivor.reportedTasks()
		if len(tasks) != eosPartitions {
			return false, fmt.Sprintf("survivor has tasks %v", tasks)
		}
		got, err := groupCommitted(admin, app, in, eosPartitions)
		if err != nil {
			return false, err.Error()
		}
		for _, p := range zombieParts {
			if got[p] <= atStop[p] {
				return false, fmt.Sprintf("zombie partition %d: committed %d, %d at SIGSTOP", p, got[p], atStop[p])
			}
		}
		return true, ""
	})
	t.Logf("survivor took over the zombie's tasks and committed on its partitions %v after SIGSTOP",
		time.Since(stopped).Round(time.Millisecond))

	cl.note(zombieSlot, "%s pid %d after %v stopped", zombieMark, pid, time.Since(stopped).Round(time.Millisecond))
	if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
		t.Fatalf("SIGCONT zombie (pid %d): %v", pid, err)
	}
	t.Logf("SIGCONT zombie after %v stopped", time.Since(stopped).Round(time.Millisecond))

	// The zombie's next commit fails: it aborts and rejoins, or stops.
	var woke []string
	kafka.Eventually(t, 30*time.Second, 100*time.Millisecond, func() (bool, string) {
		cl.checkAlive()
		woke = linesAfterMark(cl.logs[zombieSlot], zombieMark)
		return zombie.exited() || slices.ContainsFunc(woke, isAbortLine), fmt.Sprintf("zombie logged since SIGCONT:\n%s", strings.Join(woke, "\n"))
	})
	if zombie.exited() {
		t.Logf("zombie stopped with exit code %d", zombie.cmd.ProcessState.ExitCode())
	} else {
		// Back in the group, it gets a share of the tasks again.
		kafka.Eventually(t, 45*time.Second, 50*time.Millisecond, func() (bool, string) {
			cl.checkAlive()
			woke = linesAfterMark(cl.logs[zombieSlot], zombieMark)
			i := slices.IndexFunc(woke, isAbortLine)
			rejoined := i >= 0 && slices.ContainsFunc(woke[i:], func(l string) bool {
				return strings.Contains(l, "msg=assignment") && !strings.Contains(l, "tasks=0")
			})
			zt, st := zombie.reportedTasks(), survivor.reportedTasks()
			return rejoined && len(zt) > 0 && len(st) > 0 && len(zt)+len(st) == eosPartitions,
				fmt.Sprintf("zombie tasks %v, survivor tasks %v, zombie logged an assignment after its abort: %v", zt, st, rejoined)
		})
		t.Logf("zombie aborted and rejoined with tasks %v", zombie.reportedTasks())
	}
	for _, l := range woke {
		if strings.Contains(l, "level=WARN") || strings.Contains(l, "level=ERROR") || strings.Contains(l, "eos child:") {
			t.Logf("zombie after SIGCONT: %s", l)
		}
	}

	select {
	case err := <-produced:
		if err != nil {
			t.Fatalf("producing: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatalf("producing %d records took more than a minute", len(msgs))
	}
	t.Logf("%d records over %d keys produced after %v, %d input records not committed",
		len(msgs), zombieKeys, time.Since(started).Round(time.Millisecond), inputLag(t, c, admin, app, in))
	input := inputByPartition(t, msgs, eosPartitions)
	waitInputCommitted(t, c, app, in, input, 90*time.Second, cl.checkAlive)
	t.Logf("all input committed after %v", time.Since(started).Round(time.Millisecond))
	stopRunning(t, cl)
	checkZombieExit(t, cl)

	writeSentinels(t, c, echo, eosPartitions)
	writeSentinels(t, c, aggOut, eosPartitions)
	committed := readToSentinels(t, c, echo, eosPartitions, sarama.ReadCommitted)
	echoF := newFindings("echo " + echo)
	verifyEcho(echoF, input, committed)
	aggF := newFindings("agg-out " + aggOut)
	verifyAgg(aggF, input, readToSentinels(t, c, aggOut, eosPartitions, sarama.ReadCommitted))
	echoF.report(t)
	aggF.report(t)

	// The proof of the fencing: the records of the transaction the zombie
	// had open when it froze are in echo's log (read_uncommitted), and not
	// one of them is committed (read_committed).
	isCommitted := map[int32]map[int64]bool{}
	for _, m := range committed {
		if isCommitted[m.Partition] == nil {
			isCommitted[m.Partition] = map[int64]bool{}
		}
		isCommitted[m.Partition][m.Offset] = true
	}
	uncommitted := readToSentinels(t, c, echo, eosPartitions, sarama.ReadUncommitted)
	var inTxn, leaked int
	for _, m := range uncommitted {
		if r, ok := open[m.Partition]; ok && m.Offset >= r[0] && m.Offset < r[1] {
			inTxn++
			if isCommitted[m.Partition][m.Offset] {
				leaked++
			}
		}
	}
	t.Logf("echo: %d records read_uncommitted, %d read_committed; the zombie's stalled transaction holds %d records, %d of them committed",
		len(uncommitted), len(committed), inTxn, leaked)
	switch {
	case inTxn == 0:
		t.Errorf("echo holds no record at the offsets %v of the zombie's stalled transaction", open)
	case leaked > 0:
		t.Errorf("%d of the %d records of the zombie's stalled transaction are committed: the zombie was not fenced", leaked, inTxn)
	}
	t.Logf("total %v: %d violations in echo, %d in agg-out", time.Since(started).Round(time.Millisecond), echoF.total(), aggF.total())
}

// freezeInTransaction stops the process pid with SIGSTOP at a moment when
// it has an open transaction with records in topic's partitions parts,
// which nobody else writes to. It returns, per partition holding them, the
// offsets [first, end) of the transaction's records, and when it stopped
// the process.
//
// A transaction is open with records on a partition when the partition's
// last stable offset (where read_committed readers end) is below its high
// watermark. When the stopped process has none, it is resumed and stopped
// again a little later.
func freezeInTransaction(t *testing.T, c *kafka.Env, topic string, pid int, parts []int32) (map[int32][2]int64, time.Time) {
	t.Helper()
	client, err := sarama.NewClient(c.Brokers, c.SaramaConfig())
	if err != nil {
		t.Fatalf("client for %v: %v", c.Brokers, err)
	}
	defer func() { _ = client.Close() }()
	offsets := func() (stable, end map[int32]int64) {
		stable, end = map[int32]int64{}, map[int32]int64{}
		for _, p := range parts {
			stable[p] = listOffset(t, client, topic, p, sarama.ReadCommitted)
			end[p] = listOffset(t, client, topic, p, sarama.ReadUncommitted)
		}
		return stable, end
	}
	var open map[int32][2]int64
	var stopped time.Time
	kafka.Eventually(t, 30*time.Second, 20*time.Millisecond, func() (bool, string) {
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
			t.Fatalf("SIGSTOP pid %d: %v", pid, err)
		}
		stopped = time.Now()
		stable, end := offsets()
		// A transaction whose commit the coordinator had already accepted
		// gets its markers within milliseconds; one still open after this
		// pause stays open, since its producer is stopped. The pause is
		// what is checked, not a wait for something.
		time.Sleep(300 * time.Millisecond)
		stable2, end2 := offsets()
		open = map[int32][2]int64{}
		for _, p := range parts {
			if stable[p] < end[p] && stable2[p] == stable[p] {
				open[p] = [2]int64{stable[p], end2[p]}
			}
		}
		if len(open) > 0 {
			return true, ""
		}
		if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
			t.Fatalf("SIGCONT pid %d: %v", pid, err)
		}
		return false, fmt.Sprintf("no open transaction with records in %s %v: last stable offsets %v, ends %v", topic, parts, stable2, end2)
	})
	return open, stopped
}

// listOffset returns partition's end offset as a reader at isolation sees
// it: the high watermark read_uncommitted, the last stable offset
// read_committed.
func listOffset(t *testing.T, client sarama.Client, topic string, partition int32, isolation sarama.IsolationLevel) int64 {
	t.Helper()
	leader, err := client.Leader(topic, partition)
	if err != nil {
		t.Fatalf("leader of %s/%d: %v", topic, partition, err)
	}
	req := sarama.NewOffsetRequest(client.Config().Version)
	req.IsolationLevel = isolation
	req.AddBlock(topic, partition, sarama.OffsetNewest, 1)
	resp, err := leader.GetAvailableOffsets(req)
	if err != nil {
		t.Fatalf("end offset of %s/%d: %v", topic, partition, err)
	}
	b := resp.GetBlock(topic, partition)
	if b == nil || b.Err != sarama.ErrNoError {
		t.Fatalf("end offset of %s/%d: %v", topic, partition, b)
	}
	return b.Offset
}

// waitSplit waits until both instances of cl report tasks and together own
// each task once: the group has settled.
func waitSplit(t *testing.T, cl *eosCluster, timeout time.Duration) {
	t.Helper()
	kafka.Eventually(t, timeout, 50*time.Millisecond, func() (bool, string) {
		cl.checkAlive()
		var all []string
		for _, ch := range cl.children {
			tasks := ch.reportedTasks()
			if len(tasks) == 0 {
				return false, "an instance has no tasks yet"
			}
			all = append(all, tasks...)
		}
		slices.Sort(all)
		n := len(all)
		return n == eosPartitions && len(slices.Compact(all)) == n, fmt.Sprintf("tasks %v", all)
	})
}

// taskPartitions returns the input partitions of task ids "0_<partition>"
// (the EOS topology has one sub-topology).
func taskPartitions(t *testing.T, tasks []string) []int32 {
	t.Helper()
	var out []int32
	for _, id := range tasks {
		_, p, ok := strings.Cut(id, "_")
		n, err := strconv.ParseInt(p, 10, 32)
		if !ok || err != nil {
			t.Fatalf("task id %q is not <sub-topology>_<partition>", id)
		}
		out = append(out, int32(n))
	}
	return out
}

// isAbortLine reports a log line of weir's aborting a transaction or
// stopping a thread (thread.go's handleTxnError, abort and shutdown).
func isAbortLine(l string) bool {
	for _, s := range []string{"transaction aborted", "aborting transaction", "abort failed", "transaction outcome unknown", "producer fenced", "thread stopped"} {
		if strings.Contains(l, s) {
			return true
		}
	}
	return false
}

// linesAfterMark returns the lines of the log at path after the last test
// note containing mark (all lines when mark is empty).
func linesAfterMark(path, mark string) []string {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if mark == "" {
		return lines
	}
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.HasPrefix(lines[i], "=== test: ") && strings.Contains(lines[i], mark) {
			return lines[i+1:]
		}
	}
	return nil
}

// stopRunning sends SIGTERM to every instance still running and checks
// that each stops cleanly (exit code 0) within a minute. Unlike stopAll it
// accepts an instance that has already exited (the zombie that stopped).
func stopRunning(t *testing.T, cl *eosCluster) {
	t.Helper()
	cl.checkAlive()
	var running []int
	for i, ch := range cl.children {
		if ch.exited() {
			continue
		}
		ch.expected = true
		if err := ch.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Errorf("SIGTERM instance %d: %v", i, err)
		}
		cl.note(i, "SIGTERM pid %d", ch.cmd.Process.Pid)
		running = append(running, i)
	}
	deadline := time.After(time.Minute)
	for _, i := range running {
		ch := cl.children[i]
		select {
		case <-ch.done:
		case <-deadline:
			t.Fatalf("instance %d (pid %d) did not stop within a minute of SIGTERM; its log ends with:\n%s",
				i, ch.cmd.Process.Pid, logTail(cl.logs[i], 40))
		}
		if code := ch.cmd.ProcessState.ExitCode(); code != 0 {
			t.Errorf("instance %d exited with code %d after SIGTERM, want 0 (a clean stop)", i, code)
		}
	}
}

// checkZombieExit fails the test when an instance panicked or raced in
// weir's code, and when the zombie stopped by itself other than with Run's
// error (exit code 1; a panic exits with 2). A race report with no weir
// frame is only logged: sarama's async producer races inside itself when
// its producer is fenced (a stall past TransactionTimeout), which the test
// cannot fix.
func checkZombieExit(t *testing.T, cl *eosCluster) {
	t.Helper()
	for i := range cl.children {
		lines := linesAfterMark(cl.logs[i], "")
		for j, l := range lines {
			if strings.HasPrefix(l, "panic:") || strings.HasPrefix(l, "fatal error:") {
				t.Errorf("instance %d logged %q; its log ends with:\n%s", i, l, logTail(cl.logs[i], 40))
				break
			}
			if !strings.Contains(l, "WARNING: DATA RACE") {
				continue
			}
			report := lines[j:]
			if end := slices.IndexFunc(report[1:], func(l string) bool { return strings.HasPrefix(l, "==================") }); end >= 0 {
				report = report[:end+1]
			}
			if slices.ContainsFunc(report, func(l string) bool { return strings.Contains(l, "github.com/weirstream/weir") }) {
				t.Errorf("instance %d logged a data race in weir:\n%s", i, strings.Join(report, "\n"))
			} else {
				t.Logf("instance %d logged a data race inside sarama (known, not weir's):\n%s", i, strings.Join(report, "\n"))
			}
		}
	}
	woke := linesAfterMark(cl.logs[zombieSlot], zombieMark)
	if slices.ContainsFunc(woke, func(l string) bool { return strings.HasPrefix(l, "=== test: SIGTERM") }) {
		return // it was still running at the end, and stopRunning checked its exit
	}
	if code := cl.children[zombieSlot].cmd.ProcessState.ExitCode(); code != 1 ||
		!slices.ContainsFunc(woke, func(l string) bool { return strings.HasPrefix(l, "eos child: Run:") }) {
		t.Errorf("the zombie stopped by itself with exit code %d, want 1 with Run's error; its log ends with:\n%s",
			code, logTail(cl.logs[zombieSlot], 40))
	}
}
