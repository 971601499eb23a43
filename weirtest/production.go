package weirtest

import (
	"github.com/IBM/sarama"

	"github.com/weirstream/weir/internal/client"
	"github.com/weirstream/weir/internal/task"
)

// TopicLimits are what an output topic refuses, as its broker would: the
// driver holds the records a topology writes to them, and what a refused
// record becomes follows Config.ProductionErrors (or the topic's
// TopicErrors), as in an application.
type TopicLimits struct {
	// MaxMessageBytes refuses a record whose size in a record batch is
	// over it (bytes; the topic's max.message.bytes); 0: no limit.
	MaxMessageBytes int
	// Compacted refuses a record without a key (cleanup.policy=compact).
	Compacted bool
}

// refuse applies the limits of m's topic to m, as an application's
// collector does before it sends: a record within them is not refused.
// A refused one, under ProductionErrors Skip, is counted
// (weir_records_skipped_total{reason="production"}) and dropped; under
// DeadLetter its input record is also written to the dead-letter topic;
// under Fail, and for a dead-letter record refused in turn, it is the
// driver's failure, a *weir.ProductionError.
func (d *Driver) refuse(m *sarama.ProducerMessage) (refused bool, err error) {
	lim, ok := d.limits[m.Topic]
	if !ok {
		return false, nil
	}
	o, _ := m.Metadata.(*client.Origin)
	size := m.ByteSize(2)
	var pe *task.ProductionError
	switch {
	case lim.MaxMessageBytes > 0 && size > lim.MaxMessageBytes:
		pe = task.NewProductionError(o, m, size, lim.MaxMessageBytes, task.ErrRecordTooLarge)
	case lim.Compacted && m.Key == nil:
		pe = task.NewProductionError(o, m, size, 0, task.ErrNullKeyOnCompactedTopic)
	default:
		return false, nil
	}
	policy := d.sh.PoliciesFor(m.Topic).Production
	if policy.Fails() || (o != nil && o.DeadLetter) {
		// The driver fails whatever the processor does with the error,
		// as an application's thread does.
		if d.refused == nil {
			d.refused = pe
		}
		return true, pe
	}
	d.sh.Metrics.RecordsSkipped.WithLabelValues("0", pe.Task, "production").Inc()
	d.log.Warn("dropping a record its topic refuses", "task", pe.Task, "topic", pe.Topic, "partition", pe.Partition,
		"offset", pe.Offset, "sink", pe.Sink, "size", pe.Size, "limit", pe.Limit, "error", pe.Err)
	topic := policy.DeadLetterTopic()
	if topic == "" {
		return true, nil
	}
	var in *sarama.ConsumerMessage
	if o != nil {
		in = o.Input
	}
	dl := task.DeadLetterRecord(topic, in, task.Failure{Application: d.app, Task: pe.Task,
		Kind: task.KindProduction, Node: pe.Punctuator, Sink: pe.Sink, Err: pe.Err})
	d.sh.Metrics.DeadLettered.WithLabelValues("0", pe.Task).Inc()
	return true, host{d}.Send(dl)
}
