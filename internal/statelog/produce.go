package statelog

import "github.com/IBM/sarama"

// Produce sends the changes of one store partition to its changelog topic,
// one record per key, to the partition the state belongs to: a deletion is
// a tombstone, any other value (an empty one included) a record with that
// value. Entries of idx, the store's local index (nil for a store without
// one), are not sent: the restore rebuilds them (see RestoreEntries). meta
// travels as each message's Metadata. It returns the last message sent,
// whose offset, once the producer has acknowledged it, gives the
// checkpoint; nil when there was nothing to send.
func Produce(changes []Entry, idx Index, topic string, partition int32, meta any, send func(*sarama.ProducerMessage) error) (*sarama.ProducerMessage, error) {
	var last *sarama.ProducerMessage
	for _, e := range changes {
		if idx != nil && idx.Holds(e.Key) {
			continue
		}
		m := &sarama.ProducerMessage{Topic: topic, Key: sarama.ByteEncoder(e.Key), Partition: partition, Metadata: meta}
		if !e.Deleted {
			m.Value = sarama.ByteEncoder(nonNil(e.Value))
		}
		if err := send(m); err != nil {
			return last, err
		}
		last = m
	}
	return last, nil
}
