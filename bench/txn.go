package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/IBM/sarama"

	"github.com/weirstream/weir"
)

// The sarama transactional passthrough (-workloads sarama-txn-passthrough,
// not in the default set) is the bare sarama peer of weir's exactly-once
// passthrough: a consume-transform-produce loop written against sarama's
// transactional producer API, with nothing of weir in it.
//
// Each group member has a transactional AsyncProducer of its own (id
// "<group>-txn-<member>", a client of its own, weir's producer settings)
// and a consumer group client with read_committed and auto-commit off. The
// handler begins a transaction when it has none open, sends every record
// to the producer and notes the record's next offset. Every commit
// interval, and when a session ends (before the member rejoins the group,
// so that the next owner of a partition starts where this one stopped),
// the member adds the noted offsets to the transaction with the session's
// group metadata (generation and member id, KIP-447) and commits it. An
// error aborts the open transaction and stops the run.

// txnMember is one group member's transactional state. mu serializes the
// producer's transaction calls and the sends of the member's claims.
type txnMember struct {
	group    string
	output   string
	producer sarama.AsyncProducer
	c        *counter
	failed   chan<- error

	mu      sync.Mutex
	sess    sarama.ConsumerGroupSession // the current session; nil between sessions
	open    bool                        // a transaction is open
	offsets map[int32]int64             // next offset per input partition, in the open transaction
	topic   string                      // the input topic
	commits int
	err     error // the first failure; the member does nothing more after it
}

// fail records err, aborts the open transaction if any and reports the
// failure once. Called with m.mu held.
func (m *txnMember) fail(err error) {
	if m.err != nil {
		return
	}
	m.err = err
	if m.open {
		if aerr := m.producer.AbortTxn(); aerr != nil {
			err = errors.Join(err, fmt.Errorf("aborting: %w", aerr))
		}
		m.open = false
	}
	select {
	case m.failed <- err:
	default:
	}
}

// commit commits the open transaction, with the offsets of its records,
// if one is open. Called with m.mu held.
func (m *txnMember) commit() {
	if !m.open || m.err != nil {
		return
	}
	if m.sess == nil {
		m.fail(errors.New("a transaction is open outside a session"))
		return
	}
	parts := make([]*sarama.PartitionOffsetMetadata, 0, len(m.offsets))
	for p, off := range m.offsets {
		parts = append(parts, &sarama.PartitionOffsetMetadata{Partition: p, Offset: off})
	}
	group := sarama.NewConsumerGroupMetadataFromSession(m.sess, m.group, nil)
	if err := m.producer.AddOffsetsToTxnWithGroupMetadata(map[string][]*sarama.PartitionOffsetMetadata{m.topic: parts}, group); err != nil {
		m.fail(fmt.Errorf("adding offsets to the transaction: %w", err))
		return
	}
	// CommitTxn flushes the transaction's records first.
	if err := m.producer.CommitTxn(); err != nil {
		m.fail(fmt.Errorf("committing the transaction: %w", err))
		return
	}
	m.open = false
	m.commits++
	clear(m.offsets)
}

// send adds one record to the open transaction, opening one if needed.
// It returns false when the member failed or the session ended.
func (m *txnMember) send(sess sarama.ConsumerGroupSession, rec *sarama.ConsumerMessage) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.err != nil {
		return false
	}
	if !m.open {
		if err := m.producer.BeginTxn(); err != nil {
			m.fail(fmt.Errorf("beginning a transaction: %w", err))
			return false
		}
		m.open = true
	}
	msg := &sarama.ProducerMessage{Topic: m.output, Key: sarama.ByteEncoder(rec.Key), Value: sarama.ByteEncoder(rec.Value), Timestamp: rec.Timestamp}
	select {
	case m.producer.Input() <- msg:
	case <-sess.Context().Done():
		return false
	}
	m.topic = rec.Topic
	m.offsets[rec.Partition] = rec.Offset + 1
	m.c.add()
	return true
}

func (m *txnMember) Setup(sess sarama.ConsumerGroupSession) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.sess = sess
	return nil
}

// Cleanup commits what the ending session consumed, before the member
// rejoins the group.
func (m *txnMember) Cleanup(sarama.ConsumerGroupSession) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.commit()
	m.sess = nil
	return m.err
}

func (m *txnMember) ConsumeClaim(sess sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	for {
		select {
		case rec, ok := <-claim.Messages():
			if !ok || !m.send(sess, rec) {
				return nil
			}
		case <-sess.Context().Done():
			return nil
		}
	}
}

// commitEvery commits the open transaction every interval until stop is
// closed.
func (m *txnMember) commitEvery(interval time.Duration, stop <-chan struct{}) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			m.mu.Lock()
			m.commit()
			m.mu.Unlock()
		case <-stop:
			return
		}
	}
}

// txnCommitInterval is the sarama transactional passthrough's commit
// interval: -commit-interval, or weir's exactly-once default (100 ms) for 0.
func txnCommitInterval(o *options) time.Duration {
	if o.commitInterval > 0 {
		return o.commitInterval
	}
	return 100 * time.Millisecond
}

// runSaramaTxnPassthrough copies input to output with o.threads members of
// a consumer group, each with a transactional producer (see txnMember),
// until the output's committed records number o.records. With o.verify it
// then checks that the group committed every input record and that the
// output holds every record exactly once.
func runSaramaTxnPassthrough(ctx context.Context, o *options, c *cluster, input, output, group string, round int) (*result, error) {
	const name = "sarama transactional passthrough"
	c.addGroup(group)
	cnt := newCounter(o.records)
	interval := txnCommitInterval(o)
	failed := make(chan error, 2*o.threads)
	consumeCtx, stopConsuming := context.WithCancel(context.Background())
	defer stopConsuming()
	stopCommits := make(chan struct{})
	var members []*txnMember
	var closers []func() error // in closing order
	var wg sync.WaitGroup
	closed := false
	closeAll := func() error {
		if closed {
			return nil
		}
		closed = true
		stopConsuming()
		close(stopCommits)
		var errs []error
		for _, f := range closers {
			if err := f(); err != nil {
				errs = append(errs, err)
			}
		}
		wg.Wait()
		return errors.Join(errs...)
	}

	m, err := startMeasurement(o.profiling, wlSaramaTxn, round)
	if err != nil {
		return nil, err
	}
	defer m.stop()
	cnt.reset()
	for i := range o.threads {
		gc := saramaConfig(group + "-" + strconv.Itoa(i))
		gc.Consumer.MaxWaitTime = 50 * time.Millisecond
		gc.Consumer.Offsets.Initial = sarama.OffsetOldest
		gc.Consumer.Offsets.AutoCommit.Enable = false
		gc.Consumer.IsolationLevel = sarama.ReadCommitted
		gc.Consumer.Return.Errors = true
		pc := saramaConfig(group + "-producer-" + strconv.Itoa(i))
		weirProducerConfig(pc)
		pc.Producer.Transaction.ID = group + "-txn-" + strconv.Itoa(i)
		g, err := sarama.NewConsumerGroup(o.brokers, group, gc)
		var p sarama.AsyncProducer
		if err == nil {
			if p, err = sarama.NewAsyncProducer(o.brokers, pc); err != nil {
				g.Close()
			}
		}
		if err != nil {
			_ = closeAll()
			return nil, fmt.Errorf("%s: member %d: %w", name, i, err)
		}
		// The group closes first: its sessions' Cleanup commits.
		closers = append(closers, g.Close, p.Close)
		mem := &txnMember{group: group, output: output, producer: p, c: cnt, failed: failed, offsets: map[int32]int64{}}
		members = append(members, mem)
		wg.Go(func() {
			for consumeCtx.Err() == nil {
				err := g.Consume(consumeCtx, []string{input}, mem)
				if consumeCtx.Err() != nil || errors.Is(err, sarama.ErrClosedConsumerGroup) {
					return
				}
				if err != nil {
					failed <- fmt.Errorf("member %d: %w", i, err)
					return
				}
			}
		})
		wg.Go(func() { mem.commitEvery(interval, stopCommits) })
		wg.Go(func() {
			for err := range g.Errors() {
				fmt.Fprintf(os.Stderr, "bench: %s: member %d: %v\n", name, i, err)
			}
		})
		wg.Go(func() {
			for range p.Successes() {
			}
		})
		wg.Go(func() {
			for e := range p.Errors() {
				// The transaction holding the record cannot commit now;
				// the next commit fails, aborts and reports it too.
				select {
				case failed <- fmt.Errorf("member %d: producing: %w", i, e.Err):
				default:
				}
			}
		})
	}
	deadline := time.Now().Add(o.timeout)
	werr := cnt.waitDone(ctx, name, o.timeout, failed)
	end := time.Duration(cnt.last.Load())
	if werr == nil {
		// waitOutput reads the guarantee from the options: the output is
		// transactional whatever -guarantee is.
		vo := *o
		vo.guarantee = weir.ExactlyOnce
		end, werr = c.waitOutput(ctx, &vo, output, cnt, deadline, failed)
	}
	cpu, perr := m.stop()

	closeStart := time.Now()
	cerr := withTimeout(closeTimeout, closeAll)
	closeTime := time.Since(closeStart)
	if err := errors.Join(werr, perr); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if cerr != nil {
		return nil, fmt.Errorf("%s: closing: %w", name, cerr)
	}
	commits := 0
	for _, mem := range members {
		mem.mu.Lock()
		commits += mem.commits
		if mem.err != nil {
			cerr = errors.Join(cerr, mem.err)
		}
		mem.mu.Unlock()
	}
	if cerr != nil {
		return nil, fmt.Errorf("%s: %w", name, cerr)
	}
	r := &result{
		Workload:         wlSaramaTxn,
		Name:             name,
		Round:            round,
		Records:          o.records,
		Bytes:            o.records * int64(keySize+o.valueSize),
		FirstSeconds:     time.Duration(cnt.first.Load()).Seconds(),
		ProcessedSeconds: time.Duration(cnt.last.Load()).Seconds(),
		EndSeconds:       end.Seconds(),
		CPUSeconds:       cpu.Seconds(),
		CloseSeconds:     closeTime.Seconds(),
		Note: fmt.Sprintf("end = output complete (committed records counted); %d member(s), a transactional producer each, weir's producer settings, commit interval %s, %d transactions committed",
			o.threads, interval, commits),
	}
	if o.verify {
		n, err := c.verifyExactlyOnce(ctx, o, group, input, output)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		r.Verified = &n
	}
	r.finish()
	return r, nil
}

// verifyExactlyOnce checks, after a passthrough stopped, that group has
// committed every record of input and that output holds, read_committed,
// every one of them exactly once (keys are distinct, so a key seen twice
// is a duplicate). It reads the output up to sentinel records it appends
// to every partition. It returns the output's record count.
func (c *cluster) verifyExactlyOnce(ctx context.Context, o *options, group, input, output string) (int64, error) {
	hwm, err := c.offsets(input, o.partitions, sarama.ReadUncommitted)
	if err != nil {
		return 0, err
	}
	committed, err := c.committedOffsets(group, input, o.partitions)
	if err != nil {
		return 0, err
	}
	for p := range hwm {
		if committed[p] != hwm[p] {
			return 0, fmt.Errorf("the group committed offset %d of %s/%d, whose end is %d", committed[p], input, p, hwm[p])
		}
	}
	ends, err := c.writeSentinels(output, o.partitions)
	if err != nil {
		return 0, fmt.Errorf("verifying the output: %w", err)
	}
	keys := make(map[string]struct{}, o.records)
	var n, dups int64
	err = c.readUpTo(ctx, output, ends, time.Now().Add(o.timeout), func(p int32, m *sarama.ConsumerMessage) {
		if m.Offset == ends[p] {
			return
		}
		n++
		if _, ok := keys[string(m.Key)]; ok {
			dups++
		}
		keys[string(m.Key)] = struct{}{}
	})
	if err != nil {
		return 0, fmt.Errorf("verifying the output: %w", err)
	}
	if n != o.records || dups > 0 {
		return n, fmt.Errorf("the output %s is not exactly once: %d committed records, %d distinct keys (%d duplicates), want %d", output, n, len(keys), dups, o.records)
	}
	return n, nil
}
