package main

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/IBM/sarama"
)

// recordKey returns the 16-byte key of the i-th record: hex digits of a
// scrambled i, so keys are distinct and murmur2 spreads them evenly.
func recordKey(i int64) []byte {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(i)*0x9E3779B97F4A7C15)
	return hex.AppendEncode(make([]byte, 0, keySize), b[:])
}

// recordValue returns the value every record carries: valueSize printable
// bytes (compression is off, so their content does not matter).
func recordValue(valueSize int) []byte {
	v := make([]byte, valueSize)
	for i := range v {
		v[i] = 'a' + byte(i%26)
	}
	return v
}

// runLoad writes o.records records to topic with a sarama AsyncProducer
// (acks=1, no compression, murmur2 partitioning) and measures until every
// record is acknowledged. It then checks that the topic holds them all.
func runLoad(ctx context.Context, o *options, c *cluster, topic string) (*result, error) {
	res, _, err := loadTopic(ctx, o, c, topic, o.records, wlLoad, "load (sarama AsyncProducer)")
	return res, err
}

// loadTopic writes records records to topic as runLoad describes, and
// returns the measurement, named name, and the high watermark of every
// partition. The CPU profile, if any, is PREFIX-<profile>.pprof.
func loadTopic(ctx context.Context, o *options, c *cluster, topic string, records int64, profile, name string) (*result, []int64, error) {
	return loadRecords(ctx, o, c, loadSpec{topic: topic, partitions: o.partitions, to: records, profile: profile, name: name})
}

// loadSpec is one load: records [from, to) into topic.
type loadSpec struct {
	topic      string
	partitions int32
	// from and to are the indices of the first record and one past the
	// last: record i has key recordKey(i). A topic loaded in several
	// parts is loaded in order, from 0, so that it holds to records at
	// the end of each part.
	from, to int64
	// bad, if set, marks records: their value is badValue instead of the
	// usual one.
	bad func(i int64) bool
	// record, if set, gives record i's key and value instead of
	// recordKey(i) and the usual value; its values are valueSize bytes
	// (the result's byte counts assume it).
	record    func(i int64) (key, value []byte)
	valueSize int
	// profile names the CPU profile, PREFIX-<profile>.pprof; "" takes no
	// profile (a load inside another measurement).
	profile, name string
}

// badValue is the value of the records a loadSpec marks bad.
var badValue = []byte("bad")

// loadRecords writes the records of l as runLoad describes, and returns
// the measurement and the high watermark of every partition.
func loadRecords(ctx context.Context, o *options, c *cluster, l loadSpec) (*result, []int64, error) {
	topic, name, records := l.topic, l.name, l.to-l.from
	what := name
	sc := saramaConfig("weir-bench-load")
	sc.Producer.RequiredAcks = sarama.WaitForLocal
	sc.Producer.Compression = sarama.CompressionNone
	sc.Producer.Partitioner = sarama.NewMurmur2Partitioner
	sc.Producer.Return.Successes = true
	sc.Producer.Return.Errors = true
	producer, err := sarama.NewAsyncProducer(o.brokers, sc)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: producer: %w", what, err)
	}
	closed := false
	defer func() {
		if !closed {
			producer.AsyncClose()
		}
	}()

	value := sarama.ByteEncoder(recordValue(o.valueSize))
	acks := newCounter(records)
	failed := make(chan error, 1)
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		succ, errs := producer.Successes(), producer.Errors()
		for succ != nil || errs != nil {
			select {
			case _, ok := <-succ:
				if !ok {
					succ = nil
					continue
				}
				acks.add()
			case e, ok := <-errs:
				if !ok {
					errs = nil
					continue
				}
				select {
				case failed <- fmt.Errorf("producing to %s: %w", topic, e.Err):
				default:
				}
			}
		}
	}()

	prof := o.profiling
	if l.profile == "" {
		prof = profiling{}
	}
	m, err := startMeasurement(prof, l.profile, 1)
	if err != nil {
		return nil, nil, err
	}
	defer m.stop()
	acks.reset()
	sendCtx, stopSending := context.WithTimeout(ctx, o.timeout)
	defer stopSending()
	sending := make(chan struct{})
	go func() {
		defer close(sending)
		for i := l.from; i < l.to; i++ {
			msg := &sarama.ProducerMessage{Topic: topic, Key: sarama.ByteEncoder(recordKey(i)), Value: value}
			if l.record != nil {
				k, v := l.record(i)
				msg.Key, msg.Value = sarama.ByteEncoder(k), sarama.ByteEncoder(v)
			}
			if l.bad != nil && l.bad(i) {
				msg.Value = sarama.ByteEncoder(badValue)
			}
			select {
			case producer.Input() <- msg:
			case <-sendCtx.Done():
				return
			}
		}
	}()
	werr := acks.waitDone(ctx, name, o.timeout, failed)
	// The sender must be gone before the producer closes its input.
	stopSending()
	<-sending
	cpu, perr := m.stop()
	if werr != nil {
		return nil, nil, werr
	}
	if perr != nil {
		return nil, nil, perr
	}

	closeStart := time.Now()
	closed = true
	if err := producer.Close(); err != nil {
		return nil, nil, fmt.Errorf("%s: closing producer: %w", what, err)
	}
	<-drained
	closeTime := time.Since(closeStart)

	hwm, err := c.offsets(topic, l.partitions, sarama.ReadUncommitted)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", what, err)
	}
	var sum int64
	for _, h := range hwm {
		sum += h
	}
	if sum != l.to {
		return nil, nil, fmt.Errorf("%s: topic %s holds %d records, want %d", what, topic, sum, l.to)
	}

	valueSize := o.valueSize
	if l.record != nil {
		valueSize = l.valueSize
	}
	r := &result{
		Workload:         wlLoad,
		Name:             name,
		Round:            1,
		Records:          records,
		Bytes:            records * int64(keySize+valueSize),
		FirstSeconds:     time.Duration(acks.first.Load()).Seconds(),
		ProcessedSeconds: time.Duration(acks.last.Load()).Seconds(),
		EndSeconds:       time.Duration(acks.last.Load()).Seconds(),
		CPUSeconds:       cpu.Seconds(),
		CloseSeconds:     closeTime.Seconds(),
		Note:             fmt.Sprintf("acks=1, first ack = time to first acknowledgement; records per partition %v", hwm),
	}
	r.finish()
	return r, hwm, nil
}
