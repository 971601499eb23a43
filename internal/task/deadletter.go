package task

import (
	"errors"
	"strconv"

	"github.com/IBM/sarama"

	"github.com/weirstream/weir/internal/client"
	"github.com/weirstream/weir/serde"
)

// The headers a dead-letter record gains, after the input record's own.
// weir.DeadLetterHeader* are the same names: keep them in step.
const (
	HeaderApplication = "weir.error.application" // the application id
	HeaderTask        = "weir.error.task"        // the task, e.g. "0_3"
	HeaderKind        = "weir.error.kind"        // a Kind*
	HeaderTopic       = "weir.error.topic"       // the input record's topic
	HeaderPartition   = "weir.error.partition"   // its partition, decimal
	HeaderOffset      = "weir.error.offset"      // its offset, decimal
	HeaderTimestamp   = "weir.error.timestamp"   // its timestamp, Unix milliseconds, decimal
	HeaderNode        = "weir.error.node"        // the source, processor or punctuator node
	HeaderSink        = "weir.error.sink"        // production errors: the topic that refused
	HeaderSchemaID    = "weir.error.schema.id"   // deserialization errors, when the frame names one
	HeaderMessage     = "weir.error.message"     // the error, as Error() gives it
)

// What a dead-letter record failed at: the value of HeaderKind.
const (
	KindDeserialization = "deserialization"
	KindTimestamp       = "timestamp"
	KindProcessing      = "processing"
	KindProduction      = "production"
)

// Failure describes a record to dead-letter.
type Failure struct {
	Application string
	Task        string
	Kind        string // a Kind*
	Node        string
	Sink        string // KindProduction only
	Err         error
}

// DeadLetterRecord returns the record to write to topic for in, the input
// record that failed (nil for a punctuator's refused record: the
// dead-letter record then has headers only). It keeps in's raw key, value,
// timestamp and headers, and adds the Header* headers. Its metadata marks
// it as a dead-letter record for the thread's failure authority: Kafka's
// refusal of it cannot be dead-lettered again, and stops the thread.
func DeadLetterRecord(topic string, in *sarama.ConsumerMessage, f Failure) *sarama.ProducerMessage {
	m := &sarama.ProducerMessage{Topic: topic}
	o := &client.Origin{Task: f.Task, Offset: -1, Node: f.Node, DeadLetter: true}
	var headers []sarama.RecordHeader
	add := func(k, v string) {
		headers = append(headers, sarama.RecordHeader{Key: []byte(k), Value: []byte(v)})
	}
	if in != nil {
		if in.Key != nil {
			m.Key = sarama.ByteEncoder(in.Key)
		}
		if in.Value != nil {
			m.Value = sarama.ByteEncoder(in.Value)
		}
		m.Timestamp = in.Timestamp
		o.Topic, o.Partition, o.Offset = in.Topic, in.Partition, in.Offset
		headers = make([]sarama.RecordHeader, 0, len(in.Headers)+11)
		for _, h := range in.Headers {
			if h != nil {
				headers = append(headers, *h)
			}
		}
	}
	add(HeaderApplication, f.Application)
	add(HeaderTask, f.Task)
	add(HeaderKind, f.Kind)
	if in != nil {
		add(HeaderTopic, in.Topic)
		add(HeaderPartition, strconv.Itoa(int(in.Partition)))
		add(HeaderOffset, strconv.FormatInt(in.Offset, 10))
		if !in.Timestamp.IsZero() {
			add(HeaderTimestamp, strconv.FormatInt(in.Timestamp.UnixMilli(), 10))
		}
	}
	if f.Node != "" {
		add(HeaderNode, f.Node)
	}
	if f.Sink != "" {
		add(HeaderSink, f.Sink)
	}
	var fe *serde.FormatError
	if errors.As(f.Err, &fe) && fe.SchemaID != serde.NoSchemaID {
		add(HeaderSchemaID, strconv.Itoa(fe.SchemaID))
	}
	if f.Err != nil {
		add(HeaderMessage, f.Err.Error())
	}
	m.Headers = headers
	m.Metadata = o
	return m
}

// NewProductionError describes output record m, refused before it was
// sent (size bytes over limit, or cause alone), with what its origin o
// (nil when unknown) says of the input record or punctuator behind it.
func NewProductionError(o *client.Origin, m *sarama.ProducerMessage, size, limit int, cause error) *ProductionError {
	pe := &ProductionError{Sink: m.Topic, Size: size, Limit: limit, Err: cause, Offset: -1}
	if o != nil {
		pe.Task, pe.Topic, pe.Partition, pe.Offset, pe.Punctuator, pe.Store = o.Task, o.Topic, o.Partition, o.Offset, o.Node, o.Store
	}
	return pe
}
