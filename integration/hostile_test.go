package integration

import (
	"encoding/binary"
	"fmt"
	"math"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/processor"
	"github.com/weirstream/weir/schema"
	"github.com/weirstream/weir/serde"
	"github.com/weirstream/weir/weirtest/kafka"
)

// longsSchema is a record holding an array of longs, the shape of the
// security review's crafted records.
const longsSchema = `{"type":"record","name":"Longs","namespace":"weir.it","fields":[{"name":"xs","type":{"type":"array","items":"long"}}]}`

type longs struct {
	Xs []int64 `avro:"xs"`
}

// avroLong appends n in Avro's zig-zag varint.
func avroLong(b []byte, n int64) []byte {
	return binary.AppendUvarint(b, uint64(n<<1)^uint64(n>>63))
}

// TestHostileAvroInputIsDeadLettered: an exactly-once application with
// Avro input and DeserializationErrors DeadLetter, on the real broker and
// registry, fed good records among records crafted against the decoder
// (array block counts of math.MinInt64, 2^27 and 2^46, a negative count
// with an impossible block size, a count past the bytes left, a varint
// that never ends), processes every good record exactly once, dead-letters
// every crafted one, keeps running, and its heap stays bounded.
func TestHostileAvroInputIsDeadLettered(t *testing.T) {
	t.Parallel()
	c := kafka.Cluster(t)
	in, out, dlq, app := c.Name(t, "in"), c.Name(t, "out"), c.Name(t, "dlq"), c.Name(t, "app")
	for _, topic := range []string{in, out, dlq} {
		c.CreateTopic(t, topic, 2, nil)
	}
	reg := newRegistry(t, c)
	deleteSubjects(t, c, schema.TopicSubject(in, schema.Value))
	values, err := serde.Avro[longs](serde.AvroConfig{Registry: reg, Schema: longsSchema})
	if err != nil {
		t.Fatal(err)
	}
	id, err := values.Register(t.Context(), in)
	if err != nil {
		t.Fatal(err)
	}
	frame := func(body []byte) []byte {
		h := []byte{0, 0, 0, 0, 0}
		binary.BigEndian.PutUint32(h[1:], uint32(id))
		return append(h, body...)
	}
	minCount := avroLong(nil, math.MinInt64)
	crafted := [][]byte{
		frame(append(append(slices.Clone(minCount), 0), 0)),
		frame(append(append(slices.Clone(minCount), 8), 2, 4, 6, 8, 0)),
		frame(append(avroLong(nil, 1<<27), 2, 2, 2, 2, 2, 0)[:11]),
		frame(append(avroLong(nil, 1<<46), 2, 0)),
		frame(append(avroLong(avroLong(nil, -3), math.MaxInt64), 2, 2, 2, 0)),
		frame(append(avroLong(nil, 1000), 2, 2, 0)),
		frame([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}),
	}
	const good, rounds = 300, 5
	var msgs []*sarama.ProducerMessage
	for i := range good {
		v, err := values.Serialize(in, longs{Xs: []int64{int64(i), int64(i) * 2}})
		if err != nil {
			t.Fatal(err)
		}
		msgs = append(msgs, &sarama.ProducerMessage{Topic: in, Key: sarama.StringEncoder(fmt.Sprintf("k%03d", i)), Value: sarama.ByteEncoder(v)})
		if i%(good/rounds) == 0 {
			for j, b := range crafted {
				msgs = append(msgs, &sarama.ProducerMessage{Topic: in, Key: sarama.StringEncoder(fmt.Sprintf("bad-%d-%d", i, j)), Value: sarama.ByteEncoder(b)})
			}
		}
	}

	top := processor.NewTopology()
	src := top.AddSource("in", in, serde.String(), values)
	sum := top.AddProcessor("sum", processor.Func(func(ctx processor.Context[string, string], rec processor.Record[string, longs]) error {
		var s int64
		for _, x := range rec.Value.Xs {
			s += x
		}
		return ctx.Forward(processor.Record[string, string]{Key: rec.Key, Value: strconv.FormatInt(s, 10), Timestamp: rec.Timestamp})
	}), src)
	top.AddSink("out", out, serde.String(), serde.String(), sum)
	cfg := registryConfig(c, app, t)
	cfg.Guarantee = weir.ExactlyOnce
	cfg.DeserializationErrors = weir.DeadLetter(dlq)

	// The heap's peak, sampled while the application runs.
	var peak atomic.Uint64
	stopSampling := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		var m runtime.MemStats
		for {
			runtime.ReadMemStats(&m)
			if m.HeapAlloc > peak.Load() {
				peak.Store(m.HeapAlloc)
			}
			select {
			case <-stopSampling:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	inst := start(t, top, cfg)
	kafka.WaitRunning(t, inst.app)
	kafka.Produce(t, c, msgs...)

	// Every input record committed (the app's offsets at the end of
	// both partitions), then the outputs read to the sentinels written
	// after them: exactly what the app wrote.
	kafka.Eventually(t, 2*time.Minute, 200*time.Millisecond, func() (bool, string) {
		select {
		case err := <-inst.done:
			t.Fatalf("the application stopped: %v", err)
		default:
		}
		ends := kafka.EndOffsets(t, c, in)
		got, err := groupCommitted(c.Admin(t), app, in, 2)
		if err != nil {
			return false, err.Error()
		}
		return got[0] == ends[0] && got[1] == ends[1], fmt.Sprintf("committed %v of %v", got, ends)
	})
	writeSentinels(t, c, out, 2)
	writeSentinels(t, c, dlq, 2)
	outRecs := readToSentinels(t, c, out, 2, sarama.ReadCommitted)
	dead := readToSentinels(t, c, dlq, 2, sarama.ReadCommitted)
	close(stopSampling)
	<-sampled
	if st, err := inst.app.State(); st != weir.StateRunning {
		t.Fatalf("after the crafted records the application is %v (%v), want running", st, err)
	}
	seen := map[string]int{}
	for _, m := range outRecs {
		seen[string(m.Key)]++
		i, _ := strconv.Atoi(strings.TrimPrefix(string(m.Key), "k"))
		if string(m.Value) != strconv.Itoa(3*i) {
			t.Errorf("%s summed to %s, want %d", m.Key, m.Value, 3*i)
		}
	}
	for i := range good {
		if k := fmt.Sprintf("k%03d", i); seen[k] != 1 {
			t.Errorf("good record %s came out %d times, want once", k, seen[k])
		}
	}
	if len(outRecs) != good {
		t.Errorf("%d records out, want %d", len(outRecs), good)
	}
	if len(dead) != rounds*len(crafted) {
		t.Errorf("%d records dead-lettered, want %d", len(dead), rounds*len(crafted))
	}
	for _, m := range dead {
		if !strings.HasPrefix(string(m.Key), "bad-") {
			t.Errorf("a good record was dead-lettered: %s", m.Key)
		}
	}
	t.Logf("%d good records processed once each, %d crafted dead-lettered; the test process's heap peaked at %.1f MiB", good, len(dead), float64(peak.Load())/(1<<20))
	if peak.Load() > 512<<20 {
		t.Errorf("the heap peaked at %d bytes while decoding crafted records", peak.Load())
	}
}
