package stream

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/weirstream/weir/internal/client"
	"github.com/weirstream/weir/internal/task"
	"github.com/weirstream/weir/internal/txntest"
	"github.com/weirstream/weir/txn"
)

// inputRecord is the input record in/0@7 that a refused record came from.
func inputRecord(key []byte) *sarama.ConsumerMessage {
	return &sarama.ConsumerMessage{Topic: "in", Partition: 0, Offset: 7, Key: key, Value: []byte("input value"),
		Timestamp: time.UnixMilli(1_700_000_000_123),
		Headers:   []*sarama.RecordHeader{{Key: []byte("trace"), Value: []byte("t-1")}}}
}

// withInput gives m's origin the input record it came from.
func withInput(m *sarama.ProducerMessage, in *sarama.ConsumerMessage) *sarama.ProducerMessage {
	o := m.Metadata.(*client.Origin)
	o.Partition, o.Input = in.Partition, in
	return m
}

// headersOf returns m's headers by key.
func headersOf(m *sarama.ProducerMessage) map[string]string {
	h := map[string]string{}
	for _, rh := range m.Headers {
		h[string(rh.Key)] = string(rh.Value)
	}
	return h
}

// sentTo waits for th's records to be acknowledged and returns those the
// fake producer got for topic.
func sentTo(t *testing.T, th *Thread, fake *txntest.Fake, topic string) []*sarama.ProducerMessage {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := th.producer.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	var out []*sarama.ProducerMessage
	for _, m := range fake.Sent() {
		if m.Topic == topic {
			out = append(out, m)
		}
	}
	return out
}

// TestRefusedRecordIsDeadLettered: under ProductionErrors=DeadLetter a
// record refused before it is sent (over its topic's limit, or without a
// key for a compacted topic) is dropped and counted, and the input record
// it came from goes to the dead-letter topic: its raw key, value,
// timestamp and headers, and the headers that say where and why it
// failed. The thread goes on.
func TestRefusedRecordIsDeadLettered(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name  string
		msg   *sarama.ProducerMessage
		cause error
	}{
		{"over the topic's limit", msgFrom("in", 7, "out", []byte("k"), 1000), task.ErrRecordTooLarge},
		{"no key on a compacted topic", msgFrom("in", 7, "compacted", nil, 10), task.ErrNullKeyOnCompactedTopic},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			fake := txntest.New(true)
			th := productionThread(t, task.DeadLetter("dlq"), fake)
			in := inputRecord([]byte("input key"))
			if err := th.Send(withInput(c.msg, in)); err != nil || th.failed() != nil {
				t.Fatalf("send = %v, failed = %v; want the record dead-lettered and the thread going on", err, th.failed())
			}
			if got := sentTo(t, th, fake, c.msg.Topic); len(got) != 0 {
				t.Fatalf("the refused record reached the producer: %v", got)
			}
			dl := sentTo(t, th, fake, "dlq")
			if len(dl) != 1 {
				t.Fatalf("%d dead-letter records, want 1", len(dl))
			}
			m := dl[0]
			if k, _ := m.Key.Encode(); string(k) != "input key" {
				t.Errorf("dead-letter key %q, want the input record's", k)
			}
			if v, _ := m.Value.Encode(); string(v) != "input value" {
				t.Errorf("dead-letter value %q, want the input record's", v)
			}
			if !m.Timestamp.Equal(in.Timestamp) {
				t.Errorf("dead-letter timestamp %v, want the input record's %v", m.Timestamp, in.Timestamp)
			}
			h := headersOf(m)
			for k, want := range map[string]string{
				"trace":                "t-1",
				task.HeaderApplication: "app",
				task.HeaderTask:        "0_0",
				task.HeaderKind:        task.KindProduction,
				task.HeaderTopic:       "in",
				task.HeaderPartition:   "0",
				task.HeaderOffset:      "7",
				task.HeaderTimestamp:   "1700000000123",
				task.HeaderSink:        c.msg.Topic,
				task.HeaderMessage:     c.cause.Error(),
			} {
				if h[k] != want {
					t.Errorf("header %s = %q, want %q", k, h[k], want)
				}
			}
			if o, ok := m.Metadata.(*client.Origin); !ok || !o.DeadLetter {
				t.Errorf("the dead-letter record's origin %+v is not marked as a dead-letter record", m.Metadata)
			}
			if n := skippedCount(th); n != 1 {
				t.Errorf("skipped = %v, want 1", n)
			}
			if n := counterValue(t, th.in.Metrics.DeadLettered, "0", "0_0"); n != 1 {
				t.Errorf("dead-lettered = %v, want 1", n)
			}
		})
	}
}

// TestRefusedPunctuatorRecordIsDeadLetteredAsHeaders: a punctuator's
// record has no input record; its dead-letter record carries headers only,
// naming the punctuator and the sink, and no input coordinates.
func TestRefusedPunctuatorRecordIsDeadLetteredAsHeaders(t *testing.T) {
	t.Parallel()
	fake := txntest.New(true)
	th := productionThread(t, task.DeadLetter("dlq"), fake)
	m := &sarama.ProducerMessage{Topic: "out", Key: sarama.StringEncoder("k"), Value: sarama.ByteEncoder(make([]byte, 1000)),
		Metadata: &client.Origin{Task: "0_0", Offset: -1, Node: "every-minute"}}
	if err := th.Send(m); err != nil || th.failed() != nil {
		t.Fatalf("send = %v, failed = %v; want the record dead-lettered", err, th.failed())
	}
	dl := sentTo(t, th, fake, "dlq")
	if len(dl) != 1 {
		t.Fatalf("%d dead-letter records, want 1", len(dl))
	}
	if dl[0].Key != nil || dl[0].Value != nil {
		t.Errorf("dead-letter record of a punctuator has key %v, value %v; want neither", dl[0].Key, dl[0].Value)
	}
	h := headersOf(dl[0])
	if h[task.HeaderNode] != "every-minute" || h[task.HeaderSink] != "out" || h[task.HeaderKind] != task.KindProduction {
		t.Errorf("headers %v do not name the punctuator, the sink and the kind", h)
	}
	for _, k := range []string{task.HeaderTopic, task.HeaderPartition, task.HeaderOffset, task.HeaderTimestamp} {
		if _, ok := h[k]; ok {
			t.Errorf("header %s set on the dead-letter record of a punctuator's record", k)
		}
	}
}

// TestRefusedDeadLetterRecordFails: a dead-letter record that is refused
// itself (here: the dead-letter topic is compacted and the input record
// has no key) stops the thread, whatever the policy says: nothing is left
// to do with it. Every later record is refused with the same failure.
func TestRefusedDeadLetterRecordFails(t *testing.T) {
	t.Parallel()
	fake := txntest.New(true)
	th := productionThread(t, task.DeadLetter("compacted"), fake)
	err := th.Send(withInput(msgFrom("in", 7, "out", []byte("k"), 1000), inputRecord(nil)))
	var pe *task.ProductionError
	if !errors.As(err, &pe) || !errors.Is(err, task.ErrNullKeyOnCompactedTopic) || pe.Sink != "compacted" {
		t.Fatalf("send = %v, want the dead-letter record's refusal by compacted", err)
	}
	if !errors.Is(th.failed(), task.ErrNullKeyOnCompactedTopic) {
		t.Fatalf("failed = %v, want the dead-letter record's refusal", th.failed())
	}
	if err := th.Send(msgFrom("in", 8, "out", []byte("k"), 1)); !errors.Is(err, task.ErrNullKeyOnCompactedTopic) {
		t.Errorf("send after the failure = %v, want the failure again", err)
	}
	if _, err := th.settle(th.failed()); !errors.As(err, &pe) {
		t.Errorf("settle = %v, want the thread to stop", err)
	}
	if got := sentTo(t, th, fake, "compacted"); len(got) != 0 {
		t.Errorf("the refused dead-letter record reached the producer")
	}
}

// TestChangelogRecordFailsUnderDeadLetter: state cannot skip a change: a
// changelog record refused fails the thread under DeadLetter too, and no
// dead-letter record is written for it.
func TestChangelogRecordFailsUnderDeadLetter(t *testing.T) {
	t.Parallel()
	fake := txntest.New(true)
	th := productionThread(t, task.DeadLetter("dlq"), fake)
	m := &sarama.ProducerMessage{Topic: "app-s-changelog", Key: sarama.StringEncoder("k"),
		Value: sarama.ByteEncoder(make([]byte, 2000)), Metadata: &client.Origin{Task: "0_0", Offset: -1, Store: "s"}}
	var pe *task.ProductionError
	if err := th.Send(m); !errors.As(err, &pe) || pe.Store != "s" || !errors.Is(err, task.ErrRecordTooLarge) {
		t.Fatalf("send = %v, want the changelog record's refusal", err)
	}
	if th.failed() == nil {
		t.Fatal("the thread goes on after a changelog record was refused")
	}
	if got := sentTo(t, th, fake, "dlq"); len(got) != 0 || skippedCount(th) != 0 {
		t.Errorf("a refused changelog record was dead-lettered (%d) or counted skipped (%v)", len(got), skippedCount(th))
	}
}

// TestProductionPolicyPerTopic: the policy of a record's sink topic
// (TopicErrors) decides over the application's: a refused record for a
// topic set to Skip is dropped while the application fails, and one for
// another topic fails the thread.
func TestProductionPolicyPerTopic(t *testing.T) {
	t.Parallel()
	th := productionThread(t, task.Fail, txntest.New(true))
	th.in.TopicErrors = map[string]task.Policies{"out": {Production: task.Skip}}
	if err := th.Send(msgFrom("in", 7, "out", []byte("k"), 1000)); err != nil || th.failed() != nil {
		t.Fatalf("send to out (Skip) = %v, failed = %v; want the record dropped", err, th.failed())
	}
	if n := skippedCount(th); n != 1 {
		t.Errorf("skipped = %v, want 1", n)
	}
	if err := th.Send(msgFrom("in", 8, "compacted", nil, 10)); !errors.Is(err, task.ErrNullKeyOnCompactedTopic) || th.failed() == nil {
		t.Fatalf("send to compacted (Fail) = %v, failed = %v; want the thread failed", err, th.failed())
	}
}

// TestBrokerRefusalIsDeadLetteredInTheReplay: under exactly once and
// DeadLetter, a record the broker refuses aborts the transaction; the
// replay of its input record drops the record and writes its dead-letter
// record instead, in the transaction that commits the input record.
func TestBrokerRefusalIsDeadLetteredInTheReplay(t *testing.T) {
	t.Parallel()
	fake := txntest.New(true)
	fake.SendErr = sarama.ErrInvalidRecord
	th := productionThread(t, task.DeadLetter("dlq"), fake)
	in := inputRecord([]byte("input key"))
	if err := th.Send(withInput(msgFrom("in", 7, "out", []byte("k"), 10), in)); err != nil {
		t.Fatal(err)
	}
	waitFailed(t, th)
	fake.Status = sarama.ProducerTxnFlagInError | sarama.ProducerTxnFlagAbortableError
	err := th.producer.Commit(context.Background(), map[string]map[int32]int64{"in": {0: 8}}, &txn.Group{GroupID: "app"})
	if !errors.Is(err, txn.ErrFailed) && !errors.Is(err, txn.ErrAborted) {
		t.Fatalf("Commit of a transaction with a refused record = %v", err)
	}
	fake.SendErr = nil
	if _, err := th.settle(err); err != nil {
		t.Fatalf("settle = %v, want the thread to go on", err)
	}
	if got := sentTo(t, th, fake, "dlq"); len(got) != 0 {
		t.Fatalf("dead-lettered %d records before the replay; want them in the replay's transaction", len(got))
	}
	if fake.Committed != 0 {
		t.Fatalf("committed %d times", fake.Committed)
	}
	before := len(sentTo(t, th, fake, "out"))
	if err := th.Send(withInput(msgFrom("in", 7, "out", []byte("k"), 10), in)); err != nil || th.failed() != nil {
		t.Fatalf("replayed refused record: send = %v, failed = %v", err, th.failed())
	}
	if got := sentTo(t, th, fake, "out"); len(got) != before {
		t.Errorf("the replay sent the refused record again")
	}
	dl := sentTo(t, th, fake, "dlq")
	if len(dl) != 1 {
		t.Fatalf("%d dead-letter records after the replay, want 1", len(dl))
	}
	h := headersOf(dl[0])
	if h[task.HeaderSink] != "out" || h[task.HeaderOffset] != "7" || !strings.Contains(h[task.HeaderMessage], sarama.ErrInvalidRecord.Error()) {
		t.Errorf("dead-letter headers %v do not name the sink, the input offset and the broker's refusal", h)
	}
	if n := skippedCount(th); n != 1 {
		t.Errorf("skipped = %v, want 1", n)
	}
	if n := counterValue(t, th.in.Metrics.DeadLettered, "0", "0_0"); n != 1 {
		t.Errorf("dead-lettered = %v, want 1", n)
	}
}

// TestBrokerRefusalIsDeadLetteredAtOnceAtLeastOnce: at least once nothing
// is replayed, so a record the broker refuses is dead-lettered when the
// refusal is settled, and the thread goes on with the outcome dropped.
func TestBrokerRefusalIsDeadLetteredAtOnceAtLeastOnce(t *testing.T) {
	t.Parallel()
	fake := txntest.New(false)
	fake.SendErr = sarama.ErrInvalidRecord
	th := productionThread(t, task.DeadLetter("dlq"), fake)
	th.in.ExactlyOnce = false
	if err := th.Send(withInput(msgFrom("in", 7, "out", []byte("k"), 10), inputRecord([]byte("input key")))); err != nil {
		t.Fatal(err)
	}
	waitFailed(t, th)
	fake.SendErr = nil
	o, err := th.settle(th.failed())
	if err != nil || o != dropped {
		t.Fatalf("settle = %v, %v; want dropped, nil", o, err)
	}
	dl := sentTo(t, th, fake, "dlq")
	if len(dl) != 1 {
		t.Fatalf("%d dead-letter records, want 1", len(dl))
	}
	if h := headersOf(dl[0]); h[task.HeaderSink] != "out" || h[task.HeaderTopic] != "in" || h[task.HeaderOffset] != "7" {
		t.Errorf("dead-letter headers %v do not name the sink and the input record", h)
	}
	if len(th.skips) != 0 {
		t.Errorf("%d skip entries at least once, where nothing is replayed", len(th.skips))
	}
	if n := skippedCount(th); n != 1 {
		t.Errorf("skipped = %v, want 1", n)
	}
	if th.failed() != nil {
		t.Errorf("failed = %v after the refusal was dead-lettered", th.failed())
	}
}

// TestKeepNothingAtLeastOnce: at least once nothing is rewound in place,
// so no record is kept, and nothing counts towards the bound.
func TestKeepNothingAtLeastOnce(t *testing.T) {
	t.Parallel()
	th := failureThread(t, Config{}, txntest.New(false))
	th.in.ExactlyOnce = false
	if th.Keep(1) {
		t.Fatal("a record was kept at least once")
	}
	if th.replayBytes != 0 || th.replayLost {
		t.Errorf("replayBytes %d, replayLost %v after Keep at least once; want neither touched", th.replayBytes, th.replayLost)
	}
}

// partitionsClient answers Partitions from its map, or with err.
type partitionsClient struct {
	sarama.Client
	parts map[string][]int32
	err   error
}

func (c partitionsClient) Partitions(topic string) ([]int32, error) {
	if c.err != nil {
		return nil, c.err
	}
	return c.parts[topic], nil
}

// TestPartitionCount: a task's partition count is the group client's, and
// a failure to learn it names the topic and keeps its cause.
func TestPartitionCount(t *testing.T) {
	t.Parallel()
	th := failureThread(t, Config{}, txntest.New(true))
	th.client = partitionsClient{parts: map[string][]int32{"out": {0, 1, 2, 3, 4, 5}}}
	if n, err := th.PartitionCount("out"); n != 6 || err != nil {
		t.Errorf("PartitionCount(out) = %d, %v; want 6", n, err)
	}
	th.client = partitionsClient{err: sarama.ErrUnknownTopicOrPartition}
	n, err := th.PartitionCount("gone")
	if n != 0 || !errors.Is(err, sarama.ErrUnknownTopicOrPartition) || !strings.Contains(err.Error(), "gone") {
		t.Errorf("PartitionCount(gone) = %d, %v; want 0 and the cause, naming the topic", n, err)
	}
}

// One input record that produces two records for one sink, of which the
// broker refuses one: the replay drops (and dead-letters) the refused
// record only, and sends its sibling. Keyed by input record and sink
// alone, the replay dropped both: the sibling was lost without a count
// while its input offset committed.
func TestReplayDropsOnlyTheRefusedSibling(t *testing.T) {
	t.Parallel()
	fake := txntest.New(true)
	th := productionThread(t, task.DeadLetter("dlq"), fake)
	in := inputRecord([]byte("input key"))
	good := func() *sarama.ProducerMessage {
		m := withInput(msgFrom("in", 7, "out", []byte("k"), 10), in)
		m.Value = sarama.StringEncoder("fine")
		return m
	}
	bad := func() *sarama.ProducerMessage {
		m := withInput(msgFrom("in", 7, "out", []byte("k"), 10), in)
		m.Value = sarama.StringEncoder("refused")
		return m
	}
	if err := th.Send(good()); err != nil {
		t.Fatal(err)
	}
	if got := sentTo(t, th, fake, "out"); len(got) != 1 {
		t.Fatalf("sent %d records before the refusal, want 1", len(got))
	}
	fake.SendErr = sarama.ErrInvalidRecord
	if err := th.Send(bad()); err != nil {
		t.Fatal(err)
	}
	waitFailed(t, th)
	fake.Status = sarama.ProducerTxnFlagInError | sarama.ProducerTxnFlagAbortableError
	err := th.producer.Commit(context.Background(), map[string]map[int32]int64{"in": {0: 8}}, &txn.Group{GroupID: "app"})
	if !errors.Is(err, txn.ErrFailed) && !errors.Is(err, txn.ErrAborted) {
		t.Fatalf("Commit of a transaction with a refused record = %v", err)
	}
	fake.SendErr = nil
	if _, err := th.settle(err); err != nil {
		t.Fatalf("settle = %v, want the thread to go on", err)
	}
	before := len(sentTo(t, th, fake, "out"))
	// The replay produces the same two records, in the same order.
	for _, m := range []*sarama.ProducerMessage{good(), bad()} {
		if err := th.Send(m); err != nil || th.failed() != nil {
			t.Fatalf("replay: send = %v, failed = %v", err, th.failed())
		}
	}
	out := sentTo(t, th, fake, "out")
	if len(out) != before+1 {
		t.Fatalf("the replay sent %d records to out, want the sibling alone", len(out)-before)
	}
	if v, _ := out[len(out)-1].Value.Encode(); string(v) != "fine" {
		t.Fatalf("the replay sent %q, want the sibling %q", v, "fine")
	}
	if dl := sentTo(t, th, fake, "dlq"); len(dl) != 1 {
		t.Fatalf("%d dead-letter records, want 1 (the refused record)", len(dl))
	}
}
