package task

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/weirstream/weir/internal/assign"
	"github.com/weirstream/weir/internal/client"
	"github.com/weirstream/weir/internal/graph"
	"github.com/weirstream/weir/internal/queue"
	"github.com/weirstream/weir/internal/statelog"
	"github.com/weirstream/weir/processor"
	"github.com/weirstream/weir/serde"
)

// brokerlessTask runs sub-topology 0 of top as task 0_0 with no broker:
// stores in memory, records to a recording producer, metrics on reg, logs
// as JSON into logs. It reads one partition of topic "in", fed through
// the returned queue.
func brokerlessTask(t *testing.T, top *processor.Topology, reg *prometheus.Registry, logs *bytes.Buffer) (*Task, *Queue, *recordingHost) {
	t.Helper()
	g, err := graph.Of(top)
	if err != nil {
		t.Fatal(err)
	}
	m, err := testMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	sh := &Shared{Config: Config{ApplicationID: "app"}, Graph: g, Metrics: m}
	log := slog.New(slog.NewJSONHandler(logs, nil))
	host := &recordingHost{}
	tk := &Task{sh: sh, host: host, thread: "0", id: assign.TaskID{}, name: "0_0", log: log, ctx: context.Background(), byTP: map[TP]*Input{},
		stores:    map[string]*taskStore{},
		processed: m.RecordsProcessed.WithLabelValues("0", "0_0"), bytes: m.BytesProcessed.WithLabelValues("0", "0_0"),
		punctuations: m.Punctuations.WithLabelValues("0", "0_0"), deadLettered: m.DeadLettered.WithLabelValues("0", "0_0"),
		dropped: m.RecordsDropped.WithLabelValues("0", "0_0", "null_key"), latency: m.EndToEndLatency.WithLabelValues("0_0")}
	for _, s := range g.Stores {
		st := &taskStore{spec: s, buf: statelog.NewBuffer(&statelog.Memory{}), users: map[string]bool{}, ckpt: -1, staged: -1}
		for _, u := range s.Users {
			st.users[u.Name] = true
		}
		tk.stores[s.Name] = st
	}
	q := queue.New(queue.Limits{Items: 100, Bytes: 1 << 20}, RecordSize, nil)
	if err := tk.build(g.Subtopologies()[0]); err != nil {
		t.Fatal(err)
	}
	tk.parts[0].q = q
	if err := tk.init(); err != nil {
		t.Fatal(err)
	}
	return tk, q, host
}

// read is what a keyCounter's Get found.
type read struct {
	key   string
	count int64
	found bool
}

// keyCounter counts records per key in a key-value store, notes each
// record's window and session, and forwards the record under its key. A
// value "=k" re-keys the record to k first; a value "-" deletes its key
// instead of counting.
type keyCounter struct {
	kv       *processor.KeyValueSpec[string, int64]
	win      *processor.WindowSpec[string, int64]
	ses      *processor.SessionSpec[string, int64]
	counts   processor.KeyValueStore[string, int64]
	windows  processor.WindowStore[string, int64]
	sessions processor.SessionStore[string, int64]
	reads    []read
}

func (c *keyCounter) Init(ctx processor.Context[string, string]) (err error) {
	if c.counts, err = c.kv.Open(ctx); err != nil {
		return err
	}
	if c.windows, err = c.win.Open(ctx); err != nil {
		return err
	}
	c.sessions, err = c.ses.Open(ctx)
	return err
}

func (c *keyCounter) Close() error { return nil }

func (c *keyCounter) Process(ctx processor.Context[string, string], rec processor.Record[string, string]) error {
	key := rec.Key
	if k, ok := strings.CutPrefix(rec.Value, "="); ok {
		key = k
	}
	if rec.Value == "-" {
		return c.counts.Delete(key)
	}
	n, found, err := c.counts.Get(key)
	if err != nil {
		return err
	}
	c.reads = append(c.reads, read{key, n, found})
	if err := c.counts.Put(key, n+1); err != nil {
		return err
	}
	if err := c.windows.Put(key, rec.Timestamp, n+1); err != nil {
		return err
	}
	if err := c.sessions.Put(processor.Windowed[string]{Key: key, Start: rec.Timestamp, End: rec.Timestamp}, n+1); err != nil {
		return err
	}
	return ctx.Forward(processor.Record[string, string]{Key: key, Value: rec.Value, Timestamp: rec.Timestamp})
}

// nullKeyTopology is in -> count (stores "counts", "windows", "sessions")
// -> repartition "by-key" -> out.
func nullKeyTopology() (*processor.Topology, *keyCounter) {
	c := &keyCounter{
		kv:  processor.KeyValue("counts", serde.String(), serde.Int64()),
		win: processor.Window("windows", time.Second, time.Hour, serde.String(), serde.Int64()),
		ses: processor.Session("sessions", time.Hour, serde.String(), serde.Int64()),
	}
	top := processor.NewTopology()
	src := top.AddSource("in", "in", serde.String(), serde.String())
	count := top.AddProcessor("count", func() processor.Processor[string, string, string, string] { return c }, src)
	top.AddStore(c.kv, count)
	top.AddStore(c.win, count)
	top.AddStore(c.ses, count)
	byKey := top.AddRepartition("by-key", serde.String(), serde.String(), count)
	top.AddSink("out", "out", serde.String(), serde.String(), byKey)
	return top, c
}

// TestNullKeyRecordsDropTheirEmptyKeyWrites pins finding 10 of issue 9: a
// record with a null Kafka key reached processors with the key "", and
// everything it stored or repartitioned went under that one empty key.
// Now, while such a record is processed, its writes under the empty key
// (key-value, window and session stores) and its repartition record are
// dropped and counted once, and a read of the empty key misses; the same
// record re-keyed by the processor, and records whose Kafka key is present
// but empty, are stored and sent as before.
func TestNullKeyRecordsDropTheirEmptyKeyWrites(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	var logs bytes.Buffer
	top, counter := nullKeyTopology()
	tk, q, rec := brokerlessTask(t, top, reg, &logs)

	base := time.UnixMilli(1_000_000)
	inputs := []struct {
		key   []byte // nil: a null Kafka key
		value string
	}{
		{[]byte{}, "x"},   // 0: present but empty key: stored under ""
		{nil, "secret-1"}, // 1: null key: every write dropped, Get("") misses
		{nil, "-"},        // 2: null key: Delete("") dropped
		{nil, "=user-7"},  // 3: null key re-keyed by the processor: stored
		{[]byte("a"), "y"},
		{[]byte{}, "z"}, // 5: present but empty key again: sees 1 under ""
	}
	at := func(i int) time.Time { return base.Add(time.Duration(i) * time.Second) }
	for i, in := range inputs {
		m := &sarama.ConsumerMessage{Topic: "in", Partition: 0, Offset: int64(i), Key: in.key, Value: []byte(in.value), Timestamp: at(i)}
		if err := q.Push(context.Background(), m); err != nil {
			t.Fatal(err)
		}
	}
	drain(t, tk, time.Now())

	// The key-value store.
	buf := tk.stores["counts"].buf
	counts := map[string]int64{}
	for k, v := range buf.Range(nil, nil) {
		n, err := serde.Int64().Deserialize("counts", v)
		if err != nil {
			t.Fatal(err)
		}
		counts[string(k)] = n
	}
	if want := map[string]int64{"": 2, "a": 1, "user-7": 1}; fmt.Sprint(counts) != fmt.Sprint(want) {
		t.Errorf("counts = %v, want %v: only the records with a present key count under \"\"", counts, want)
	}
	wantReads := []read{{"", 0, false}, {"", 0, false}, {"user-7", 0, false}, {"a", 0, false}, {"", 1, true}}
	if !slices.Equal(counter.reads, wantReads) {
		t.Errorf("reads = %v, want %v: the null-key record's Get(\"\") misses, a present empty key's hits", counter.reads, wantReads)
	}

	// The window and session stores, by user key and time.
	wb, err := statelog.NewWindowBytes(tk.stores["windows"].buf, time.Hour, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var windows []string
	for wk := range wb.All() {
		windows = append(windows, fmt.Sprintf("%q@%d", wk.Key, wk.Start.Sub(base)/time.Second))
	}
	sb, err := statelog.NewSessionBytes(tk.stores["sessions"].buf, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	var sessions []string
	for sk := range sb.All() {
		sessions = append(sessions, fmt.Sprintf("%q@%d", sk.Key, sk.Start.Sub(base)/time.Second))
	}
	want := []string{`""@0`, `""@5`, `"a"@4`, `"user-7"@3`}
	if !slices.Equal(windows, want) {
		t.Errorf("windows = %v, want %v", windows, want)
	}
	if !slices.Equal(sessions, want) {
		t.Errorf("sessions = %v, want %v", sessions, want)
	}

	// The repartition topic: everything but the null-key record's "".
	var sent []string
	for _, m := range rec.sent {
		if m.Topic != "app-by-key-repartition" {
			t.Errorf("record sent to %s, want app-by-key-repartition", m.Topic)
		}
		k, err := m.Key.Encode()
		if err != nil {
			t.Fatal(err)
		}
		sent = append(sent, m.Metadata.(*client.Origin).Topic+"@"+fmt.Sprint(m.Metadata.(*client.Origin).Offset)+":"+string(k))
	}
	if want := []string{"in@0:", "in@3:user-7", "in@4:a", "in@5:"}; !slices.Equal(sent, want) {
		t.Errorf("repartition records (input@offset:key) = %v, want %v", sent, want)
	}

	// Counted once per input record, though record 1 lost four writes.
	var dropped dto.Metric
	if err := tk.dropped.(prometheus.Metric).Write(&dropped); err != nil {
		t.Fatal(err)
	}
	if n := dropped.GetCounter().GetValue(); n != 2 {
		t.Errorf("weir_records_dropped_total{reason=null_key} = %v, want 2 (records 1 and 2)", n)
	}

	// Logged once per record and destination, with coordinates, not values.
	if strings.Contains(logs.String(), "secret") {
		t.Errorf("the logs hold a record value:\n%s", logs.String())
	}
	var lines []string
	for line := range strings.Lines(logs.String()) {
		var e map[string]any
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatal(err)
		}
		if e["level"] != "WARN" {
			continue
		}
		where := fmt.Sprint("store=", e["store"])
		if e["repartition_topic"] != nil {
			where = fmt.Sprint("repartition_topic=", e["repartition_topic"])
		}
		lines = append(lines, fmt.Sprintf("%v/%v@%v %s", e["topic"], e["partition"], e["offset"], where))
	}
	wantLines := []string{
		"in/0@1 store=counts", "in/0@1 store=windows", "in/0@1 store=sessions", "in/0@1 repartition_topic=app-by-key-repartition",
		"in/0@2 store=counts",
	}
	if !slices.Equal(lines, wantLines) {
		t.Errorf("warnings = %q, want %q", lines, wantLines)
	}
}
