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
	cfg := c.SaramaConfig()
	cfg.Consumer.IsolationLevel = isolation
	cfg.Consumer.Return.Errors = true
	consumer, err := sarama.NewConsumer(c.Brokers, cfg)
	if err != nil {
		t.Fatalf("weirtest/kafka: consumer for %v: %v", c.Brokers, err)
		return nil
	}
	parts, err := consumer.Partitions(topic)
	if err != nil {
		_ = consumer.Close()
		t.Fatalf("weirtest/kafka: partitions of %q: %v", topic, err)
		return nil
	}

	// One goroutine per partition forwards records into msgs until done is
	// closed; the deferred shutdown closes done, waits for them, then closes
	// the partition consumers (which drain what is left) and the consumer.
	var (
		msgs    = make(chan *sarama.ConsumerMessage)
		done    = make(chan struct{})
		wg      sync.WaitGroup
		mu      sync.Mutex
		lastErr error
		pcs     []sarama.PartitionConsumer
	)
	defer func() {
		close(done)
		wg.Wait()
		for _, pc := range pcs {
			_ = pc.Close()
		}
		_ = consumer.Close()
	}()
	deadline := time.Now().Add(ReadTimeout)
	for _, p := range parts {
		pc, err := consumePartition(consumer, topic, p, deadline)
		if err != nil {
			t.Fatalf("weirtest/kafka: consume %s/%d: %v", topic, p, err)
			return nil
		}
		pcs = append(pcs, pc)
		wg.Go(func() {
			for {
				select {
				case m, ok := <-pc.Messages():
					if !ok {
						return
					}
					select {
					case msgs <- m:
					case <-done:
						return
					}
				case e, ok := <-pc.Errors():
					if !ok {
						return
					}
					mu.Lock()
					lastErr = e
					mu.Unlock()
				case <-done:
					return
				}
			}
		})
	}

	var got []*sarama.ConsumerMessage
	if until(got) {
		return got
	}
	timeout := time.NewTimer(ReadTimeout)
	defer timeout.Stop()
	for {
		select {
		case m := <-msgs:
			got = append(got, m)
			if until(got) {
				return got
			}
		case <-timeout.C:
			mu.Lock()
			err := lastErr
			mu.Unlock()
			t.Fatalf("weirtest/kafka: reading %q (%s) from the start: condition not met after %v and %d records; last consumer error: %v",
				topic, isolationName(isolation), ReadTimeout, len(got), err)
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
