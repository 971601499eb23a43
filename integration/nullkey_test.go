package integration

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/weirstream/weir/processor"
	"github.com/weirstream/weir/serde"
	"github.com/weirstream/weir/weirtest/kafka"
)

// storeCounter counts records per key in a key-value store and emits the
// store's count of every key it saw since the last emission, in key order,
// from a wall-clock punctuator: what it emits is what the store holds.
type storeCounter struct {
	spec  *processor.KeyValueSpec[string, int64]
	ctx   processor.Context[string, int64]
	store processor.KeyValueStore[string, int64]
	dirty map[string]bool
}

func countInto(spec *processor.KeyValueSpec[string, int64]) func() processor.Processor[string, string, string, int64] {
	return func() processor.Processor[string, string, string, int64] { return &storeCounter{spec: spec} }
}

func (c *storeCounter) Init(ctx processor.Context[string, int64]) (err error) {
	c.ctx, c.dirty = ctx, map[string]bool{}
	if c.store, err = c.spec.Open(ctx); err != nil {
		return err
	}
	_, err = ctx.Schedule(50*time.Millisecond, processor.WallClockTime, c.emit)
	return err
}

func (c *storeCounter) emit(now time.Time) error {
	for _, k := range slices.Sorted(maps.Keys(c.dirty)) {
		n, found, err := c.store.Get(k)
		if err != nil {
			return err
		}
		if found {
			if err := c.ctx.Forward(processor.Record[string, int64]{Key: k, Value: n, Timestamp: now}); err != nil {
				return err
			}
		}
	}
	clear(c.dirty)
	return nil
}

func (c *storeCounter) Process(_ processor.Context[string, int64], rec processor.Record[string, string]) error {
	n, _, err := c.store.Get(rec.Key)
	if err != nil {
		return err
	}
	c.dirty[rec.Key] = true
	return c.store.Put(rec.Key, n+1)
}

func (c *storeCounter) Close() error { return nil }

// TestNullKeyRecordsStayOutOfStateAndRepartitions: records with a null
// Kafka key used to be counted under the key "" and repartitioned with an
// empty key. Counting per key straight from the input, and again after a
// repartition, the counts hold exactly the keyed records, no "" key is
// ever emitted, and weir_records_dropped_total{reason="null_key"} counts
// each null-key record once, though each lost a store write and a
// repartition record.
//
// Every topic has one partition, so the counter sees the records in input
// order and emits a key's count no later than any count that follows it in
// the input: once the last keyed record's count is read, a "" count, if
// there were one, would have been read before it.
func TestNullKeyRecordsStayOutOfStateAndRepartitions(t *testing.T) {
	t.Parallel()
	c := kafka.Cluster(t)
	in, out, outRP, app := c.Name(t, "in"), c.Name(t, "out"), c.Name(t, "out-rp"), c.Name(t, "app")
	for _, topic := range []string{in, out, outRP} {
		c.CreateTopic(t, topic, 1, nil)
	}

	const total = 60
	var msgs []*sarama.ProducerMessage
	want := map[string]int64{}
	nulls := 0
	for i := range total {
		m := &sarama.ProducerMessage{Topic: in, Value: sarama.StringEncoder(strconv.Itoa(i))}
		if i%4 == 1 {
			nulls++ // Key stays nil: a null Kafka key
		} else {
			k := "key-" + strconv.Itoa(i%3)
			m.Key = sarama.StringEncoder(k)
			want[k]++
		}
		msgs = append(msgs, m)
	}
	if msgs[total-1].Key == nil {
		t.Fatal("the last input record must have a key (see the test's doc)")
	}
	kafka.Produce(t, c, msgs...)

	top := processor.NewTopology()
	src := top.AddSource("in", in, serde.String(), serde.String())
	counts := processor.KeyValue("counts", serde.String(), serde.Int64())
	count := top.AddProcessor("count", countInto(counts), src)
	top.AddStore(counts, count)
	top.AddSink("out", out, serde.String(), serde.Int64(), count)
	byKey := top.AddRepartition("by-key", serde.String(), serde.String(), src)
	countsRP := processor.KeyValue("counts-rp", serde.String(), serde.Int64())
	countRP := top.AddProcessor("count-rp", countInto(countsRP), byKey)
	top.AddStore(countsRP, countRP)
	top.AddSink("out-rp", outRP, serde.String(), serde.Int64(), countRP)

	reg := prometheus.NewRegistry()
	cfg := baseConfig(c, app, t)
	cfg.Metrics = reg
	a := start(t, top, cfg)

	for _, topic := range []string{out, outRP} {
		latest := map[string]int64{}
		kafka.ReadAll(t, c, topic, sarama.ReadCommitted, func(got []*sarama.ConsumerMessage) bool {
			if len(got) == 0 {
				return false
			}
			m := got[len(got)-1]
			n, err := serde.Int64().Deserialize(topic, m.Value)
			if err != nil {
				t.Fatalf("%s: value %x: %v", topic, m.Value, err)
			}
			latest[string(m.Key)] = n
			for k, v := range want {
				if latest[k] != v {
					return false
				}
			}
			return true
		})
		if n, ok := latest[""]; ok {
			t.Errorf("%s: a count of %d under the empty key", topic, n)
		}
		if !maps.Equal(latest, want) {
			t.Errorf("%s: latest counts %v, want %v", topic, latest, want)
		}
	}

	var fams map[string]*dto.MetricFamily
	kafka.Eventually(t, 30*time.Second, 50*time.Millisecond, func() (bool, string) {
		fams = gather(t, reg)
		n, _ := value(fams, "weir_records_processed_total", map[string]string{"task": "0_0"})
		return n == total, fmt.Sprintf("task 0_0 processed %v of %d records", n, total)
	})
	dropped, found := value(fams, "weir_records_dropped_total", map[string]string{"reason": "null_key"})
	if !found || dropped != float64(nulls) {
		t.Errorf("weir_records_dropped_total{reason=null_key} = %v (found %v), want %d: one per null-key record", dropped, found, nulls)
	}
	if err := a.stop(t); err != nil {
		t.Fatal(err)
	}
}

// gather collects reg's metric families by name.
func gather(t *testing.T, reg *prometheus.Registry) map[string]*dto.MetricFamily {
	t.Helper()
	fs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := make(map[string]*dto.MetricFamily, len(fs))
	for _, f := range fs {
		out[f.GetName()] = f
	}
	return out
}
