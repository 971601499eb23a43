package integration

// Tests of the public txn package on the real broker, without weir's
// runtime: a consume-transform-produce loop on a plain sarama
// ConsumerGroup, as a sarama user would write it (it follows the package's
// Example and examples/relay).

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/weirstream/weir/txn"
	"github.com/weirstream/weir/weirtest/kafka"
)

// txnLoop is the loop's sarama.ConsumerGroupHandler: each input record is
// written to output with its value upper-cased, its key kept. A failed
// commit ends the session (the claims cannot seek back) and, after
// fencing or an unknown outcome, replaces the producer.
type txnLoop struct {
	group    string
	output   string
	interval time.Duration
	// hold, while set, keeps the periodic commits from running, so that a
	// test can act while a transaction is open.
	hold atomic.Bool

	mu        sync.Mutex
	producer  *txn.Producer
	offsets   map[string]map[int32]int64
	last      time.Time
	rewind    bool
	committed int     // input records whose output committed
	pending   int     // records sent in the open transaction
	failures  []error // every failed commit, in order
	rebuilds  int
	err       error
}

func (l *txnLoop) Setup(sarama.ConsumerGroupSession) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.offsets, l.pending, l.last, l.rewind = map[string]map[int32]int64{}, 0, time.Now(), false
	return nil
}

func (l *txnLoop) Cleanup(s sarama.ConsumerGroupSession) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.commit(s)
	return nil
}

func (l *txnLoop) ConsumeClaim(s sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	tick := time.NewTicker(l.interval)
	defer tick.Stop()
	for {
		select {
		case m, ok := <-claim.Messages():
			if !ok || !l.process(s, m) {
				return nil
			}
		case <-tick.C:
			if !l.hold.Load() && !l.commitDue(s) {
				return nil
			}
		case <-s.Context().Done():
			return nil
		}
	}
}

func (l *txnLoop) process(s sarama.ConsumerGroupSession, m *sarama.ConsumerMessage) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.rewind {
		return false
	}
	out := &sarama.ProducerMessage{Topic: l.output}
	if m.Key != nil {
		out.Key = sarama.ByteEncoder(m.Key)
	}
	if m.Value != nil {
		out.Value = sarama.ByteEncoder(bytes.ToUpper(m.Value))
	}
	if err := l.producer.Send(out); err != nil {
		return l.commit(s) // aborts the failed transaction
	}
	if l.offsets[m.Topic] == nil {
		l.offsets[m.Topic] = map[int32]int64{}
	}
	l.offsets[m.Topic][m.Partition] = m.Offset + 1
	l.pending++
	return true
}

func (l *txnLoop) commitDue(s sarama.ConsumerGroupSession) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.rewind {
		return false
	}
	if time.Since(l.last) < l.interval {
		return true
	}
	return l.commit(s)
}

// commit ends the open transaction with l.mu held; false ends the session.
func (l *txnLoop) commit(s sarama.ConsumerGroupSession) bool {
	if l.rewind {
		return false
	}
	l.last = time.Now()
	err := l.producer.Commit(context.Background(), l.offsets, txn.SessionGroup(s, l.group, ""))
	if err == nil {
		l.committed += l.pending
		l.pending = 0
		clear(l.offsets)
		return true
	}
	l.failures = append(l.failures, err)
	l.rewind = true
	switch {
	case errors.Is(err, txn.ErrAborted):
	case errors.Is(err, txn.ErrFenced), errors.Is(err, txn.ErrAmbiguous):
		p, rerr := l.producer.Rebuild()
		if rerr != nil {
			l.err = rerr
			return false
		}
		l.producer = p
		l.rebuilds++
	default:
		l.err = err
	}
	return false
}

// producerErr is the open transaction's failure, if any.
func (l *txnLoop) producerErr() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.producer.Err()
}

// state returns the committed record count, the failed commits and the
// rebuilds so far.
func (l *txnLoop) state() (committed int, failures []error, rebuilds int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.committed, slices.Clone(l.failures), l.rebuilds
}

// runningLoop is a txnLoop relaying a topic in a goroutine.
type runningLoop struct {
	*txnLoop
	cancel context.CancelFunc
	done   chan error
}

// startLoop relays in to out with transactional id txnID, committing every
// 100 ms, until stop.
func startLoop(t *testing.T, c *kafka.Env, in, out, group, txnID string) *runningLoop {
	t.Helper()
	pcfg := c.SaramaConfig()
	pcfg.ClientID = "txn-loop-producer"
	txn.ConfigureProducer(pcfg, txnID)
	// A test that dies inside a transaction leaves it open; a short
	// timeout lets the broker abort it soon.
	pcfg.Producer.Transaction.Timeout = 15 * time.Second
	pclient, err := sarama.NewClient(c.Brokers, pcfg)
	if err != nil {
		t.Fatalf("producer client: %v", err)
	}
	producer, err := txn.New(pclient)
	if err != nil {
		pclient.Close()
		t.Fatalf("txn.New: %v", err)
	}
	ccfg := c.SaramaConfig()
	ccfg.ClientID = "txn-loop"
	ccfg.Consumer.Offsets.Initial = sarama.OffsetOldest
	txn.ConfigureConsumer(ccfg)
	cg, err := sarama.NewConsumerGroup(c.Brokers, group, ccfg)
	if err != nil {
		producer.Close()
		pclient.Close()
		t.Fatalf("consumer group: %v", err)
	}
	l := &txnLoop{group: group, output: out, interval: 100 * time.Millisecond, producer: producer}
	ctx, cancel := context.WithCancel(context.Background())
	r := &runningLoop{txnLoop: l, cancel: cancel, done: make(chan error, 1)}
	go func() {
		var err error
		for ctx.Err() == nil && err == nil {
			if err = cg.Consume(ctx, []string{in}, l); err != nil {
				break
			}
			l.mu.Lock()
			err = l.err
			l.mu.Unlock()
		}
		if cerr := cg.Close(); err == nil {
			err = cerr
		}
		l.mu.Lock()
		l.producer.Close()
		l.mu.Unlock()
		pclient.Close()
		r.done <- err
	}()
	t.Cleanup(func() {
		cancel()
		<-r.done
	})
	return r
}

// stop ends the loop (its last session commits) and returns its error.
func (r *runningLoop) stop(t *testing.T) error {
	t.Helper()
	r.cancel()
	select {
	case err := <-r.done:
		r.done <- err // for the cleanup
		return err
	case <-time.After(time.Minute):
		t.Fatal("the loop did not stop within a minute")
		return nil
	}
}

// waitLoopCommitted waits until the loop has committed n records, failing
// early when it stopped.
func waitLoopCommitted(t *testing.T, r *runningLoop, n int) {
	t.Helper()
	kafka.Eventually(t, 90*time.Second, 50*time.Millisecond, func() (bool, string) {
		select {
		case err := <-r.done:
			r.done <- err
			t.Fatalf("the loop stopped: %v", err)
		default:
		}
		got, failures, _ := r.state()
		return got == n, fmt.Sprintf("%d of %d records committed; failed commits: %v", got, n, failures)
	})
}

// loopInput returns records from to to-1 for topic: key k-<i>, value v-<i>.
func loopInput(topic string, from, to int) []*sarama.ProducerMessage {
	var msgs []*sarama.ProducerMessage
	for i := from; i < to; i++ {
		msgs = append(msgs, &sarama.ProducerMessage{Topic: topic, Key: sarama.StringEncoder(fmt.Sprintf("k-%05d", i)), Value: sarama.StringEncoder(fmt.Sprintf("v-%d", i))})
	}
	return msgs
}

// checkRelayed checks that out (read whole, read_committed, after the
// loop stopped) holds the output of each input record of want exactly
// once, and nothing else.
func checkRelayed(t *testing.T, c *kafka.Env, out string, partitions int32, want []*sarama.ProducerMessage) {
	t.Helper()
	writeSentinels(t, c, out, partitions)
	got := readToSentinels(t, c, out, partitions, sarama.ReadCommitted)
	wanted := map[string]int{} // "key/VALUE" → times wanted
	for _, m := range want {
		wanted[recordID(m)]++
	}
	seen := map[string]int{}
	for _, m := range got {
		id := encodedID(m.Key, m.Value)
		if _, ok := wanted[id]; !ok {
			t.Fatalf("output %s/%d@%d %s is no input record's output", out, m.Partition, m.Offset, id)
		}
		seen[id]++
	}
	for id, n := range wanted {
		if seen[id] != n {
			t.Errorf("output %s appears %d times, want %d", id, seen[id], n)
		}
	}
}

// recordID is the id of the output expected for input m.
func recordID(m *sarama.ProducerMessage) string {
	var k, v []byte
	if m.Key != nil {
		k, _ = m.Key.Encode()
	}
	if m.Value != nil {
		v, _ = m.Value.Encode()
		v = bytes.ToUpper(v)
	}
	return encodedID(k, v)
}

func encodedID(k, v []byte) string {
	key := "<null>"
	if k != nil {
		key = string(k)
	}
	return key + "/" + string(v)
}

// setCleanupPolicy changes topic's cleanup.policy and waits until the
// broker describes it so.
func setCleanupPolicy(t *testing.T, c *kafka.Env, topic, policy string) {
	t.Helper()
	admin := c.Admin(t)
	if err := admin.AlterConfig(sarama.TopicResource, topic, map[string]*string{"cleanup.policy": &policy}, false); err != nil {
		t.Fatalf("setting cleanup.policy=%s on %s: %v", policy, topic, err)
	}
	kafka.Eventually(t, 30*time.Second, 100*time.Millisecond, func() (bool, string) {
		entries, err := admin.DescribeConfig(sarama.ConfigResource{Type: sarama.TopicResource, Name: topic, ConfigNames: []string{"cleanup.policy"}})
		if err != nil || len(entries) == 0 {
			return false, fmt.Sprintf("describing %s: %v", topic, err)
		}
		return entries[0].Value == policy, "cleanup.policy=" + entries[0].Value
	})
}

// waitUncommitted waits until a read_uncommitted reader sees at least n
// records in topic: records of an open transaction are then written.
func waitUncommitted(t *testing.T, c *kafka.Env, topic string, n int) {
	t.Helper()
	kafka.ReadAll(t, c, topic, sarama.ReadUncommitted, func(got []*sarama.ConsumerMessage) bool { return len(got) >= n })
}

// TestTxnLoopCopiesExactlyOnce: a sarama ConsumerGroup loop on the public
// txn package copies every input record once, and the group's committed
// offsets, written in the transactions, reach the end of the input.
func TestTxnLoopCopiesExactlyOnce(t *testing.T) {
	t.Parallel()
	c := kafka.Cluster(t)
	in, out, group := c.Name(t, "in"), c.Name(t, "out"), c.Name(t, "group")
	c.CreateTopic(t, in, 3, nil)
	c.CreateTopic(t, out, 3, nil)
	const n = 3000
	input := loopInput(in, 0, n)
	kafka.Produce(t, c, input[:n/2]...)
	r := startLoop(t, c, in, out, group, c.Name(t, "txn"))
	kafka.Produce(t, c, input[n/2:]...)
	waitLoopCommitted(t, r, n)
	if err := r.stop(t); err != nil {
		t.Fatalf("the loop stopped with %v", err)
	}
	if _, failures, _ := r.state(); len(failures) > 0 {
		t.Errorf("failed commits in a run without failures: %v", failures)
	}
	checkRelayed(t, c, out, 3, input)
	ends := kafka.EndOffsets(t, c, in)
	committed, err := groupCommitted(c.Admin(t), group, in, 3)
	if err != nil {
		t.Fatal(err)
	}
	for p, end := range ends {
		if committed[p] != end {
			t.Errorf("partition %d: group committed %d, input ends at %d", p, committed[p], end)
		}
	}
}

// TestTxnLoopRewindsAfterARefusedRecord: the broker refuses an output
// record (no key, on a topic made compacted after start) in a transaction
// whose other records are already written. The failure is sticky: the
// commit aborts (ErrAborted wrapping the *txn.RefusedError), the loop ends
// its session and reprocesses from the committed offsets, and once the
// topic accepts the record again every input record's output is there
// exactly once; the aborted copies are visible to read_uncommitted only.
func TestTxnLoopRewindsAfterARefusedRecord(t *testing.T) {
	t.Parallel()
	c := kafka.Cluster(t)
	in, out, group := c.Name(t, "in"), c.Name(t, "out"), c.Name(t, "group")
	c.CreateTopic(t, in, 2, nil)
	c.CreateTopic(t, out, 2, map[string]string{"cleanup.policy": "delete"})
	first, held, after := loopInput(in, 0, 100), loopInput(in, 100, 200), loopInput(in, 200, 300)
	poison := &sarama.ProducerMessage{Topic: in, Value: sarama.StringEncoder("no key")}

	kafka.Produce(t, c, first...)
	r := startLoop(t, c, in, out, group, c.Name(t, "txn"))
	waitLoopCommitted(t, r, 100)
	setCleanupPolicy(t, c, out, "compact")

	// One transaction: the held records, written but not committed, then
	// the record the broker refuses.
	r.hold.Store(true)
	kafka.Produce(t, c, held...)
	waitUncommitted(t, c, out, 200)
	kafka.Produce(t, c, poison)
	kafka.Eventually(t, 30*time.Second, 50*time.Millisecond, func() (bool, string) {
		return r.producerErr() != nil, "the refusal has not reached the producer"
	})
	var re *txn.RefusedError
	if err := r.producerErr(); !errors.Is(err, txn.ErrFailed) || !errors.As(err, &re) || !errors.Is(err, sarama.ErrInvalidRecord) {
		t.Fatalf("the producer's failure = %v, want ErrFailed wrapping a *txn.RefusedError for INVALID_RECORD", err)
	}
	// The record is accepted again from now on; the loop's next commit
	// aborts the failed transaction, and the replay commits.
	setCleanupPolicy(t, c, out, "delete")
	r.hold.Store(false)
	kafka.Eventually(t, 30*time.Second, 50*time.Millisecond, func() (bool, string) {
		_, failures, _ := r.state()
		return len(failures) > 0, "no failed commit yet"
	})
	_, failures, rebuilds := r.state()
	if err := failures[0]; !errors.Is(err, txn.ErrAborted) || !errors.As(err, &re) {
		t.Fatalf("the first failed commit = %v, want ErrAborted wrapping the *txn.RefusedError", err)
	}
	if rebuilds != 0 {
		t.Errorf("%d producer rebuilds after an abortable failure", rebuilds)
	}
	t.Logf("failed commits: %v", failures)
	kafka.Produce(t, c, after...)
	waitLoopCommitted(t, r, 301)
	if err := r.stop(t); err != nil {
		t.Fatalf("the loop stopped with %v", err)
	}

	want := slices.Concat(first, held, []*sarama.ProducerMessage{poison}, after)
	checkRelayed(t, c, out, 2, want)
	// The aborted transaction's copies of the held records were written:
	// read_uncommitted sees them twice, read_committed (above) once.
	uncommitted := readToSentinels(t, c, out, 2, sarama.ReadUncommitted)
	copies := map[string]int{}
	for _, m := range uncommitted {
		copies[encodedID(m.Key, m.Value)]++
	}
	for _, m := range held {
		if id := recordID(m); copies[id] < 2 {
			t.Errorf("read_uncommitted sees %s %d times, want the aborted copy too", id, copies[id])
		}
	}
}

// TestTxnLoopRebuildsAFencedProducer: a second producer initialises the
// loop's transactional id while the loop's transaction is open, which
// fences the loop's producer and aborts that transaction. The loop's
// commit fails with ErrFenced; it rebuilds its producer, reprocesses from
// the committed offsets and goes on, and every input record's output is
// there exactly once.
func TestTxnLoopRebuildsAFencedProducer(t *testing.T) {
	t.Parallel()
	c := kafka.Cluster(t)
	in, out, group, txnID := c.Name(t, "in"), c.Name(t, "out"), c.Name(t, "group"), c.Name(t, "txn")
	c.CreateTopic(t, in, 2, nil)
	c.CreateTopic(t, out, 2, nil)
	first, held, after := loopInput(in, 0, 100), loopInput(in, 100, 200), loopInput(in, 200, 300)

	kafka.Produce(t, c, first...)
	r := startLoop(t, c, in, out, group, txnID)
	waitLoopCommitted(t, r, 100)
	r.hold.Store(true)
	kafka.Produce(t, c, held...)
	waitUncommitted(t, c, out, 200)

	// newTxnProducer initialises txnID: the loop's producer is fenced.
	newTxnProducer(t, c, txnID)
	r.hold.Store(false)
	kafka.Eventually(t, 30*time.Second, 50*time.Millisecond, func() (bool, string) {
		_, failures, rebuilds := r.state()
		return len(failures) > 0 && rebuilds > 0, fmt.Sprintf("failed commits %v, %d rebuilds", failures, rebuilds)
	})
	_, failures, _ := r.state()
	t.Logf("failed commits: %v", failures)
	if !errors.Is(failures[0], txn.ErrFenced) {
		t.Fatalf("the first failed commit = %v, want ErrFenced", failures[0])
	}
	kafka.Produce(t, c, after...)
	waitLoopCommitted(t, r, 300)
	if err := r.stop(t); err != nil {
		t.Fatalf("the loop stopped with %v", err)
	}
	checkRelayed(t, c, out, 2, slices.Concat(first, held, after))
	uncommitted := readToSentinels(t, c, out, 2, sarama.ReadUncommitted)
	aborted := 0
	for _, m := range uncommitted {
		if strings.HasPrefix(string(m.Key), "k-001") { // records 100..199
			aborted++
		}
	}
	if aborted < 2*len(held) {
		t.Errorf("read_uncommitted sees %d copies of the held records, want the fenced transaction's too (%d)", aborted, 2*len(held))
	}
}
