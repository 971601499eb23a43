package task

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/weirstream/weir/internal/client"
	"github.com/weirstream/weir/internal/statelog"
	"github.com/weirstream/weir/processor"
	"github.com/weirstream/weir/serde"
)

// indexedWriter writes every record to a window, a session and a TTL
// store: the stores that keep a local index.
type indexedWriter struct {
	win      *processor.WindowSpec[string, string]
	ses      *processor.SessionSpec[string, string]
	ttl      *processor.TTLSpec[string, string]
	windows  processor.WindowStore[string, string]
	sessions processor.SessionStore[string, string]
	seen     processor.TTLStore[string, string]
}

func (w *indexedWriter) Init(ctx processor.Context[string, string]) (err error) {
	if w.windows, err = w.win.Open(ctx); err != nil {
		return err
	}
	if w.sessions, err = w.ses.Open(ctx); err != nil {
		return err
	}
	w.seen, err = w.ttl.Open(ctx)
	return err
}

func (w *indexedWriter) Process(_ processor.Context[string, string], rec processor.Record[string, string]) error {
	start := time.UnixMilli(rec.Timestamp.UnixMilli() / 10 * 10)
	if err := w.windows.Put(rec.Key, start, rec.Value); err != nil {
		return err
	}
	if err := w.sessions.Put(processor.Windowed[string]{Key: rec.Key, Start: rec.Timestamp, End: rec.Timestamp}, rec.Value); err != nil {
		return err
	}
	return w.seen.Put(rec.Key, rec.Value)
}

func (w *indexedWriter) Close() error { return nil }

// TestIndexedStoreUpdatesAreOneChangelogRecordEach pins item 6 of issue
// 20: a window store Put sent two changelog records, its value and its
// time index entry (and so did a session store Put), doubling the
// changelog of a dedup store. Through a task, each update of a window,
// session or TTL store is now one changelog record; the index entries
// still reach the committed state, and applying the changelog records as
// the restore does rebuilds that state exactly.
func TestIndexedStoreUpdatesAreOneChangelogRecordEach(t *testing.T) {
	t.Parallel()
	w := &indexedWriter{
		win: processor.Window("windows", 10*time.Millisecond, time.Hour, serde.String(), serde.String()),
		ses: processor.Session("sessions", time.Hour, serde.String(), serde.String()),
		ttl: processor.TTL("seen", time.Hour, serde.String(), serde.String()),
	}
	top := processor.NewTopology()
	src := top.AddSource("in", "in", serde.String(), serde.String())
	p := top.AddProcessor("write", func() processor.Processor[string, string, string, string] { return w }, src)
	top.AddStore(w.win, p)
	top.AddStore(w.ses, p)
	top.AddStore(w.ttl, p)
	tk, q, host := brokerlessTask(t, top, prometheus.NewRegistry(), &bytes.Buffer{})

	base := time.UnixMilli(1_000_000)
	inputs := []struct {
		key string
		at  int64 // ms after base
	}{{"a", 0}, {"b", 0}, {"a", 10}, {"c", 20}, {"b", 30}, {"a", 40}}
	for i, in := range inputs {
		m := &sarama.ConsumerMessage{Topic: "in", Offset: int64(i), Key: []byte(in.key), Value: fmt.Appendf(nil, "v%d", i), Timestamp: base.Add(time.Duration(in.at) * time.Millisecond)}
		if err := q.Push(context.Background(), m); err != nil {
			t.Fatal(err)
		}
	}
	drain(t, tk, time.Now())
	if err := tk.SendChangelog(); err != nil {
		t.Fatal(err)
	}
	records := map[string][]statelog.Record{}
	for _, m := range host.sent {
		store := m.Metadata.(*client.Origin).Store
		k, err := m.Key.Encode()
		if err != nil {
			t.Fatal(err)
		}
		var v []byte
		if m.Value != nil {
			if v, err = m.Value.Encode(); err != nil {
				t.Fatal(err)
			}
		}
		records[store] = append(records[store], statelog.Record{Key: k, Value: v, Offset: int64(len(records[store]))})
	}
	// Six distinct windows and sessions; three keys in the TTL store.
	want := map[string]int{"windows": 6, "sessions": 6, "seen": 3}
	for store, n := range want {
		if got := len(records[store]); got != n {
			t.Errorf("store %s: %d changelog records for %d updates, want one each", store, got, n)
		}
	}

	for store := range want {
		st := tk.stores[store]
		if err := st.buf.Flush(); err != nil { // the commit's write to the state
			t.Fatal(err)
		}
		committed := dumpBytes(t, st.buf)
		if len(committed) != 2*want[store] {
			t.Errorf("store %s: the committed state holds %d entries, want %d (index entries included)", store, len(committed), 2*want[store])
		}
		entries, err := statelog.RestoreEntries(nil, records[store], storeIndex(st.spec.Kind), false)
		if err != nil {
			t.Fatal(err)
		}
		restored := &statelog.Memory{}
		if err := restored.Apply(entries); err != nil {
			t.Fatal(err)
		}
		if got := dumpBytes(t, restored); !slices.Equal(got, committed) {
			t.Errorf("store %s: restored state\n%v\nwant the committed state\n%v", store, got, committed)
		}
	}
}

func dumpBytes(t *testing.T, b statelog.Bytes) []string {
	t.Helper()
	var out []string
	for k, v := range b.Range(nil, nil) {
		out = append(out, fmt.Sprintf("%x=%x", k, v))
	}
	if err := b.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}
