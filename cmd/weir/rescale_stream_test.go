package main

// Tests of the streamed copy of weir rescale, and of a rescale killed
// with SIGKILL and run again: the command runs in a child process (this
// test binary, see cliChild).

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/weirstream/weir/internal/graph"
	"github.com/weirstream/weir/internal/statelog"
	"github.com/weirstream/weir/serde"
	"github.com/weirstream/weir/weirtest/kafka"
)

// cliChildEnv makes the test binary run the weir command with its
// arguments instead of the tests (see TestMain); killAtEnv, when set,
// names the step (rescaleStep) after which it kills itself with SIGKILL.
const (
	cliChildEnv = "WEIR_CLI_COMMAND_CHILD"
	killAtEnv   = "WEIR_CLI_KILL_AT"
)

// cliChild runs the command line of its arguments.
func cliChild() int {
	if at := os.Getenv(killAtEnv); at != "" {
		rescaleStep = func(step string) {
			if step == at {
				_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
				select {} // the signal is on its way
			}
		}
	}
	return run(context.Background(), os.Args[1:], os.Stdout, os.Stderr)
}

// syncBuffer is a bytes.Buffer safe for a writer and a reader.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// cliProcess is a weir command line running in a child process.
type cliProcess struct {
	cmd  *exec.Cmd
	out  *syncBuffer   // its stdout and stderr
	done chan struct{} // closed once it exited, with err set
	err  error
}

// startCLI starts the weir command line args in a child process; killAt,
// when not empty, is the step after which it kills itself. The process is
// killed when the test ends.
func startCLI(t *testing.T, killAt string, args ...string) *cliProcess {
	t.Helper()
	c := &cliProcess{cmd: exec.Command(os.Args[0], args...), out: &syncBuffer{}, done: make(chan struct{})}
	c.cmd.Env = append(os.Environ(), cliChildEnv+"=1", killAtEnv+"="+killAt)
	c.cmd.Stdout, c.cmd.Stderr = c.out, c.out
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		c.err = c.cmd.Wait()
		close(c.done)
	}()
	t.Cleanup(func() {
		_ = c.cmd.Process.Kill()
		<-c.done
	})
	return c
}

// wait returns the child's exit.
func (c *cliProcess) wait() error {
	<-c.done
	return c.err
}

// killed reports whether err is the exit of a process killed by SIGKILL.
func killed(err error) bool {
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return false
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
}

// storeApp makes the count application of dslCount (store "counts") on a
// new input of parts partitions, runs it once on no input, so that it has
// its descriptor and its store's changelog, and stops it: its store is
// then what the test writes to from+"-counts-changelog".
func storeApp(t *testing.T, c *kafka.Env, prefix string, parts int32) (in, from, to string) {
	t.Helper()
	in, out := c.Name(t, prefix+"-in"), c.Name(t, prefix+"-out")
	from, to = c.Name(t, prefix+"-app"), c.Name(t, prefix+"-app2")
	c.CreateTopic(t, in, parts, nil)
	c.CreateTopic(t, out, 8, nil)
	cleanupApps(t, c, from, to)
	runApp(t, dslCount(in, out, 0), rescaleConfig(c, from, t.TempDir()))()
	return in, from, to
}

// produceFast writes msgs, each to the partition Kafka's murmur2
// partitioner gives its key, with an idempotent producer (acks=all), in
// the order given per key.
func produceFast(t *testing.T, c *kafka.Env, msgs []*sarama.ProducerMessage) {
	t.Helper()
	produceWith(t, c, sarama.NewMurmur2Partitioner, msgs)
}

// produceWith is produceFast with the given partitioner.
func produceWith(t *testing.T, c *kafka.Env, partitioner sarama.PartitionerConstructor, msgs []*sarama.ProducerMessage) {
	t.Helper()
	cfg := c.SaramaConfig()
	cfg.Producer.Partitioner = partitioner
	cfg.Producer.Idempotent = true
	cfg.Producer.RequiredAcks = sarama.WaitForAll
	cfg.Net.MaxOpenRequests = 1
	cfg.Producer.Flush.Bytes = 1 << 20
	cfg.Producer.Flush.Frequency = 5 * time.Millisecond
	p, err := sarama.NewSyncProducer(c.Brokers, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = p.Close() }()
	for len(msgs) > 0 {
		n := min(len(msgs), 50_000)
		if err := p.SendMessages(msgs[:n]); err != nil {
			t.Fatalf("producing %d records: %v", n, err)
		}
		msgs = msgs[n:]
	}
}

// liveEntry is the latest record of a key in a changelog.
type liveEntry struct {
	value   string
	ts      int64 // Unix milliseconds
	stamped bool
}

// readTopic returns every record of topic (read_committed) up to its
// end offsets now, by partition.
func readTopic(t *testing.T, c *kafka.Env, topic string) map[int32][]*sarama.ConsumerMessage {
	t.Helper()
	cl, err := connect(common{brokers: strings.Join(c.Brokers, ",")})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.close()
	ps, err := cl.partitions(topic)
	if err != nil {
		t.Fatal(err)
	}
	out := map[int32][]*sarama.ConsumerMessage{}
	for _, p := range ps {
		start, end, err := cl.offsets(topic, p)
		if err != nil {
			t.Fatal(err)
		}
		out[p] = nil
		if err := scanRange(context.Background(), cl, topic, p, start, end, func(m *sarama.ConsumerMessage) error {
			out[p] = append(out[p], m)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// changelogState reads every record of topic (read_committed), checks
// that every key's records are in the partition of the key (murmur2 over
// the topic's partitions) when partitioned is set, and returns each key's
// latest entry (a tombstone deletes it) and the number of records.
func changelogState(t *testing.T, topic string, c *kafka.Env, partitioned bool) (map[string]liveEntry, int64) {
	t.Helper()
	state := map[string]liveEntry{}
	var records int64
	all := readTopic(t, c, topic)
	for p, ms := range all {
		for _, m := range ms {
			records++
			if partitioned {
				if q, err := rescalePartition("key-value", graph.KeyLayout{}, m.Key, int32(len(all))); err != nil || q != p {
					t.Fatalf("key %q in %s/%d, belongs in %d (%v)", m.Key, topic, p, q, err)
				}
			}
			if m.Value == nil {
				delete(state, string(m.Key))
				continue
			}
			state[string(m.Key)] = liveEntry{value: string(m.Value), ts: m.Timestamp.UnixMilli(), stamped: stampedRecord(m)}
		}
	}
	return state, records
}

// sameState fails the test unless got and want hold the same entries.
func sameState(t *testing.T, what string, got, want map[string]liveEntry) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s: %d keys, want %d", what, len(got), len(want))
	}
	bad := 0
	for k, w := range want {
		if g, ok := got[k]; !ok || g != w {
			if bad++; bad <= 10 {
				t.Errorf("%s: key %q = %+v (present %v), want %+v", what, k, g, ok, w)
			}
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			if bad++; bad <= 10 {
				t.Errorf("%s: key %q is not in the source", what, k)
			}
		}
	}
	if bad > 0 {
		t.Fatalf("%s: %d keys differ", what, bad)
	}
}

func countValue(n int64) []byte { return binary.BigEndian.AppendUint64(nil, uint64(n)) }

// A store whose changelog holds many versions of its keys, tombstones,
// keys deleted and written again, and records of an aborted transaction,
// over 3 partitions, is copied to exactly its keys' latest entries (value,
// timestamp, and the header that says the timestamp is the value's), one
// record each, in the partition of its key.
func TestRescaleCopiesOnlyTheLatestEntries(t *testing.T) {
	t.Parallel()
	c := kafka.Cluster(t)
	_, from, to := storeApp(t, c, "rsl", 3)
	changelog, target := from+"-counts-changelog", to+"-counts-changelog"

	base := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	rng := rand.New(rand.NewPCG(1, 2))
	want := map[string]liveEntry{}
	var msgs []*sarama.ProducerMessage
	put := func(k string, v []byte, ts time.Time, stamped bool) {
		m := &sarama.ProducerMessage{Topic: changelog, Key: sarama.StringEncoder(k), Timestamp: ts}
		if v == nil {
			delete(want, k)
		} else {
			m.Value = sarama.ByteEncoder(v)
			want[k] = liveEntry{value: string(v), ts: ts.UnixMilli(), stamped: stamped}
			if stamped {
				m.Headers = []sarama.RecordHeader{{Key: []byte(statelog.TimeHeader), Value: []byte{}}}
			}
		}
		msgs = append(msgs, m)
	}
	const nkeys = 2000
	for round := range 6 {
		for i := range nkeys {
			k := fmt.Sprintf("key-%04d", i)
			switch {
			case i%10 == 0 && round > 0:
				continue // one version only
			case i%7 == 3 && round == 4:
				put(k, nil, base, false) // deleted, written again in round 5
			case i%5 == 1 && round == 5:
				put(k, nil, base, false) // deleted last
			case i%11 == 2:
				put(k, nil, base, false) // only tombstones: never live
			default:
				ts := base.Add(time.Duration(rng.IntN(1_000_000)) * time.Millisecond)
				put(k, countValue(int64(round*nkeys+i)), ts, i%3 != 0)
			}
		}
	}
	// An empty value is a value, not a tombstone.
	put("key-empty", []byte{}, base, true)
	// One batch per round of keys, in order; then an aborted transaction
	// whose records a read_committed reader never gets.
	produceFast(t, c, msgs)
	tcfg := c.SaramaConfig()
	tcfg.Producer.Idempotent = true
	tcfg.Producer.RequiredAcks = sarama.WaitForAll
	tcfg.Net.MaxOpenRequests = 1
	tcfg.Producer.Transaction.ID = c.Name(t, "rsl-txn")
	tp, err := sarama.NewSyncProducer(c.Brokers, tcfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := tp.BeginTxn(); err != nil {
		t.Fatal(err)
	}
	var aborted []*sarama.ProducerMessage
	for i := range 50 {
		aborted = append(aborted, &sarama.ProducerMessage{Topic: changelog, Key: sarama.StringEncoder(fmt.Sprintf("key-%04d", i*7)), Value: sarama.StringEncoder("aborted")})
		aborted = append(aborted, &sarama.ProducerMessage{Topic: changelog, Key: sarama.StringEncoder(fmt.Sprintf("key-%04d", i*7+1))}) // a tombstone
	}
	if err := tp.SendMessages(aborted); err != nil {
		t.Fatal(err)
	}
	if err := tp.AbortTxn(); err != nil {
		t.Fatal(err)
	}
	_ = tp.Close()

	source, records := changelogState(t, changelog, c, true)
	sameState(t, "the source changelog", source, want)
	if records < 4*int64(len(want)) {
		t.Fatalf("the source changelog holds %d records for %d keys: not the many versions the test wrote (compacted?)", records, len(want))
	}
	code, done, errOut := weirCmd(t, "rescale", "-brokers", strings.Join(c.Brokers, ","), "-from", from, "-to", to, "-partitions", "5")
	if code != exitOK || !strings.Contains(done, fmt.Sprintf("rescaled counts: %d keys into 5 partitions", len(want))) {
		t.Fatalf("rescale = %d: %s%s", code, done, errOut)
	}
	copied, n := changelogState(t, target, c, true)
	sameState(t, "the copy", copied, want)
	if n != int64(len(want)) {
		t.Fatalf("the copy holds %d records for %d keys, want one each", n, len(want))
	}
}

// A store with task entries (a suppression buffer's close point, see
// graph.KeyLayout.Shared), several versions of them in each old
// partition, is copied with the one of the largest value among the old
// partitions' latest in every new partition; its other entries each in
// the partition of their key, the latest version only.
func TestRescaleSpreadsTaskEntries(t *testing.T) {
	t.Parallel()
	c := kafka.Cluster(t)
	in, out := c.Name(t, "rst-in"), c.Name(t, "rst-out")
	from, to := c.Name(t, "rst-app"), c.Name(t, "rst-app2")
	c.CreateTopic(t, in, 3, nil)
	c.CreateTopic(t, out, 5, nil)
	cleanupApps(t, c, from, to)
	runApp(t, suppressedCount(in, out, time.Minute), rescaleConfig(c, from, t.TempDir()))()
	changelog, target := from+"-final-changelog", to+"-final-changelog"

	closed := binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64(nil, 1<<63-1), 1<<63-1)
	layout := graph.KeyLayout{Skip: 16, Shared: closed}
	ts := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	var msgs []*sarama.ProducerMessage
	send := func(p int32, key []byte, v []byte) {
		m := &sarama.ProducerMessage{Topic: changelog, Partition: p, Key: sarama.ByteEncoder(key), Timestamp: ts}
		if v != nil {
			m.Value = sarama.ByteEncoder(v)
		}
		msgs = append(msgs, m)
	}
	// The close point of each old task: partition 1's latest is the
	// largest, though partition 0 once held a larger one and partition 2
	// holds a larger one before its tombstone.
	send(0, closed, countValue(900))
	send(0, closed, countValue(100))
	send(1, closed, countValue(300))
	send(1, closed, countValue(500))
	send(2, closed, countValue(800))
	send(2, closed, nil)
	wantShared := string(countValue(500))
	want := map[string]liveEntry{}
	for i := range 200 {
		k := append(binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64(nil, uint64(i)), uint64(i+1)), fmt.Sprintf("key-%03d", i)...)
		p, err := rescalePartition("key-value", layout, k, 3)
		if err != nil {
			t.Fatal(err)
		}
		for v := range 1 + i%3 {
			send(p, k, countValue(int64(v)))
		}
		want[string(k)] = liveEntry{value: string(countValue(int64(i % 3))), ts: ts.UnixMilli()}
		if i%4 == 0 {
			send(p, k, nil)
			delete(want, string(k))
		}
	}
	produceWith(t, c, sarama.NewManualPartitioner, msgs)

	code, done, errOut := weirCmd(t, "rescale", "-brokers", strings.Join(c.Brokers, ","), "-from", from, "-to", to, "-partitions", "5")
	if code != exitOK || !strings.Contains(done, fmt.Sprintf("rescaled final: %d keys into 5 partitions", len(want))) {
		t.Fatalf("rescale = %d: %s%s", code, done, errOut)
	}
	got := map[string]liveEntry{}
	sharedIn := map[int32]int{}
	var copied []*sarama.ConsumerMessage
	for _, ms := range readTopic(t, c, target) {
		copied = append(copied, ms...)
	}
	for _, m := range copied {
		if layout.IsShared(m.Key) {
			sharedIn[m.Partition]++
			if string(m.Value) != wantShared {
				t.Fatalf("the close point in %s/%d is %x, want %x", target, m.Partition, m.Value, wantShared)
			}
			continue
		}
		if p, err := rescalePartition("key-value", layout, m.Key, 5); err != nil || p != m.Partition {
			t.Fatalf("key %x in %s/%d, belongs in %d (%v)", m.Key, target, m.Partition, p, err)
		}
		if _, ok := got[string(m.Key)]; ok {
			t.Fatalf("key %x copied twice", m.Key)
		}
		got[string(m.Key)] = liveEntry{value: string(m.Value), ts: m.Timestamp.UnixMilli(), stamped: stampedRecord(m)}
	}
	for p := range int32(5) {
		if sharedIn[p] != 1 {
			t.Fatalf("the close point is %d times in %s/%d, want once (%v)", sharedIn[p], target, p, sharedIn)
		}
	}
	sameState(t, "the copy", got, want)
}

// A rescale killed with SIGKILL while it copies a store of 200,000
// entries is completed by the same command: it writes the copy again,
// which then holds exactly the source's entries, and the new application
// continues from them.
func TestRescaleKilledMidCopyResumes(t *testing.T) {
	t.Parallel()
	c := kafka.Cluster(t)
	in, from, to := storeApp(t, c, "rsk", 3)
	changelog, target := from+"-counts-changelog", to+"-counts-changelog"
	const n = 200_000
	stamp := []sarama.RecordHeader{{Key: []byte(statelog.TimeHeader), Value: []byte{}}}
	ts := time.Now().Add(-time.Minute).Truncate(time.Millisecond)
	msgs := make([]*sarama.ProducerMessage, n)
	for i := range msgs {
		msgs[i] = &sarama.ProducerMessage{Topic: changelog, Key: sarama.StringEncoder(fmt.Sprintf("k%06d", i)),
			Value: sarama.ByteEncoder(countValue(int64(i%1000 + 1))), Timestamp: ts, Headers: stamp}
	}
	produceFast(t, c, msgs)
	source, _ := changelogState(t, changelog, c, false)
	if len(source) != n {
		t.Fatalf("the source holds %d keys, want %d", len(source), n)
	}

	brokers := strings.Join(c.Brokers, ",")
	args := []string{"rescale", "-brokers", brokers, "-from", from, "-to", to, "-partitions", "6"}
	child := startCLI(t, "", args...)
	out := child.out
	// Kill it once the copy has records, well before it has all of them.
	client, err := sarama.NewClient(c.Brokers, c.SaramaConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	written := func() int64 {
		var sum int64
		for p := range int32(6) {
			if off, err := client.GetOffset(target, p, sarama.OffsetNewest); err == nil {
				sum += off
			}
		}
		return sum
	}
	deadline := time.Now().Add(2 * time.Minute)
	for written() == 0 {
		select {
		case <-child.done:
			t.Fatalf("the rescale ended (%v) before the test saw a record of its copy:\n%s", child.err, out)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no record in %s after 2 minutes:\n%s", target, out)
		}
		_ = client.RefreshMetadata(target)
		time.Sleep(5 * time.Millisecond)
	}
	if err := child.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := child.wait(); !killed(err) {
		t.Fatalf("the rescale exited with %v, not killed:\n%s", err, out)
	}
	if w := written(); w >= n || strings.Contains(out.String(), "rescaled counts") {
		t.Fatalf("the kill came after the copy (%d records of %d written):\n%s", w, n, out)
	} else {
		t.Logf("killed with %d records of %d in %s", w, n, target)
	}

	code, again, errOut := weirCmd(t, args...)
	if code != exitOK || !strings.Contains(again, "a partial copy of an interrupted rescale") || !strings.Contains(again, fmt.Sprintf("rescaled counts: %d keys into 6 partitions", n)) {
		t.Fatalf("the rescale run again = %d: %s%s", code, again, errOut)
	}
	t.Log(again)
	copied, records := changelogState(t, target, c, true)
	sameState(t, "the copy", copied, source)
	if records != n {
		t.Fatalf("the copy holds %d records, want %d", records, n)
	}

	// The new id counts on from the copied counts, on every partition.
	sample := make([]string, 0, 120)
	expect := map[string]int64{}
	for i := 0; i < n; i += n / 120 {
		k := fmt.Sprintf("k%06d", i)
		sample = append(sample, k)
		expect[k] = int64(i%1000+1) + 1
	}
	kafka.Produce(t, c, keyed(in, time.Now(), sample...)...)
	out2 := c.Name(t, "rsk-out2")
	c.CreateTopic(t, out2, 6, nil)
	stop := runApp(t, dslCount(in, out2, 0), rescaleConfig(c, to, t.TempDir()))
	defer stop()
	got := counts(t, c, out2, serde.String(), expect)
	for _, k := range sample {
		if s := got[k]; len(s) != 1 || s[0] != expect[k] {
			t.Fatalf("key %s counted %v after the rescale, want [%d]", k, s, expect[k])
		}
	}
}

// A rescale killed after any step that changes the cluster (a store
// copied; the input's partitions added; the new id's offsets committed)
// is completed by the same command, and the new id counts on exactly.
func TestRescaleKilledAfterEachStepResumes(t *testing.T) {
	t.Parallel()
	for _, step := range []string{"store counts", "grown", "committed"} {
		t.Run(strings.ReplaceAll(step, " ", "-"), func(t *testing.T) {
			t.Parallel()
			c := kafka.Cluster(t)
			in, out, out2 := c.Name(t, "rsa-in"), c.Name(t, "rsa-out"), c.Name(t, "rsa-out2")
			from, to := c.Name(t, "rsa-app"), c.Name(t, "rsa-app2")
			c.CreateTopic(t, in, 2, nil)
			c.CreateTopic(t, out, 2, nil)
			c.CreateTopic(t, out2, 4, nil)
			cleanupApps(t, c, from, to)
			ks := keys("a", 30)
			want := map[string]int64{}
			for _, k := range ks {
				want[k] = 1
			}
			kafka.Produce(t, c, keyed(in, time.Now(), ks...)...)
			stop := runApp(t, dslCount(in, out, 0), rescaleConfig(c, from, t.TempDir()))
			counts(t, c, out, serde.String(), want)
			stop()

			args := []string{"rescale", "-brokers", strings.Join(c.Brokers, ","), "-from", from, "-to", to, "-partitions", "4"}
			child := startCLI(t, step, args...)
			first := child.out
			if err := child.wait(); !killed(err) {
				t.Fatalf("the rescale killed after %q exited with %v:\n%s", step, err, first)
			}
			if strings.Contains(first.String(), "done in") {
				t.Fatalf("the rescale killed after %q ended:\n%s", step, first)
			}
			grown := partitionCount(t, c, in) == 4
			if grown != (step != "store counts") {
				t.Fatalf("killed after %q: the input grown: %v", step, grown)
			}
			code, again, errOut := weirCmd(t, args...)
			if code != exitOK || !strings.Contains(again, "a partial copy of an interrupted rescale") || !strings.Contains(again, "rescaled counts: 30 keys into 4 partitions") {
				t.Fatalf("the rescale run again after %q = %d: %s%s", step, code, again, errOut)
			}
			if strings.Contains(again, "added partitions") == grown {
				t.Fatalf("the rescale run again after %q (input grown: %v):\n%s", step, grown, again)
			}

			kafka.Produce(t, c, keyed(in, time.Now(), ks...)...)
			for _, k := range ks {
				want[k] = 2
			}
			stop = runApp(t, dslCount(in, out2, 0), rescaleConfig(c, to, t.TempDir()))
			defer stop()
			got := counts(t, c, out2, serde.String(), want)
			for _, k := range ks {
				if s := got[k]; !slices.Equal(s, []int64{2}) {
					t.Fatalf("key %s counted %v after the rescale, want [2]", k, s)
				}
			}
		})
	}
}

// entrySum is FNV-64a of the lengths, the key and the value, as the
// checksum of rescale always was (hash/fnv, once per entry).
func TestEntrySumIsFNV64aOfLengthsKeyAndValue(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range 200 {
		key, value := make([]byte, rng.IntN(40)), make([]byte, rng.IntN(300))
		for j := range key {
			key[j] = byte(rng.Uint32())
		}
		for j := range value {
			value[j] = byte(rng.Uint32())
		}
		if i == 0 {
			key, value = nil, nil
		}
		h := fnv.New64a()
		var lens [16]byte
		binary.BigEndian.PutUint64(lens[:8], uint64(len(key)))
		binary.BigEndian.PutUint64(lens[8:], uint64(len(value)))
		h.Write(lens[:])
		h.Write(key)
		h.Write(value)
		if got, want := entrySum(key, value), h.Sum64(); got != want {
			t.Fatalf("entrySum(%x, %x) = %016x, want %016x", key, value, got, want)
		}
	}
	var d digest
	d.add([]byte("k"), []byte("v"))
	d.add([]byte("k2"), nil)
	if d.records != 2 || d.sum != entrySum([]byte("k"), []byte("v"))+entrySum([]byte("k2"), nil) {
		t.Fatalf("digest %+v", d)
	}
}

// A keyHasher gives a key the same hash every time, and distinct keys
// distinct hashes; two hashers (two runs) differ.
func TestKeyHasher(t *testing.T) {
	t.Parallel()
	h, other := newKeyHasher(), newKeyHasher()
	seen := map[keyHash]string{}
	for i := range 100_000 {
		k := fmt.Appendf(nil, "key-%d", i)
		s := h.sum(k)
		if s != h.sum(bytes.Clone(k)) {
			t.Fatalf("%s: two hashes", k)
		}
		if s[0] == s[1] {
			t.Fatalf("%s: the two halves are equal: one seed twice?", k)
		}
		if prev, ok := seen[s]; ok {
			t.Fatalf("%s and %s share a hash", prev, k)
		}
		seen[s] = string(k)
		if i < 10 && other.sum(k) == s {
			t.Fatalf("%s: the same hash under two hashers", k)
		}
	}
	if h.sum(nil) != h.sum([]byte{}) {
		t.Fatal("a nil key and an empty one differ")
	}
}
