package integration

// Chaos tests: the exactly-once test's three instance processes, with a
// repartition topic between the input and the aggregate, run through the
// fault proxy (integration/faultproxy) while it delays, drops or cuts the
// transaction's requests and responses, partitions one instance from the
// broker, or while the broker itself restarts; kill -9 on top of each. The
// verifier then names what it finds wrong: a lost write, a duplicate, an
// aborted read, a count that went backwards, an output with no input, a
// transaction left open.
//
// `make test` runs a short round of each scenario; `make chaos` sets
// WEIR_CHAOS_ROUNDS for more rounds and input.

import (
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/integration/faultproxy"
	"github.com/weirstream/weir/processor"
	"github.com/weirstream/weir/serde"
	"github.com/weirstream/weir/weirtest/kafka"
)

// The anomalies the verifier names (the kinds of findings).
const (
	anomalyLost        = "lost write"
	anomalyDuplicate   = "duplicate"
	anomalyAbortedRead = "aborted read"
	anomalyBackwards   = "count went backwards"
	anomalyNoInput     = "output with no input"
	anomalyOpenTxn     = "transaction left open"
)

// canaryPrefix starts the keys of the records the canary writes in
// transactions it aborts: none may ever be read read_committed.
const canaryPrefix = "aborted-"

// poisonPrefix starts the values of input records that are no sequence
// number: the aggregate fails on them, and its instance, whose processing
// errors are skipped, aborts its transaction and replays without them.
// The echo copies them like any other record.
const poisonPrefix = "poison-"

// chaosTopology is eosTopology with a repartition topic between the input
// and the aggregate: the aggregate's sub-topology reads what the first
// one wrote in its transactions.
func chaosTopology(in, echo, aggOut string) *processor.Topology {
	t := processor.NewTopology()
	src := t.AddSource("in", in, serde.String(), serde.String())
	t.AddSink("echo", echo, serde.String(), serde.String(), src)
	rekeyed := t.AddRepartition("rekey", serde.String(), serde.String(), src)
	agg := t.AddProcessor("count-sum", func() processor.Processor[string, string, string, string] { return &countSum{} }, rekeyed)
	t.AddStore(eosAgg, agg)
	t.AddSink("agg-out", aggOut, serde.String(), serde.String(), agg)
	return t
}

// chaosRounds is how many rounds of its fault each scenario runs: 1 in
// `make test`, WEIR_CHAOS_ROUNDS in `make chaos`.
func chaosRounds(t *testing.T) int {
	s := os.Getenv("WEIR_CHAOS_ROUNDS")
	if s == "" {
		return 1
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		t.Fatalf("WEIR_CHAOS_ROUNDS=%q: want a positive number", s)
	}
	return n
}

// chaosEnv returns an environment variable the chaos tests need: set by
// the cluster of `make kafka-up`. Without it the test is skipped, or fails
// under CI=true.
func chaosEnv(t *testing.T, name string) string {
	t.Helper()
	v := os.Getenv(name)
	if v != "" {
		return v
	}
	if ci, err := strconv.ParseBool(os.Getenv("CI")); err == nil && ci {
		t.Fatalf("%s is not set: the chaos tests need the cluster of `make kafka-up` (integration/env/up.sh), and CI never skips them", name)
	}
	t.Skipf("%s is not set: run the cluster of `make kafka-up`", name)
	return ""
}

// restartBroker restarts the test broker on its data with
// $WEIR_BROKER_RESTART, integration/env/restart.sh (SIGKILL when kill is
// set, else SIGTERM), and returns once it accepts connections again.
func restartBroker(kill bool) error {
	args := []string{}
	if kill {
		args = append(args, "-kill")
	}
	out, err := exec.Command(os.Getenv("WEIR_BROKER_RESTART"), args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("restarting the broker: %w\n%s", err, out)
	}
	return nil
}

// chaosRun is one scenario's run: the instances behind the proxy, their
// input and what the test injected.
type chaosRun struct {
	t *testing.T
	c *kafka.Env
	// rc is the replicated cluster the run is on; nil on the single
	// broker.
	rc       *replicatedCluster
	proxy    *faultproxy.Proxy
	cl       *eosCluster
	rng      *rand.Rand
	admin    sarama.ClusterAdmin
	app      string
	in       string
	echo     string
	aggOut   string
	producer *chunkProducer
	msgs     []*sarama.ProducerMessage
	next     int // msgs[:next] are produced
	// poison are the records produced besides msgs that the aggregate
	// fails on (poisonPrefix): echoed, never counted.
	poison []*sarama.ProducerMessage
	kills  int
	fired  map[faultproxy.Action]int // the proxy's counts when the round began
	// partitioned is the instance the round cuts off from the broker, -1
	// for none.
	partitioned int
}

// clientOf is the client id prefix of instance slot's connections.
func (r *chaosRun) clientOf(slot int) string { return r.app + "-i" + strconv.Itoa(slot) + "-" }

// produce produces the next n input records (fewer at the end).
func (r *chaosRun) produce(n int) {
	r.t.Helper()
	end := min(r.next+n, len(r.msgs))
	if err := r.producer.send(r.msgs[r.next:end]); err != nil {
		r.t.Fatalf("producing input: %v", err)
	}
	r.next = end
}

// producePoison produces per input partition perPartition records the
// aggregate fails on (poisonPrefix), keyed with input keys of that
// partition, so that every task of the aggregate's sub-topology aborts a
// transaction for one.
func (r *chaosRun) producePoison(round, perPartition int) {
	r.t.Helper()
	part := r.c.SaramaConfig().Producer.Partitioner(r.in)
	left := map[int32]int{}
	for p := range int32(eosPartitions) {
		left[p] = perPartition
	}
	var msgs []*sarama.ProducerMessage
	for k := 0; k < eosKeys && len(left) > 0; k++ {
		m := &sarama.ProducerMessage{Topic: r.in, Key: sarama.StringEncoder(fmt.Sprintf("k%03d", k)),
			Value: sarama.StringEncoder(fmt.Sprintf("%sr%d-k%03d", poisonPrefix, round, k))}
		p, err := part.Partition(m, eosPartitions)
		if err != nil {
			r.t.Fatal(err)
		}
		if left[p] == 0 {
			continue
		}
		if left[p]--; left[p] == 0 {
			delete(left, p)
		}
		msgs = append(msgs, m)
	}
	if err := r.producer.p.SendMessages(msgs); err != nil {
		r.t.Fatalf("producing poison records: %v", err)
	}
	r.poison = append(r.poison, msgs...)
}

// withoutPoison is the input the aggregate counts: in without the poison
// records.
func withoutPoison(in map[int32][]inRec) map[int32][]inRec {
	out := map[int32][]inRec{}
	for p, recs := range in {
		for _, rec := range recs {
			if !strings.HasPrefix(rec.value, poisonPrefix) {
				out[p] = append(out[p], rec)
			}
		}
	}
	return out
}

// feed produces the next n input records from a goroutine, 100 every
// 50 ms (all at once with burst), so that input flows while a fault is
// injected; wait returns the producer's error.
func (r *chaosRun) feed(n int, burst bool) (wait func() error) {
	end := min(r.next+n, len(r.msgs))
	batch := r.msgs[r.next:end]
	r.next = end
	done := make(chan error, 1)
	go func() {
		for len(batch) > 0 {
			k := min(100, len(batch))
			if burst {
				k = len(batch)
			}
			if err := r.producer.p.SendMessages(batch[:k]); err != nil {
				done <- err
				return
			}
			batch = batch[k:]
			if len(batch) > 0 {
				time.Sleep(50 * time.Millisecond)
			}
		}
		done <- nil
	}()
	return func() error { return <-done }
}

// committed is the sum of the group's committed input offsets.
func (r *chaosRun) committed() int64 {
	got, err := groupCommitted(r.c.Admin(r.t), r.app, r.in, eosPartitions)
	if err != nil {
		return -1
	}
	var sum int64
	for _, o := range got {
		sum += max(o, 0)
	}
	return sum
}

// waitProgress produces n more records and returns how long the group took
// to commit past what it had committed: the time to recover after a
// fault.
func (r *chaosRun) waitProgress(n int, timeout time.Duration) time.Duration {
	r.t.Helper()
	before := r.committed()
	start := time.Now()
	r.produce(n)
	kafka.Eventually(r.t, timeout, 100*time.Millisecond, func() (bool, string) {
		r.cl.checkAlive()
		now := r.committed()
		return now > before, fmt.Sprintf("committed input offsets still sum to %d", now)
	})
	return time.Since(start)
}

// killOne kills a random instance with SIGKILL and restarts it on its state
// directory. It spares the instance the round partitions: restarted
// while no broker answers, an instance's Run fails at once ("connecting
// to ...: client has run out of available brokers"), which is weir's
// documented start-up behaviour and would end the scenario. It returns
// the instance's slot.
func (r *chaosRun) killOne() int {
	slot := r.rng.IntN(eosInstances)
	for slot == r.partitioned {
		slot = r.rng.IntN(eosInstances)
	}
	r.cl.kill(slot)
	r.kills++
	r.t.Logf("kill -9 of instance %d", slot)
	return slot
}

// chaosScenario is one fault, injected each round between two parts of the
// input.
type chaosScenario struct {
	name string
	// fault injects the fault for the round and returns at once; wait,
	// called on the test's goroutine, returns once the fault is over.
	fault func(r *chaosRun, round int) (wait func())
	// kill adds a kill -9 of a random instance to each round, while the
	// fault is in force.
	kill bool
	// killFirst puts the kill before the fault: an instance restarted
	// while no broker answers fails its Run at once (weir's documented
	// start-up behaviour), which would end the scenario.
	killFirst bool
	// burst produces the round's input at once, before the fault: the
	// broker restart would fail a producer that runs across it, and the
	// instances are still busy with the backlog when it comes.
	burst bool
}

// The scenarios. Each instance's requests time out after
// chaosRequestTimeout, so a delay of chaosLate is past it.
const (
	chaosRequestTimeout = 3 * time.Second
	chaosLate           = 5 * time.Second
	chaosRecords        = 6000 // per round
)

// replicatedChaos says whether the chaos tests run on the replicated
// three-broker cluster (WEIR_CHAOS_BROKERS=3, as `make chaos` sets), where
// the scenarios of leader moves, coordinator and replica loss and rolling
// restarts join those of the single broker.
var replicatedChaos = os.Getenv("WEIR_CHAOS_BROKERS") == "3"

func chaosScenarios() []chaosScenario {
	endTxnLate := func(r *chaosRun, round int) func() {
		// EndTxn of one instance held past its request timeout, then
		// delivered: the commit or abort lands while the client has
		// given up on it (the torn-transaction race of clients without
		// KIP-890).
		slot := round % eosInstances
		id := r.proxy.Add(faultproxy.Rule{APIs: []faultproxy.APIKey{faultproxy.EndTxn}, ClientID: r.clientOf(slot), Action: faultproxy.DelayRequest, Delay: chaosLate, Once: true})
		return func() {
			defer r.proxy.Remove(id)
			r.waitFired(faultproxy.DelayRequest, 30*time.Second)
		}
	}
	endTxnDropped := func(r *chaosRun, round int) func() {
		// The broker ends the transaction, the client never hears of it.
		slot := round % eosInstances
		id := r.proxy.Add(faultproxy.Rule{APIs: []faultproxy.APIKey{faultproxy.EndTxn}, TxnEnd: faultproxy.CommitTxnEnd, ClientID: r.clientOf(slot), Action: faultproxy.DropResponse, Once: true})
		return func() {
			defer r.proxy.Remove(id)
			r.waitFired(faultproxy.DropResponse, 30*time.Second)
		}
	}
	abortDropped := func(r *chaosRun, round int) func() {
		// Records the aggregate fails on make the instances that own
		// its tasks abort (and replay without them); the broker aborts
		// the first of those transactions, whichever instance's, and the
		// client never hears of it.
		id := r.proxy.Add(faultproxy.Rule{APIs: []faultproxy.APIKey{faultproxy.EndTxn}, TxnEnd: faultproxy.AbortTxnEnd, ClientID: r.app + "-i", Action: faultproxy.DropResponse, Once: true})
		r.producePoison(round, 2)
		return func() {
			defer r.proxy.Remove(id)
			r.waitFired(faultproxy.DropResponse, 30*time.Second)
		}
	}
	offsetsLate := func(r *chaosRun, round int) func() {
		// TxnOffsetCommit of one instance delayed while another one
		// leaves the group and comes back: the offsets arrive for a
		// generation that is over.
		slot := round % eosInstances
		id := r.proxy.Add(faultproxy.Rule{APIs: []faultproxy.APIKey{faultproxy.TxnOffsetCommit}, ClientID: r.clientOf(slot), Action: faultproxy.DelayRequest, Delay: 2 * time.Second, Once: true})
		return func() {
			defer r.proxy.Remove(id)
			r.waitFired(faultproxy.DelayRequest, 30*time.Second)
			other := (slot + 1) % eosInstances
			r.cl.kill(other)
			r.t.Logf("instance %d restarted while instance %d's offsets were held", other, slot)
		}
	}
	partition := func(r *chaosRun, round int) func() {
		// One instance cut off from the broker for longer than the
		// session timeout (6 s), then healed.
		slot := round % eosInstances
		const d = 8 * time.Second
		r.partitioned = slot
		r.proxy.Partition(r.clientOf(slot), d)
		healed := time.Now().Add(d)
		r.t.Logf("instance %d partitioned from the broker for %v", slot, d)
		return func() {
			// The partition's length is the fault itself.
			time.Sleep(time.Until(healed))
		}
	}
	brokerRestart := func(r *chaosRun, round int) func() {
		// The broker restarts while every instance commits every 100 ms:
		// stopped cleanly in even rounds, killed in odd ones. On three
		// brokers, each in turn.
		kill := round%2 == 1
		done := make(chan error, 1)
		start := time.Now()
		n := round%3 + 1
		go func() {
			if r.rc != nil {
				done <- r.rc.restart(map[bool]string{true: "-kill", false: ""}[kill], n)
				return
			}
			done <- restartBroker(kill)
		}()
		return func() {
			if err := <-done; err != nil {
				r.t.Fatal(err)
			}
			r.t.Logf("broker %d restarted (SIGKILL %v) in %v", n, kill, time.Since(start).Round(time.Millisecond))
		}
	}
	scenarios := []chaosScenario{
		{name: "EndTxnDelayedPastTimeout", fault: endTxnLate},
		{name: "EndTxnResponseDropped", fault: endTxnDropped},
		{name: "EndTxnAbortResponseDropped", fault: abortDropped},
		{name: "TxnOffsetCommitDelayedAcrossRebalance", fault: offsetsLate},
		{name: "InstancePartitionedPastSessionTimeout", fault: partition},
		{name: "BrokerRestartMidCommit", fault: brokerRestart, burst: true},
		{name: "EndTxnDelayedWithKill9", fault: endTxnLate, kill: true},
		{name: "EndTxnDroppedWithKill9", fault: endTxnDropped, kill: true},
		{name: "EndTxnAbortDroppedWithKill9", fault: abortDropped, kill: true},
		{name: "PartitionWithKill9", fault: partition, kill: true},
		{name: "BrokerRestartWithKill9", fault: brokerRestart, kill: true, killFirst: true, burst: true},
	}
	if !replicatedChaos {
		return scenarios
	}
	leaders := func(r *chaosRun, round int) func() {
		// The leaders of every partition of the input, the outputs, the
		// repartition topic, the changelog, __consumer_offsets and
		// __transaction_state move to another replica, mid-transaction.
		moved := moveLeaders(r.t, r.admin, r.topics()...)
		r.t.Logf("%d leaders moved", moved)
		return func() {}
	}
	coordinator := func(r *chaosRun, round int) func() {
		// The broker of a transaction coordinator of the application is
		// killed with SIGKILL (and restarted) while every instance
		// commits every 100 ms.
		b := coordinatorBroker(r.t, r.c, r.admin, r.app)
		if b < 0 {
			b = int32(round%3 + 1)
		}
		done := make(chan error, 1)
		start := time.Now()
		go func() { done <- r.rc.restart("-kill", int(b)) }()
		return func() {
			if err := <-done; err != nil {
				r.t.Fatal(err)
			}
			r.t.Logf("broker %d, a transaction coordinator of the application, killed and restarted in %v", b, time.Since(start).Round(time.Millisecond))
		}
	}
	replicaLoss := func(r *chaosRun, round int) func() {
		// One broker down while the outputs and the changelog need all
		// three replicas in sync: every produce to them fails with
		// NOT_ENOUGH_REPLICAS until it is back.
		n := round%3 + 1
		written := r.written()
		setMinISR(r.t, r.admin, 3, written...)
		outage := time.Duration(5+r.rng.IntN(11)) * time.Second
		done := make(chan error, 1)
		go func() {
			if err := r.rc.restart("-stop", n); err != nil {
				done <- err
				return
			}
			time.Sleep(outage) // the outage is the fault
			done <- nil
		}()
		return func() {
			err := <-done
			setMinISR(r.t, r.admin, 2, written...)
			if serr := r.rc.restart("-start", n); err == nil {
				err = serr
			}
			if err != nil {
				r.t.Fatal(err)
			}
			r.t.Logf("broker %d down for %v with the outputs needing 3 replicas in sync", n, outage)
		}
	}
	rolling := func(r *chaosRun, round int) func() {
		// A rolling restart of the three brokers (SIGTERM, each back
		// before the next), under load.
		done := make(chan error, 1)
		start := time.Now()
		go func() {
			for n := 1; n <= 3; n++ {
				if err := r.rc.restart("", n); err != nil {
					done <- err
					return
				}
			}
			done <- nil
		}()
		return func() {
			if err := <-done; err != nil {
				r.t.Fatal(err)
			}
			r.t.Logf("rolling restart of the three brokers in %v", time.Since(start).Round(time.Millisecond))
		}
	}
	return append(scenarios,
		chaosScenario{name: "LeadersMovedWithKill9", fault: leaders, kill: true},
		chaosScenario{name: "CoordinatorBrokerKilledWithKill9", fault: coordinator, kill: true, killFirst: true, burst: true},
		chaosScenario{name: "ReplicaLostWithKill9", fault: replicaLoss, kill: true},
		chaosScenario{name: "RollingRestartWithKill9", fault: rolling, kill: true, killFirst: true, burst: true},
	)
}

// topics returns every topic of the run's application (the input, the
// outputs, its repartition and changelog topics) and Kafka's internal
// topics of offsets and transactions.
func (r *chaosRun) topics() []string {
	all, err := r.admin.ListTopics()
	if err != nil {
		r.t.Fatalf("listing topics: %v", err)
	}
	out := []string{r.in, "__consumer_offsets", "__transaction_state"}
	for name := range all {
		if strings.HasPrefix(name, r.app+"-") || name == r.echo || name == r.aggOut {
			out = append(out, name)
		}
	}
	return out
}

// written returns the topics the run's application writes: its outputs,
// repartition and changelog topics.
func (r *chaosRun) written() []string {
	return slices.DeleteFunc(r.topics(), func(name string) bool {
		return name == r.in || strings.HasPrefix(name, "__")
	})
}

// waitFired waits until the proxy has fired action once more than when the
// round started.
func (r *chaosRun) waitFired(action faultproxy.Action, timeout time.Duration) {
	r.t.Helper()
	kafka.Eventually(r.t, timeout, 50*time.Millisecond, func() (bool, string) {
		r.cl.checkAlive()
		return r.proxy.Stats().Fired[action] > r.firedBefore(action), fmt.Sprintf("the proxy has not fired %v yet", action)
	})
}

// TestChaos runs every scenario, one after another: they share the fault
// proxy's port and the broker, so none runs beside another test.
func TestChaos(t *testing.T) {
	var (
		c      *kafka.Env
		rc     *replicatedCluster
		routes []faultproxy.Route
	)
	if replicatedChaos {
		rc = replicated(t)
		c = rc.Env
		t.Cleanup(rc.allUp)
		upstreams := strings.Split(chaosEnv(t, "WEIR_REPLICATED_PROXIED_UPSTREAMS"), ",")
		addrs := strings.Split(chaosEnv(t, "WEIR_REPLICATED_FAULT_PROXY_ADDRS"), ",")
		if len(upstreams) != len(addrs) {
			t.Fatalf("WEIR_REPLICATED_PROXIED_UPSTREAMS %v and WEIR_REPLICATED_FAULT_PROXY_ADDRS %v differ in length", upstreams, addrs)
		}
		for i := range addrs {
			routes = append(routes, faultproxy.Route{Listen: addrs[i], Upstream: upstreams[i]})
		}
	} else {
		c = kafka.Cluster(t)
		routes = []faultproxy.Route{{Listen: chaosEnv(t, "WEIR_FAULT_PROXY_ADDR"), Upstream: chaosEnv(t, "WEIR_PROXIED_UPSTREAM")}}
		chaosEnv(t, "WEIR_BROKER_RESTART")
	}
	rounds := chaosRounds(t)
	for _, sc := range chaosScenarios() {
		t.Run(sc.name, func(t *testing.T) {
			proxy, err := faultproxy.StartRoutes(routes...)
			if err != nil {
				t.Fatalf("starting the fault proxy on %v: %v", routes, err)
			}
			defer proxy.Close()
			runChaos(t, c, rc, proxy, sc, rounds)
		})
	}
}

func runChaos(t *testing.T, c *kafka.Env, rc *replicatedCluster, proxy *faultproxy.Proxy, sc chaosScenario, rounds int) {
	in, echo, aggOut, app := c.Name(t, "in"), c.Name(t, "echo"), c.Name(t, "agg-out"), c.Name(t, "app")
	for _, topic := range []string{in, echo, aggOut} {
		c.CreateTopic(t, topic, eosPartitions, nil)
	}
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d, %d round(s)", seed, rounds)
	rng := rand.New(rand.NewPCG(seed, seed>>1))
	base := eosChildConfig{
		Brokers: proxy.Addrs(), App: app, In: in, Echo: echo, AggOut: aggOut,
		Guarantee: weir.ExactlyOnce, Repartition: true, ClientIDPrefix: app + "-i", RequestTimeout: chaosRequestTimeout,
	}
	started := time.Now()
	cl := newEOSCluster(t, base, eosInstances)
	defer keepLogs(t, cl)
	for i := range eosInstances {
		cl.waitTasks(i, 60*time.Second)
	}
	r := &chaosRun{t: t, c: c, rc: rc, admin: c.Admin(t), proxy: proxy, cl: cl, rng: rng, app: app, in: in, echo: echo, aggOut: aggOut, producer: newChunkProducer(t, c),
		msgs: eosInput(in, rounds*(chaosRecords+chaosRecords/10)+chaosRecords, eosKeys, rng)}
	stopCanary := startCanary(t, c, echo, aggOut)

	var recoveries []time.Duration
	for round := range rounds {
		// Input in flight while the fault hits, then a part more to see
		// the group recover.
		fed := r.feed(chaosRecords, sc.burst)
		if sc.burst {
			if err := fed(); err != nil {
				t.Fatalf("producing input: %v", err)
			}
		}
		r.resetFired()
		r.partitioned = -1
		if sc.killFirst {
			// The restarted instance must be past its start-up, where a
			// broker that does not answer fails its Run, before the
			// fault takes the broker away.
			r.cl.waitTasks(r.killOne(), 60*time.Second)
		}
		wait := sc.fault(r, round)
		if sc.kill && !sc.killFirst {
			// The delay puts the kill at a random point of the fault.
			time.Sleep(time.Duration(rng.Int64N(int64(2 * time.Second))))
			r.killOne()
		}
		wait()
		if !sc.burst {
			if err := fed(); err != nil {
				t.Fatalf("producing input: %v", err)
			}
		}
		recoveries = append(recoveries, r.waitProgress(chaosRecords/10, 2*time.Minute))
	}
	r.produce(len(r.msgs))
	input := inputByPartition(t, append(slices.Clone(r.msgs), r.poison...), eosPartitions)
	counted := withoutPoison(input)
	waitInputCommitted(t, c, app, in, input, 3*time.Minute, cl.checkAlive)
	// The aggregate's sub-topology reads the repartition topic: the input
	// being committed does not mean the aggregates are.
	waitAggregates(t, c, aggOut, counted, 2*time.Minute, cl.checkAlive)
	cl.stopAll()
	canaries := stopCanary()

	findings := verifyChaos(t, c, input, counted, echo, aggOut)
	for _, f := range findings {
		f.report(t)
	}
	if findings[0].total()+findings[1].total() > 0 {
		logBrokerTransactions(t, app, 80)
	}
	for _, e := range proxy.Log() {
		if e.Rule != 0 {
			t.Logf("fault: %v", e)
		}
	}
	for i, path := range cl.logs {
		if warn := grepLines(path, "level=WARN", 8); warn != "" {
			t.Logf("instance %d's first warnings:\n%s", i, warn)
		}
	}
	stats := proxy.Stats()
	t.Logf("%s: %d rounds, %d kills, faults fired %v, %d canary transactions aborted; instances logged %s; time to recover after each fault %v; %d violations; %v in all",
		sc.name, rounds, r.kills, stats.Fired, canaries, cl.logCounts(), recoveries, findings[0].total()+findings[1].total(), time.Since(started).Round(time.Millisecond))
}

// keepLogs copies the instances' logs of a failed scenario into the
// directory WEIR_CHAOS_LOGS names, if any: the test's own directory is
// removed when it ends.
func keepLogs(t *testing.T, cl *eosCluster) {
	dir := os.Getenv("WEIR_CHAOS_LOGS")
	if dir == "" || !t.Failed() {
		return
	}
	// SIGQUIT makes a Go process write every goroutine's stack to stderr
	// (its log) and exit: where a stuck instance waits.
	for _, ch := range cl.children {
		if ch.exited() {
			continue
		}
		ch.expected = true
		_ = ch.cmd.Process.Signal(syscall.SIGQUIT)
		select {
		case <-ch.done:
		case <-time.After(10 * time.Second):
		}
	}
	for i, path := range cl.logs {
		b, err := os.ReadFile(path)
		if err == nil {
			err = os.WriteFile(filepath.Join(dir, fmt.Sprintf("%s-instance-%d.log", strings.ReplaceAll(t.Name(), "/", "-"), i)), b, 0o644)
		}
		if err != nil {
			t.Logf("keeping instance %d's log: %v", i, err)
		}
	}
	t.Logf("instance logs kept in %s", dir)
}

// firedBefore and resetFired keep the proxy's counts at the start of a
// round.
func (r *chaosRun) firedBefore(a faultproxy.Action) int { return r.fired[a] }

func (r *chaosRun) resetFired() { r.fired = r.proxy.Stats().Fired }

// startCanary writes, every 200 ms until stopped, a transaction of one
// record to every partition of each topic and aborts it: a reader that
// ever sees one read_committed has read an aborted transaction. stop
// returns how many transactions it aborted.
func startCanary(t *testing.T, c *kafka.Env, topics ...string) (stop func() int) {
	var n int
	var failure error
	t.Helper()
	p := newTxnProducer(t, c, c.Name(t, "canary"))
	quit, done := make(chan struct{}), make(chan struct{})
	// Cleanups run last first: this one stops the canary before the
	// producer is closed under it.
	t.Cleanup(func() { stop() })
	go func() {
		defer close(done)
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-quit:
				return
			case <-tick.C:
			}
			if err := p.BeginTxn(); err != nil {
				failure = fmt.Errorf("begin: %w", err)
				return
			}
			var msgs []*sarama.ProducerMessage
			for _, topic := range topics {
				for part, key := range sentinelKeys(eosPartitions) {
					msgs = append(msgs, &sarama.ProducerMessage{Topic: topic, Partition: part, Key: sarama.StringEncoder(canaryPrefix + key + "-" + strconv.Itoa(i)), Value: sarama.StringEncoder("canary")})
				}
			}
			// A broker restart fails a send; the canary then aborts
			// what it has and tries again at the next tick.
			_ = p.SendMessages(msgs)
			if err := p.AbortTxn(); err != nil {
				failure = fmt.Errorf("abort: %w", err)
				return
			}
			n++
		}
	}()
	var once sync.Once
	stop = func() int {
		once.Do(func() {
			close(quit)
			<-done
			if failure != nil {
				t.Logf("the canary stopped early: %v", failure)
			}
		})
		return n
	}
	return stop
}

// waitAggregates reads topic read_committed until every key's last
// "count,sum" is its input count, for at most timeout, calling check on
// the way. It returns either way: the verifier names what is missing.
func waitAggregates(t *testing.T, c *kafka.Env, topic string, input map[int32][]inRec, timeout time.Duration, check func()) {
	t.Helper()
	want := map[string]int64{}
	for _, recs := range input {
		for _, r := range recs {
			want[r.key]++
		}
	}
	cfg := c.SaramaConfig()
	cfg.Consumer.IsolationLevel = sarama.ReadCommitted
	consumer, err := sarama.NewConsumer(c.Brokers, cfg)
	if err != nil {
		t.Fatalf("consumer: %v", err)
	}
	defer consumer.Close()
	msgs, done := make(chan *sarama.ConsumerMessage, 1024), make(chan struct{})
	defer close(done)
	for p := range int32(eosPartitions) {
		pc, err := consumer.ConsumePartition(topic, p, sarama.OffsetOldest)
		if err != nil {
			t.Fatalf("consuming %s/%d: %v", topic, p, err)
		}
		defer pc.AsyncClose()
		go func() {
			for m := range pc.Messages() {
				select {
				case msgs <- m:
				case <-done:
					return
				}
			}
		}()
	}
	behind := len(want)
	got := map[string]int64{}
	deadline := time.After(timeout)
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for behind > 0 {
		select {
		case m := <-msgs:
			k := string(m.Key)
			count, _, err := parseCountSum(string(m.Value))
			if err != nil || want[k] == 0 {
				continue
			}
			if got[k] == want[k] && count != want[k] {
				behind++
			} else if got[k] != want[k] && count == want[k] {
				behind--
			}
			got[k] = count
		case <-tick.C:
			check()
		case <-deadline:
			t.Logf("%d keys' aggregates still short of their input after %v", behind, timeout)
			return
		}
	}
}

// verifyChaos reads echo and agg-out read_committed to the end markers it
// appends and checks them against the input: the echo verifier against
// all of it, the aggregate's against counted (the input without its
// poison records), plus aborted reads (canary records) and transactions
// left open (a partition whose read never reaches its end marker).
func verifyChaos(t *testing.T, c *kafka.Env, input, counted map[int32][]inRec, echo, aggOut string) []*findings {
	t.Helper()
	echoF, aggF := newFindings("echo "+echo), newFindings("agg-out "+aggOut)
	for _, check := range []struct {
		topic  string
		f      *findings
		input  map[int32][]inRec
		verify func(*findings, map[int32][]inRec, []*sarama.ConsumerMessage)
	}{{echo, echoF, input, verifyEcho}, {aggOut, aggF, counted, verifyAgg}} {
		writeSentinels(t, c, check.topic, eosPartitions)
		recs := readCommittedToSentinels(t, c, check.f, check.topic, 45*time.Second)
		var kept []*sarama.ConsumerMessage
		for _, m := range recs {
			if strings.HasPrefix(string(m.Key), canaryPrefix) {
				check.f.add(anomalyAbortedRead, "partition %d offset %d: key %s of a transaction the canary aborted", m.Partition, m.Offset, m.Key)
				continue
			}
			kept = append(kept, m)
		}
		check.verify(check.f, check.input, kept)
	}
	return []*findings{echoF, aggF}
}

// readCommittedToSentinels reads every partition of topic read_committed
// from its start to its sentinel, for at most timeout. A partition that
// does not get there holds a transaction that never ended: reported as
// anomalyOpenTxn, with where its read stopped.
func readCommittedToSentinels(t *testing.T, c *kafka.Env, f *findings, topic string, timeout time.Duration) []*sarama.ConsumerMessage {
	t.Helper()
	cfg := c.SaramaConfig()
	cfg.Consumer.IsolationLevel = sarama.ReadCommitted
	cfg.Consumer.Offsets.Initial = sarama.OffsetOldest
	consumer, err := sarama.NewConsumer(c.Brokers, cfg)
	if err != nil {
		t.Fatalf("consumer: %v", err)
	}
	defer consumer.Close()
	ends := kafka.EndOffsets(t, c, topic)
	var out []*sarama.ConsumerMessage
	deadline := time.After(timeout)
	for p := range int32(eosPartitions) {
		pc, err := consumer.ConsumePartition(topic, p, sarama.OffsetOldest)
		if err != nil {
			t.Fatalf("consuming %s/%d: %v", topic, p, err)
		}
		last := int64(-1)
	read:
		for {
			select {
			case m := <-pc.Messages():
				last = m.Offset
				if strings.HasPrefix(string(m.Key), sentinelPrefix) {
					break read
				}
				out = append(out, m)
			case err := <-pc.Errors():
				t.Fatalf("reading %s/%d: %v", topic, p, err)
			case <-deadline:
				f.add(anomalyOpenTxn, "partition %d: read_committed stopped after offset %d of %d: a transaction there never ended", p, last, ends[p])
				deadline = time.After(0)
				break read
			}
		}
		_ = pc.Close()
	}
	return out
}

// logCounts counts the lines of the instances' logs that tell of aborts,
// fencing, unknown outcomes, producer rebuilds, records left open by a
// lost marker and assignments.
func (cl *eosCluster) logCounts() string {
	kinds := []struct{ name, text string }{
		{"aborts", "transaction aborted"},
		{"replays without a failed record", "aborting the transaction and replaying without the record"},
		{"fenced", "producer fenced"},
		{"unknown outcomes", "transaction outcome unknown"},
		{"rebuilds after a slow commit", "rebuilding the producer so that no late request"},
		{"open records of aborted transactions ended", "ending them with an abort"},
		{"open records of committed transactions ended", "ending them with a commit"},
		{"assignments", `msg=assignment`},
	}
	counts := make([]int, len(kinds))
	for _, path := range cl.logs {
		b, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		for i, k := range kinds {
			counts[i] += strings.Count(string(b), k.text)
		}
	}
	var parts []string
	for i, k := range kinds {
		parts = append(parts, fmt.Sprintf("%d %s", counts[i], k.name))
	}
	return strings.Join(parts, ", ")
}

// grepLines returns the first n lines of the file at path that contain
// text.
func grepLines(path, text string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, text) && len(out) < n {
			out = append(out, "  "+l)
		}
	}
	return strings.Join(out, "\n")
}

// logBrokerTransactions logs, after a test found a violation, what the
// brokers of `make kafka-up` logged of app's transactional ids (its
// coordinators initialising, timing out, aborting, fencing), at most the
// last max lines of every broker log: the brokers' own account of the
// transactions the verifier found wrong. The logs are found through the
// run directories env.sh exports (WEIR_ENV_DIR, WEIR_REPLICATED_ENV_DIR).
func logBrokerTransactions(t *testing.T, app string, max int) {
	t.Helper()
	for _, dir := range []string{os.Getenv("WEIR_ENV_DIR"), os.Getenv("WEIR_REPLICATED_ENV_DIR")} {
		if dir == "" {
			continue
		}
		paths, _ := filepath.Glob(filepath.Join(dir, "broker*.log"))
		for _, path := range paths {
			b, err := os.ReadFile(path)
			if err != nil {
				continue
			}
			var lines []string
			for _, l := range strings.Split(string(b), "\n") {
				if strings.Contains(l, app) {
					lines = append(lines, "  "+l)
				}
			}
			if len(lines) == 0 {
				continue
			}
			if len(lines) > max {
				lines = lines[len(lines)-max:]
			}
			t.Logf("%s: %d lines naming %s, the last ones:\n%s", path, len(lines), app, strings.Join(lines, "\n"))
		}
	}
}
