package integration

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/changelog"
	"github.com/weirstream/weir/internal/statelog"
	"github.com/weirstream/weir/processor"
	"github.com/weirstream/weir/serde"
	"github.com/weirstream/weir/weirtest/kafka"
)

// Restores that meet a changelog which lost records while the local state
// was away or while the restore ran: review findings 8 and 9 of issue 9.

var kv = processor.KeyValue("kv", serde.String(), serde.String())

// kvTopology keeps a string store: a record puts its value under its key,
// the value "-" deletes the key, and the key "?" asks for the keys the
// store holds, which the processor forwards to out as one record with key
// "?" and the keys, sorted and comma-separated, as value. Keys starting
// with "~" (fillers a test writes to the changelog) are left out.
func kvTopology(in, out string) *processor.Topology {
	t := processor.NewTopology()
	src := t.AddSource("in", in, serde.String(), serde.String())
	p := t.AddProcessor("kv", func() processor.Processor[string, string, string, string] { return &kvProc{} }, src)
	t.AddStore(kv, p)
	t.AddSink("out", out, serde.String(), serde.String(), p)
	return t
}

type kvProc struct {
	store processor.KeyValueStore[string, string]
}

func (p *kvProc) Init(ctx processor.Context[string, string]) error {
	s, err := kv.Open(ctx)
	p.store = s
	return err
}

func (p *kvProc) Process(ctx processor.Context[string, string], rec processor.Record[string, string]) error {
	switch {
	case rec.Key == "?":
		var keys []string
		for k := range p.store.All() {
			if !strings.HasPrefix(k, "~") {
				keys = append(keys, k)
			}
		}
		if err := p.store.Err(); err != nil {
			return err
		}
		return ctx.Forward(processor.Record[string, string]{Key: "?", Value: strings.Join(keys, ","), Timestamp: rec.Timestamp})
	case rec.Value == "-":
		return p.store.Delete(rec.Key)
	default:
		return p.store.Put(rec.Key, rec.Value)
	}
}

func (p *kvProc) Close() error { return nil }

// answers reads out until it holds n answers of kvTopology's "?" queries,
// and returns them in order.
func answers(t *testing.T, c *kafka.Env, out string, n int) []string {
	t.Helper()
	var got []string
	kafka.ReadAll(t, c, out, sarama.ReadCommitted, func(msgs []*sarama.ConsumerMessage) bool {
		got = got[:0]
		for _, m := range msgs {
			if string(m.Key) == "?" {
				got = append(got, string(m.Value))
			}
		}
		return len(got) >= n
	})
	return got
}

func kvRecord(topic, key, value string) *sarama.ProducerMessage {
	return &sarama.ProducerMessage{Topic: topic, Key: sarama.StringEncoder(key), Value: sarama.StringEncoder(value)}
}

// waitCommitted waits until the group of application app has committed
// the end of in's partition 0: the state of the records before it is in
// Badger with its checkpoint, and stopping the App commits nothing more.
func waitCommitted(t *testing.T, c *kafka.Env, app, in string) {
	t.Helper()
	admin := c.Admin(t)
	kafka.Eventually(t, 30*time.Second, 50*time.Millisecond, func() (bool, string) {
		end := kafka.EndOffsets(t, c, in)[0]
		got, err := groupCommitted(admin, app, in, 1)
		if err != nil {
			return false, fmt.Sprintf("committed offsets of %s: %v", app, err)
		}
		return got[0] == end, fmt.Sprintf("committed offset %d, end %d", got[0], end)
	})
}

// failIfStopped fails the test at once when the App's Run has returned.
func failIfStopped(t *testing.T, in *instance) {
	t.Helper()
	select {
	case err := <-in.done:
		t.Fatalf("the App stopped: %v", err)
	default:
	}
}

// logStartMover is a RestoreListener that, after the first batch a restore
// applies, deletes the changelog's records up to halfway between the
// restore's position and the changelog's end (DeleteRecords, as an
// operator or retention would), so that the next fetch falls below the
// log start.
type logStartMover struct {
	*restoreLog
	admin sarama.ClusterAdmin
	topic string
	end   int64

	mu        sync.Mutex
	firstNext int64 // the position after the first batch
	deletedTo int64 // the new log start; 0 before the deletion
	err       error
}

func (m *logStartMover) OnBatchRestored(_ string, p int32, next int64, _ int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.deletedTo != 0 || m.err != nil {
		return
	}
	m.firstNext = next
	if m.end-next < 2 {
		m.err = fmt.Errorf("the first batch reached offset %d of %d: nothing left to delete past the restore", next, m.end)
		return
	}
	// Past the next batch too: the restore fetches one batch ahead of the
	// one it reports applied.
	to := next + 3*(m.end-next)/4
	if m.err = m.admin.DeleteRecords(m.topic, map[int32]int64{p: to}); m.err == nil {
		m.deletedTo = to
	}
}

func (m *logStartMover) state() (firstNext, deletedTo int64, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.firstNext, m.deletedTo, m.err
}

// fullRestores returns weir_restores_full_total of reason from reg.
func fullRestores(t *testing.T, reg *prometheus.Registry, reason string) float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var n float64
	for _, f := range fams {
		if f.GetName() != "weir_restores_full_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "reason" && l.GetValue() == reason {
					n += m.GetCounter().GetValue()
				}
			}
		}
	}
	return n
}

// TestFullRestoreStartsOverWhenLogStartMoves: a full restore whose position
// fell below the changelog's log start (retention or DeleteRecords moved
// it during the restore) used to fail the restore and stop the App. It now
// starts over from the new log start on dropped state, and the store ends
// up holding exactly the records the changelog still has.
//
// Both restore paths: write batches, and the bulk load (which starts over
// with the store partition still empty, its runs dropped).
func TestFullRestoreStartsOverWhenLogStartMoves(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		bulkMin int64
	}{{"write batches", -1}, {"bulk", 1}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			fullRestoreStartsOverWhenLogStartMoves(t, tc.bulkMin)
		})
	}
}

func fullRestoreStartsOverWhenLogStartMoves(t *testing.T, bulkMin int64) {
	c := kafka.Cluster(t)
	in, out, app := c.Name(t, "in"), c.Name(t, "out"), c.Name(t, "app")
	c.CreateTopic(t, in, 1, nil)
	c.CreateTopic(t, out, 1, nil)
	// compact,delete as weir makes window and session store changelogs:
	// Kafka refuses DeleteRecords on a compact-only topic. The restore is
	// the same for every kind of store.
	topic := app + "-kv-changelog"
	c.CreateTopic(t, topic, 1, map[string]string{"cleanup.policy": "compact,delete", "retention.ms": "-1"})

	// About 3 MiB of distinct keys: the restore reader fetches at most
	// 1 MiB at a time, so the restore takes several batches.
	const keys = 2000
	value := strings.Repeat("v", 1500)
	msgs := make([]*sarama.ProducerMessage, keys)
	for i := range msgs {
		msgs[i] = kvRecord(topic, fmt.Sprintf("k%05d", i), value)
		msgs[i].Partition = 0
	}
	kafka.Produce(t, c, msgs...)
	end := kafka.EndOffsets(t, c, topic)[0]

	mover := &logStartMover{restoreLog: &restoreLog{}, admin: c.Admin(t), topic: topic, end: end}
	reg := prometheus.NewRegistry()
	cfg := baseConfig(c, app, t)
	cfg.Metrics = reg
	cfg.Stores.RestoreListener = mover
	cfg.Stores.BulkRestoreMinRecords = bulkMin
	a := start(t, kvTopology(in, out), cfg)
	kafka.Eventually(t, 60*time.Second, 50*time.Millisecond, func() (bool, string) {
		failIfStopped(t, a)
		if _, _, err := mover.state(); err != nil {
			t.Fatalf("moving the log start: %v", err)
		}
		s, _ := a.app.State()
		_, ended := restored(mover.snapshot())
		return ended == 1 && s == weir.StateRunning, fmt.Sprintf("%d restores ended, App %v", ended, s)
	})
	firstNext, deletedTo, _ := mover.state()
	if deletedTo == 0 {
		t.Fatal("the restore ended without the log start moving")
	}
	t.Logf("first batch ended at offset %d; log start moved to %d of %d", firstNext, deletedTo, end)

	var starts []restoreEvent
	for _, e := range mover.snapshot() {
		if e.Kind == "start" {
			starts = append(starts, e)
		}
	}
	if len(starts) != 2 || !starts[0].Full || starts[0].From != 0 || !starts[1].Full || starts[1].From != deletedTo {
		t.Errorf("restore starts %+v; want a full restore from 0, then one from the new log start %d", starts, deletedTo)
	}
	if n := fullRestores(t, reg, "log_start_moved"); n != 1 {
		t.Errorf("weir_restores_full_total{reason=log_start_moved} = %v, want 1", n)
	}
	if err := a.stop(t); err != nil {
		t.Fatal(err)
	}

	// The store holds the records from the new log start on, and none
	// of those the first attempt applied below it.
	db, err := statelog.Open(filepath.Join(cfg.StateDir, app, "state"), changelog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var got []string
	for k, v := range db.Space("kv", 0).Range(nil, nil) {
		if string(v) != value {
			t.Errorf("store[%s] has a value of %d bytes, want %d", k, len(v), len(value))
		}
		got = append(got, string(k))
	}
	var want []string
	for _, m := range msgs {
		if m.Offset >= deletedTo {
			k, _ := m.Key.Encode()
			want = append(want, string(k))
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("store holds %d keys (%s...%s), want the %d from offset %d on (%s...%s)",
			len(got), first(got), last(got), len(want), deletedTo, first(want), last(want))
	}
}

func first(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return s[0]
}

func last(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return s[len(s)-1]
}

// TestOldCheckpointDoesNotBringBackDeletedKeys: tombstones leave a compacted
// changelog delete.retention.ms after compaction reaches them. A state
// directory used again after longer than that used to replay only the
// changelog after its checkpoint, which no longer held the deletion, and
// kept the deleted key. It is now restored in full.
func TestOldCheckpointDoesNotBringBackDeletedKeys(t *testing.T) {
	t.Parallel()
	c := kafka.Cluster(t)
	in, out, app := c.Name(t, "in"), c.Name(t, "out"), c.Name(t, "app")
	c.CreateTopic(t, in, 1, nil)
	c.CreateTopic(t, out, 1, nil)
	// A changelog that rolls and compacts within seconds and keeps
	// tombstones for one second.
	topic := app + "-kv-changelog"
	c.CreateTopic(t, topic, 1, map[string]string{
		"cleanup.policy": "compact", "delete.retention.ms": "1000", "segment.ms": "100",
		"min.cleanable.dirty.ratio": "0.01", "min.compaction.lag.ms": "0",
	})

	// Instance 1 writes a, b and c, and stops; its state directory stays.
	cfg1 := baseConfig(c, app, t)
	i1 := start(t, kvTopology(in, out), cfg1)
	kafka.Produce(t, c, kvRecord(in, "a", "1"), kvRecord(in, "b", "1"), kvRecord(in, "c", "1"), kvRecord(in, "?", ""))
	if got := answers(t, c, out, 1); got[0] != "a,b,c" {
		t.Fatalf("instance 1 holds %q, want a,b,c", got[0])
	}
	waitCommitted(t, c, app, in)
	if err := i1.stop(t); err != nil {
		t.Fatal(err)
	}

	// Instance 2, on a state directory of its own, deletes b and stops.
	cfg2 := baseConfig(c, app, t)
	i2 := start(t, kvTopology(in, out), cfg2)
	kafka.Produce(t, c, kvRecord(in, "b", "-"), kvRecord(in, "?", ""))
	if got := answers(t, c, out, 2); got[1] != "a,c" {
		t.Fatalf("instance 2 holds %q after deleting b, want a,c", got[1])
	}
	waitCommitted(t, c, app, in)
	if err := i2.stop(t); err != nil {
		t.Fatal(err)
	}

	// Compaction removes b's value and then, a second later, its
	// tombstone. A filler record per round rolls the segment so that the
	// cleaner can reach the records before it.
	fillers := 0
	kafka.Eventually(t, 90*time.Second, 300*time.Millisecond, func() (bool, string) {
		fillers++
		kafka.Produce(t, c, &sarama.ProducerMessage{Topic: topic, Partition: 0, Key: sarama.StringEncoder("~filler"), Value: sarama.StringEncoder(fmt.Sprint(fillers))})
		end := kafka.EndOffsets(t, c, topic)[0]
		// The last record is in the active segment, which the cleaner
		// never touches: reading up to it reads the whole log.
		msgs := kafka.ReadAll(t, c, topic, sarama.ReadUncommitted, func(m []*sarama.ConsumerMessage) bool {
			return len(m) > 0 && m[len(m)-1].Offset >= end-1
		})
		var b []string
		for _, m := range msgs {
			if string(m.Key) == "b" {
				if m.Value == nil {
					b = append(b, fmt.Sprintf("tombstone@%d", m.Offset))
				} else {
					b = append(b, fmt.Sprintf("%s@%d", m.Value, m.Offset))
				}
			}
		}
		return len(b) == 0, fmt.Sprintf("after %d fillers the changelog still has b: %v", fillers, b)
	})

	// Instance 1 comes back to its old state directory: its checkpoint
	// is older than the tombstone's delete.retention.ms.
	log1 := &restoreLog{}
	cfg1.Stores.RestoreListener = log1
	reg := prometheus.NewRegistry()
	cfg1.Metrics = reg
	i1 = start(t, kvTopology(in, out), cfg1)
	kafka.Produce(t, c, kvRecord(in, "?", ""))
	if got := answers(t, c, out, 3); got[2] != "a,c" {
		t.Errorf("instance 1, back on its old state, holds %q; want a,c: b was deleted", got[2])
	}
	waitCommitted(t, c, app, in)
	for _, e := range log1.snapshot() {
		if e.Kind == "start" && !e.Full {
			t.Errorf("instance 1 replayed its changelog from checkpoint %d instead of restoring in full", e.From)
		}
	}
	if n := fullRestores(t, reg, "checkpoint_too_old"); n != 1 {
		t.Errorf("weir_restores_full_total{reason=checkpoint_too_old} = %v, want 1", n)
	}
	if err := i1.stop(t); err != nil {
		t.Fatal(err)
	}
}
