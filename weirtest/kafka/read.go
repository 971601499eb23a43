package kafka

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
)

// ReadTimeout bounds one call of [ReadAll].
const ReadTimeout = 30 * time.Second

// ReadAll reads every partition of topic from its earliest offset with a new
// sarama consumer at the given isolation level (sarama.ReadCommitted or
// sarama.ReadUncommitted), and returns the records read once until reports
// true for them. until is called with the records read so far (in arrival
// order, which is offset order within a partition but interleaves
// partitions), first with none and then after each record; it must not keep
// or modify the slice. Transaction markers are never returned, and a
// read_committed reader returns no aborted records. The test fails when
// until is still false after [ReadTimeout]; the message gives the count read
// and the consumer's last error.
//
// To assert that a topic holds exactly some records, stop at a record known
// to be written last (a partition is read in offset order, so everything
// before it has been seen) rather than at a count.
func ReadAll(t testing.TB, c *Env, topic string, isolation sarama.IsolationLevel, until func(got []*sarama.ConsumerMessage) bool) []*sarama.ConsumerMessage {
	t.Helper()
	consumer, parts, ok := openTopic(t, c, topic, isolation)
	if !ok {
		return nil
	}
	r := &topicReader{consumer: consumer, msgs: make(chan *sarama.ConsumerMessage), done: make(chan struct{})}
	defer r.close()
	deadline := time.Now().Add(ReadTimeout)
	for _, p := range parts {
		if err := r.consume(topic, p, deadline); err != nil {
			t.Fatalf("weirtest/kafka: consume %s/%d: %v", topic, p, err)
			return nil
		}
	}
	return r.readUntil(t, topic, isolation, until)
}

// openTopic returns a new consumer at the isolation level and the
// partitions of topic; ok is false when t failed.
func openTopic(t testing.TB, c *Env, topic string, isolation sarama.IsolationLevel) (consumer sarama.Consumer, parts []int32, ok bool) {
	t.Helper()
	cfg := c.SaramaConfig()
	cfg.Consumer.IsolationLevel = isolation
	cfg.Consumer.Return.Errors = true // for the timeout's message
	consumer, err := sarama.NewConsumer(c.Brokers, cfg)
	if err != nil {
		t.Fatalf("weirtest/kafka: consumer for %v: %v", c.Brokers, err)
		return nil, nil, false
	}
	parts, err = consumer.Partitions(topic)
	if err != nil {
		_ = consumer.Close()
		t.Fatalf("weirtest/kafka: partitions of %q: %v", topic, err)
		return nil, nil, false
	}
	return consumer, parts, true
}

// topicReader merges the partitions of a topic: one goroutine per
// partition forwards its records into msgs until done is closed, and
// keeps the partition's last error for the timeout's message.
type topicReader struct {
	consumer sarama.Consumer
	msgs     chan *sarama.ConsumerMessage
	done     chan struct{}
	wg       sync.WaitGroup
	pcs      []sarama.PartitionConsumer
	mu       sync.Mutex
	lastErr  error
}

// consume starts forwarding the records of topic/p, from its earliest
// offset.
func (r *topicReader) consume(topic string, p int32, deadline time.Time) error {
	pc, err := consumePartition(r.consumer, topic, p, deadline)
	if err != nil {
		return err
	}
	r.pcs = append(r.pcs, pc)
	r.wg.Go(func() { r.forward(pc) })
	return nil
}

// forward sends pc's records into msgs and keeps its errors, until pc or
// done is closed.
func (r *topicReader) forward(pc sarama.PartitionConsumer) {
	for {
		select {
		case m, ok := <-pc.Messages():
			if !ok {
				return
			}
			select {
			case r.msgs <- m:
			case <-r.done:
				return
			}
		case e, ok := <-pc.Errors():
			if !ok {
				return
			}
			r.mu.Lock()
			r.lastErr = e
			r.mu.Unlock()
		case <-r.done:
			return
		}
	}
}

// close closes done and waits for the goroutines, then closes the
// partition consumers (which drain what is left) and the consumer.
func (r *topicReader) close() {
	close(r.done)
	r.wg.Wait()
	for _, pc := range r.pcs {
		_ = pc.Close()
	}
	_ = r.consumer.Close()
}

// lastError returns the last error of any partition.
func (r *topicReader) lastError() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lastErr
}

// readUntil collects the records from msgs until until reports true for
// them, and fails t after [ReadTimeout].
func (r *topicReader) readUntil(t testing.TB, topic string, isolation sarama.IsolationLevel, until func(got []*sarama.ConsumerMessage) bool) []*sarama.ConsumerMessage {
	t.Helper()
	var got []*sarama.ConsumerMessage
	if until(got) {
		return got
	}
	timeout := time.NewTimer(ReadTimeout)
	defer timeout.Stop()
	for {
		select {
		case m := <-r.msgs:
			got = append(got, m)
			if until(got) {
				return got
			}
		case <-timeout.C:
			t.Fatalf("weirtest/kafka: reading %q (%s) from the start: condition not met after %v and %d records; last consumer error: %v",
				topic, isolationName(isolation), ReadTimeout, len(got), r.lastError())
			return nil
		}
	}
}

// consumePartition starts consuming topic/p from its earliest offset. A
// partition whose leader is moving or not yet serving (a topic weir has just
// created, a broker restarting) refuses the start-offset lookup with a
// retriable error; the lookup is tried again every [pollInterval] until
// deadline.
func consumePartition(consumer sarama.Consumer, topic string, p int32, deadline time.Time) (sarama.PartitionConsumer, error) {
	for {
		pc, err := consumer.ConsumePartition(topic, p, sarama.OffsetOldest)
		if err == nil || !retriable(err) || time.Now().After(deadline) {
			return pc, err
		}
		time.Sleep(pollInterval)
	}
}

// retriable reports whether err is a partition error that a metadata
// refresh and another try can clear.
func retriable(err error) bool {
	var kerr sarama.KError
	if !errors.As(err, &kerr) {
		return false
	}
	switch kerr {
	case sarama.ErrNotLeaderForPartition, sarama.ErrLeaderNotAvailable,
		sarama.ErrUnknownTopicOrPartition, sarama.ErrOffsetNotAvailable,
		sarama.ErrFencedLeaderEpoch, sarama.ErrUnknownLeaderEpoch:
		return true
	}
	return false
}

// isolationName names an isolation level the way Kafka does.
func isolationName(l sarama.IsolationLevel) string {
	switch l {
	case sarama.ReadCommitted:
		return "read_committed"
	case sarama.ReadUncommitted:
		return "read_uncommitted"
	default:
		return fmt.Sprintf("isolation level %d", l)
	}
}
