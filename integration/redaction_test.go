package integration

// weir's promise that no record key or value appears in a log line, an
// error or a metric label of its own, tested through every error path the
// public API can drive, with a marker in every key and value.

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/changelog"
	"github.com/weirstream/weir/processor"
	"github.com/weirstream/weir/schema"
	"github.com/weirstream/weir/serde"
	"github.com/weirstream/weir/weirtest/kafka"
)

// redactMarker is in every key and value the redaction test writes.
const redactMarker = "redact-7f3a9c"

// redactForms are the forms in which the marker must not appear: as is,
// and in hex as %x writes bytes.
var redactForms = []string{redactMarker, hex.EncodeToString([]byte(redactMarker)), strings.ToUpper(hex.EncodeToString([]byte(redactMarker)))}

// holdsMarker reports whether s holds the marker in one of its forms.
func holdsMarker(s string) bool {
	for _, f := range redactForms {
		if strings.Contains(s, f) {
			return true
		}
	}
	return false
}

// redactEvent is the JSON value of the redaction test's JSON input. Its
// fields give encoding/json's errors something to quote: a number that is
// a string, a map key, a time that does not parse.
type redactEvent struct {
	N    int64            `json:"n"`
	Note string           `json:"note,omitempty"`
	At   *time.Time       `json:"at,omitempty"`
	Tags map[string]int64 `json:"tags,omitempty"`
}

// The numbers of the events on which the redaction topology fails in a
// particular way; any other number ending in 7 fails in "check".
const (
	redactHugeOutput   = 1001 // "check" forwards a value over the producer's limit: a refused record
	redactBadOutput    = 1002 // "check" forwards a value the sink's String serde refuses (invalid UTF-8)
	redactNegativeTime = 1003 // the JSON source's extractor gives it a time before 1970
)

// redactTopology reads three topics into "check", which keeps every
// record's value in a store under its key and echoes it to out:
// intIn (String keys, Int64 values), jsonIn (JSON redactEvent values,
// with a timestamp extractor) and avroIn (Avro dlEvent values).
func redactTopology(intIn, jsonIn, avroIn, out string, reg serde.Registry) (*processor.Topology, error) {
	avroValues, err := serde.Avro[dlEvent](serde.AvroConfig{Registry: reg, Schema: dlEventSchema})
	if err != nil {
		return nil, err
	}
	store := processor.KeyValue("redact-store", serde.String(), serde.String())
	t := processor.NewTopology()
	ints := t.AddSource("int-in", intIn, serde.String(), serde.Int64())
	jsons := t.AddSource("json-in", jsonIn, serde.String(), serde.JSON[redactEvent](),
		processor.WithTimestampExtractor(func(rec processor.Record[string, redactEvent], _ time.Time) (time.Time, error) {
			if rec.Value.N == redactNegativeTime {
				return time.UnixMilli(-1000), nil
			}
			return rec.Timestamp, nil
		}))
	avros := t.AddSource("avro-in", avroIn, serde.String(), avroValues)
	fromInt := t.AddProcessor("from-int", processor.Func(func(ctx processor.Context[string, redactEvent], rec processor.Record[string, int64]) error {
		return ctx.Forward(processor.Record[string, redactEvent]{Key: rec.Key, Value: redactEvent{N: rec.Value}, Timestamp: rec.Timestamp})
	}), ints)
	fromAvro := t.AddProcessor("from-avro", processor.Func(func(ctx processor.Context[string, redactEvent], rec processor.Record[string, dlEvent]) error {
		return ctx.Forward(processor.Record[string, redactEvent]{Key: rec.Key, Value: redactEvent{N: rec.Value.N}, Timestamp: rec.Timestamp})
	}), avros)
	check := t.AddProcessor("check", func() processor.Processor[string, redactEvent, string, string] {
		return &redactCheck{spec: store}
	}, fromInt, jsons, fromAvro)
	t.AddStore(store, check)
	t.AddSink("out", out, serde.String(), serde.String(), check)
	return t, nil
}

// redactCheck stores and echoes every event, then fails on some. Its own
// error text holds no data: what a processor returns is its author's
// text, which weir passes on; the test is about weir's.
type redactCheck struct {
	spec  *processor.KeyValueSpec[string, string]
	store processor.KeyValueStore[string, string]
}

func (p *redactCheck) Init(ctx processor.Context[string, string]) error {
	s, err := p.spec.Open(ctx)
	p.store = s
	return err
}

func (p *redactCheck) Process(ctx processor.Context[string, string], rec processor.Record[string, redactEvent]) error {
	value := fmt.Sprintf("%s value %d", redactMarker, rec.Value.N)
	// A record with a null key reaches here with the key "": the write is
	// dropped, counted and logged.
	if err := p.store.Put(rec.Key, value); err != nil {
		return err
	}
	switch rec.Value.N {
	case redactHugeOutput:
		value = strings.Repeat(redactMarker, (2<<20)/len(redactMarker))
	case redactBadOutput:
		value = redactMarker + "\xff"
	}
	if err := ctx.Forward(processor.Record[string, string]{Key: rec.Key, Value: value, Timestamp: rec.Timestamp}); err != nil {
		return err
	}
	if rec.Value.N%10 == 7 {
		return errors.New("the check refuses this record")
	}
	return nil
}

func (p *redactCheck) Close() error { return nil }

// bigKeyTopology keeps every record under a key of about 70 kB made of
// the record's key, over the 65000 bytes that Badger takes: the store
// refuses it.
func bigKeyTopology(in string) *processor.Topology {
	store := processor.KeyValue("big-keys", serde.String(), serde.String())
	t := processor.NewTopology()
	src := t.AddSource("in", in, serde.String(), serde.String())
	keep := t.AddProcessor("keep", func() processor.Processor[string, string, string, string] {
		return &bigKeys{spec: store}
	}, src)
	t.AddStore(store, keep)
	return t
}

type bigKeys struct {
	spec  *processor.KeyValueSpec[string, string]
	store processor.KeyValueStore[string, string]
}

func (p *bigKeys) Init(ctx processor.Context[string, string]) error {
	s, err := p.spec.Open(ctx)
	p.store = s
	return err
}

func (p *bigKeys) Process(_ processor.Context[string, string], rec processor.Record[string, string]) error {
	return p.store.Put(strings.Repeat(rec.Key, 70000/len(rec.Key)+1), rec.Value)
}

func (p *bigKeys) Close() error { return nil }

// windowTopology keeps every record in a window store.
func windowTopology(in string) *processor.Topology {
	store := processor.Window("win", time.Minute, time.Hour, serde.String(), serde.String())
	t := processor.NewTopology()
	src := t.AddSource("in", in, serde.String(), serde.String())
	keep := t.AddProcessor("keep", func() processor.Processor[string, string, string, string] {
		return &windowKeeper{spec: store}
	}, src)
	t.AddStore(store, keep)
	return t
}

type windowKeeper struct {
	spec  *processor.WindowSpec[string, string]
	store processor.WindowStore[string, string]
}

func (p *windowKeeper) Init(ctx processor.Context[string, string]) error {
	s, err := p.spec.Open(ctx)
	p.store = s
	return err
}

func (p *windowKeeper) Process(_ processor.Context[string, string], rec processor.Record[string, string]) error {
	return p.store.Put(rec.Key, rec.Timestamp.Truncate(time.Minute), rec.Value)
}

func (p *windowKeeper) Close() error { return nil }

// logCapture keeps every line of every App of the test, at debug level.
type logCapture struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logCapture) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logCapture) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

func (l *logCapture) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(l, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// redactionCheck collects what the Apps of the test said: their logs,
// the errors their Runs returned and their metric registries.
type redactionCheck struct {
	logs       logCapture
	errs       []error
	registries []*prometheus.Registry
}

// config returns an exactly-once Config for app on a fresh metrics
// registry, logging to the capture.
func (rc *redactionCheck) config(c *kafka.Env, app string, t *testing.T) weir.Config {
	reg := prometheus.NewRegistry()
	rc.registries = append(rc.registries, reg)
	return weir.Config{
		ApplicationID:  app,
		Brokers:        c.Brokers,
		StateDir:       t.TempDir(),
		Guarantee:      weir.ExactlyOnce,
		CommitInterval: 100 * time.Millisecond,
		Consumer:       weir.ConsumerConfig{SessionTimeout: 6 * time.Second, HeartbeatInterval: 500 * time.Millisecond},
		Logger:         rc.logs.logger(),
		Metrics:        reg,
	}
}

// ran records what a Run returned.
func (rc *redactionCheck) ran(err error) error {
	if err != nil {
		rc.errs = append(rc.errs, err)
	}
	return err
}

// metric sums the values of the counters named name whose labels include
// the given name=value pairs.
func (rc *redactionCheck) metric(t *testing.T, name string, labels ...string) float64 {
	t.Helper()
	var sum float64
	for _, reg := range rc.registries {
		fams, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range fams {
			if f.GetName() != name {
				continue
			}
		metrics:
			for _, m := range f.GetMetric() {
				for i := 0; i+1 < len(labels); i += 2 {
					found := false
					for _, l := range m.GetLabel() {
						found = found || l.GetName() == labels[i] && l.GetValue() == labels[i+1]
					}
					if !found {
						continue metrics
					}
				}
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}

// assertRedacted fails the test for every log line, error and metric
// label that holds the marker.
func (rc *redactionCheck) assertRedacted(t *testing.T) {
	t.Helper()
	lines := strings.Split(rc.logs.String(), "\n")
	var leaks []string
	for _, line := range lines {
		if holdsMarker(line) {
			leaks = append(leaks, line)
		}
	}
	if len(leaks) > 0 {
		for _, line := range leaks[:min(len(leaks), 5)] {
			if len(line) > 600 {
				line = line[:600] + "..."
			}
			t.Errorf("log line holds record data: %s", line)
		}
		t.Errorf("%d of %d log lines hold record data", len(leaks), len(lines))
	}
	for _, err := range rc.errs {
		for _, text := range []string{err.Error(), fmt.Sprintf("%+v", err)} {
			if holdsMarker(text) {
				if len(text) > 600 {
					text = text[:600] + "..."
				}
				t.Errorf("error returned by Run holds record data: %s", text)
			}
		}
	}
	for _, reg := range rc.registries {
		fams, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range fams {
			for _, m := range f.GetMetric() {
				for _, l := range m.GetLabel() {
					if holdsMarker(l.GetValue()) {
						t.Errorf("metric %s has label %s=%q, which holds record data", f.GetName(), l.GetName(), l.GetValue())
					}
				}
			}
		}
	}
}

// TestNoRecordDataInLogsErrorsOrMetrics drives weir through the error
// paths the public API reaches, with a marker in every key and value, and
// a logger that keeps every line at debug level (Config.Logger gets weir's
// lines, Badger's warnings forwarded by weir and the processors' own;
// sarama's logger is not wired to it):
//
//   - under exactly once, on one task: values that an Int64 serde cannot
//     read and a key that is not UTF-8 (Skip); JSON that is not JSON, a
//     string for a number, a map key and a time that do not fit
//     (DeadLetter); Avro with a wrong magic byte, an unknown schema id and
//     trailing bytes (DeadLetter); a time before 1970 from an extractor
//     (DeadLetter); a processor error (Skip: aborted and replayed); a
//     value the sink's serde refuses (Skip); a value over the producer's
//     limit (ProductionErrors Skip); a record with a null key written to
//     a store;
//   - a restart after the state directory is deleted: the store restores
//     its changelog, whose keys and values hold the marker;
//   - a second instance with the first one's process id (a copy of its
//     state directory): the first is fenced and stops with ErrFenced;
//   - an undecodable value under DeserializationErrors Fail: Run returns
//     a *weir.RecordError;
//   - a store key over Badger's limit: the commit's write to the local
//     state fails and Run returns the error;
//   - a window store's changelog holding a record that is not a window
//     entry: the restore fails and Run returns the error.
//
// No log line, no error Run returned and no metric label may hold the
// marker, as is or in hex, while the dead-letter topic holds the failed
// records' keys and values, marker included, and the output and the
// restore show that the marker went through.
func TestNoRecordDataInLogsErrorsOrMetrics(t *testing.T) {
	t.Parallel()
	c := kafka.Cluster(t)
	rc := &redactionCheck{}
	t.Cleanup(func() {
		if t.Failed() {
			log := rc.logs.String()
			t.Logf("weir logs: %s\n%s", saveLog(t, []byte(log)), lastWarnings(log, 8))
		}
	})
	intIn, jsonIn, avroIn := c.Name(t, "int-in"), c.Name(t, "json-in"), c.Name(t, "avro-in")
	out, dlq, app := c.Name(t, "out"), c.Name(t, "dlq"), c.Name(t, "app")
	for _, topic := range []string{intIn, jsonIn, avroIn, out, dlq} {
		c.CreateTopic(t, topic, 1, nil)
	}
	deleteSubjects(t, c, avroIn+"-value")
	reg := newRegistry(t, c)
	avroValues, err := serde.Avro[dlEvent](serde.AvroConfig{Registry: reg, Schema: dlEventSchema})
	if err != nil {
		t.Fatal(err)
	}

	// The input. deadLettered lists the keys that must reach the
	// dead-letter topic.
	var msgs []*sarama.ProducerMessage
	counts := map[string]int64{}
	deadLettered := map[string]bool{}
	seq := 0
	key := func(what string) string {
		seq++
		return fmt.Sprintf("%s-%s-%d", redactMarker, what, seq)
	}
	add := func(topic string, k, v []byte, dead bool) {
		msgs = append(msgs, &sarama.ProducerMessage{Topic: topic, Key: bytesOrNil(k), Value: sarama.ByteEncoder(v),
			Headers: []sarama.RecordHeader{{Key: []byte("trace"), Value: []byte(redactMarker)}}})
		counts[topic]++
		if dead {
			deadLettered[string(k)] = true
		}
	}
	int64Bytes := func(n int64) []byte { return binary.BigEndian.AppendUint64(nil, uint64(n)) }
	for n := range int64(30) {
		add(intIn, []byte(key("int")), int64Bytes(n), false)
		good, err := avroValues.Serialize(avroIn, dlEvent{N: n})
		if err != nil {
			t.Fatal(err)
		}
		add(avroIn, []byte(key("avro")), good, false)
		add(jsonIn, []byte(key("json")), fmt.Appendf(nil, `{"n":%d,"note":"%s","tags":{"%s":%d}}`, n, redactMarker, redactMarker, n), false)
	}
	frame, err := avroValues.Serialize(avroIn, dlEvent{N: 1})
	if err != nil {
		t.Fatal(err)
	}
	// Deserialization errors under Skip.
	add(intIn, []byte(key("int-poison")), []byte(redactMarker+" is not an int64"), false)
	add(intIn, []byte(redactMarker+"-not-utf8-\xff"), int64Bytes(40), false)
	// A null key.
	add(intIn, nil, int64Bytes(42), false)
	// Deserialization and timestamp errors under DeadLetter.
	add(jsonIn, []byte(key("json-syntax")), []byte(`{"n": `+redactMarker+`}`), true)
	add(jsonIn, []byte(key("json-type")), []byte(`{"n":"`+redactMarker+`"}`), true)
	add(jsonIn, []byte(key("json-map-key")), []byte(`{"n":1,"tags":{"`+redactMarker+`":"x"}}`), true)
	add(jsonIn, []byte(key("json-time")), []byte(`{"n":1,"at":"`+redactMarker+`"}`), true)
	add(jsonIn, []byte(key("json-negative-time")), fmt.Appendf(nil, `{"n":%d,"note":"%s"}`, redactNegativeTime, redactMarker), true)
	add(avroIn, []byte(key("avro-magic")), []byte(redactMarker), true)
	add(avroIn, []byte(key("avro-unknown-id")), append([]byte{0, 0x7f, 0xff, 0xf0, 0x0d}, redactMarker...), true)
	add(avroIn, []byte(key("avro-trailing")), append(append([]byte{}, frame[:5]...), redactMarker...), true)
	// Output that fails: the sink's serde, the producer's size limit.
	add(jsonIn, []byte(key("json-bad-output")), fmt.Appendf(nil, `{"n":%d,"note":"%s"}`, redactBadOutput, redactMarker), false)
	add(jsonIn, []byte(key("json-huge-output")), fmt.Appendf(nil, `{"n":%d,"note":"%s"}`, redactHugeOutput, redactMarker), false)
	kafka.Produce(t, c, msgs...)

	top, err := redactTopology(intIn, jsonIn, avroIn, out, reg)
	if err != nil {
		t.Fatal(err)
	}
	config := func() weir.Config {
		cfg := rc.config(c, app, t)
		cfg.Registry = schema.Config{URL: c.RegistryURL, RetryTimeout: 20 * time.Second}
		cfg.ProcessingErrors = weir.Skip
		cfg.ProductionErrors = weir.Skip
		cfg.TopicErrors = map[string]weir.ErrorPolicies{
			intIn:  {Deserialization: weir.Skip},
			jsonIn: {Deserialization: weir.DeadLetter(dlq), Timestamp: weir.DeadLetter(dlq)},
			avroIn: {Deserialization: weir.DeadLetter(dlq)},
		}
		return cfg
	}
	waitCommitted := func(what string, running *instance) {
		t.Helper()
		kafka.Eventually(t, 90*time.Second, 100*time.Millisecond, func() (bool, string) {
			select {
			case err := <-running.done:
				t.Fatalf("%s: Run = %v before the input was committed", what, rc.ran(err))
			default:
			}
			for topic, n := range counts {
				if off := committedOffset(t, c, app, topic); off != n {
					return false, fmt.Sprintf("%s: %s committed up to %d of %d", what, topic, off, n)
				}
			}
			return true, ""
		})
	}

	// 1. Every error path of one task.
	cfg := config()
	stateDir := cfg.StateDir
	first := start(t, top, cfg)
	waitCommitted("first run", first)
	if err := rc.ran(first.stop(t)); err != nil {
		t.Fatalf("first run: %v", err)
	}
	for _, want := range []struct {
		metric string
		labels []string
	}{
		{"weir_records_skipped_total", []string{"reason", "deserialization"}},
		{"weir_records_skipped_total", []string{"reason", "processing"}},
		{"weir_records_skipped_total", []string{"reason", "production"}},
		{"weir_records_dead_lettered_total", nil},
		{"weir_records_dropped_total", []string{"reason", "null_key"}},
		{"weir_node_failures_total", []string{"node", "check"}},
	} {
		if rc.metric(t, want.metric, want.labels...) == 0 {
			t.Errorf("%s%v is 0: the path it counts was not taken", want.metric, want.labels)
		}
	}

	// The dead-letter topic keeps the payloads: the failed records' keys
	// and values, marker included.
	dead := kafka.ReadAll(t, c, dlq, sarama.ReadCommitted, func(got []*sarama.ConsumerMessage) bool {
		return len(got) >= len(deadLettered)
	})
	for _, m := range dead {
		if !deadLettered[string(m.Key)] {
			t.Errorf("dead-letter record with key %q, which should not be there", m.Key)
		}
		if !bytes.Contains(m.Value, []byte(redactMarker)) {
			t.Errorf("dead-letter record %q lost its value: %q", m.Key, m.Value)
		}
	}
	if len(dead) != len(deadLettered) {
		t.Errorf("%d dead-letter records, want %d", len(dead), len(deadLettered))
	}
	echoed := kafka.ReadAll(t, c, out, sarama.ReadCommitted, func(got []*sarama.ConsumerMessage) bool { return len(got) > 0 })
	if !bytes.Contains(echoed[0].Value, []byte(redactMarker)) {
		t.Errorf("output %q lacks the marker", echoed[0].Value)
	}

	// 2. The state directory lost: the store restores its changelog.
	if err := os.RemoveAll(filepath.Join(stateDir, app)); err != nil {
		t.Fatal(err)
	}
	restores := &restoreLog{}
	cfg = config()
	cfg.StateDir = stateDir
	cfg.Stores.RestoreListener = restores
	second := start(t, top, cfg)
	kafka.Eventually(t, 60*time.Second, 50*time.Millisecond, func() (bool, string) {
		_, ended := restored(restores.snapshot())
		return ended == 1, "the store's restore has not ended"
	})
	if n, _ := restored(restores.snapshot()); n == 0 {
		t.Errorf("the restore applied no records")
	}

	// 3. A second instance with the running one's process id fences it.
	cfgB := config()
	id, err := os.ReadFile(filepath.Join(cfg.StateDir, app, "process-id"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(cfgB.StateDir, app), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cfgB.StateDir, app, "process-id"), id, 0o644); err != nil {
		t.Fatal(err)
	}
	third := start(t, top, cfgB)
	kafka.Eventually(t, 60*time.Second, 100*time.Millisecond, func() (bool, string) {
		select {
		case err := <-second.done:
			if !errors.Is(rc.ran(err), weir.ErrInstanceFenced) {
				t.Fatalf("the first instance's Run = %v, want ErrInstanceFenced", err)
			}
			return true, ""
		default:
		}
		// Keep records flowing so that the first instance commits.
		msgs = msgs[:0]
		add(jsonIn, []byte(key("json-more")), fmt.Appendf(nil, `{"n":%d,"note":"%s"}`, 2000+counts[jsonIn], redactMarker), false)
		kafka.Produce(t, c, msgs...)
		return false, "the first instance was not fenced"
	})
	waitCommitted("fencing instance", third)
	if err := rc.ran(third.stop(t)); err != nil {
		t.Fatalf("fencing instance: %v", err)
	}

	// 4. Fail: Run returns a *RecordError for an undecodable value.
	failIn, failApp := c.Name(t, "fail-in"), c.Name(t, "fail-app")
	c.CreateTopic(t, failIn, 1, nil)
	kafka.Produce(t, c, &sarama.ProducerMessage{Topic: failIn, Key: sarama.StringEncoder(redactMarker + "-fail"), Value: sarama.StringEncoder(redactMarker + " is not an int64")})
	failTop := processor.NewTopology()
	failTop.AddSink("out", out, serde.String(), serde.Int64(), failTop.AddSource("in", failIn, serde.String(), serde.Int64()))
	err = rc.ran(runUntilDone(t, failTop, rc.config(c, failApp, t)))
	var re *weir.RecordError
	var size *serde.SizeError
	if !errors.As(err, &re) || re.Topic != failIn || re.Offset != 0 || re.Node != "in" || !errors.As(err, &size) {
		t.Errorf("Run = %v, want a *weir.RecordError at %s/0@0, node in, caused by a *serde.SizeError", err, failIn)
	}

	// 5. A store key over the limit Badger imposes: refused when it is put,
	// so Run stops at the record (the Fail policy), before its changelog
	// record could be committed.
	bigIn, bigApp := c.Name(t, "big-in"), c.Name(t, "big-app")
	c.CreateTopic(t, bigIn, 1, nil)
	kafka.Produce(t, c, &sarama.ProducerMessage{Topic: bigIn, Key: sarama.StringEncoder(redactMarker + "-big"), Value: sarama.StringEncoder(redactMarker + " value")})
	var recErr *weir.RecordError
	if err := rc.ran(runUntilDone(t, bigKeyTopology(bigIn), rc.config(c, bigApp, t))); err == nil {
		t.Error("Run of a store key over Badger's limit returned nil")
	} else if !errors.Is(err, changelog.ErrKeyTooLarge) || !errors.As(err, &recErr) || recErr.Topic != bigIn {
		t.Errorf("Run = %v, want a RecordError at %s for a store key too large", err, bigIn)
	}

	// 6. A window store's changelog holding a record that is not a window
	// entry (a corrupt changelog): the restore fails on it.
	winIn, winApp := c.Name(t, "win-in"), c.Name(t, "win-app")
	c.CreateTopic(t, winIn, 1, nil)
	kafka.Produce(t, c, &sarama.ProducerMessage{Topic: winIn, Key: sarama.StringEncoder(redactMarker + "-win"), Value: sarama.StringEncoder(redactMarker + " value")})
	win := start(t, windowTopology(winIn), rc.config(c, winApp, t))
	kafka.Eventually(t, 60*time.Second, 100*time.Millisecond, func() (bool, string) {
		off := committedOffset(t, c, winApp, winIn)
		return off == 1, fmt.Sprintf("%s committed up to %d of 1", winIn, off)
	})
	if err := rc.ran(win.stop(t)); err != nil {
		t.Fatalf("window store run: %v", err)
	}
	// The changelog topic of store "win" ("<application id>-<store>-changelog").
	kafka.Produce(t, c, &sarama.ProducerMessage{Topic: winApp + "-win-changelog", Partition: 0,
		Key: sarama.ByteEncoder(append([]byte{1}, redactMarker+"-not-a-window-entry"...)), Value: sarama.StringEncoder(redactMarker + " value")})
	// A new state directory: the store restores its changelog in full.
	if err := rc.ran(runUntilDone(t, windowTopology(winIn), rc.config(c, winApp, t))); !errors.Is(err, changelog.ErrMalformedKey) {
		t.Errorf("Run over a corrupt window changelog = %v, want an error wrapping changelog.ErrMalformedKey", err)
	}

	rc.assertRedacted(t)
}

// bytesOrNil is b as a record key, nil for a record without key.
func bytesOrNil(b []byte) sarama.Encoder {
	if b == nil {
		return nil
	}
	return sarama.ByteEncoder(b)
}
