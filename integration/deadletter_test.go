package integration

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/processor"
	"github.com/weirstream/weir/schema"
	"github.com/weirstream/weir/serde"
	"github.com/weirstream/weir/weirtest/kafka"
)

// dlEvent is the value of the dead-letter tests' input, in Avro on one
// topic and in JSON on the other.
type dlEvent struct {
	N int64 `avro:"n" json:"n"`
}

const dlEventSchema = `{"type":"record","name":"DLEvent","namespace":"weir.it","fields":[{"name":"n","type":"long"}]}`

// dlRefused reports the events the "check" processor fails on, after it
// has forwarded them: what such a record did must not be committed. Avro
// events have even numbers and JSON events odd ones: both fail some.
func dlRefused(n int64) bool { return n%10 == 4 || n%10 == 7 }

// deadLetterTopology reads dlEvent from avroIn (Avro, checked against the
// registry) and jsonIn (JSON), and writes each event's number to out
// under the record's key. "check" forwards every event, then fails on
// those dlRefused names.
func deadLetterTopology(avroIn, jsonIn, out string, reg serde.Registry) (*processor.Topology, error) {
	avroValues, err := serde.Avro[dlEvent](serde.AvroConfig{Registry: reg, Schema: dlEventSchema})
	if err != nil {
		return nil, err
	}
	t := processor.NewTopology()
	a := t.AddSource("avro-in", avroIn, serde.String(), avroValues)
	j := t.AddSource("json-in", jsonIn, serde.String(), serde.JSON[dlEvent]())
	check := t.AddProcessor("check", processor.Func(func(ctx processor.Context[string, int64], rec processor.Record[string, dlEvent]) error {
		if err := ctx.Forward(processor.Record[string, int64]{Key: rec.Key, Value: rec.Value.N, Timestamp: rec.Timestamp}); err != nil {
			return err
		}
		if dlRefused(rec.Value.N) {
			return fmt.Errorf("event %d refused by the check", rec.Value.N)
		}
		return nil
	}), a, j)
	t.AddSink("out", out, serde.String(), serde.Int64(), check)
	return t, nil
}

// runDeadLetterChild runs deadLetterTopology under exactly once with
// DeserializationErrors and ProcessingErrors DeadLetter(WEIR_IT_DLQ),
// for the dslChildEnv child process (WEIR_IT_TOPOLOGY=deadletter).
func runDeadLetterChild(get func(string) string) (weir.Topology, weir.Config, error) {
	reg, err := schema.New(schema.Config{URL: get("REGISTRY"), RetryTimeout: 20 * time.Second})
	if err != nil {
		return nil, weir.Config{}, err
	}
	top, err := deadLetterTopology(get("IN"), get("JSON_IN"), get("OUT"), reg)
	if err != nil {
		return nil, weir.Config{}, err
	}
	return top, weir.Config{
		DeserializationErrors: weir.DeadLetter(get("DLQ")),
		ProcessingErrors:      weir.DeadLetter(get("DLQ")),
		Registry:              schema.Config{URL: get("REGISTRY"), RetryTimeout: 20 * time.Second},
	}, nil
}

// dlInput is one input record of the dead-letter test and what must
// become of it.
type dlInput struct {
	topic, key string
	value      []byte
	n          int64  // the event's number, for a good or refused event
	kind       string // "" for a good event; else its dead-letter kind
	schemaID   string // the dead-letter record's schema id header, if any
}

// deadLetterInputs returns n records for each of avroIn and jsonIn, with
// poison among them: every 40th record of each topic is bad bytes (for
// Avro in turn a wrong magic byte, a truncated frame, an unknown schema
// id and no bytes at all; for JSON invalid JSON and no bytes), and every
// event dlRefused names fails in "check".
func deadLetterInputs(t *testing.T, reg serde.Registry, avroIn, jsonIn string, n int) []dlInput {
	t.Helper()
	avroValues, err := serde.Avro[dlEvent](serde.AvroConfig{Registry: reg, Schema: dlEventSchema})
	if err != nil {
		t.Fatal(err)
	}
	const unknownID = 0x7ffff001
	unknown := binary.BigEndian.AppendUint32([]byte{0}, unknownID)
	avroPoison := []dlInput{
		{value: []byte{1, 0, 0, 0, 1, 2}},                              // wrong magic byte
		{value: []byte{0, 0, 0}},                                       // truncated frame
		{value: append(unknown, 2), schemaID: strconv.Itoa(unknownID)}, // unknown schema id
		{value: []byte{}},                                              // no bytes
	}
	jsonPoison := []dlInput{{value: []byte(`{"n":`)}, {value: []byte{}}}
	var ins []dlInput
	for i := range n {
		for _, topic := range []string{avroIn, jsonIn} {
			in := dlInput{topic: topic, n: int64(2*i + len(ins)%2)}
			in.key = fmt.Sprintf("%s-%d", map[bool]string{true: "avro", false: "json"}[topic == avroIn], i)
			switch {
			case i%40 == 39 && topic == avroIn:
				p := avroPoison[(i/40)%len(avroPoison)]
				in.value, in.schemaID, in.kind = p.value, p.schemaID, "deserialization"
			case i%40 == 39:
				in.value, in.kind = jsonPoison[(i/40)%len(jsonPoison)].value, "deserialization"
			default:
				if topic == avroIn {
					if in.value, err = avroValues.Serialize(avroIn, dlEvent{N: in.n}); err != nil {
						t.Fatal(err)
					}
				} else {
					in.value = fmt.Appendf(nil, `{"n":%d}`, in.n)
				}
				if dlRefused(in.n) {
					in.kind = "processing"
				}
			}
			ins = append(ins, in)
		}
	}
	return ins
}

// TestDeadLetterSurvivesKill9: poison records on an Avro and a JSON input
// (a wrong magic byte, a truncated frame, an unknown schema id, invalid
// JSON, empty values) and records a processor fails on after forwarding
// them, under exactly once with DeserializationErrors and
// ProcessingErrors DeadLetter, in a process killed with SIGKILL
// mid-stream and finished by another. Each bad record must appear in the
// dead-letter topic exactly once, with its raw key and value and headers
// naming its kind, coordinates and node; each good record's output
// exactly once; and nothing from a record that failed in the processor,
// though it forwarded its output before failing.
func TestDeadLetterSurvivesKill9(t *testing.T) {
	t.Parallel()
	c := kafka.Cluster(t)
	avroIn, jsonIn, out, dlq, app := c.Name(t, "avro-in"), c.Name(t, "json-in"), c.Name(t, "out"), c.Name(t, "dlq"), c.Name(t, "app")
	const partitions = 2
	for _, topic := range []string{avroIn, jsonIn, out, dlq} {
		c.CreateTopic(t, topic, partitions, nil)
	}
	deleteSubjects(t, c, avroIn+"-value")
	ins := deadLetterInputs(t, newRegistry(t, c), avroIn, jsonIn, 1200)
	byKey := map[string]dlInput{}
	for _, in := range ins {
		byKey[in.key] = in
	}

	admin := c.Admin(t)
	env := map[string]string{
		"BROKERS": strings.Join(c.Brokers, ","), "REGISTRY": c.RegistryURL, "APP": app, "STATE_DIR": t.TempDir(),
		"TOPOLOGY": "deadletter", "IN": avroIn, "JSON_IN": jsonIn, "OUT": out, "DLQ": dlq,
	}
	msg := func(in dlInput) *sarama.ProducerMessage {
		return &sarama.ProducerMessage{Topic: in.topic, Key: sarama.StringEncoder(in.key), Value: sarama.ByteEncoder(in.value),
			Headers: []sarama.RecordHeader{{Key: []byte("trace"), Value: []byte(in.key)}}}
	}
	killMidStream(t, c, admin, env, app, avroIn, len(ins)/2, func(from, to int) {
		var msgs []*sarama.ProducerMessage
		for _, in := range ins[2*from : 2*to] {
			msgs = append(msgs, msg(in))
		}
		kafka.Produce(t, c, msgs...)
	})
	finishAfterKill(t, env, func() {
		waitLagZero(t, c, admin, app, avroIn)
		waitLagZero(t, c, admin, app, jsonIn)
	})

	writeSentinels(t, c, out, partitions)
	writeSentinels(t, c, dlq, partitions)
	f := newFindings(out)
	seen := map[string]int{}
	for _, m := range readToSentinels(t, c, out, partitions, sarama.ReadCommitted) {
		key := string(m.Key)
		seen[key]++
		in, ok := byKey[key]
		switch {
		case !ok:
			f.add("unknown", "output for unknown key %s", key)
		case in.kind != "":
			f.add("output of a failed record", "%s (%s) has output", key, in.kind)
		case seen[key] == 2:
			f.add("duplicate", "%s output twice", key)
		}
	}
	dead := map[string]int{}
	for _, m := range readToSentinels(t, c, dlq, partitions, sarama.ReadCommitted) {
		key := string(m.Key)
		dead[key]++
		in, ok := byKey[key]
		if !ok || in.kind == "" {
			f.add("good record dead-lettered", "%s in the dead-letter topic", key)
			continue
		}
		if dead[key] == 2 {
			f.add("duplicate dead letter", "%s dead-lettered twice", key)
		}
		if !bytes.Equal(m.Value, in.value) {
			f.add("value changed", "%s: dead-letter value %q, want the raw %q", key, m.Value, in.value)
		}
		node := map[bool]string{true: "avro-in", false: "json-in"}[in.topic == avroIn]
		if in.kind == "processing" {
			node = "check"
		}
		want := map[string]string{
			weir.DeadLetterHeaderKind: in.kind, weir.DeadLetterHeaderTopic: in.topic, weir.DeadLetterHeaderNode: node,
			weir.DeadLetterHeaderApplication: app, "trace": key, weir.DeadLetterHeaderSchemaID: in.schemaID,
		}
		got := map[string]string{}
		for _, h := range m.Headers {
			got[string(h.Key)] = string(h.Value)
		}
		for k, v := range want {
			if got[k] != v {
				f.add("header", "%s: header %s = %q, want %q", key, k, got[k], v)
			}
		}
		for _, k := range []string{weir.DeadLetterHeaderPartition, weir.DeadLetterHeaderOffset, weir.DeadLetterHeaderMessage, weir.DeadLetterHeaderTask} {
			if got[k] == "" {
				f.add("header", "%s: header %s missing", key, k)
			}
		}
	}
	var good, bad int
	for _, in := range ins {
		switch {
		case in.kind == "" && seen[in.key] == 0:
			f.add("lost output", "%s has no output", in.key)
		case in.kind != "" && dead[in.key] == 0:
			f.add("lost dead letter", "%s (%s) is not in the dead-letter topic", in.key, in.kind)
		}
		if in.kind == "" {
			good++
		} else {
			bad++
		}
	}
	t.Logf("%d good records, %d dead-lettered (%d of them failed in the processor)", good, bad, countKind(ins, "processing"))
	f.report(t)
}

func countKind(ins []dlInput, kind string) int {
	n := 0
	for _, in := range ins {
		if in.kind == kind {
			n++
		}
	}
	return n
}

// TestDeadLetterFailStopsAtTheRecord: under the default Fail a record with
// an unknown schema id stops Run with a *weir.RecordError that names its
// topic, partition, offset and source node, at once: the application
// does not loop on it.
func TestDeadLetterFailStopsAtTheRecord(t *testing.T) {
	t.Parallel()
	c := kafka.Cluster(t)
	avroIn, jsonIn, out := c.Name(t, "avro-in"), c.Name(t, "json-in"), c.Name(t, "out")
	for _, topic := range []string{avroIn, jsonIn, out} {
		c.CreateTopic(t, topic, 1, nil)
	}
	deleteSubjects(t, c, avroIn+"-value")
	reg := newRegistry(t, c)
	ins := deadLetterInputs(t, reg, avroIn, jsonIn, 40) // avro-39 has a wrong magic byte
	var msgs []*sarama.ProducerMessage
	for _, in := range ins {
		if in.topic == avroIn {
			msgs = append(msgs, &sarama.ProducerMessage{Topic: in.topic, Key: sarama.StringEncoder(in.key), Value: sarama.ByteEncoder(in.value)})
		}
	}
	kafka.Produce(t, c, msgs...)
	top, err := deadLetterTopology(avroIn, jsonIn, out, reg)
	if err != nil {
		t.Fatal(err)
	}
	cfg := eosFailureConfig(c, c.Name(t, "app"), t)
	cfg.Registry = schema.Config{URL: c.RegistryURL, RetryTimeout: 20 * time.Second}
	cfg.ProcessingErrors = weir.Skip // only the poison record may stop it
	inst := start(t, top, cfg)
	err = waitRun(t, inst, 60*time.Second)
	var re *weir.RecordError
	if !errors.As(err, &re) || re.Topic != avroIn || re.Partition != 0 || re.Offset != 39 || re.Node != "avro-in" {
		t.Fatalf("Run = %v, want a *weir.RecordError at %s/0@39 naming the source avro-in", err, avroIn)
	}
	var fe *serde.FormatError
	if !errors.As(err, &fe) {
		t.Errorf("Run = %v, want a *serde.FormatError inside", err)
	}
}

// TestRefusedOutputIsDeadLettered: with ProductionErrors DeadLetter, an
// output record Kafka refuses (too large, caught before it is sent; or
// without key on a topic made compacted after start, refused by the
// broker, which aborts the transaction) is dropped, and the input record
// that produced it goes to the dead-letter topic exactly once, with
// headers naming the sink; every other input record is echoed exactly
// once and all are committed.
func TestRefusedOutputIsDeadLettered(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		refuse func(processor.Record[[]byte, string]) processor.Record[[]byte, string]
		broker bool
	}{
		{"too large", bigValue, false},
		{"refused by the broker", noKey, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := kafka.Cluster(t)
			in, out, dlq, app := c.Name(t, "in"), c.Name(t, "out"), c.Name(t, "dlq"), c.Name(t, "app")
			c.CreateTopic(t, in, 1, nil)
			c.CreateTopic(t, out, 1, map[string]string{"cleanup.policy": "delete"})
			c.CreateTopic(t, dlq, 1, nil)
			cfg := eosFailureConfig(c, app, t)
			cfg.ProductionErrors = weir.DeadLetter(dlq)
			inst := start(t, offsetEcho(in, out, func(off int64) bool { return off == 50 }, tc.refuse, true), cfg)
			if tc.broker {
				produceFailureInput(t, c, in, 0, 50)
				kafka.Eventually(t, 60*time.Second, 100*time.Millisecond, func() (bool, string) {
					off := committedOffset(t, c, app, in)
					return off == 50, fmt.Sprintf("committed offset %d", off)
				})
				compactLater(t, c, out)
				produceFailureInput(t, c, in, 50, failureInput)
			} else {
				produceFailureInput(t, c, in, 0, failureInput)
			}
			kafka.Eventually(t, 60*time.Second, 100*time.Millisecond, func() (bool, string) {
				off := committedOffset(t, c, app, in)
				return off == failureInput, fmt.Sprintf("committed offset %d", off)
			})
			if err := inst.stop(t); err != nil {
				t.Fatalf("Run = %v", err)
			}
			checkEchoedUpTo(t, echoed(t, c, out), failureInput, map[int64]bool{50: true})

			writeSentinels(t, c, dlq, 1)
			dead := readToSentinels(t, c, dlq, 1, sarama.ReadCommitted)
			if len(dead) != 1 {
				t.Fatalf("%d dead-letter records, want 1 (input record 50)", len(dead))
			}
			got := map[string]string{}
			for _, h := range dead[0].Headers {
				got[string(h.Key)] = string(h.Value)
			}
			if string(dead[0].Key) != "in" || string(dead[0].Value) != "50" {
				t.Errorf("dead-letter record %q/%q, want the input record in/50", dead[0].Key, dead[0].Value)
			}
			for k, v := range map[string]string{
				weir.DeadLetterHeaderKind: "production", weir.DeadLetterHeaderSink: out, weir.DeadLetterHeaderTopic: in,
				weir.DeadLetterHeaderPartition: "0", weir.DeadLetterHeaderOffset: "50", weir.DeadLetterHeaderTask: "0_0",
			} {
				if got[k] != v {
					t.Errorf("header %s = %q, want %q", k, got[k], v)
				}
			}
			if got[weir.DeadLetterHeaderMessage] == "" {
				t.Error("no error message header")
			}
		})
	}
}
