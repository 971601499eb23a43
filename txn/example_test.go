package txn_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"os/signal"
	"sync"
	"time"

	"github.com/IBM/sarama"

	"github.com/weirstream/weir/txn"
)

// upper copies every record of its input topics to the topic output,
// upper-casing the value and keeping the key, exactly once. It is the
// sarama.ConsumerGroupHandler of the loop: sarama calls Setup, then
// ConsumeClaim in a goroutine per claimed partition, then Cleanup, once per
// session. It relies on sarama's default, eager rebalancing, under which
// every rebalance ends the session and Cleanup commits before the
// partitions move.
type upper struct {
	group    string        // the consumer group's id
	output   string        // the output topic
	interval time.Duration // between commits

	mu       sync.Mutex // the claims share the producer
	producer *txn.Producer
	// offsets are the input of the open transaction: the next offset to
	// consume of each partition whose records were sent.
	offsets map[string]map[int32]int64
	last    time.Time // of the last commit
	// rewind is set when the session's uncommitted work is lost: nothing
	// more is sent, and the session ends so that the next one starts at
	// the committed offsets.
	rewind bool
	fenced bool  // fenced since the last successful commit
	err    error // stops the loop
}

func (h *upper) Setup(sarama.ConsumerGroupSession) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.offsets, h.last, h.rewind = map[string]map[int32]int64{}, time.Now(), false
	return nil
}

// Cleanup commits what the session processed, before its partitions go.
func (h *upper) Cleanup(s sarama.ConsumerGroupSession) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.commit(s)
	return nil
}

// ConsumeClaim returns to end the session: sarama ends it when any claim
// returns.
func (h *upper) ConsumeClaim(s sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	tick := time.NewTicker(h.interval)
	defer tick.Stop()
	for {
		select {
		case m, ok := <-claim.Messages():
			if !ok {
				return nil
			}
			if !h.process(s, m) {
				return nil
			}
		case <-tick.C:
			if !h.commitDue(s) {
				return nil
			}
		case <-s.Context().Done():
			return nil
		}
	}
}

// process sends m's output; false ends the session.
func (h *upper) process(s sarama.ConsumerGroupSession, m *sarama.ConsumerMessage) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.rewind {
		return false // another claim's commit failed: send nothing more
	}
	out := &sarama.ProducerMessage{Topic: h.output}
	if m.Key != nil {
		out.Key = sarama.ByteEncoder(m.Key)
	}
	if m.Value != nil {
		out.Value = sarama.ByteEncoder(bytes.ToUpper(m.Value))
	}
	if err := h.producer.Send(out); err != nil {
		// The transaction failed: Commit aborts it and says what next.
		return h.commit(s)
	}
	if h.offsets[m.Topic] == nil {
		h.offsets[m.Topic] = map[int32]int64{}
	}
	h.offsets[m.Topic][m.Partition] = m.Offset + 1
	return true
}

func (h *upper) commitDue(s sarama.ConsumerGroupSession) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if time.Since(h.last) < h.interval {
		return !h.rewind
	}
	return h.commit(s)
}

// commit commits the open transaction with h.mu held; false ends the
// session.
func (h *upper) commit(s sarama.ConsumerGroupSession) bool {
	if h.rewind {
		return false
	}
	h.last = time.Now()
	err := h.producer.Commit(context.Background(), h.offsets, txn.SessionGroup(s, h.group, ""))
	if err == nil {
		clear(h.offsets)
		h.fenced = false
		return true
	}
	h.rewind = true
	switch {
	case errors.Is(err, txn.ErrAborted):
		// Nothing of the transaction happened; the next session
		// reprocesses it.
	case errors.Is(err, txn.ErrFenced) && h.fenced:
		h.err = fmt.Errorf("fenced twice without a commit in between: another instance uses this transactional id: %w", err)
	case errors.Is(err, txn.ErrFenced), errors.Is(err, txn.ErrAmbiguous):
		h.fenced = errors.Is(err, txn.ErrFenced)
		p, rerr := h.producer.Rebuild()
		if rerr != nil {
			h.err = rerr
			return false
		}
		h.producer = p
	default:
		h.err = err
	}
	return false
}

// run relays input to output until ctx is done or the loop fails.
func run(ctx context.Context, brokers []string, transactionalID string) error {
	pcfg := sarama.NewConfig()
	pcfg.Version = sarama.V4_0_0_0
	txn.ConfigureProducer(pcfg, transactionalID)
	pclient, err := sarama.NewClient(brokers, pcfg)
	if err != nil {
		return err
	}
	defer pclient.Close()
	producer, err := txn.New(pclient)
	if err != nil {
		return err
	}
	h := &upper{group: "upper", output: "output", interval: 100 * time.Millisecond, producer: producer}
	defer func() { h.producer.Close() }() // the last one, after rebuilds

	ccfg := sarama.NewConfig()
	ccfg.Version = sarama.V4_0_0_0
	ccfg.Consumer.Offsets.Initial = sarama.OffsetOldest
	txn.ConfigureConsumer(ccfg)
	group, err := sarama.NewConsumerGroup(brokers, h.group, ccfg)
	if err != nil {
		return err
	}
	defer group.Close()

	for ctx.Err() == nil {
		// One session per call: it returns at a rebalance, when ctx is
		// done, or when the handler ends the session to rewind.
		if err := group.Consume(ctx, []string{"input"}, h); err != nil {
			return err
		}
		h.mu.Lock()
		err := h.err
		h.mu.Unlock()
		if err != nil {
			return err
		}
	}
	return nil
}

// A consume-transform-produce loop with a sarama ConsumerGroup: every
// record of the topic input is written to the topic output with its value
// upper-cased, exactly once. Run several instances, each with its own
// transactional id, to share the input partitions.
func Example() {
	host, _ := os.Hostname()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	// The transactional id is unique to this instance and the same across
	// its restarts.
	if err := run(ctx, []string{"localhost:9092"}, "upper-"+host); err != nil {
		log.Print(err)
	}
}
