package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/changelog"
	"github.com/weirstream/weir/internal/statelog"
	"github.com/weirstream/weir/processor"
	"github.com/weirstream/weir/serde"
	"github.com/weirstream/weir/weirtest/kafka"
)

// A dedup service remembers the ids it has seen in a window store (the
// first time of each id, per minute window) and in a TTL store. Issue 20,
// item 6: a window store Put wrote two changelog records, its value and a
// time index entry, doubling the changelog of such a store.

const (
	dedupWindowSize = time.Minute
	dedupRetention  = time.Hour
)

var (
	dedupWindows = processor.Window("seen-windows", dedupWindowSize, dedupRetention, serde.String(), serde.Int64())
	dedupIDs     = processor.TTL("seen-ids", dedupRetention, serde.String(), serde.Int64())
)

type dedupService struct {
	windows processor.WindowStore[string, int64]
	ids     processor.TTLStore[string, int64]
}

func (d *dedupService) Init(ctx processor.Context[string, string]) (err error) {
	if d.windows, err = dedupWindows.Open(ctx); err != nil {
		return err
	}
	d.ids, err = dedupIDs.Open(ctx)
	return err
}

func (d *dedupService) Process(ctx processor.Context[string, string], rec processor.Record[string, string]) error {
	if _, seen, err := d.ids.Get(rec.Key); err != nil || seen {
		return err
	}
	ts := rec.Timestamp.UnixMilli()
	if err := d.ids.Put(rec.Key, ts); err != nil {
		return err
	}
	if err := d.windows.Put(rec.Key, rec.Timestamp.Truncate(dedupWindowSize), ts); err != nil {
		return err
	}
	return ctx.Forward(rec)
}

func (d *dedupService) Close() error { return nil }

func dedupTopology(in, out string) *processor.Topology {
	t := processor.NewTopology()
	src := t.AddSource("in", in, serde.String(), serde.String())
	d := t.AddProcessor("dedup", func() processor.Processor[string, string, string, string] { return &dedupService{} }, src)
	t.AddStore(dedupWindows, d)
	t.AddStore(dedupIDs, d)
	t.AddSink("out", out, serde.String(), serde.String(), d)
	return t
}

// dedupState is what a stopped instance's stores hold and answer.
type dedupState struct {
	raw   map[string][]string // store -> every entry of its partition, index included
	reads string              // every read of the stores, printed
}

// readDedupState opens a stopped instance's state and reads partition 0
// of both stores: raw, and through every read they offer, by key and by
// time.
func readDedupState(t *testing.T, stateDir, app string, ids []string) dedupState {
	t.Helper()
	db, err := statelog.Open(filepath.Join(stateDir, app, "state"), changelog.Options{})
	if err != nil {
		t.Fatalf("opening the stopped instance's state: %v", err)
	}
	defer db.Close()
	st := dedupState{raw: map[string][]string{}}
	for _, name := range []string{dedupWindows.Name(), dedupIDs.Name()} {
		for k, v := range db.Space(name, 0).Range(nil, nil) {
			st.raw[name] = append(st.raw[name], fmt.Sprintf("%x=%x", k, v))
		}
	}
	var b strings.Builder
	w, err := statelog.NewWindowBytes(db.Space(dedupWindows.Name(), 0), dedupRetention, dedupWindowSize)
	if err != nil {
		t.Fatal(err)
	}
	all := time.UnixMilli(1 << 42)
	for _, id := range ids {
		fmt.Fprintf(&b, "fetch %s:", id)
		for start, v := range w.FetchRange([]byte(id), time.UnixMilli(0), all) {
			fmt.Fprintf(&b, " %d=%x", start.UnixMilli(), v)
		}
		b.WriteString("\n")
	}
	b.WriteString("fetchAll:")
	for k, v := range w.FetchAll(time.UnixMilli(0), all) {
		fmt.Fprintf(&b, " %s@%d=%x", k.Key, k.Start.UnixMilli(), v)
	}
	b.WriteString("\nall:")
	for k, v := range w.All() {
		fmt.Fprintf(&b, " %s@%d=%x", k.Key, k.Start.UnixMilli(), v)
	}
	if err := w.Err(); err != nil {
		t.Fatal(err)
	}
	ttl, err := statelog.NewTTLBytes(db.Space(dedupIDs.Name(), 0), dedupRetention)
	if err != nil {
		t.Fatal(err)
	}
	b.WriteString("\nids:")
	for k, v := range ttl.All() {
		fmt.Fprintf(&b, " %s=%x", k, v)
	}
	if err := ttl.Err(); err != nil {
		t.Fatal(err)
	}
	st.reads = b.String()
	return st
}

// TestIndexedStoresChangelogOneRecordPerUpdate runs the dedup service on
// the real broker: the changelog of its window store, and of its TTL
// store, holds one record per update and no index entry. A full restore
// into an empty state directory then gives the state the first run had,
// byte for byte (the index rebuilt from the records), and the same
// answers to fetches by key and by time.
func TestIndexedStoresChangelogOneRecordPerUpdate(t *testing.T) {
	t.Parallel()
	c := kafka.Cluster(t)
	in, out, app := c.Name(t, "in"), c.Name(t, "out"), c.Name(t, "app")
	c.CreateTopic(t, in, 1, nil)
	c.CreateTopic(t, out, 1, nil)

	// 40 ids, the first 20 sent twice: 40 first sightings, over three
	// one-minute windows.
	const ids, dups = 40, 20
	base := time.Now().Truncate(time.Minute).Add(-3 * time.Minute)
	var msgs []*sarama.ProducerMessage
	var names []string
	for i := range ids + dups {
		id := fmt.Sprintf("id-%02d", i%ids)
		if i < ids {
			names = append(names, id)
		}
		msgs = append(msgs, &sarama.ProducerMessage{Topic: in, Key: sarama.StringEncoder(id), Value: sarama.StringEncoder("payment"),
			Timestamp: base.Add(time.Duration(i) * 3 * time.Second)})
	}
	kafka.Produce(t, c, msgs...)

	cfg := baseConfig(c, app, t)
	// No transactions: a changelog's end offset is then its record count.
	cfg.Guarantee = weir.AtLeastOnce
	a := start(t, dedupTopology(in, out), cfg)
	kafka.ReadAll(t, c, out, sarama.ReadCommitted, func(got []*sarama.ConsumerMessage) bool { return len(got) == ids })
	if err := a.stop(t); err != nil {
		t.Fatal(err)
	}

	for _, store := range []string{dedupWindows.Name(), dedupIDs.Name()} {
		topic := app + "-" + store + "-changelog"
		end := kafka.EndOffsets(t, c, topic)[0]
		if end != ids {
			t.Errorf("changelog %s ends at offset %d after %d updates, want %d: one record per update", topic, end, ids, ids)
		}
		recs := kafka.ReadAll(t, c, topic, sarama.ReadUncommitted, func(got []*sarama.ConsumerMessage) bool { return int64(len(got)) >= end })
		for _, m := range recs {
			if len(m.Key) == 0 || m.Key[0] != 0x01 {
				t.Errorf("changelog %s holds a record of key %x at offset %d, not a primary entry", topic, m.Key, m.Offset)
				break
			}
		}
	}
	want := readDedupState(t, cfg.StateDir, app, names)
	if n := len(want.raw[dedupWindows.Name()]); n != 2*ids {
		t.Fatalf("the window store holds %d entries, want %d (a window and its index entry per id)", n, 2*ids)
	}

	// Lost state: a full restore from the changelogs.
	if err := os.RemoveAll(filepath.Join(cfg.StateDir, app)); err != nil {
		t.Fatal(err)
	}
	log := &restoreLog{}
	cfg.Stores.RestoreListener = log
	b := start(t, dedupTopology(in, out), cfg)
	kafka.Eventually(t, 60*time.Second, 50*time.Millisecond, func() (bool, string) {
		_, ended := restored(log.snapshot())
		return ended == 2, fmt.Sprintf("%d of 2 store restores ended", ended)
	})
	if err := b.stop(t); err != nil {
		t.Fatal(err)
	}
	for _, e := range log.snapshot() {
		if e.Kind == "start" && !e.Full {
			t.Errorf("restore of %s without local state was not full", e.Store)
		}
		if e.Kind == "end" && e.Records != ids {
			t.Errorf("restore of %s applied %d records, want %d", e.Store, e.Records, ids)
		}
	}
	got := readDedupState(t, cfg.StateDir, app, names)
	for store, entries := range want.raw {
		if !slices.Equal(got.raw[store], entries) {
			t.Errorf("store %s after the full restore:\n%v\nwant\n%v", store, got.raw[store], entries)
		}
	}
	if got.reads != want.reads {
		t.Errorf("reads after the full restore:\n%s\nwant\n%s", got.reads, want.reads)
	}
}
