package produce_test

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/weirstream/weir/internal/produce"
	"github.com/weirstream/weir/weirtest/kafka"
)

func TestMain(m *testing.M) { kafka.Main(m) }

// results gathers a producer's Results.
type results struct {
	mu  sync.Mutex
	all []produce.Result
}

func (r *results) add(res produce.Result) {
	r.mu.Lock()
	r.all = append(r.all, res)
	r.mu.Unlock()
}

// failed returns the records that failed and the first error.
func (r *results) failed() (n int, first error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, res := range r.all {
		if res.Err != nil {
			if first == nil {
				first = res.Err
			}
			n += len(res.Msgs)
		}
	}
	return n, first
}

func newProducer(t *testing.T, c *kafka.Env, id string, configure ...func(*sarama.Config)) (*produce.Producer, *results) {
	t.Helper()
	cfg := c.SaramaConfig()
	cfg.Producer.Transaction.ID = id
	cfg.Producer.Idempotent = true
	cfg.Producer.RequiredAcks = sarama.WaitForAll
	cfg.Net.MaxOpenRequests = 1
	cfg.Producer.Flush.Frequency = 5 * time.Millisecond
	for _, f := range configure {
		f(cfg)
	}
	client, err := sarama.NewClient(c.Brokers, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	res := &results{}
	p, err := produce.New(t.Context(), client, produce.Options{OnResult: res.add})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p, res
}

func send(t *testing.T, p *produce.Producer, topic string, values ...string) {
	t.Helper()
	for _, v := range values {
		if err := p.Send(&sarama.ProducerMessage{Topic: topic, Key: sarama.StringEncoder(v), Value: sarama.StringEncoder(v)}); err != nil {
			t.Fatalf("sending %q: %v", v, err)
		}
	}
}

// values returns the values of topic read read_committed once want
// records are there, in each partition's order.
func values(t *testing.T, c *kafka.Env, topic string, want int) map[int32][]string {
	t.Helper()
	got := kafka.ReadAll(t, c, topic, sarama.ReadCommitted, func(got []*sarama.ConsumerMessage) bool { return len(got) >= want })
	out := map[int32][]string{}
	for _, m := range got {
		out[m.Partition] = append(out[m.Partition], string(m.Value))
	}
	return out
}

// TestCommitDeliversEveryRecordOnceInOrder sends more than a batch holds
// to each partition (so that sequences run over several batches), then a
// transaction that aborts, then one that commits: read_committed shows the
// first and last transactions' records, each once and in the order sent.
func TestCommitDeliversEveryRecordOnceInOrder(t *testing.T) {
	t.Parallel()
	c := kafka.Cluster(t)
	topic := c.Name(t, "produce-order")
	c.CreateTopic(t, topic, 3, nil)
	p, res := newProducer(t, c, c.Name(t, "produce-order-txn"))
	ctx := t.Context()

	pad := strings.Repeat("x", 200)
	var first []string
	for i := range 20000 {
		first = append(first, fmt.Sprintf("a%06d-%s", i, pad))
	}
	send(t, p, topic, first...)
	if err := p.Commit(ctx, nil, nil); err != nil {
		t.Fatal(err)
	}
	send(t, p, topic, "aborted-1", "aborted-2", "aborted-3")
	if err := p.Abort(ctx); err != nil {
		t.Fatal(err)
	}
	last := []string{"c1", "c2", "c3", "c4"}
	send(t, p, topic, last...)
	if err := p.Commit(ctx, nil, nil); err != nil {
		t.Fatal(err)
	}
	if n, err := res.failed(); n > 0 {
		t.Fatalf("%d records failed, the first with %v", n, err)
	}

	got := values(t, c, topic, len(first)+len(last))
	seen := map[string]int{}
	total := 0
	for part, vs := range got {
		prev := ""
		for _, v := range vs {
			seen[v]++
			total++
			if strings.HasPrefix(v, "a") && strings.HasPrefix(prev, "a") && v < prev {
				t.Errorf("partition %d: %.7s after %.7s", part, v, prev)
			}
			prev = v
		}
	}
	for _, v := range append(first, last...) {
		if seen[v] != 1 {
			t.Errorf("%.7s read %d times, want once", v, seen[v])
		}
	}
	if total != len(first)+len(last) {
		t.Errorf("read %d records, want %d (aborted ones must not show)", total, len(first)+len(last))
	}
	batches := 0
	res.mu.Lock()
	batches = len(res.all)
	res.mu.Unlock()
	if batches < 5 {
		t.Errorf("%d batches for 20000 records of 210 bytes over 3 partitions: batches of at most 1 MiB need at least 5", batches)
	}
}

// TestRefusedBatchAbortsAndTheNextTransactionCommits has the broker refuse
// a batch (larger than the topic's max.message.bytes): its records fail
// with the broker's error, the records sent behind it on the partition
// are dropped, and after the abort, which bumps the epoch over the
// sequence gap, the next transaction commits.
func TestRefusedBatchAbortsAndTheNextTransactionCommits(t *testing.T) {
	t.Parallel()
	c := kafka.Cluster(t)
	topic := c.Name(t, "produce-refused")
	c.CreateTopic(t, topic, 1, map[string]string{"max.message.bytes": "2000"})
	p, res := newProducer(t, c, c.Name(t, "produce-refused-txn"))
	ctx := t.Context()

	send(t, p, topic, strings.Repeat("big", 2000))
	p.Flush()
	send(t, p, topic, "behind")
	p.Flush()
	if err := p.WaitIdle(ctx); err != nil {
		t.Fatal(err)
	}
	n, err := res.failed()
	if n != 2 || !errors.Is(err, sarama.ErrMessageSizeTooLarge) {
		t.Fatalf("%d records failed, the first with %v; want 2, the first refused as too large", n, err)
	}
	res.mu.Lock()
	dropped := res.all[len(res.all)-1].Err
	res.mu.Unlock()
	if !errors.Is(dropped, produce.ErrDropped) {
		t.Errorf("the record behind the refused batch failed with %v, want produce.ErrDropped", dropped)
	}
	if err := p.Abort(ctx); err != nil {
		t.Fatal(err)
	}
	send(t, p, topic, "n1", "n2")
	if err := p.Commit(ctx, nil, nil); err != nil {
		t.Fatal(err)
	}
	got := values(t, c, topic, 2)[0]
	if strings.Join(got, ",") != "n1,n2" {
		t.Errorf("read_committed holds %q, want n1,n2", got)
	}
}

// TestANewerProducerFencesTheOlder: a second producer with the same
// transactional id fences the first, whose next commit fails with
// produce.ErrFatal and commits nothing.
func TestANewerProducerFencesTheOlder(t *testing.T) {
	t.Parallel()
	c := kafka.Cluster(t)
	topic := c.Name(t, "produce-fenced")
	c.CreateTopic(t, topic, 1, nil)
	id := c.Name(t, "produce-fenced-txn")
	old, _ := newProducer(t, c, id)
	ctx := t.Context()
	send(t, old, topic, "before")
	if err := old.Commit(ctx, nil, nil); err != nil {
		t.Fatal(err)
	}
	newer, _ := newProducer(t, c, id)
	send(t, old, topic, "zombie")
	err := old.Commit(ctx, nil, nil)
	if !errors.Is(err, produce.ErrFatal) {
		t.Fatalf("the fenced producer's commit returned %v, want produce.ErrFatal", err)
	}
	send(t, newer, topic, "after")
	if err := newer.Commit(ctx, nil, nil); err != nil {
		t.Fatal(err)
	}
	got := values(t, c, topic, 2)[0]
	if strings.Join(got, ",") != "before,after" {
		t.Errorf("read_committed holds %q, want before,after", got)
	}
}

// TestLingerSendsWhatTheSenderLeftOpen: a record sent without Flush
// reaches the broker after the linger (Producer.Flush.Frequency), while
// its transaction is still open.
func TestLingerSendsWhatTheSenderLeftOpen(t *testing.T) {
	t.Parallel()
	c := kafka.Cluster(t)
	topic := c.Name(t, "produce-linger")
	c.CreateTopic(t, topic, 1, nil)
	p, _ := newProducer(t, c, c.Name(t, "produce-linger-txn"))
	send(t, p, topic, "open")
	got := kafka.ReadAll(t, c, topic, sarama.ReadUncommitted, func(got []*sarama.ConsumerMessage) bool { return len(got) >= 1 })
	if string(got[0].Value) != "open" {
		t.Errorf("read %q, want open", got[0].Value)
	}
	if err := p.Abort(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// TestSendRefusesARecordOverMaxMessageBytes: the client's own limit is
// checked before the record is kept.
func TestSendRefusesARecordOverMaxMessageBytes(t *testing.T) {
	t.Parallel()
	c := kafka.Cluster(t)
	topic := c.Name(t, "produce-limit")
	c.CreateTopic(t, topic, 1, nil)
	p, res := newProducer(t, c, c.Name(t, "produce-limit-txn"), func(cfg *sarama.Config) { cfg.Producer.MaxMessageBytes = 1000 })
	err := p.Send(&sarama.ProducerMessage{Topic: topic, Value: sarama.StringEncoder(strings.Repeat("v", 1000))})
	if !errors.Is(err, sarama.ErrMessageSizeTooLarge) {
		t.Fatalf("Send returned %v, want ErrMessageSizeTooLarge", err)
	}
	send(t, p, topic, "small")
	if err := p.Commit(t.Context(), nil, nil); err != nil {
		t.Fatal(err)
	}
	if n, err := res.failed(); n > 0 {
		t.Fatalf("%d records failed, the first with %v", n, err)
	}
}
