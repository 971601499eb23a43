package weirtest

import (
	"fmt"
	"time"

	"github.com/IBM/sarama"

	"github.com/weirstream/weir/processor"
	"github.com/weirstream/weir/serde"
)

// InputTopic writes typed records to a topic a source of the topology
// reads. Take one with [Input].
type InputTopic[K, V any] struct {
	d      *Driver
	topic  string
	keys   serde.Serde[K]
	values serde.Serde[V]
}

// Input returns a writer of records to topic with the given serdes (which
// should be the ones the source reads with).
func Input[K, V any](d *Driver, topic string, keys serde.Serde[K], values serde.Serde[V]) *InputTopic[K, V] {
	return &InputTopic[K, V]{d: d, topic: topic, keys: keys, values: values}
}

// Pipe writes one record, with event time ts and the given headers, and
// processes it through the topology, with everything it sends to
// repartition topics, before it returns; it is then committed. An error
// is the first failure of the record or of the driver (which stops, as
// an application would, at its first failure): a weir record error from a
// processor, or a topic no source reads. A record the source cannot
// decode stops the driver too, as weir.Config's default policy stops an
// application. A key that serializes to nil is a null Kafka key, as
// with a real producer.
func (in *InputTopic[K, V]) Pipe(key K, value V, ts time.Time, headers ...processor.Header) error {
	kb, err := in.keys.Serialize(in.topic, key)
	if err != nil {
		return fmt.Errorf("weirtest: serialize key for %s: %w", in.topic, err)
	}
	return in.pipe(kb, value, ts, headers)
}

// PipeNullKey writes one record whose Kafka key is null, as Pipe does.
func (in *InputTopic[K, V]) PipeNullKey(value V, ts time.Time, headers ...processor.Header) error {
	return in.pipe(nil, value, ts, headers)
}

// PipeTombstone writes one record of key with a null value (a Kafka
// tombstone), as Pipe does: a table reading the topic deletes the key.
func (in *InputTopic[K, V]) PipeTombstone(key K, ts time.Time, headers ...processor.Header) error {
	kb, err := in.keys.Serialize(in.topic, key)
	if err != nil {
		return fmt.Errorf("weirtest: serialize key for %s: %w", in.topic, err)
	}
	return in.send(kb, nil, ts, headers)
}

func (in *InputTopic[K, V]) pipe(key []byte, value V, ts time.Time, headers []processor.Header) error {
	vb, err := in.values.Serialize(in.topic, value)
	if err != nil {
		return fmt.Errorf("weirtest: serialize value for %s: %w", in.topic, err)
	}
	return in.send(key, vb, ts, headers)
}

func (in *InputTopic[K, V]) send(key, value []byte, ts time.Time, headers []processor.Header) error {
	m := &sarama.ConsumerMessage{Topic: in.topic, Key: key, Value: value, Timestamp: ts}
	for _, h := range headers {
		m.Headers = append(m.Headers, &sarama.RecordHeader{Key: []byte(h.Key), Value: h.Value})
	}
	return in.d.pipe(m)
}

// OutputTopic reads the typed records the topology wrote to a topic. Take
// one with [Output].
type OutputTopic[K, V any] struct {
	d      *Driver
	topic  string
	keys   serde.Serde[K]
	values serde.Serde[V]
}

// Output returns a reader of the records written to topic (by a sink:
// repartition topics are internal and not readable here), decoded with
// the given serdes.
func Output[K, V any](d *Driver, topic string, keys serde.Serde[K], values serde.Serde[V]) *OutputTopic[K, V] {
	return &OutputTopic[K, V]{d: d, topic: topic, keys: keys, values: values}
}

// ReadAll returns the records written to the topic since the last
// ReadAll, in the order they were written, and consumes them. Each has
// the key and value decoded, the timestamp and the headers the sink
// wrote. A record with a null value is a tombstone (Tombstone set, the
// zero value; the value serde is not called). A record that cannot be
// decoded is an error and nothing is consumed.
func (o *OutputTopic[K, V]) ReadAll() ([]processor.Record[K, V], error) {
	msgs := o.d.outputs[o.topic]
	out := make([]processor.Record[K, V], 0, len(msgs))
	for _, m := range msgs {
		k, err := serde.Decode(o.keys, o.topic, m.Key)
		if err != nil {
			return nil, fmt.Errorf("weirtest: %s@%d: key: %w", o.topic, m.Offset, err)
		}
		rec := processor.Record[K, V]{Key: k, Timestamp: m.Timestamp, Tombstone: m.Value == nil}
		if !rec.Tombstone {
			if rec.Value, err = serde.Decode(o.values, o.topic, m.Value); err != nil {
				return nil, fmt.Errorf("weirtest: %s@%d: value: %w", o.topic, m.Offset, err)
			}
		}
		for _, h := range m.Headers {
			rec.Headers = append(rec.Headers, processor.Header{Key: string(h.Key), Value: h.Value})
		}
		out = append(out, rec)
	}
	o.d.outputs[o.topic] = msgs[len(msgs):]
	return out, nil
}
