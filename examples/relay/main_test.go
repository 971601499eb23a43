package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
)

func TestFlagsKeepTheirContract(t *testing.T) {
	t.Parallel()
	o, err := parseFlags(nil)
	if err != nil {
		t.Fatal(err)
	}
	if o.brokers != "" || o.input != "relay-input" || o.output != "relay-output" || o.group != "relay" ||
		o.records != 0 || o.commitInterval != 100*time.Millisecond || o.abortEvery != 0 || !strings.HasPrefix(o.transactionalID, "relay-") {
		t.Errorf("defaults changed: %+v", o)
	}
	o, err = parseFlags([]string{"-brokers", "a:1,b:2", "-input", "i", "-output", "o", "-group", "g",
		"-transactional-id", "g-7", "-records", "5", "-commit-interval", "1s", "-abort-every", "3"})
	if err != nil || o.brokers != "a:1,b:2" || o.input != "i" || o.output != "o" || o.group != "g" ||
		o.transactionalID != "g-7" || o.records != 5 || o.commitInterval != time.Second || o.abortEvery != 3 {
		t.Errorf("parseFlags = %+v, %v", o, err)
	}
	for _, bad := range [][]string{{"-records", "-1"}, {"-abort-every", "1"}, {"-commit-interval", "0s"}, {"extra"}} {
		if _, err := parseFlags(bad); err == nil {
			t.Errorf("parseFlags(%q) accepted", bad)
		}
	}
}

func TestTransformKeepsKeyAndNulls(t *testing.T) {
	t.Parallel()
	out := transform(&sarama.ConsumerMessage{Key: []byte("k"), Value: []byte("abc")}, "o")
	k, _ := out.Key.Encode()
	v, _ := out.Value.Encode()
	if out.Topic != "o" || string(k) != "k" || string(v) != "ABC" {
		t.Errorf("transform = %s %q %q", out.Topic, k, v)
	}
	// A null key or value stays null, not empty: a tombstone stays one.
	out = transform(&sarama.ConsumerMessage{}, "o")
	if out.Key != nil || out.Value != nil {
		t.Errorf("transform of nulls = %v, %v", out.Key, out.Value)
	}
}

func TestCheckOutputFindsDuplicatesAndLoss(t *testing.T) {
	t.Parallel()
	rec := func(i int) *sarama.ConsumerMessage {
		return &sarama.ConsumerMessage{Key: []byte(inputKey(i)), Value: []byte(strings.ToUpper(inputValue(i)))}
	}
	if err := checkOutput([]*sarama.ConsumerMessage{rec(0), rec(1)}, 2); err != nil {
		t.Fatal(err)
	}
	if err := checkOutput([]*sarama.ConsumerMessage{rec(0), rec(0)}, 2); err == nil {
		t.Error("a duplicate passed")
	}
	if err := checkOutput([]*sarama.ConsumerMessage{rec(0)}, 2); err == nil {
		t.Error("a lost record passed")
	}
	bad := rec(1)
	bad.Value = []byte(inputValue(1))
	if err := checkOutput([]*sarama.ConsumerMessage{rec(0), bad}, 2); err == nil {
		t.Error("an untransformed record passed")
	}
}

// TestEmbeddedRelayWithAbortsIsExactlyOnce runs the example as `go run
// ./relay` does, aborting every second transaction, and checks the whole
// output topic: each input record once.
func TestEmbeddedRelayWithAbortsIsExactlyOnce(t *testing.T) {
	t.Parallel()
	o, err := parseFlags([]string{"-records", "3000", "-abort-every", "2", "-commit-interval", "5ms"})
	if err != nil {
		t.Fatal(err)
	}
	cluster, err := startEmbedded(o.input, o.output)
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	brokers := cluster.Brokers()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// The input arrives in three parts, each once the one before is
	// committed: at least three transactions, so every second one aborts
	// at least once, however fast the relay reads.
	type result struct {
		st  stats
		err error
	}
	done := make(chan result, 1)
	go func() {
		st, err := relayTopic(ctx, brokers, o)
		done <- result{st, err}
	}()
	third := o.records / 3
	for part, from := range []int{0, third, 2 * third} {
		to := from + third
		if part == 2 {
			to = o.records
		}
		if err := produceRecords(brokers, o.input, from, to); err != nil {
			t.Fatal(err)
		}
		if part < 2 {
			waitCommitted(t, brokers, o.group, o.input, int64(to))
		}
	}
	r := <-done
	st, err := r.st, r.err
	if err != nil {
		t.Fatal(err)
	}
	if st.Aborted == 0 || st.Records != o.records {
		t.Fatalf("stats %+v: want aborts and %d records", st, o.records)
	}
	if err := checkOutput(readWhole(t, brokers, o.output), o.records); err != nil {
		t.Fatal(err)
	}
}

// TestEmbeddedRelayRebuildsAFencedProducer fences the relay's producer
// with a second producer of the same transactional id while it runs: the
// relay replaces its producer, reprocesses, and the output is still each
// input record once.
func TestEmbeddedRelayRebuildsAFencedProducer(t *testing.T) {
	t.Parallel()
	o, err := parseFlags([]string{"-records", "200", "-commit-interval", "10ms", "-transactional-id", "relay-fenced"})
	if err != nil {
		t.Fatal(err)
	}
	cluster, err := startEmbedded(o.input, o.output)
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	brokers := cluster.Brokers()
	if err := produceRecords(brokers, o.input, 0, 100); err != nil {
		t.Fatal(err)
	}
	type result struct {
		st  stats
		err error
	}
	res := make(chan result, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	go func() {
		st, err := relayTopic(ctx, brokers, o)
		res <- result{st, err}
	}()
	// The first 100 are committed once read back (read_committed).
	if _, err := readOutput(brokers, o.output, 100); err != nil {
		t.Fatal(err)
	}
	cfg := saramaConfig("rogue")
	cfg.Producer.Idempotent = true
	cfg.Producer.RequiredAcks = sarama.WaitForAll
	cfg.Net.MaxOpenRequests = 1
	cfg.Producer.Transaction.ID = o.transactionalID
	rogue, err := sarama.NewAsyncProducer(brokers, cfg) // initialises the id: fences the relay
	if err != nil {
		t.Fatal(err)
	}
	rogue.Close()
	// The next 100 meet the fenced producer.
	if err := produceRecords(brokers, o.input, 100, 200); err != nil {
		t.Fatal(err)
	}
	r := <-res
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.st.Rebuilds == 0 || r.st.Records != 200 {
		t.Fatalf("stats %+v: want a rebuild and 200 records", r.st)
	}
	if err := checkOutput(readWhole(t, brokers, o.output), 200); err != nil {
		t.Fatal(err)
	}
}

// readWhole reads every record of topic (read_committed): it writes an
// end marker to each partition, after the relay has stopped, and reads
// until it has seen all of them, so that a duplicate written after the
// last original cannot hide.
func readWhole(t *testing.T, brokers []string, topic string) []*sarama.ConsumerMessage {
	t.Helper()
	cfg := saramaConfig("test")
	cfg.Producer.Return.Successes = true
	cfg.Producer.Partitioner = sarama.NewManualPartitioner
	cfg.Consumer.IsolationLevel = sarama.ReadCommitted
	p, err := sarama.NewSyncProducer(brokers, cfg)
	if err != nil {
		t.Fatal(err)
	}
	client, err := sarama.NewClient(brokers, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	parts, err := client.Partitions(topic)
	if err != nil {
		t.Fatal(err)
	}
	end := []byte("end-marker")
	for _, part := range parts {
		if _, _, err := p.SendMessage(&sarama.ProducerMessage{Topic: topic, Partition: part, Key: sarama.ByteEncoder(end)}); err != nil {
			t.Fatal(err)
		}
	}
	p.Close()

	consumer, err := sarama.NewConsumerFromClient(client)
	if err != nil {
		t.Fatal(err)
	}
	defer consumer.Close()
	var got []*sarama.ConsumerMessage
	for _, part := range parts {
		pc, err := consumer.ConsumePartition(topic, part, sarama.OffsetOldest)
		if err != nil {
			t.Fatal(err)
		}
		timeout := time.After(30 * time.Second)
	read:
		for {
			select {
			case m := <-pc.Messages():
				if bytes.Equal(m.Key, end) {
					break read
				}
				got = append(got, m)
			case <-timeout:
				t.Fatalf("no end marker in %s/%d within 30 s", topic, part)
			}
		}
		pc.Close()
	}
	return got
}

// waitCommitted polls, for at most a minute, until group has committed n
// records of topic, summed over its partitions.
func waitCommitted(t *testing.T, brokers []string, group, topic string, n int64) {
	t.Helper()
	admin, err := sarama.NewClusterAdmin(brokers, saramaConfig("test-admin"))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	deadline := time.Now().Add(time.Minute)
	for {
		resp, err := admin.ListConsumerGroupOffsets(group, nil)
		var sum int64
		if err == nil {
			for _, b := range resp.Blocks[topic] {
				if b.Offset > 0 {
					sum += b.Offset
				}
			}
		}
		if sum >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("group %s committed %d of %d records of %s within a minute (last error %v)", group, sum, n, topic, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
