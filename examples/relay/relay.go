package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/IBM/sarama"

	"github.com/weirstream/weir/txn"
)

// transform is what the relay does to each record: the value upper-cased,
// the key kept. A null key or value stays null.
func transform(m *sarama.ConsumerMessage, output string) *sarama.ProducerMessage {
	out := &sarama.ProducerMessage{Topic: output}
	if m.Key != nil {
		out.Key = sarama.ByteEncoder(m.Key)
	}
	if m.Value != nil {
		out.Value = sarama.ByteEncoder(bytes.ToUpper(m.Value))
	}
	return out
}

// stats count what the relay did.
type stats struct {
	Records      int // input records whose output committed
	Transactions int // transactions committed
	Aborted      int // transactions aborted, their input reprocessed
	Rebuilds     int // producers replaced after fencing or an unknown outcome, their input reprocessed
}

// relay is the consume-transform-produce loop's sarama.ConsumerGroupHandler:
// sarama calls Setup, then ConsumeClaim in a goroutine per claimed
// partition, then Cleanup, once per session. It relies on sarama's default
// eager rebalancing, under which every rebalance ends the session, so that
// Cleanup commits before the partitions move.
//
// The claims share one producer under mu. A commit that fails ends the
// session: the first claim to see it returns, sarama then closes the
// others, and the next session starts from the committed offsets (a sarama
// claim cannot seek back). Until then nothing more is sent.
type relay struct {
	group    string // consumer group id
	output   string
	interval time.Duration // between commits
	// abortEvery > 0 aborts every abortEvery-th transaction on purpose, to
	// show that its records are never seen and are relayed again.
	abortEvery int
	// target > 0 closes done once target records have been committed.
	target int
	done   chan struct{}

	mu       sync.Mutex
	producer *txn.Producer
	offsets  map[string]map[int32]int64 // next offset of each partition sent in the open transaction
	records  int                        // records sent in the open transaction
	last     time.Time                  // of the last commit
	attempts int                        // commits of a transaction with records, for abortEvery
	rewind   bool                       // the session's uncommitted work is lost: send nothing more
	fenced   bool                       // fenced since the last successful commit
	err      error                      // stops the relay
	stats    stats
}

func newRelay(producer *txn.Producer, group, output string, interval time.Duration, abortEvery, target int) *relay {
	return &relay{
		group: group, output: output, interval: interval, abortEvery: abortEvery, target: target,
		done: make(chan struct{}), producer: producer,
	}
}

// Setup starts a session with nothing sent.
func (r *relay) Setup(sarama.ConsumerGroupSession) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.offsets, r.records, r.last, r.rewind = map[string]map[int32]int64{}, 0, time.Now(), false
	return nil
}

// Cleanup commits what the session processed, before its partitions go.
func (r *relay) Cleanup(s sarama.ConsumerGroupSession) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.commit(s)
	return nil
}

// ConsumeClaim relays one partition until the session ends; returning
// ends the session.
func (r *relay) ConsumeClaim(s sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	tick := time.NewTicker(r.interval)
	defer tick.Stop()
	for {
		select {
		case m, ok := <-claim.Messages():
			if !ok || !r.process(s, m) {
				return nil
			}
		case <-tick.C:
			if !r.commitDue(s) {
				return nil
			}
		case <-s.Context().Done():
			return nil
		}
	}
}

// process sends m's output into the open transaction; false ends the
// session.
func (r *relay) process(s sarama.ConsumerGroupSession, m *sarama.ConsumerMessage) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.rewind {
		return false
	}
	if err := r.producer.Send(transform(m, r.output)); err != nil {
		// A record of the transaction failed (or the producer is
		// closed): Commit aborts the transaction and says what next.
		return r.commit(s)
	}
	if r.offsets[m.Topic] == nil {
		r.offsets[m.Topic] = map[int32]int64{}
	}
	r.offsets[m.Topic][m.Partition] = m.Offset + 1
	r.records++
	return true
}

func (r *relay) commitDue(s sarama.ConsumerGroupSession) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.rewind {
		return false
	}
	if time.Since(r.last) < r.interval {
		return true
	}
	return r.commit(s)
}

// commit ends the open transaction, with r.mu held. It returns true when
// the session goes on; false when it must end, to reprocess from the
// committed offsets (r.rewind) or to stop (r.err).
func (r *relay) commit(s sarama.ConsumerGroupSession) bool {
	if r.rewind {
		return false
	}
	r.last = time.Now()
	if r.records > 0 {
		r.attempts++
		if r.abortEvery > 0 && r.attempts%r.abortEvery == 0 {
			// The demonstration's abort: a decision of the relay's, as
			// a failed transformation would be.
			return r.failed(r.producer.Abort(context.Background()), true)
		}
	}
	err := r.producer.Commit(context.Background(), r.offsets, txn.SessionGroup(s, r.group, ""))
	if err != nil {
		return r.failed(err, false)
	}
	if r.records > 0 {
		r.stats.Records += r.records
		r.stats.Transactions++
	}
	clear(r.offsets)
	r.records, r.fenced = 0, false
	if r.target > 0 && r.stats.Records >= r.target && r.done != nil {
		close(r.done)
		r.done = nil
	}
	return true
}

// failed acts on the failure of a commit or of an abort (err, nil after an
// abort that succeeded): the session ends, and the producer is replaced
// when it must not be used again.
func (r *relay) failed(err error, aborting bool) bool {
	r.rewind = true
	switch {
	case err == nil && aborting, errors.Is(err, txn.ErrAborted):
		// Nothing of the transaction happened; the next session
		// reprocesses its input.
		r.stats.Aborted++
	case errors.Is(err, txn.ErrFenced) && r.fenced:
		// Rebuilding fenced the other producer, which fenced this one
		// back before it could commit: two live instances share the id.
		r.err = fmt.Errorf("fenced twice without a commit in between: another instance uses this transactional id: %w", err)
	case errors.Is(err, txn.ErrFenced), errors.Is(err, txn.ErrAmbiguous):
		// The producer is dead, or its outcome unknown: a new one on the
		// same client fences it for good and aborts what it left open.
		r.fenced = errors.Is(err, txn.ErrFenced)
		p, rerr := r.producer.Rebuild()
		if rerr != nil {
			r.err = rerr
			return false
		}
		r.producer = p
		r.stats.Rebuilds++
	default:
		r.err = err
	}
	return false
}

// run relays topic input until ctx is done, the target is reached or the
// relay fails, and closes the group. The producer it ends with is
// r.producer, the caller's to close.
func (r *relay) run(ctx context.Context, group sarama.ConsumerGroup, input string) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	r.mu.Lock()
	done := r.done
	r.mu.Unlock()
	if done != nil {
		go func() {
			select {
			case <-done:
				cancel()
			case <-ctx.Done():
			}
		}()
	}
	for ctx.Err() == nil {
		// One session per call: it returns at a rebalance, when ctx is
		// done, or when the relay ends the session to rewind.
		if err := group.Consume(ctx, []string{input}, r); err != nil {
			return err
		}
		r.mu.Lock()
		err := r.err
		r.mu.Unlock()
		if err != nil {
			return err
		}
	}
	return nil
}

// Stats returns what the relay did so far.
func (r *relay) Stats() stats {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stats
}
