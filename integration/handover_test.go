package integration

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/processor"
	"github.com/weirstream/weir/serde"
	"github.com/weirstream/weir/weirtest/kafka"
)

// perKeyCounts is the store of countingTopology: records seen per key.
var perKeyCounts = processor.KeyValue("per-key-counts", serde.String(), serde.Int64())

// countingTopology counts the records of each key in a key-value store and
// emits "<count>:<input value>" for every record. hold, if not nil, runs
// before a record is counted and may block.
func countingTopology(in, out string, hold func(processor.Record[string, string])) *processor.Topology {
	t := processor.NewTopology()
	src := t.AddSource("in", in, serde.String(), serde.String())
	count := t.AddProcessor("count", func() processor.Processor[string, string, string, string] { return &counter{hold: hold} }, src)
	t.AddStore(perKeyCounts, count)
	t.AddSink("out", out, serde.String(), serde.String(), count)
	return t
}

type counter struct {
	hold  func(processor.Record[string, string])
	store processor.KeyValueStore[string, int64]
}

func (p *counter) Init(ctx processor.Context[string, string]) error {
	s, err := perKeyCounts.Open(ctx)
	p.store = s
	return err
}

func (p *counter) Process(ctx processor.Context[string, string], rec processor.Record[string, string]) error {
	if p.hold != nil {
		p.hold(rec)
	}
	n, _, err := p.store.Get(rec.Key)
	if err != nil {
		return err
	}
	n++
	if err := p.store.Put(rec.Key, n); err != nil {
		return err
	}
	return ctx.Forward(processor.Record[string, string]{Key: rec.Key, Value: strconv.FormatInt(n, 10) + ":" + rec.Value, Timestamp: rec.Timestamp})
}

func (p *counter) Close() error { return nil }

// threadsOf returns the threads of an instance that run task id.
func threadsOf(in *instance, id string) []int {
	var out []int
	for _, ti := range in.app.Tasks() {
		if ti.ID == id && !ti.Restoring {
			out = append(out, ti.Thread)
		}
	}
	return out
}

// TestTaskMovedToSiblingThreadKeepsItsState pins a bug where, with two
// threads per instance, a thread that closed a task late, after the group
// had already given it to its sibling thread, made the instance drop the
// sibling's live state of that task (CleanupDelay later): the sibling then
// counted from zero again.
//
// Instance a runs two threads on four partitions. One of its threads, x,
// blocks in a record of task 0_0 (the gate). Instance b joins: x cannot
// serve the revocation, the group drops it after the rebalance timeout and
// gives task 0_0 to x's sibling y, which takes it while x, still blocked,
// holds it too. Then the gate opens: x's commit fails (its generation is
// gone), it closes its tasks and rejoins. Every key's committed counts
// must then be exactly 1, 2, …, n for its n input records, across the move
// and the records produced after it.
//
// Why y gets task 0_0: b's two threads join in one round, in which every
// member keeps its lowest task (x keeps 0_0) and gives the other up. x
// cannot, so the follow-up round runs without it: y keeps its task, and of
// the unowned ones, whose state only instance a holds, y gets the first,
// 0_0, as the one extra task three members share four with.
func TestTaskMovedToSiblingThreadKeepsItsState(t *testing.T) {
	t.Parallel()
	c := kafka.Cluster(t)
	in, out, app := c.Name(t, "in"), c.Name(t, "out"), c.Name(t, "app")
	const partitions = 4
	c.CreateTopic(t, in, partitions, nil)
	c.CreateTopic(t, out, partitions, nil)
	const keys, before, after = 20, 10, 10

	// The gate blocks the first record whose value is "gate", once.
	gate := make(chan struct{})
	blocked := make(chan struct{})
	var held atomic.Bool
	var once sync.Once
	openGate := func() { once.Do(func() { close(gate) }) }
	hold := func(rec processor.Record[string, string]) {
		if rec.Value == "gate" && held.CompareAndSwap(false, true) {
			close(blocked)
			<-gate
		}
	}

	cfg := baseConfig(c, app, t)
	cfg.Threads = 2
	cfg.Guarantee = weir.ExactlyOnce
	cfg.CommitInterval = 100 * time.Millisecond
	cfg.Consumer.RebalanceTimeout = 3 * time.Second
	// Short enough that a wrongly scheduled drop lands long before the
	// records produced after the move are processed.
	cfg.Stores.CleanupDelay = 200 * time.Millisecond
	a := start(t, countingTopology(in, out, hold), cfg)
	t.Cleanup(openGate) // before a's cleanup waits for the blocked thread
	kafka.Eventually(t, 60*time.Second, 100*time.Millisecond, func() (bool, string) {
		per := tasksPerThread(a)
		return per[0] == 2 && per[1] == 2, fmt.Sprintf("instance a: tasks per thread %v", per)
	})

	// Every task has committed state before the move.
	kafka.Produce(t, c, records(in, keys, before, 0)...)
	waitCounts(t, c, out, keys, strconv.Itoa(before-1), func(string) int { return before })

	gateKey := keyOnPartition(t, in, partitions, 0, keys)
	x := threadsOf(a, "0_0")
	if len(x) != 1 {
		t.Fatalf("task 0_0 runs on threads %v of instance a", x)
	}
	kafka.Produce(t, c, &sarama.ProducerMessage{Topic: in, Key: sarama.StringEncoder(gateKey), Value: sarama.StringEncoder("gate")})
	select {
	case <-blocked:
	case <-time.After(30 * time.Second):
		t.Fatal("thread of task 0_0 did not reach the gate")
	}
	t.Logf("thread %d of instance a blocks in task 0_0; instance b joins", x[0])

	cfgB := cfg
	cfgB.StateDir = t.TempDir()
	b := start(t, countingTopology(in, out, nil), cfgB)

	// The sibling takes task 0_0 over while the blocked thread holds it.
	kafka.Eventually(t, 90*time.Second, 50*time.Millisecond, func() (bool, string) {
		on := threadsOf(a, "0_0")
		return slices.Contains(on, 1-x[0]), fmt.Sprintf("task 0_0 runs on threads %v of a; b runs %v", on, tasksPerThread(b))
	})
	// Once the sibling has committed its count of the gate record, it is
	// idle: no commit of its own races the rebalances to come, aborts and
	// makes it restore task 0_0 from the changelog, which would hide a
	// wrongly dropped state.
	kafka.ReadAll(t, c, out, sarama.ReadCommitted, func(msgs []*sarama.ConsumerMessage) bool {
		return len(msgs) > 0 && strings.HasSuffix(string(msgs[len(msgs)-1].Value), ":gate")
	})
	t.Logf("thread %d of instance a runs task 0_0 too and committed the gate record; the gate opens", 1-x[0])
	openGate()
	kafka.Eventually(t, 60*time.Second, 50*time.Millisecond, func() (bool, string) {
		on := threadsOf(a, "0_0")
		return !slices.Contains(on, x[0]), fmt.Sprintf("task 0_0 runs on threads %v of a", on)
	})
	// The group settles with one task per thread, 0_0 still on the
	// sibling: by then a wrongly scheduled drop has long happened.
	kafka.Eventually(t, 90*time.Second, 100*time.Millisecond, func() (bool, string) {
		pa, pb := tasksPerThread(a), tasksPerThread(b)
		on := threadsOf(a, "0_0")
		ok := pa[0] == 1 && pa[1] == 1 && pb[0] == 1 && pb[1] == 1 && slices.Equal(on, []int{1 - x[0]})
		return ok, fmt.Sprintf("tasks per thread: a=%v b=%v; 0_0 on threads %v of a", pa, pb, on)
	})

	more := records(in, keys, after, before)
	for k := range keys {
		more = append(more, &sarama.ProducerMessage{Topic: in, Key: sarama.StringEncoder("key-" + strconv.Itoa(k)), Value: sarama.StringEncoder("last")})
	}
	kafka.Produce(t, c, more...)
	waitCounts(t, c, out, keys, "last", func(k string) int {
		n := before + after + 1
		if k == gateKey {
			n++
		}
		return n
	})
}

// keyOnPartition returns the first of the keys "key-0".. that Kafka's
// default partitioner puts on partition p of topic.
func keyOnPartition(t *testing.T, topic string, partitions, p int32, keys int) string {
	t.Helper()
	part := sarama.NewMurmur2Partitioner(topic)
	for k := range keys {
		key := "key-" + strconv.Itoa(k)
		got, err := part.Partition(&sarama.ProducerMessage{Topic: topic, Key: sarama.StringEncoder(key)}, partitions)
		if err != nil {
			t.Fatal(err)
		}
		if got == p {
			return key
		}
	}
	t.Fatalf("none of %d keys is on partition %d", keys, p)
	return ""
}

// waitCounts reads the committed output of countingTopology until every
// one of keys has the output of its input record last, the last one
// produced for it, and checks that each key's counts are exactly 1, 2, …,
// want(key) in order.
func waitCounts(t *testing.T, c *kafka.Env, out string, keys int, last string, want func(key string) int) {
	t.Helper()
	counts := map[string][]int{}
	done := 0
	kafka.ReadAll(t, c, out, sarama.ReadCommitted, func(msgs []*sarama.ConsumerMessage) bool {
		if len(msgs) == 0 {
			return false
		}
		m := msgs[len(msgs)-1]
		k := string(m.Key)
		n, input, _ := strings.Cut(string(m.Value), ":")
		v, err := strconv.Atoi(n)
		if err != nil {
			t.Fatalf("output %q of key %s: %v", m.Value, k, err)
		}
		counts[k] = append(counts[k], v)
		if input == last {
			done++
		}
		return done == keys
	})
	bad := 0
	for k, got := range counts {
		n := want(k)
		ok := len(got) == n
		for i := 0; ok && i < n; i++ {
			ok = got[i] == i+1
		}
		if !ok && bad < 5 {
			t.Errorf("key %s: committed counts %v, want 1..%d", k, got, n)
			bad++
		}
	}
}
