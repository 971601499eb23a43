package statelog

import (
	"time"

	"github.com/IBM/sarama"
)

// TimeHeader marks a changelog record whose timestamp is its value's own
// (Bytes.PutStamped): the restore gives the value that timestamp back.
// Its value is empty. Records without it carry the time they were sent,
// which says nothing about the value.
const TimeHeader = "weir.time"

// timeHeader is TimeHeader as a record header; shared, never modified.
var timeHeader = []sarama.RecordHeader{{Key: []byte(TimeHeader), Value: []byte{}}}

// Produce sends the changes of one store partition to its changelog topic,
// one record per key, to the partition the state belongs to: a deletion is
// a tombstone, any other value (an empty one included) a record with that
// value. Entries of idx, the store's local index (nil for a store without
// one), are not sent: the restore rebuilds them (see RestoreEntries). A
// value with a timestamp (Entry.Stamped) goes out with that timestamp and
// TimeHeader. meta
// travels as each message's Metadata. It returns the last message sent,
// whose offset, once the producer has acknowledged it, gives the
// checkpoint; nil when there was nothing to send.
func Produce(changes []Entry, idx Index, topic string, partition int32, meta any, send func(*sarama.ProducerMessage) error) (*sarama.ProducerMessage, error) {
	var last *sarama.ProducerMessage
	for _, e := range changes {
		if idx != nil && idx.Holds(e.Key) {
			continue
		}
		var value []byte
		if !e.Deleted {
			value = nonNil(e.Value)
		}
		m := NewMessage(e.Key, value)
		m.Topic, m.Partition, m.Metadata = topic, partition, meta
		if !e.Deleted {
			if e.Stamped {
				m.Timestamp, m.Headers = time.UnixMilli(e.Time), timeHeader
			}
		}
		if err := send(m); err != nil {
			return last, err
		}
		last = m
	}
	return last, nil
}

// NewMessage returns a producer message holding key and value (nil: none),
// which it does not copy: one allocation, where a sarama.ByteEncoder
// stored in the message's Key or Value interface costs one of its own.
// Key and Value hold *sarama.ByteEncoder, which encodes as
// sarama.ByteEncoder does.
func NewMessage(key, value []byte) *sarama.ProducerMessage {
	o := &message{key: key, value: value}
	if key != nil {
		o.m.Key = &o.key
	}
	if value != nil {
		o.m.Value = &o.value
	}
	return &o.m
}

// message is a producer message with its key's and value's encoders.
type message struct {
	m          sarama.ProducerMessage
	key, value sarama.ByteEncoder
}
