package stream

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/IBM/sarama"

	"github.com/weirstream/weir/internal/client"
	"github.com/weirstream/weir/internal/task"
)

// This file is the thread's collector (Kafka Streams' RecordCollector):
// the send path every record of its tasks takes to the producer, with the
// checks made before a record is sent (size limits, keys on compacted
// topics, the replay's skip list) and what a refused record becomes under
// the production error policy (dropped and counted, dead-lettered, or the
// thread's failure).

// Send is the one way a record leaves the thread: it is checked against
// the limits of its topic (read at start) and the replay's skip list, then
// handed to the producer. A refused record is a *task.ProductionError: under
// ProductionErrors=Skip it is counted and dropped here (send returns nil);
// otherwise the thread is failed, whatever the caller does with the error.
func (th *Thread) Send(m *sarama.ProducerMessage) error {
	if th.failure != nil {
		return th.failure
	}
	o, _ := m.Metadata.(*client.Origin)
	if o != nil && o.Offset >= 0 && len(th.skips) > 0 {
		if cause, ok := th.skips[skipKey{o.Topic, o.Partition, o.Offset, m.Topic, recordDigest(m)}]; ok {
			th.log.Debug("dropping a refused record again in the replay", "task", o.Task,
				"topic", o.Topic, "partition", o.Partition, "offset", o.Offset, "sink", m.Topic)
			var pe *task.ProductionError
			if errors.As(cause, &pe) {
				return th.deadLetterRefused(o, pe)
			}
			return nil
		}
	}
	size := m.ByteSize(2)
	limit := th.maxBytes
	lim, known := th.in.Layout.Limits[m.Topic]
	if lim.MaxBytes > 0 && lim.MaxBytes < limit {
		limit = lim.MaxBytes
	}
	switch {
	case size > limit:
		return th.refuse(o, task.NewProductionError(o, m, size, limit, task.ErrRecordTooLarge))
	case lim.Compacted && m.Key == nil:
		return th.refuse(o, task.NewProductionError(o, m, size, 0, task.ErrNullKeyOnCompactedTopic))
	}
	if err := th.producer.Send(m); err != nil {
		return err
	}
	if !known {
		th.noteTopic(m.Topic)
	}
	if th.isolate[m.Topic] {
		// Finding the record the broker refuses: one record a batch.
		ctx, cancel := context.WithTimeout(context.Background(), th.in.TransactionTimeout)
		defer cancel()
		return th.producer.Wait(ctx)
	}
	return nil
}

// refuse applies ProductionErrors to a record refused before it was sent;
// o is the record's origin.
func (th *Thread) refuse(o *client.Origin, pe *task.ProductionError) error {
	if th.mustFail(o, pe) {
		th.failure = pe
		return pe
	}
	th.skipped(pe)
	return th.deadLetterRefused(o, pe)
}

// mustFail reports whether a refused record stops the thread: under
// ProductionErrors=Fail, and always for a changelog record (state cannot
// skip a change) and a dead-letter record (nothing is left to do with it).
func (th *Thread) mustFail(o *client.Origin, pe *task.ProductionError) bool {
	return pe.Store != "" || (o != nil && o.DeadLetter) || th.in.PoliciesFor(pe.Sink).Production.Fails()
}

// skipped counts and logs a refused record that ProductionErrors Skip or
// DeadLetter drops.
func (th *Thread) skipped(pe *task.ProductionError) {
	th.in.Metrics.RecordsSkipped.WithLabelValues(strconv.Itoa(th.idx), pe.Task, "production").Inc()
	th.log.Warn("dropping a record Kafka refuses", "task", pe.Task, "topic", pe.Topic, "partition", pe.Partition,
		"offset", pe.Offset, "punctuator", pe.Punctuator, "sink", pe.Sink, "size", pe.Size, "limit", pe.Limit,
		"dead_letter_topic", th.in.PoliciesFor(pe.Sink).Production.DeadLetterTopic(), "error", pe.Err)
}

// deadLetterRefused writes the dead-letter record of a refused record
// under ProductionErrors=DeadLetter: the input record that produced it
// (o.Input), or headers only for a punctuator's record.
func (th *Thread) deadLetterRefused(o *client.Origin, pe *task.ProductionError) error {
	topic := th.in.PoliciesFor(pe.Sink).Production.DeadLetterTopic()
	if topic == "" {
		return nil
	}
	var in *sarama.ConsumerMessage
	if o != nil {
		in = o.Input
	}
	m := task.DeadLetterRecord(topic, in, task.Failure{Application: th.in.ApplicationID, Task: pe.Task,
		Kind: task.KindProduction, Node: pe.Punctuator, Sink: pe.Sink, Err: pe.Err})
	th.in.Metrics.DeadLettered.WithLabelValues(strconv.Itoa(th.idx), pe.Task).Inc()
	return th.Send(m)
}

// Keep implements task.Host: a task keeps a processed record until the
// commit that covers it, for a rewind in place, while the thread's kept
// records stay within MaxBufferBytes.
func (th *Thread) Keep(size int) bool {
	if th.replayLost || !th.in.ExactlyOnce {
		return false
	}
	th.replayBytes += size
	if th.replayBytes > th.in.MaxBufferBytes {
		// Too much to keep: let it all go; a rewind before the next
		// commit rejoins the group.
		th.replayLost = true
		for _, id := range th.order {
			th.tasks[id].ForgetKept()
		}
		return false
	}
	return true
}

// PartitionCount implements task.Host.
func (th *Thread) PartitionCount(topic string) (int32, error) {
	ps, err := th.client.Partitions(topic)
	if err != nil {
		return 0, fmt.Errorf("weir: partitions of %s: %w", topic, err)
	}
	return int32(len(ps)), nil
}
