package main

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/IBM/sarama"
)

// The aborts workload's administration and output verification: the
// group's committed offsets, the change of the output's cleanup policy,
// and reading input and output back to check that every committed input
// record but the bad ones has its output exactly once.

// committedOffsets returns group's committed offsets of topic's
// partitions, -1 where none is committed.
func (c *cluster) committedOffsets(group, topic string, partitions int32) ([]int64, error) {
	parts := make([]int32, partitions)
	for p := range partitions {
		parts[p] = p
	}
	res, err := c.admin.ListConsumerGroupOffsets(group, map[string][]int32{topic: parts})
	if err != nil {
		return nil, fmt.Errorf("committed offsets of group %s: %w", group, err)
	}
	out := make([]int64, partitions)
	for _, p := range parts {
		b := res.GetBlock(topic, p)
		if b == nil {
			return nil, fmt.Errorf("committed offsets of group %s: no answer for %s/%d", group, topic, p)
		}
		if !errors.Is(b.Err, sarama.ErrNoError) {
			return nil, fmt.Errorf("committed offset of group %s on %s/%d: %w", group, topic, p, b.Err)
		}
		out[p] = b.Offset
	}
	return out, nil
}

// setCompacted sets topic's cleanup.policy to compact and waits until the
// broker describes it so.
func (c *cluster) setCompacted(ctx context.Context, topic string) error {
	if err := c.admin.AlterConfig(sarama.TopicResource, topic, map[string]*string{"cleanup.policy": new("compact")}, false); err != nil {
		return fmt.Errorf("making %s compacted: %w", topic, err)
	}
	return poll(ctx, "waiting for "+topic+" to be compacted", time.Now(), adminTimeout, func() (bool, string, error) {
		entries, err := c.admin.DescribeConfig(sarama.ConfigResource{Type: sarama.TopicResource, Name: topic, ConfigNames: []string{"cleanup.policy"}})
		if err != nil || len(entries) == 0 {
			return false, fmt.Sprintf("describing %s: %v", topic, err), nil
		}
		return entries[0].Value == "compact", "cleanup.policy=" + entries[0].Value, nil
	})
}

// sentinelKey is the key of the records the verification appends to the
// output to find its end: a compacted topic refuses records without key.
var sentinelKey = []byte("weir-bench-sentinel")

// writeSentinels appends one record to every partition of topic, outside
// any transaction, and returns their offsets: a read_committed reader
// that reaches one has read every committed record before it.
func (c *cluster) writeSentinels(topic string, partitions int32) ([]int64, error) {
	sc := saramaConfig("weir-bench-sentinel")
	sc.Producer.RequiredAcks = sarama.WaitForAll
	sc.Producer.Partitioner = sarama.NewManualPartitioner
	sc.Producer.Return.Successes = true
	producer, err := sarama.NewSyncProducer(c.brokers, sc)
	if err != nil {
		return nil, fmt.Errorf("sentinels for %s: producer: %w", topic, err)
	}
	defer producer.Close()
	out := make([]int64, partitions)
	for p := range partitions {
		_, off, err := producer.SendMessage(&sarama.ProducerMessage{Topic: topic, Partition: p, Key: sarama.ByteEncoder(sentinelKey), Value: sarama.StringEncoder("end")})
		if err != nil {
			return nil, fmt.Errorf("sentinel for %s/%d: %w", topic, p, err)
		}
		out[p] = off
	}
	return out, nil
}

// readUpTo reads every partition p of topic from its start with
// read_committed isolation up to offset last[p] included (nothing where
// last[p] < 0) and calls visit with each record, one call at a time. It
// fails when the deadline passes first.
func (c *cluster) readUpTo(ctx context.Context, topic string, last []int64, deadline time.Time, visit func(p int32, m *sarama.ConsumerMessage)) error {
	sc := saramaConfig("weir-bench-verify")
	sc.Consumer.IsolationLevel = sarama.ReadCommitted
	sc.Consumer.MaxWaitTime = 50 * time.Millisecond
	consumer, err := sarama.NewConsumer(c.brokers, sc)
	if err != nil {
		return fmt.Errorf("reading %s: consumer: %w", topic, err)
	}
	defer consumer.Close()
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	var mu sync.Mutex
	var wg sync.WaitGroup
	errs := make([]error, len(last))
	for p, end := range last {
		if end < 0 {
			continue
		}
		pc, err := consumer.ConsumePartition(topic, int32(p), sarama.OffsetOldest)
		if err != nil {
			cancel()
			wg.Wait()
			return fmt.Errorf("reading %s/%d: %w", topic, p, err)
		}
		wg.Go(func() {
			defer pc.AsyncClose()
			at := int64(-1)
			perrs := pc.Errors()
			for {
				select {
				case m, ok := <-pc.Messages():
					if !ok {
						errs[p] = fmt.Errorf("reading %s/%d: closed at offset %d of %d", topic, p, at, end)
						return
					}
					at = m.Offset
					mu.Lock()
					visit(int32(p), m)
					mu.Unlock()
					if m.Offset >= end {
						return
					}
				case perr, ok := <-perrs:
					if !ok {
						perrs = nil
						continue
					}
					errs[p] = fmt.Errorf("reading %s/%d: %w", topic, p, perr.Err)
					return
				case <-ctx.Done():
					errs[p] = fmt.Errorf("reading %s/%d: read up to offset %d of %d: %w", topic, p, at, end, ctx.Err())
					return
				}
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// verifyAbortsOutput checks, after the instances stopped, that the
// output's committed records are exactly the committed input records but
// the bad ones, each once, and returns their count. When the run was
// complete every input record is committed and injected of them are bad.
func (c *cluster) verifyAbortsOutput(ctx context.Context, o *options, group, input, output string, partitions int32, injected int64, complete bool) (int64, error) {
	offs, err := c.committedOffsets(group, input, partitions)
	if err != nil {
		return 0, err
	}
	last := make([]int64, partitions)
	for p, off := range offs {
		last[p] = off - 1 // -1 or below: nothing committed
	}
	deadline := time.Now().Add(o.timeout)
	// seen counts the output records of each committed good input key.
	type echoes struct {
		at coord
		n  int
	}
	seen := map[string]*echoes{}
	var committedInput, badCommitted int64
	var bad []coord
	err = c.readUpTo(ctx, input, last, deadline, func(p int32, m *sarama.ConsumerMessage) {
		committedInput++
		if bytes.Equal(m.Value, badValue) {
			badCommitted++
			bad = append(bad, coord{p, m.Offset})
			return
		}
		seen[string(m.Key)] = &echoes{at: coord{p, m.Offset}}
	})
	if err != nil {
		return 0, fmt.Errorf("verifying the output: %w", err)
	}
	ends, err := c.writeSentinels(output, partitions)
	if err != nil {
		return 0, fmt.Errorf("verifying the output: %w", err)
	}
	var n, nilKeys, unexpected int64
	err = c.readUpTo(ctx, output, ends, deadline, func(p int32, m *sarama.ConsumerMessage) {
		switch {
		case m.Offset == ends[p]:
		case m.Key == nil:
			n++
			nilKeys++
		default:
			n++
			e, ok := seen[string(m.Key)]
			if !ok {
				unexpected++
				return
			}
			e.n++
		}
	})
	if err != nil {
		return 0, fmt.Errorf("verifying the output: %w", err)
	}
	var missing, dups []coord
	for _, e := range seen {
		switch {
		case e.n == 0:
			missing = append(missing, e.at)
		case e.n > 1:
			for range e.n - 1 {
				dups = append(dups, e.at)
			}
		}
	}
	var problems []string
	if nilKeys > 0 {
		problems = append(problems, fmt.Sprintf("%d records without key (the broker accepted them: was the topic not compacted yet?)", nilKeys))
	}
	if unexpected > 0 {
		problems = append(problems, fmt.Sprintf("%d records of input not committed", unexpected))
	}
	if len(missing) > 0 {
		problems = append(problems, fmt.Sprintf("%d committed input records missing: %s", len(missing), coords(missing)))
	}
	if len(dups) > 0 {
		problems = append(problems, fmt.Sprintf("%d duplicates: %s", len(dups), coords(dups)))
	}
	if complete && (committedInput != o.records || badCommitted != injected) {
		problems = append(problems, fmt.Sprintf("%d input records committed with %d bad ones, want %d with %d", committedInput, badCommitted, o.records, injected))
	}
	if len(problems) > 0 {
		return n, fmt.Errorf("the output %s is not exactly once: %d committed records for %d committed input records (%d bad, at %s): %s",
			output, n, committedInput, badCommitted, coords(bad), strings.Join(problems, "; "))
	}
	return n, nil
}

// coord is an input record's partition and offset.
type coord struct {
	p   int32
	off int64
}

// coords lists the first ten of cs, in order, as partition@offset.
func coords(cs []coord) string {
	slices.SortFunc(cs, func(a, b coord) int { return cmp.Or(cmp.Compare(a.p, b.p), cmp.Compare(a.off, b.off)) })
	var b strings.Builder
	for i, c := range cs[:min(len(cs), 10)] {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%d@%d", c.p, c.off)
	}
	if len(cs) > 10 {
		fmt.Fprintf(&b, " and %d more", len(cs)-10)
	}
	return b.String()
}
