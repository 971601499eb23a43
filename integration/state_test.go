package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
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

// The state tests run a topology that keeps, per key, the highest sequence
// number seen. Reprocessing a record does not change it, so the store must
// equal a reference computed from the input even at least once, across
// crashes and moves.

var latest = processor.KeyValue("latest", serde.String(), serde.Int64())

func maxSeqTopology(in, out string) *processor.Topology {
	t := processor.NewTopology()
	src := t.AddSource("in", in, serde.String(), serde.String())
	track := t.AddProcessor("track", func() processor.Processor[string, string, string, int64] { return &maxSeq{} }, src)
	t.AddStore(latest, track)
	t.AddSink("out", out, serde.String(), serde.Int64(), track)
	return t
}

type maxSeq struct {
	store processor.KeyValueStore[string, int64]
}

func (p *maxSeq) Init(ctx processor.Context[string, int64]) error {
	s, err := latest.Open(ctx)
	p.store = s
	return err
}

func (p *maxSeq) Process(ctx processor.Context[string, int64], rec processor.Record[string, string]) error {
	seq, err := strconv.ParseInt(rec.Value, 10, 64)
	if err != nil {
		return err
	}
	cur, _, err := p.store.Get(rec.Key)
	if err != nil {
		return err
	}
	if seq <= cur {
		return nil
	}
	if err := p.store.Put(rec.Key, seq); err != nil {
		return err
	}
	return ctx.Forward(processor.Record[string, int64]{Key: rec.Key, Value: seq, Timestamp: rec.Timestamp})
}

func (p *maxSeq) Close() error { return nil }

// seqRecords returns records for keys 0..keys-1 with sequence numbers
// from..to-1, interleaved.
func seqRecords(topic string, keys, from, to int) []*sarama.ProducerMessage {
	var msgs []*sarama.ProducerMessage
	for seq := from; seq < to; seq++ {
		for k := range keys {
			msgs = append(msgs, &sarama.ProducerMessage{Topic: topic, Key: sarama.StringEncoder(fmt.Sprintf("key-%04d", k)), Value: sarama.StringEncoder(strconv.Itoa(seq))})
		}
	}
	return msgs
}

// restoreEvent is one RestoreListener call.
type restoreEvent struct {
	Kind      string `json:"kind"` // start, batch, end
	Store     string `json:"store"`
	Partition int32  `json:"partition"`
	From      int64  `json:"from"`
	End       int64  `json:"end"`
	Full      bool   `json:"full"`
	Records   int64  `json:"records"`
}

// restoreLog collects restore events.
type restoreLog struct {
	mu     sync.Mutex
	events []restoreEvent
	out    func(restoreEvent)
}

func (l *restoreLog) add(e restoreEvent) {
	l.mu.Lock()
	l.events = append(l.events, e)
	l.mu.Unlock()
	if l.out != nil {
		l.out(e)
	}
}

func (l *restoreLog) OnRestoreStart(store string, p int32, from, end int64, full bool) {
	l.add(restoreEvent{Kind: "start", Store: store, Partition: p, From: from, End: end, Full: full})
}
func (l *restoreLog) OnBatchRestored(store string, p int32, next int64, records int) {
	l.add(restoreEvent{Kind: "batch", Store: store, Partition: p, End: next, Records: int64(records)})
}
func (l *restoreLog) OnRestoreEnd(store string, p int32, records int64, _ time.Duration) {
	l.add(restoreEvent{Kind: "end", Store: store, Partition: p, Records: records})
}

func (l *restoreLog) snapshot() []restoreEvent {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]restoreEvent(nil), l.events...)
}

// restored sums the records of the restores that ended.
func restored(events []restoreEvent) (records int64, ended int) {
	for _, e := range events {
		if e.Kind == "end" {
			records += e.Records
			ended++
		}
	}
	return records, ended
}

// readStore opens an instance's state after it stopped and returns the
// "latest" store, all partitions merged.
func readStore(t *testing.T, stateDir, app string, partitions int32) map[string]int64 {
	t.Helper()
	db, err := statelog.Open(filepath.Join(stateDir, app, "state"), changelog.Options{})
	if err != nil {
		t.Fatalf("opening the stopped instance's state: %v", err)
	}
	defer db.Close()
	out := map[string]int64{}
	for p := range partitions {
		for k, v := range db.Space("latest", p).Range(nil, nil) {
			n, err := serde.Int64().Deserialize("", v)
			if err != nil {
				t.Fatalf("store value of %q: %v", k, err)
			}
			out[string(k)] = n
		}
	}
	return out
}

func wantLatest(keys, seqs int) map[string]int64 {
	want := map[string]int64{}
	for k := range keys {
		want[fmt.Sprintf("key-%04d", k)] = int64(seqs - 1)
	}
	return want
}

func equalStores(t *testing.T, got, want map[string]int64) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("store has %d keys, want %d", len(got), len(want))
	}
	bad := 0
	for k, v := range want {
		if got[k] != v && bad < 5 {
			t.Errorf("store[%s] = %d, want %d", k, got[k], v)
			bad++
		}
	}
}

// waitOutput waits until every key's last sequence number is in the output.
func waitProcessed(t *testing.T, c *kafka.Env, out string, keys, seqs int) {
	t.Helper()
	last := map[string]bool{}
	kafka.ReadAll(t, c, out, sarama.ReadCommitted, func(msgs []*sarama.ConsumerMessage) bool {
		if len(msgs) == 0 {
			return false
		}
		m := msgs[len(msgs)-1]
		if len(m.Value) == 8 {
			if n, _ := serde.Int64().Deserialize("", m.Value); n == int64(seqs-1) {
				last[string(m.Key)] = true
			}
		}
		return len(last) == keys
	})
}

// TestRestoreAfterCleanStopAndLostState: a clean restart restores nothing;
// after the state directory is deleted a full restore rebuilds every key.
func TestRestoreAfterCleanStopAndLostState(t *testing.T) {
	t.Parallel()
	c := kafka.Cluster(t)
	in, out, app := c.Name(t, "in"), c.Name(t, "out"), c.Name(t, "app")
	c.CreateTopic(t, in, 4, nil)
	c.CreateTopic(t, out, 4, nil)
	const keys, seqs = 200, 20
	kafka.Produce(t, c, seqRecords(in, keys, 0, seqs)...)

	cfg := baseConfig(c, app, t)
	// Regression: a stopping App once dropped the state of the tasks its
	// own shutdown closed, as if they had moved away.
	cfg.Stores.CleanupDelay = time.Millisecond
	first := &restoreLog{}
	cfg.Stores.RestoreListener = first
	a := start(t, maxSeqTopology(in, out), cfg)
	waitProcessed(t, c, out, keys, seqs)
	if err := a.stop(t); err != nil {
		t.Fatal(err)
	}
	want := wantLatest(keys, seqs)
	equalStores(t, readStore(t, cfg.StateDir, app, 4), want)

	// Clean restart: every partition's checkpoint is at the end. (The
	// default delay: state not assigned within it at start is dropped.)
	cfg.Stores.CleanupDelay = 0
	again := &restoreLog{}
	cfg.Stores.RestoreListener = again
	b := start(t, maxSeqTopology(in, out), cfg)
	kafka.Eventually(t, 30*time.Second, 50*time.Millisecond, func() (bool, string) {
		_, ended := restored(again.snapshot())
		return ended == 4, fmt.Sprintf("%d of 4 restores ended", ended)
	})
	if n, _ := restored(again.snapshot()); n != 0 {
		t.Errorf("clean restart restored %d records, want 0", n)
	}
	for _, e := range again.snapshot() {
		if e.Kind == "start" && e.Full {
			t.Errorf("clean restart did a full restore of partition %d", e.Partition)
		}
	}
	if err := b.stop(t); err != nil {
		t.Fatal(err)
	}

	// Lost state: a full restore from the changelog.
	if err := os.RemoveAll(filepath.Join(cfg.StateDir, app)); err != nil {
		t.Fatal(err)
	}
	full := &restoreLog{}
	cfg.Stores.RestoreListener = full
	d := start(t, maxSeqTopology(in, out), cfg)
	kafka.Eventually(t, 30*time.Second, 50*time.Millisecond, func() (bool, string) {
		_, ended := restored(full.snapshot())
		return ended == 4, fmt.Sprintf("%d of 4 restores ended", ended)
	})
	n, _ := restored(full.snapshot())
	if n < keys {
		t.Errorf("full restore applied %d records, want at least one per key (%d)", n, keys)
	}
	for _, e := range full.snapshot() {
		if e.Kind == "start" && !e.Full {
			t.Errorf("restore of partition %d without local state was not full", e.Partition)
		}
	}
	if err := d.stop(t); err != nil {
		t.Fatal(err)
	}
	equalStores(t, readStore(t, cfg.StateDir, app, 4), want)
}

// TestSecondInstanceRebuildsMovedTasks: tasks that move to a new instance
// are rebuilt there from the changelog, and the two instances' stores
// together hold the right state.
func TestSecondInstanceRebuildsMovedTasks(t *testing.T) {
	t.Parallel()
	c := kafka.Cluster(t)
	in, out, app := c.Name(t, "in"), c.Name(t, "out"), c.Name(t, "app")
	c.CreateTopic(t, in, 4, nil)
	c.CreateTopic(t, out, 4, nil)
	const keys, seqs = 100, 10
	kafka.Produce(t, c, seqRecords(in, keys, 0, seqs)...)

	cfgA := baseConfig(c, app, t)
	cfgA.Stores.CleanupDelay = 50 * time.Millisecond
	a := start(t, maxSeqTopology(in, out), cfgA)
	waitProcessed(t, c, out, keys, seqs)

	cfgB := baseConfig(c, app, t)
	logB := &restoreLog{}
	cfgB.Stores.RestoreListener = logB
	b := start(t, maxSeqTopology(in, out), cfgB)
	kafka.Eventually(t, 60*time.Second, 50*time.Millisecond, func() (bool, string) {
		na, nb := len(a.app.Tasks()), len(b.app.Tasks())
		_, ended := restored(logB.snapshot())
		return na == 2 && nb == 2 && ended == 2, fmt.Sprintf("tasks a=%d b=%d, restores ended on b: %d", na, nb, ended)
	})
	if n, _ := restored(logB.snapshot()); n == 0 {
		t.Error("the new instance restored no records for the tasks it took over")
	}
	kafka.Produce(t, c, seqRecords(in, keys, seqs, 2*seqs)...)
	waitProcessed(t, c, out, keys, 2*seqs)
	if err := b.stop(t); err != nil {
		t.Fatal(err)
	}
	if err := a.stop(t); err != nil {
		t.Fatal(err)
	}
	// Each instance holds exactly the partitions it ran last: A dropped
	// the state of the tasks it gave away after Stores.CleanupDelay.
	partsB := map[int32]bool{}
	for _, e := range logB.snapshot() {
		partsB[e.Partition] = true
	}
	stA, stB := readStore(t, cfgA.StateDir, app, 4), readStore(t, cfgB.StateDir, app, 4)
	hash := sarama.NewMurmur2Partitioner(in)
	merged := map[string]int64{}
	for name, st := range map[string]map[string]int64{"a": stA, "b": stB} {
		for k, v := range st {
			p, _ := hash.Partition(&sarama.ProducerMessage{Key: sarama.StringEncoder(k)}, 4)
			if partsB[p] != (name == "b") {
				t.Fatalf("instance %s still holds key %s of partition %d", name, k, p)
			}
			merged[k] = v
		}
	}
	equalStores(t, merged, wantLatest(keys, 2*seqs))
}

// TestCompactedChangelogRestoresTheSameState: with a changelog the broker
// compacts quickly, a full restore reads fewer records than were written
// and still rebuilds the same state.
func TestCompactedChangelogRestoresTheSameState(t *testing.T) {
	t.Parallel()
	c := kafka.Cluster(t)
	in, out, app := c.Name(t, "in"), c.Name(t, "out"), c.Name(t, "app")
	c.CreateTopic(t, in, 1, nil)
	c.CreateTopic(t, out, 1, nil)
	// weir accepts an existing, compacted changelog with the right
	// partition count; this one rolls and compacts within seconds.
	c.CreateTopic(t, app+"-latest-changelog", 1, map[string]string{
		"cleanup.policy": "compact", "segment.ms": "100", "min.cleanable.dirty.ratio": "0.01",
		"delete.retention.ms": "0", "min.compaction.lag.ms": "0",
	})
	const keys, seqs = 50, 40
	cfg := baseConfig(c, app, t)
	cfg.CommitInterval = 50 * time.Millisecond
	a := start(t, maxSeqTopology(in, out), cfg)
	// Produce in rounds so that many commits write each key again.
	for s := 0; s < seqs; s += 5 {
		kafka.Produce(t, c, seqRecords(in, keys, s, s+5)...)
		waitProcessed(t, c, out, keys, s+5)
	}
	if err := a.stop(t); err != nil {
		t.Fatal(err)
	}
	changelogTopic := app + "-latest-changelog"
	written := kafka.EndOffsets(t, c, changelogTopic)[0]
	// Keep writing a filler record until the cleaner has compacted the
	// rolled segments: reading from the start then yields far fewer
	// records than were written.
	kafka.Eventually(t, 60*time.Second, 300*time.Millisecond, func() (bool, string) {
		kafka.Produce(t, c, &sarama.ProducerMessage{Topic: changelogTopic, Key: sarama.StringEncoder("~filler"), Value: sarama.ByteEncoder(make([]byte, 8)), Partition: 0})
		msgs := kafka.ReadAll(t, c, changelogTopic, sarama.ReadCommitted, func(m []*sarama.ConsumerMessage) bool {
			return len(m) > 0 && m[len(m)-1].Offset >= kafka.EndOffsets(t, c, changelogTopic)[0]-1
		})
		return int64(len(msgs)) < written/2, fmt.Sprintf("%d of %d changelog records left", len(msgs), written)
	})

	if err := os.RemoveAll(filepath.Join(cfg.StateDir, app)); err != nil {
		t.Fatal(err)
	}
	log := &restoreLog{}
	cfg.Stores.RestoreListener = log
	b := start(t, maxSeqTopology(in, out), cfg)
	kafka.Eventually(t, 30*time.Second, 50*time.Millisecond, func() (bool, string) {
		_, ended := restored(log.snapshot())
		return ended == 1, "restore not ended"
	})
	n, _ := restored(log.snapshot())
	if n >= written/2 {
		t.Errorf("full restore read %d records of %d written: the changelog was not compacted", n, written)
	}
	if err := b.stop(t); err != nil {
		t.Fatal(err)
	}
	got := readStore(t, cfg.StateDir, app, 1)
	delete(got, "~filler")
	equalStores(t, got, wantLatest(keys, seqs))
}

// TestFailedCommitLeavesStateUnchanged: when the changelog write of a
// commit fails, the buffered changes never reach Badger.
func TestFailedCommitLeavesStateUnchanged(t *testing.T) {
	t.Parallel()
	c := kafka.Cluster(t)
	in, out, app := c.Name(t, "in"), c.Name(t, "out"), c.Name(t, "app")
	c.CreateTopic(t, in, 1, nil)
	c.CreateTopic(t, out, 1, nil)
	// The changelog refuses batches bigger than 2000 bytes: the failure is
	// injected between producing the changelog and committing.
	c.CreateTopic(t, app+"-latest-changelog", 1, map[string]string{"cleanup.policy": "compact", "max.message.bytes": "2000"})
	kafka.Produce(t, c, seqRecords(in, 10, 0, 5)...)
	cfg := baseConfig(c, app, t)
	// A commit every 2 s: the two records below, sent together, are
	// processed between two commits, so they share the failing one.
	cfg.CommitInterval = 2 * time.Second
	a := start(t, maxSeqTopology(in, out), cfg)
	waitProcessed(t, c, out, 10, 5)
	// Let a commit land, then feed a key too long for the changelog.
	kafka.Eventually(t, 30*time.Second, 50*time.Millisecond, func() (bool, string) {
		ts := a.app.Tasks()
		return len(ts) == 1 && ts[0].Partitions[0].Committed == 50, fmt.Sprintf("tasks %+v", ts)
	})
	long := strings.Repeat("k", 4000)
	kafka.Produce(t, c,
		&sarama.ProducerMessage{Topic: in, Key: sarama.StringEncoder("key-0000"), Value: sarama.StringEncoder("99")},
		&sarama.ProducerMessage{Topic: in, Key: sarama.StringEncoder(long), Value: sarama.StringEncoder("1")})
	select {
	case err := <-a.done:
		if err == nil || !strings.Contains(err.Error(), "latest-changelog") {
			t.Fatalf("Run = %v, want the changelog write failure", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the failed commit did not stop the application")
	}
	got := readStore(t, cfg.StateDir, app, 1)
	equalStores(t, got, wantLatest(10, 5))
	if _, ok := got[long]; ok {
		t.Error("the change of the failed commit reached Badger")
	}
}

// childEnv names the variables that make the test binary run one weir
// instance instead of tests (see runChild).
const childEnv = "WEIR_IT_CHILD"

// runChild runs the max-seq topology until SIGTERM, printing restore
// events as JSON lines and "running" once every task runs. The kill -9
// test starts it as a separate process.
func runChild() int {
	get := func(k string) string { return os.Getenv("WEIR_IT_" + k) }
	commit, _ := time.ParseDuration(get("COMMIT"))
	bulkMin, _ := strconv.ParseInt(get("BULK_MIN"), 10, 64) // 0: the default
	enc := json.NewEncoder(os.Stdout)
	var mu sync.Mutex
	log := &restoreLog{out: func(e restoreEvent) {
		mu.Lock()
		enc.Encode(e)
		mu.Unlock()
	}}
	app, err := weir.New(maxSeqTopology(get("IN"), get("OUT")), weir.Config{
		ApplicationID:  get("APP"),
		Brokers:        strings.Split(get("BROKERS"), ","),
		StateDir:       get("STATE_DIR"),
		Guarantee:      weir.AtLeastOnce,
		CommitInterval: commit,
		Consumer:       weir.ConsumerConfig{SessionTimeout: 6 * time.Second, HeartbeatInterval: 500 * time.Millisecond},
		Stores:         weir.StoresConfig{RestoreListener: log, BulkRestoreMinRecords: bulkMin},
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	go func() {
		for ctx.Err() == nil {
			ts := app.Tasks()
			if len(ts) > 0 {
				mu.Lock()
				fmt.Println(`{"kind":"running"}`)
				mu.Unlock()
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	if err := app.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// child is a weir instance in its own process.
type child struct {
	cmd    *exec.Cmd
	mu     sync.Mutex
	events []restoreEvent
	done   chan struct{}
}

func startChild(t *testing.T, env map[string]string) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=1")
	for k, v := range env {
		cmd.Env = append(cmd.Env, "WEIR_IT_"+k+"="+v)
	}
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ch := &child{cmd: cmd, done: make(chan struct{})}
	go func() {
		defer close(ch.done)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var e restoreEvent
			if json.Unmarshal(sc.Bytes(), &e) == nil && e.Kind != "" {
				ch.mu.Lock()
				ch.events = append(ch.events, e)
				ch.mu.Unlock()
			}
		}
		cmd.Wait()
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-ch.done
	})
	return ch
}

func (ch *child) snapshot() []restoreEvent {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	return append([]restoreEvent(nil), ch.events...)
}

// stopChild stops a child instance with SIGTERM and fails t unless it
// exits cleanly within 30 s.
func stopChild(t *testing.T, ch *child) {
	t.Helper()
	if err := ch.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ch.done:
	case <-time.After(30 * time.Second):
		t.Fatal("child did not stop on SIGTERM")
	}
	if code := ch.cmd.ProcessState.ExitCode(); code != 0 {
		t.Fatalf("child exited with %d", code)
	}
}

// TestKill9RestoresOnlyTheTail kills an instance with SIGKILL while it
// processes a stream and restarts it on the same state directory: the
// restart replays only what the last commits wrote, never the whole
// changelog, and the state equals the reference.
func TestKill9RestoresOnlyTheTail(t *testing.T) {
	t.Parallel()
	c := kafka.Cluster(t)
	in, out, app := c.Name(t, "in"), c.Name(t, "out"), c.Name(t, "app")
	c.CreateTopic(t, in, 2, nil)
	c.CreateTopic(t, out, 2, nil)
	const keys = 500
	env := map[string]string{
		"BROKERS": strings.Join(c.Brokers, ","), "APP": app, "IN": in, "OUT": out,
		"STATE_DIR": t.TempDir(), "COMMIT": "200ms",
	}
	first := startChild(t, env)
	kafka.Eventually(t, 60*time.Second, 50*time.Millisecond, func() (bool, string) {
		for _, e := range first.snapshot() {
			if e.Kind == "running" {
				return true, ""
			}
		}
		return false, "child not running yet"
	})
	// Feed the stream in rounds while the child commits every 200 ms, and
	// kill it while records still flow, once the changelog has a long
	// history.
	changelogTopic := app + "-latest-changelog"
	var written int64
	seq := 0
	for ; ; seq++ {
		kafka.Produce(t, c, seqRecords(in, keys, seq, seq+1)...)
		if seq%5 != 4 {
			continue
		}
		written = 0
		for _, end := range kafka.EndOffsets(t, c, changelogTopic) {
			written += end
		}
		if written >= 10*keys {
			break
		}
		if seq > 400 {
			t.Fatalf("after %d rounds the changelog holds only %d records", seq, written)
		}
	}
	seq++
	kafka.Produce(t, c, seqRecords(in, keys, seq-1, seq)...) // in flight at the kill
	if err := first.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-first.done

	second := startChild(t, env)
	kafka.Eventually(t, 60*time.Second, 50*time.Millisecond, func() (bool, string) {
		_, ended := restored(second.snapshot())
		return ended == 2, fmt.Sprintf("%d of 2 restores ended", ended)
	})
	n, _ := restored(second.snapshot())
	for _, e := range second.snapshot() {
		if e.Kind == "start" && (e.Full || e.From == 0) {
			t.Errorf("partition %d restored from %d (full %v) after kill -9: the local state was not used", e.Partition, e.From, e.Full)
		}
	}
	// One commit writes each key at most once: two commit intervals write
	// at most two records per key.
	t.Logf("kill -9: restored %d changelog records of %d written", n, written)
	if n > 2*keys {
		t.Errorf("restored %d records, more than two commits can write (%d)", n, 2*keys)
	}
	kafka.Produce(t, c, seqRecords(in, keys, seq, seq+1)...)
	waitProcessed(t, c, out, keys, seq+1)
	stopChild(t, second)
	equalStores(t, readStore(t, env["STATE_DIR"], app, 2), wantLatest(keys, seq+1))
}
