package integration

// The soak: three exactly-once instances on the replicated cluster under
// steady input for WEIR_SOAK (say 30m; `make soak SOAK=30m`), while a
// nemesis injects a fault every 20-60 s, drawn from: the leaders of every
// partition moved, a broker restarted (SIGTERM), a broker crashed
// (SIGKILL) and restarted, replicas lost (a broker down while the outputs
// need all three in sync), the broker of a transaction coordinator of the
// application killed, and an instance killed with SIGKILL. After each
// fault it measures how long the group took to commit new input; at the
// end the read_committed verifier checks every record and aggregate.
// Instance 0 is never killed, so its memory is watched over the whole run.

import (
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/weirstream/weir/changelog"
	"github.com/weirstream/weir/weirtest/kafka"
)

// soakBadger bounds the instances' Badger databases far below the defaults,
// so that the memory check sees leaks rather than Badger's bounded memory
// filling. With the defaults, Badger's first 16 MiB memtable is an arena
// that the process touches a page at a time as writes land: measured
// (statelog.DB with default Options, one small entry per write), the RSS
// rose from 14 to 69 MiB over the first 200,000 writes, then swung between
// 68 and 141 MiB as memtables were flushed and reallocated, without a
// trend, up to 1.15 million writes. Instance 0 of a 30-minute soak writes
// about 300,000 records, so with the defaults its whole run sits in that
// first rise. With 1 MiB memtables and small caches the bounded parts are
// full within the warm-up, and a growth after it is weir's.
var soakBadger = changelog.Options{MemTableSize: 1 << 20, BlockCacheSize: 4 << 20, IndexCacheSize: 2 << 20}

// soakRate is the input rate, records a second, in batches of soakBatch.
const (
	soakRate  = 500
	soakBatch = 50
)

func TestSoak(t *testing.T) {
	d, err := time.ParseDuration(os.Getenv("WEIR_SOAK"))
	if err != nil || d <= 0 {
		t.Skip("the soak runs with WEIR_SOAK set to a duration (make soak SOAK=30m)")
	}
	rc := replicated(t)
	c := rc.Env
	admin := c.Admin(t)
	t.Cleanup(rc.allUp)
	in, echo, aggOut, app := c.Name(t, "in"), c.Name(t, "echo"), c.Name(t, "agg-out"), c.Name(t, "app")
	for _, topic := range []string{in, echo, aggOut} {
		c.CreateTopic(t, topic, eosPartitions, nil)
	}
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, seed>>1))
	t.Logf("soak for %v, seed %d", d, seed)
	cl := newEOSCluster(t, eosChildConfig{Brokers: c.Brokers, App: app, In: in, Echo: echo, AggOut: aggOut, Guarantee: eosGuarantee, MemReport: true, Badger: soakBadger, SaramaRetries: true}, eosInstances)
	for i := range eosInstances {
		cl.waitTasks(i, time.Minute)
	}

	// Steady input from a goroutine of its own.
	var (
		mu       sync.Mutex
		sent     []*sarama.ProducerMessage
		prodErr  error
		stopProd = make(chan struct{})
		prodDone = make(chan struct{})
	)
	producer := newChunkProducer(t, c)
	// A test that fails stops the producing goroutine before the producer
	// closes (cleanups run last first).
	var stopOnce sync.Once
	stopProducing := func() {
		stopOnce.Do(func() { close(stopProd) })
		<-prodDone
	}
	t.Cleanup(stopProducing)
	prng := rand.New(rand.NewPCG(seed>>2, seed)) // the producer's own
	go func() {
		defer close(prodDone)
		next := make([]int, eosKeys)
		tick := time.NewTicker(time.Second * soakBatch / soakRate)
		defer tick.Stop()
		for {
			select {
			case <-stopProd:
				return
			case <-tick.C:
			}
			batch := make([]*sarama.ProducerMessage, soakBatch)
			for i := range batch {
				k := prng.IntN(eosKeys)
				batch[i] = &sarama.ProducerMessage{Topic: in, Key: sarama.StringEncoder(fmt.Sprintf("k%03d", k)), Value: sarama.StringEncoder(strconv.Itoa(next[k]))}
				next[k]++
			}
			if err := producer.p.SendMessages(batch); err != nil {
				mu.Lock()
				prodErr = err
				mu.Unlock()
				return
			}
			mu.Lock()
			sent = append(sent, batch...)
			mu.Unlock()
		}
	}()
	committed := func() int64 {
		got, err := groupCommitted(admin, app, in, eosPartitions)
		if err != nil {
			return -1
		}
		var n int64
		for _, off := range got {
			n += max(off, 0)
		}
		return n
	}

	start := time.Now()
	deadline := start.Add(d)
	// Instance 0's memory is compared from when it is warm (its caches
	// and buffers filled) to the end.
	warmup := max(2*time.Minute, d/6)
	// A monitor samples the committed input every 200 ms: the longest
	// time without progress while input flows is the stall, charged to
	// the fault that began last before it.
	var (
		monMu   sync.Mutex
		current = "none"
		gaps    = map[string]time.Duration{} // fault -> longest gap since it began
		order   []string
	)
	monDone, stopMon := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(monDone)
		last, lastAt := committed(), time.Now()
		for {
			select {
			case <-stopMon:
				return
			case <-time.After(200 * time.Millisecond):
			}
			n := committed()
			now := time.Now()
			gap := now.Sub(lastAt)
			monMu.Lock()
			if gap > gaps[current] {
				gaps[current] = gap
			}
			monMu.Unlock()
			if n > last {
				last, lastAt = n, now
			}
		}
	}()
	// Instance 0's resident set is sampled every 10 s once it is warm;
	// its start and end are the medians of the first and the last six
	// samples (a minute each), as one reading of a Go process swings with
	// its garbage collector's cycle.
	var (
		rssMu      sync.Mutex
		rssSamples []int64
		memSamples []memSample // the instance's own report at each RSS sample
		taskCounts []int
	)
	stopRSS, rssDone := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(rssDone)
		tick := time.NewTicker(10 * time.Second)
		defer tick.Stop()
		for {
			select {
			case <-stopRSS:
				return
			case <-tick.C:
				if time.Since(start) >= warmup {
					kib, err := pidRSS(cl.children[0].cmd.Process.Pid)
					if err != nil {
						continue // checkAlive reports a dead instance
					}
					rssMu.Lock()
					rssSamples = append(rssSamples, kib)
					memSamples = append(memSamples, cl.children[0].reportedMem())
					taskCounts = append(taskCounts, len(cl.children[0].reportedTasks()))
					rssMu.Unlock()
				}
			}
		}
	}()
	faults := map[string]int{}
	for i := 0; time.Now().Before(deadline); i++ {
		time.Sleep(time.Duration(20+rng.IntN(41)) * time.Second) // the nemesis' pace
		cl.checkAlive()
		mu.Lock()
		perr := prodErr
		mu.Unlock()
		if perr != nil {
			t.Fatalf("producing input: %v", perr)
		}
		monMu.Lock()
		if i > 0 {
			t.Logf("  longest time without new committed input since %s: %v", current, gaps[current].Round(time.Millisecond))
		}
		current = fmt.Sprintf("fault %d", i+1)
		order = append(order, current)
		monMu.Unlock()
		began := time.Now()
		did := soakFault(t, rc, admin, cl, rng)
		faults[strings.TrimSuffix(strings.Fields(did)[0], ":")]++
		t.Logf("%v: fault %d: %s (took %v)", began.Sub(start).Round(time.Second), i+1, did, time.Since(began).Round(time.Millisecond))
	}
	// The last fault's recovery is watched too.
	time.Sleep(20 * time.Second)
	close(stopMon)
	<-monDone
	var longest time.Duration
	longestAfter := "none"
	for _, f := range order {
		if gaps[f] > longest {
			longest, longestAfter = gaps[f], f
		}
	}
	t.Logf("  longest time without new committed input since %s: %v", current, gaps[current].Round(time.Millisecond))
	stopProducing()
	close(stopRSS)
	<-rssDone
	rssStart, rssEnd, rssMin, rssMax := rssSummary(rssSamples)
	// Instances 1 and 2 may have been killed: each is reported with the
	// age of its current process.
	for i, ch := range cl.children {
		if kib, err := pidRSS(ch.cmd.Process.Pid); err == nil {
			t.Logf("instance %d: RSS %d KiB at the end, its process up for %v", i, kib, time.Since(ch.started).Round(time.Second))
		}
	}
	mu.Lock()
	msgs := sent
	mu.Unlock()
	input := inputByPartition(t, msgs, eosPartitions)
	waitInputCommitted(t, c, app, in, input, eosCompleteTimeout, cl.checkAlive)
	cl.stopAll()
	writeSentinels(t, c, echo, eosPartitions)
	writeSentinels(t, c, aggOut, eosPartitions)
	echoF := newFindings("echo " + echo)
	echoOut := readToSentinels(t, c, echo, eosPartitions, sarama.ReadCommitted)
	verifyEcho(echoF, input, echoOut)
	aggF := newFindings("agg-out " + aggOut)
	aggOutMsgs := readToSentinels(t, c, aggOut, eosPartitions, sarama.ReadCommitted)
	verifyAgg(aggF, input, aggOutMsgs)
	echoF.report(t)
	aggF.report(t)
	if echoF.total()+aggF.total() > 0 {
		logBrokerTransactions(t, app, 200)
		// Tell a reader's mistake from the log's: what does a client of
		// another library read at read_committed?
		kcat := kcatPath(t)
		for topic, msgs := range map[string][]*sarama.ConsumerMessage{echo: echoOut, aggOut: aggOutMsgs} {
			s, k := saramaLines(msgs), kcatRead(t, kcat, c, topic, "read_committed")
			t.Logf("%s: sarama read %d records, kcat %d; sarama's not in kcat's: %v; kcat's not in sarama's: %v",
				topic, len(s), len(k), linesMissingFrom(s, k), linesMissingFrom(k, s))
		}
	}
	total := 0
	for _, n := range faults {
		total += n
	}
	t.Logf("soak summary: %v, %d records processed, %d faults %v, violations %d (echo) + %d (agg-out), longest stall %v (after %s), instance 0 RSS %d KiB when warm, %d KiB at the end (%+.1f%%; %d samples from %d to %d KiB)",
		time.Since(start).Round(time.Second), len(msgs), total, faults, echoF.total(), aggF.total(), longest.Round(time.Millisecond), longestAfter,
		rssStart, rssEnd, 100*float64(rssEnd-rssStart)/float64(max(rssStart, 1)), len(rssSamples), rssMin, rssMax)
	t.Logf("instance 0 every 10 s once warm: RSS, Go heap in use, Go heap free and not returned, runtime Sys (KiB), goroutines, GCs, tasks")
	for i, kib := range rssSamples {
		m := memSamples[i]
		t.Logf("  %4d s: %6d %6d %6d %6d %4d %5d %d", 10*i, kib, m.HeapInuse, m.HeapFree, m.Sys, m.Goroutines, m.GCs, taskCounts[i])
	}
	if rssStart > 0 && float64(rssEnd) > 1.1*float64(rssStart) {
		t.Errorf("instance 0's RSS grew from %d to %d KiB, more than 10%%", rssStart, rssEnd)
	}
}

// soakFault injects one fault drawn at random and says what it did; its
// first word names its kind.
func soakFault(t *testing.T, rc *replicatedCluster, admin sarama.ClusterAdmin, cl *eosCluster, rng *rand.Rand) string {
	t.Helper()
	written := []string{cl.base.Echo, cl.base.AggOut, cl.base.App + "-agg-changelog"}
	n := 1 + rng.IntN(3)
	switch rng.IntN(6) {
	case 0:
		moved := moveLeaders(t, admin, cl.base.In, cl.base.Echo, cl.base.AggOut, cl.base.App+"-agg-changelog", "__consumer_offsets", "__transaction_state")
		return fmt.Sprintf("leaders: %d moved", moved)
	case 1:
		rc.broker(t, "", n)
		return fmt.Sprintf("restart: broker %d (SIGTERM)", n)
	case 2:
		rc.broker(t, "-kill", n)
		return fmt.Sprintf("crash: broker %d (SIGKILL)", n)
	case 3:
		rc.broker(t, "-stop", n)
		setMinISR(t, admin, 3, written...)
		time.Sleep(time.Duration(5+rng.IntN(11)) * time.Second) // the outage
		setMinISR(t, admin, 2, written...)
		rc.broker(t, "-start", n)
		return fmt.Sprintf("replicas: broker %d down with the outputs needing 3 in sync", n)
	case 4:
		b := coordinatorBroker(t, rc.Env, admin, cl.base.App)
		if b < 0 {
			rc.broker(t, "-kill", n)
			return fmt.Sprintf("coordinator: none found; broker %d crashed instead", n)
		}
		rc.broker(t, "-kill", int(b))
		return fmt.Sprintf("coordinator: broker %d, which held a transaction coordinator of the application, crashed", b)
	default:
		slot := 1 + rng.IntN(len(cl.children)-1) // instance 0 lives throughout
		cl.kill(slot)
		cl.waitTasks(slot, time.Minute)
		return fmt.Sprintf("instance: %d killed with SIGKILL and restarted", slot)
	}
}

// coordinatorBroker returns the broker id (1-3) of the transaction
// coordinator of one of app's transactional ids, -1 when none is found.
func coordinatorBroker(t *testing.T, c *kafka.Env, admin sarama.ClusterAdmin, app string) int32 {
	t.Helper()
	ta, ok := admin.(sarama.TransactionClusterAdmin)
	if !ok {
		return -1
	}
	listed, err := ta.ListTransactions(nil, nil, -1)
	if err != nil {
		return -1
	}
	cl, err := sarama.NewClient(c.Brokers, c.SaramaConfig())
	if err != nil {
		return -1
	}
	defer cl.Close()
	for _, l := range listed {
		if !strings.HasPrefix(l.TransactionalID, app+"-") {
			continue
		}
		if b, err := cl.TransactionCoordinator(l.TransactionalID); err == nil {
			return b.ID()
		}
	}
	return -1
}

// rssSummary returns the medians of the first and of the last six
// samples, and the smallest and largest sample (KiB); zeros without
// samples.
func rssSummary(samples []int64) (start, end, least, most int64) {
	if len(samples) == 0 {
		return 0, 0, 0, 0
	}
	median := func(s []int64) int64 {
		s = slices.Clone(s)
		slices.Sort(s)
		return s[len(s)/2]
	}
	n := min(6, len(samples))
	return median(samples[:n]), median(samples[len(samples)-n:]), slices.Min(samples), slices.Max(samples)
}

// pidRSS returns the resident set of process pid in KiB.
func pidRSS(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			return strconv.ParseInt(strings.Fields(v)[0], 10, 64)
		}
	}
	return 0, fmt.Errorf("/proc/%d/status has no VmRSS", pid)
}
