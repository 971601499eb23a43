package integration

// The exactly-once verification test, in the spirit of Kafka Streams' own
// EOS system test: several weir instances, each in its own process, process
// a stream while they are killed with SIGKILL and restarted on the same
// state directory; a verifier then reads the output read_committed,
// recomputes everything from the input and must find no loss, no duplicate
// and no wrong aggregate.
//
// A second test reads weir's transactional output with a third-party client
// (kcat, on librdkafka) and checks that it sees what sarama sees and never a
// record of an aborted transaction. A third pins the verifier itself.
//
// The file is longer than our files usually are: the instance processes,
// the verifier and the tests are one concept, kept together until another
// test needs the process cluster or the verifier.

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/changelog"
	"github.com/weirstream/weir/processor"
	"github.com/weirstream/weir/serde"
	"github.com/weirstream/weir/weirtest/kafka"
)

// eosGuarantee is the guarantee both tests run weir with. Set it to
// weir.AtLeastOnce to watch the verifier fail: after a kill -9 an
// at-least-once instance repeats the effects of what it processed since
// its last commit.
const eosGuarantee = weir.ExactlyOnce

// Sizes of TestExactlyOnceUnderKill9. The run takes about a minute on a
// 2-core machine that also runs the broker; most of it is the rebalance
// after each kill, which waits Consumer.SessionTimeout (6 s) for the dead
// member.
const (
	eosPartitions = 6
	eosInstances  = 3
	eosKeys       = 1000
	eosRecords    = 200_000
	eosChunk      = 10_000
	eosKills      = 6
	// eosMaxKillDelay bounds the random delay between the start of a round
	// of production and its kill, so the kill lands anywhere in the
	// processing of the backlog: between commits, in a commit, in a
	// rebalance.
	eosMaxKillDelay = 1500 * time.Millisecond
	// eosPace records, then eosPause: a round of about 28,600 records is
	// produced over about 1.7 s, longer than eosMaxKillDelay.
	eosPace  = 1000
	eosPause = 60 * time.Millisecond
	// eosCompleteTimeout bounds the wait for the committed offsets to reach
	// the end of the input once everything is produced.
	eosCompleteTimeout = 150 * time.Second
)

// sentinelPrefix starts the keys of the records the verifier appends to each
// output partition once every instance has stopped, to know where the
// partition ends (see writeSentinels).
const sentinelPrefix = "~end-"

// eosAgg holds, per key, "count,sum" of the values seen.
var eosAgg = processor.KeyValue("agg", serde.String(), serde.String())

// eosTopology copies every input record unchanged to echo, and counts and
// sums each key's sequence numbers into the store "agg", emitting the new
// "count,sum" to aggOut for every record. Both sinks partition by key with
// the default murmur2, so a key's output lands on the partition number of
// its input.
func eosTopology(in, echo, aggOut string) *processor.Topology {
	t := processor.NewTopology()
	src := t.AddSource("in", in, serde.String(), serde.String())
	t.AddSink("echo", echo, serde.String(), serde.String(), src)
	agg := t.AddProcessor("count-sum", func() processor.Processor[string, string, string, string] { return &countSum{} }, src)
	t.AddStore(eosAgg, agg)
	t.AddSink("agg-out", aggOut, serde.String(), serde.String(), agg)
	return t
}

type countSum struct {
	store processor.KeyValueStore[string, string]
}

func (p *countSum) Init(ctx processor.Context[string, string]) error {
	s, err := eosAgg.Open(ctx)
	p.store = s
	return err
}

func (p *countSum) Process(ctx processor.Context[string, string], rec processor.Record[string, string]) error {
	seq, err := strconv.ParseInt(rec.Value, 10, 64)
	if err != nil {
		return err
	}
	cur, found, err := p.store.Get(rec.Key)
	if err != nil {
		return err
	}
	var count, sum int64
	if found {
		if count, sum, err = parseCountSum(cur); err != nil {
			return err
		}
	}
	v := formatCountSum(count+1, sum+seq)
	if err := p.store.Put(rec.Key, v); err != nil {
		return err
	}
	return ctx.Forward(processor.Record[string, string]{Key: rec.Key, Value: v, Timestamp: rec.Timestamp})
}

func (p *countSum) Close() error { return nil }

func formatCountSum(count, sum int64) string { return fmt.Sprintf("%d,%d", count, sum) }

func parseCountSum(s string) (count, sum int64, err error) {
	if _, err := fmt.Sscanf(s, "%d,%d", &count, &sum); err != nil {
		return 0, 0, fmt.Errorf("count,sum %q: %w", s, err)
	}
	return count, sum, nil
}

// eosChildEnv holds, as JSON, the eosChildConfig of a test binary that must
// run one weir instance instead of tests (see runEOSChild).
const eosChildEnv = "WEIR_IT_EOS_CHILD"

// eosChildConfig is what the test gives each instance process.
type eosChildConfig struct {
	Brokers   []string
	App       string
	In        string
	Echo      string
	AggOut    string
	StateDir  string
	Threads   int
	Guarantee weir.Guarantee
	// The chaos tests' settings (chaos_test.go): the repartitioned
	// topology, the instance's client id (set per slot from
	// ClientIDPrefix, so the fault proxy can tell instances apart), and
	// Net.RequestTimeout; the aggregate's processing errors skipped
	// (ProcessingErrors: Skip, under exactly once an abort and a replay
	// without the record).
	Repartition    bool
	ClientIDPrefix string
	ClientID       string
	RequestTimeout time.Duration
	// Standbys is Config.StandbyReplicas.
	Standbys int
	// MemReport makes the instance print an eosStatus with its Go
	// memory every 10 s (the soak tells caches filling from a leak by it).
	MemReport bool
	// Badger is Config.Stores.Badger.
	Badger changelog.Options
	// SaramaRetries logs sarama's lines about retries, errors and broker
	// state changes to the instance's log (the soak's forensics).
	SaramaRetries bool
}

// weirConfig is the configuration of an instance, shared by the children
// and the parent's up-front check.
func (cc eosChildConfig) weirConfig(logger *slog.Logger) weir.Config {
	cfg := weir.Config{
		Logger:          logger,
		ApplicationID:   cc.App,
		Brokers:         cc.Brokers,
		StateDir:        cc.StateDir,
		Threads:         cc.Threads,
		Guarantee:       cc.Guarantee,
		CommitInterval:  100 * time.Millisecond,
		Consumer:        weir.ConsumerConfig{SessionTimeout: 6 * time.Second, HeartbeatInterval: 500 * time.Millisecond},
		ClientID:        cc.ClientID,
		Net:             weir.NetConfig{RequestTimeout: cc.RequestTimeout},
		StandbyReplicas: cc.Standbys,
	}
	cfg.Stores.Badger = cc.Badger
	if cc.Repartition {
		cfg.ProcessingErrors = weir.Skip
	}
	return cfg
}

// topology is the instance's topology: eosTopology, or with Repartition
// chaosTopology.
func (cc eosChildConfig) topology() *processor.Topology {
	if cc.Repartition {
		return chaosTopology(cc.In, cc.Echo, cc.AggOut)
	}
	return eosTopology(cc.In, cc.Echo, cc.AggOut)
}

// eosStatus is a line a child prints on stdout: its task ids, each time
// they change.
type eosStatus struct {
	Tasks []string   `json:"tasks"` // null in a line of memory only
	Mem   *memSample `json:"mem,omitempty"`
}

// memSample is an instance's Go memory at one time, in KiB (runtime.MemStats).
type memSample struct {
	// HeapInuse is memory in spans with objects in them; HeapFree is
	// memory the heap holds without objects and has not returned to the
	// OS (HeapIdle - HeapReleased); Sys is everything the runtime got from
	// the OS.
	HeapInuse, HeapFree, Sys int64
	Goroutines               int
	GCs                      uint32
}

func readMemSample() memSample {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return memSample{
		HeapInuse:  int64(ms.HeapInuse >> 10),
		HeapFree:   int64((ms.HeapIdle - ms.HeapReleased) >> 10),
		Sys:        int64(ms.Sys >> 10),
		Goroutines: runtime.NumGoroutine(),
		GCs:        ms.NumGC,
	}
}

// runEOSChild runs the EOS topology until SIGTERM. It logs to stderr and
// prints an eosStatus line whenever its tasks change.
func runEOSChild() int {
	var cc eosChildConfig
	if err := json.Unmarshal([]byte(os.Getenv(eosChildEnv)), &cc); err != nil {
		fmt.Fprintf(os.Stderr, "eos child: bad %s: %v\n", eosChildEnv, err)
		return 2
	}
	level := slog.LevelInfo
	if os.Getenv("WEIR_EOS_CHILD_DEBUG") != "" {
		// Debugging a failed run: weir's debug logs and sarama's.
		level = slog.LevelDebug
		sarama.Logger = log.New(os.Stderr, "sarama: ", log.Lmicroseconds)
	}
	if cc.SaramaRetries && os.Getenv("WEIR_EOS_CHILD_DEBUG") == "" {
		sarama.Logger = retryLines{log.New(os.Stderr, "sarama: ", log.Lmicroseconds)}
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	app, err := weir.New(cc.topology(), cc.weirConfig(logger))
	if err != nil {
		fmt.Fprintln(os.Stderr, "eos child: weir.New:", err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	go func() {
		enc := json.NewEncoder(os.Stdout)
		last := []string{}
		lastMem := time.Now()
		for ctx.Err() == nil {
			ids := []string{}
			for _, ti := range app.Tasks() {
				ids = append(ids, ti.ID)
			}
			if !slices.Equal(ids, last) {
				_ = enc.Encode(eosStatus{Tasks: ids})
				last = ids
			}
			if cc.MemReport && time.Since(lastMem) >= 10*time.Second {
				m := readMemSample()
				_ = enc.Encode(eosStatus{Mem: &m})
				lastMem = time.Now()
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()
	if err := app.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "eos child: Run:", err)
		return 1
	}
	return 0
}

// retryLines passes on sarama's log lines about retries, errors and
// state changes, and drops the rest.
type retryLines struct{ l *log.Logger }

func (r retryLines) Print(v ...any) { r.pass(fmt.Sprint(v...)) }

func (r retryLines) Printf(format string, v ...any) { r.pass(fmt.Sprintf(format, v...)) }

func (r retryLines) Println(v ...any) { r.pass(fmt.Sprintln(v...)) }

func (r retryLines) pass(line string) {
	l := strings.ToLower(line)
	for _, w := range []string{"retr", "error", "state change", "epoch", "sequence", "abort", "fenced", "txnmgr"} {
		if strings.Contains(l, w) {
			r.l.Print(line)
			return
		}
	}
}

// eosChild is one incarnation of an instance process.
type eosChild struct {
	cmd     *exec.Cmd
	started time.Time
	done    chan struct{} // closed once the process exited and stdout is drained
	// expected is set before the test signals the process: its exit is
	// then no failure. Test goroutine only.
	expected bool

	mu    sync.Mutex
	tasks []string  // last reported
	mem   memSample // last reported, with eosChildConfig.MemReport
}

func (ch *eosChild) reportedMem() memSample {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	return ch.mem
}

func (ch *eosChild) reportedTasks() []string {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	return ch.tasks
}

func (ch *eosChild) exited() bool {
	select {
	case <-ch.done:
		return true
	default:
		return false
	}
}

// eosCluster is the set of instance processes of a test: slot i always
// runs with state directory dirs[i] and appends its logs to logs[i].
type eosCluster struct {
	t        *testing.T
	base     eosChildConfig
	dirs     []string
	logs     []string
	children []*eosChild
}

func newEOSCluster(t *testing.T, base eosChildConfig, n int) *eosCluster {
	cl := &eosCluster{t: t, base: base}
	dir := t.TempDir()
	for i := range n {
		cl.dirs = append(cl.dirs, filepath.Join(dir, fmt.Sprintf("state-%d", i)))
		cl.logs = append(cl.logs, filepath.Join(dir, fmt.Sprintf("instance-%d.log", i)))
	}
	cl.children = make([]*eosChild, n)
	t.Cleanup(func() {
		for _, ch := range cl.children {
			if ch != nil && !ch.exited() {
				ch.expected = true
				_ = ch.cmd.Process.Kill()
				<-ch.done
			}
		}
		if t.Failed() {
			for i := range cl.logs {
				t.Logf("warnings of instance %d's log, the retried checks and the consumer's reconnections left out:\n%s", i, logWarnings(cl.logs[i], 300))
				t.Logf("last lines of instance %d's log:\n%s", i, logTail(cl.logs[i], 40))
			}
			cl.keepLogs()
		}
	})
	for i := range n {
		cl.start(i)
	}
	return cl
}

// keepLogs copies the instances' logs out of the test's temporary
// directory, which is removed when the test ends, into WEIR_IT_KEEP_LOGS
// (a directory) when set.
func (cl *eosCluster) keepLogs() {
	dir := os.Getenv("WEIR_IT_KEEP_LOGS")
	if dir == "" {
		return
	}
	dst := filepath.Join(dir, fmt.Sprintf("%s-%d", strings.ReplaceAll(cl.t.Name(), "/", "_"), time.Now().Unix()))
	if err := os.MkdirAll(dst, 0o755); err != nil {
		cl.t.Logf("keeping the logs: %v", err)
		return
	}
	for i, src := range cl.logs {
		b, err := os.ReadFile(src)
		if err == nil {
			err = os.WriteFile(filepath.Join(dst, fmt.Sprintf("instance-%d.log", i)), b, 0o644)
		}
		if err != nil {
			cl.t.Logf("keeping instance %d's log: %v", i, err)
		}
	}
	cl.t.Logf("the instances' logs are kept in %s", dst)
}

// eosThreads gives the slots 1 or 2 stream threads, so the group mixes
// processes with one and with two transactional producers.
func eosThreads(slot int) int { return 1 + slot%2 }

// start runs a new process in slot.
func (cl *eosCluster) start(slot int) {
	t := cl.t
	t.Helper()
	cc := cl.base
	cc.StateDir = cl.dirs[slot]
	cc.Threads = eosThreads(slot)
	if cc.ClientIDPrefix != "" {
		cc.ClientID = cc.ClientIDPrefix + strconv.Itoa(slot)
	}
	ch := &eosChild{started: time.Now()}
	ch.cmd, ch.done = spawnInstance(t, eosChildEnv, cc, cl.logs[slot], func(line []byte) {
		var st eosStatus
		if json.Unmarshal(line, &st) != nil {
			return
		}
		ch.mu.Lock()
		if st.Tasks != nil {
			ch.tasks = st.Tasks
		}
		if st.Mem != nil {
			ch.mem = *st.Mem
		}
		ch.mu.Unlock()
	})
	cl.children[slot] = ch
}

// note appends a line of the test's own to slot's log.
func (cl *eosCluster) note(slot int, format string, args ...any) {
	f, err := os.OpenFile(cl.logs[slot], os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return
	}
	defer f.Close()
	fmt.Fprintf(f, "=== test: %s at %s\n", fmt.Sprintf(format, args...), time.Now().Format(time.StampMilli))
}

// checkAlive fails the test when an instance exited without being told to:
// weir must survive fencing, aborts and rebalances caused by the kills of
// other instances.
func (cl *eosCluster) checkAlive() {
	t := cl.t
	t.Helper()
	for i, ch := range cl.children {
		if !ch.expected && ch.exited() {
			t.Fatalf("instance %d (pid %d) exited by itself with code %d; its log ends with:\n%s",
				i, ch.cmd.Process.Pid, ch.cmd.ProcessState.ExitCode(), logTail(cl.logs[i], 40))
		}
	}
}

// waitTasks waits until slot's process reports tasks: it has joined the
// group and got its share (6 tasks over 4 threads leaves none empty).
func (cl *eosCluster) waitTasks(slot int, timeout time.Duration) {
	cl.t.Helper()
	kafka.Eventually(cl.t, timeout, 50*time.Millisecond, func() (bool, string) {
		cl.checkAlive()
		tasks := cl.children[slot].reportedTasks()
		return len(tasks) > 0, fmt.Sprintf("instance %d has no tasks yet", slot)
	})
}

// kill sends SIGKILL to slot's process, waits until it is gone and starts
// a new process on the same state directory.
func (cl *eosCluster) kill(slot int) {
	t := cl.t
	t.Helper()
	ch := cl.children[slot]
	ch.expected = true
	if err := ch.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatalf("SIGKILL instance %d: %v", slot, err)
	}
	select {
	case <-ch.done:
	case <-time.After(30 * time.Second):
		t.Fatalf("instance %d (pid %d) still runs 30 s after SIGKILL", slot, ch.cmd.Process.Pid)
	}
	cl.note(slot, "SIGKILL pid %d (tasks %v)", ch.cmd.Process.Pid, ch.reportedTasks())
	cl.start(slot)
}

// stopAll sends SIGTERM to every process and checks that each stops
// cleanly (exit code 0) within a minute.
func (cl *eosCluster) stopAll() {
	t := cl.t
	t.Helper()
	cl.checkAlive()
	for i, ch := range cl.children {
		ch.expected = true
		if err := ch.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Errorf("SIGTERM instance %d: %v", i, err)
		}
		cl.note(i, "SIGTERM pid %d", ch.cmd.Process.Pid)
	}
	deadline := time.After(time.Minute)
	for i, ch := range cl.children {
		select {
		case <-ch.done:
		case <-deadline:
			t.Fatalf("instance %d (pid %d) did not stop within a minute of SIGTERM; its log ends with:\n%s",
				i, ch.cmd.Process.Pid, logTail(cl.logs[i], 40))
		}
		if code := ch.cmd.ProcessState.ExitCode(); code != 0 {
			t.Errorf("instance %d exited with code %d after SIGTERM, want 0 (a clean stop)", i, code)
		}
	}
}

// logTail returns the last n lines of a file.
func logTail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(%v)", err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// logWarnings returns the last n lines of the log at path that are
// warnings or errors, or the test's own marks (kills, starts), without the
// two kinds that repeat while a broker is down: a failed check waiting to
// be retried and the consumer's reconnections. Whatever the repair decided
// (an abort or a commit over open records, a take-over, a rebuilt
// producer, a rewind) stays, from the whole run, so that a loss the
// verification finds can be traced to the decision that caused it.
func logWarnings(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(%v)", err)
	}
	var kept []string
	for _, l := range strings.Split(strings.TrimRight(string(b), "\n"), "\n") {
		switch {
		case strings.Contains(l, `msg="could not check for records`), strings.Contains(l, `msg="consumer group"`):
		case strings.Contains(l, "level=WARN"), strings.Contains(l, "level=ERROR"), strings.HasPrefix(l, "=== test:"):
			kept = append(kept, l)
		}
	}
	return strings.Join(kept[max(0, len(kept)-n):], "\n")
}

// repairEvents are the log messages of the open-transaction repair and
// of the failures that lead to it, by the name repairCounts gives them.
var repairEvents = []struct{ name, msg string }{
	{"aborted", `msg="transaction aborted; tasks restart from the committed offsets"`},
	{"outcome unknown", `msg="transaction outcome unknown`},
	{"fenced", `msg="producer fenced`},
	{"commit over (init or check)", `without their commit marker; ending them with a commit"`},
	{"commit over (after commit)", `their commit marker missing; ending them with a commit"`},
	{"abort over", `that the broker left open; ending them with an abort"`},
	{"left to the next check", `leaving them to the next check"`},
	{"taken over", `taking its transactional id over`},
	{"slow commit rebuild", `rebuilding the producer so that no late request`},
	{"check retried", `msg="could not check for records of aborted transactions`},
}

// repairCounts counts the repair's decisions in the instances' logs, for
// the test's log: a run that passes shows which paths it went through,
// and one that fails can be compared with it.
func repairCounts(logs []string) string {
	counts := make([]int, len(repairEvents))
	for _, path := range logs {
		b, err := os.ReadFile(path)
		if err != nil {
			return err.Error()
		}
		for l := range strings.SplitSeq(string(b), "\n") {
			for i, e := range repairEvents {
				if strings.Contains(l, e.msg) {
					counts[i]++
				}
			}
		}
	}
	var parts []string
	for i, e := range repairEvents {
		parts = append(parts, fmt.Sprintf("%s %d", e.name, counts[i]))
	}
	return strings.Join(parts, ", ")
}

// eosSeed returns the seed of a fault test's random choices (its input,
// the faults and their timing): WEIR_EOS_SEED when set, so that a failed
// run's schedule can be replayed, or a new one.
func eosSeed(t *testing.T) uint64 {
	s := os.Getenv("WEIR_EOS_SEED")
	if s == "" {
		return uint64(time.Now().UnixNano())
	}
	seed, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		t.Fatalf("WEIR_EOS_SEED=%q: %v", s, err)
	}
	return seed
}

// eosInput returns n records for topic over keys k000, k001, ..., each
// drawn at random; the value of a key's records is its sequence number
// 0, 1, 2, ... in production order.
func eosInput(topic string, n, keys int, rng *rand.Rand) []*sarama.ProducerMessage {
	next := make([]int, keys)
	msgs := make([]*sarama.ProducerMessage, n)
	for i := range msgs {
		k := rng.IntN(keys)
		msgs[i] = &sarama.ProducerMessage{
			Topic: topic,
			Key:   sarama.StringEncoder(fmt.Sprintf("k%03d", k)),
			Value: sarama.StringEncoder(strconv.Itoa(next[k])),
		}
		next[k]++
	}
	return msgs
}

// inRec is an input record as the broker acknowledged it.
type inRec struct {
	key, value string
	offset     int64
}

// inputByPartition groups acknowledged records by partition in offset order
// and checks that each partition holds exactly them: offsets 0, 1, 2, ...
func inputByPartition(t *testing.T, msgs []*sarama.ProducerMessage, partitions int32) map[int32][]inRec {
	t.Helper()
	by := map[int32][]inRec{}
	for _, m := range msgs {
		k, _ := m.Key.Encode()
		v, _ := m.Value.Encode()
		by[m.Partition] = append(by[m.Partition], inRec{key: string(k), value: string(v), offset: m.Offset})
	}
	for p := range partitions {
		recs := by[p]
		slices.SortFunc(recs, func(a, b inRec) int { return cmp.Compare(a.offset, b.offset) })
		for i, r := range recs {
			if r.offset != int64(i) {
				t.Fatalf("input partition %d: record %d has offset %d: the topic holds more than the test produced", p, i, r.offset)
			}
		}
		if len(recs) == 0 {
			t.Fatalf("input partition %d is empty", p)
		}
	}
	return by
}

// verifyInputTopic reads the input topic back and fails the test unless
// each partition holds exactly the records of input (what the broker
// acknowledged), in order: the outputs are checked against input, and a
// record the cluster lost or wrote twice under the faults would otherwise
// show as weir's loss or duplicate.
func verifyInputTopic(t *testing.T, c *kafka.Env, topic string, input map[int32][]inRec) {
	t.Helper()
	partitions := int32(len(input))
	writeSentinels(t, c, topic, partitions)
	got := map[int32][]*sarama.ConsumerMessage{}
	for _, m := range readToSentinels(t, c, topic, partitions, sarama.ReadUncommitted) {
		got[m.Partition] = append(got[m.Partition], m)
	}
	for p, want := range input {
		recs := got[p]
		for i, r := range want {
			if i >= len(recs) || string(recs[i].Key) != r.key || string(recs[i].Value) != r.value {
				t.Fatalf("input %s/%d does not hold what the test produced and the broker acknowledged (%d records, %d wanted), from offset %d on: the cluster lost or reordered input, so the outputs cannot be checked against it",
					topic, p, len(recs), len(want), r.offset)
			}
		}
		if len(recs) != len(want) {
			t.Fatalf("input %s/%d holds %d records, the test produced %d: the cluster wrote input twice", topic, p, len(recs), len(want))
		}
	}
}

// chunkProducer produces input records from a goroutine other than the
// test's, with the settings of kafka.Produce (idempotent, acks from all
// in-sync replicas, murmur2).
type chunkProducer struct{ p sarama.SyncProducer }

func newChunkProducer(t *testing.T, c *kafka.Env) *chunkProducer {
	t.Helper()
	cfg := c.SaramaConfig()
	cfg.Producer.Idempotent = true
	cfg.Producer.RequiredAcks = sarama.WaitForAll
	cfg.Net.MaxOpenRequests = 1
	// Through a broker restart (the chaos tests'): up to 30 s of retries.
	cfg.Producer.Retry.Max, cfg.Producer.Retry.Backoff = 60, 500*time.Millisecond
	p, err := sarama.NewSyncProducer(c.Brokers, cfg)
	if err != nil {
		t.Fatalf("producer for %v: %v", c.Brokers, err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return &chunkProducer{p: p}
}

// send produces msgs eosPace records at a time with a pause after each,
// so that a round's records arrive over longer than eosMaxKillDelay: the
// kill then finds records in processing and transactions open, however
// fast the instances process. The broker's acknowledgement fills in each
// message's partition and offset.
func (cp *chunkProducer) send(msgs []*sarama.ProducerMessage) error {
	for len(msgs) > 0 {
		n := min(eosPace, len(msgs))
		if err := cp.p.SendMessages(msgs[:n]); err != nil {
			// sarama's ProducerErrors says only how many failed: name why.
			if errs, ok := errors.AsType[sarama.ProducerErrors](err); ok && len(errs) > 0 {
				return fmt.Errorf("%w (the first to %s/%d: %w)", err, errs[0].Msg.Topic, errs[0].Msg.Partition, errs[0].Err)
			}
			return err
		}
		msgs = msgs[n:]
		if len(msgs) > 0 {
			time.Sleep(eosPause)
		}
	}
	return nil
}

// inputLag is the number of records in topic that group has not
// committed, for the test's log.
func inputLag(t *testing.T, c *kafka.Env, admin sarama.ClusterAdmin, group, topic string) int64 {
	t.Helper()
	ends := kafka.EndOffsets(t, c, topic)
	committed, err := groupCommitted(admin, group, topic, int32(len(ends)))
	if err != nil {
		return -1
	}
	var lag int64
	for p, end := range ends {
		lag += end - max(committed[p], 0)
	}
	return lag
}

// groupCommitted returns the group's committed offsets of topic's
// partitions; -1 where none is committed.
func groupCommitted(admin sarama.ClusterAdmin, group, topic string, partitions int32) (map[int32]int64, error) {
	parts := make([]int32, partitions)
	for p := range partitions {
		parts[p] = p
	}
	res, err := admin.ListConsumerGroupOffsets(group, map[string][]int32{topic: parts})
	if err != nil {
		return nil, err
	}
	out := map[int32]int64{}
	for _, p := range parts {
		b := res.GetBlock(topic, p)
		if b == nil {
			return nil, fmt.Errorf("no offset block for %s/%d", topic, p)
		}
		if b.Err != sarama.ErrNoError {
			return nil, fmt.Errorf("offset of %s/%d: %w", topic, p, b.Err)
		}
		out[p] = b.Offset
	}
	return out, nil
}

// waitInputCommitted waits until group has committed the end of every input
// partition. Under exactly-once the output of those records is committed
// in the same transactions. check runs at every poll (it may fail the
// test).
func waitInputCommitted(t *testing.T, c *kafka.Env, group, topic string, in map[int32][]inRec, timeout time.Duration, check func()) {
	t.Helper()
	admin := c.Admin(t)
	kafka.Eventually(t, timeout, 200*time.Millisecond, func() (bool, string) {
		check()
		got, err := groupCommitted(admin, group, topic, int32(len(in)))
		if err != nil {
			return false, fmt.Sprintf("committed offsets of %s: %v", group, err)
		}
		lag := int64(0)
		for p, recs := range in {
			lag += int64(len(recs)) - max(got[p], 0)
		}
		return lag == 0, fmt.Sprintf("committed offsets %v, %d input records not committed", got, lag)
	})
}

// sentinelKeys returns, for each partition, a key that murmur2 sends there.
func sentinelKeys(partitions int32) map[int32]string {
	hash := sarama.NewMurmur2Partitioner("")
	keys := map[int32]string{}
	for i := 0; int32(len(keys)) < partitions; i++ {
		k := sentinelPrefix + strconv.Itoa(i)
		// murmur2 fails only on a nil key.
		p, _ := hash.Partition(&sarama.ProducerMessage{Key: sarama.StringEncoder(k)}, partitions)
		if _, ok := keys[p]; !ok {
			keys[p] = k
		}
	}
	return keys
}

// writeSentinels appends a sentinel record to every partition of topic,
// once nothing else writes to it: a reader that has seen all of them has
// read the whole topic.
func writeSentinels(t *testing.T, c *kafka.Env, topic string, partitions int32) {
	t.Helper()
	var msgs []*sarama.ProducerMessage
	for _, k := range sentinelKeys(partitions) {
		msgs = append(msgs, &sarama.ProducerMessage{Topic: topic, Key: sarama.StringEncoder(k), Value: sarama.StringEncoder("end")})
	}
	kafka.Produce(t, c, msgs...)
}

// readToSentinels reads topic up to the sentinels of writeSentinels and
// returns what came before, sentinels left out. read_committed, it cannot
// pass a transaction that is still open: an instance that stopped without
// ending its transaction fails the read (after kafka.ReadTimeout).
func readToSentinels(t *testing.T, c *kafka.Env, topic string, partitions int32, isolation sarama.IsolationLevel) []*sarama.ConsumerMessage {
	t.Helper()
	seen := map[int32]bool{}
	got := kafka.ReadAll(t, c, topic, isolation, func(got []*sarama.ConsumerMessage) bool {
		if len(got) > 0 {
			if m := got[len(got)-1]; strings.HasPrefix(string(m.Key), sentinelPrefix) {
				seen[m.Partition] = true
			}
		}
		return len(seen) == int(partitions)
	})
	return slices.DeleteFunc(got, func(m *sarama.ConsumerMessage) bool {
		return strings.HasPrefix(string(m.Key), sentinelPrefix)
	})
}

// findings collects what the verifier finds wrong, by kind, with the first
// few examples of each kind.
type findings struct {
	what     string // the topic checked, for messages
	kinds    []string
	count    map[string]int
	examples map[string][]string
	// out and in are the offsets, by partition, of the output records
	// concerned and of their input records (violationLogs).
	out, in map[int32]span
}

// mark records the offsets of a violation on partition p: output records
// (none for a record lost) and their input record.
func (f *findings) mark(p int32, input int64, output ...int64) {
	if f.out == nil {
		f.out, f.in = map[int32]span{}, map[int32]span{}
	}
	for _, o := range output {
		f.out[p] = f.out[p].with(o)
	}
	f.in[p] = f.in[p].with(input)
}

const maxExamples = 5

func newFindings(what string) *findings {
	return &findings{what: what, count: map[string]int{}, examples: map[string][]string{}}
}

func (f *findings) add(kind, format string, args ...any) {
	if f.count[kind] == 0 {
		f.kinds = append(f.kinds, kind)
	}
	f.count[kind]++
	if len(f.examples[kind]) < maxExamples {
		f.examples[kind] = append(f.examples[kind], fmt.Sprintf(format, args...))
	}
}

func (f *findings) total() int {
	n := 0
	for _, c := range f.count {
		n += c
	}
	return n
}

// report fails the test with one error per kind of violation.
func (f *findings) report(t *testing.T) {
	t.Helper()
	for _, k := range f.kinds {
		t.Errorf("%s: %d × %s, first ones:\n  %s", f.what, f.count[k], k, strings.Join(f.examples[k], "\n  "))
	}
}

// verifyEcho checks that each echo partition holds exactly the records of
// the same input partition, in the same order.
func verifyEcho(f *findings, in map[int32][]inRec, echo []*sarama.ConsumerMessage) {
	got := map[int32][]*sarama.ConsumerMessage{}
	for _, m := range echo {
		got[m.Partition] = append(got[m.Partition], m)
	}
	for p := range got {
		if _, ok := in[p]; !ok {
			f.add(anomalyNoInput, "partition %d: %d records", p, len(got[p]))
		}
	}
	for _, p := range slices.Sorted(maps.Keys(in)) {
		want := in[p]
		inOffset := map[string]int64{} // key=value -> input offset
		for _, r := range want {
			inOffset[r.key+"="+r.value] = r.offset
		}
		first := map[string]int64{} // key=value -> first echo offset
		clean := true
		for _, m := range got[p] {
			id := string(m.Key) + "=" + string(m.Value)
			if _, ok := inOffset[id]; !ok {
				f.add(anomalyNoInput, "partition %d offset %d: key %s value %s", p, m.Offset, m.Key, m.Value)
				clean = false
				continue
			}
			if at, dup := first[id]; dup {
				f.add(anomalyDuplicate, "partition %d offset %d: key %s value %s, already at offset %d", p, m.Offset, m.Key, m.Value, at)
				f.mark(p, inOffset[id], at, m.Offset)
				clean = false
				continue
			}
			first[id] = m.Offset
		}
		for _, r := range want {
			if _, ok := first[r.key+"="+r.value]; !ok {
				f.add(anomalyLost, "partition %d: key %s value %s (input offset %d) missing", p, r.key, r.value, r.offset)
				f.mark(p, r.offset)
				clean = false
			}
		}
		if len(got[p]) != len(want) {
			f.add("partitions with the wrong count", "partition %d holds %d records, the input %d", p, len(got[p]), len(want))
			continue
		}
		if !clean {
			continue
		}
		for i, m := range got[p] {
			if r := want[i]; string(m.Key) != r.key || string(m.Value) != r.value {
				f.add("partitions out of order", "partition %d offset %d: key %s value %s, the input has key %s value %s at offset %d",
					p, m.Offset, m.Key, m.Value, r.key, r.value, r.offset)
				break
			}
		}
	}
}

// verifyAgg checks that each key's emissions count 1, 2, 3, ... with the
// sum of the key's first count input sequence numbers, on the key's input
// partition, and end at the key's input count and sum.
func verifyAgg(f *findings, in map[int32][]inRec, out []*sarama.ConsumerMessage) {
	partOf := map[string]int32{}
	prefix := map[string][]int64{} // key -> sums of its first 0, 1, 2, ... input values
	for _, p := range slices.Sorted(maps.Keys(in)) {
		for _, r := range in[p] {
			seq, err := strconv.ParseInt(r.value, 10, 64)
			if err != nil {
				f.add("unparsable input values", "partition %d offset %d: key %s value %q", p, r.offset, r.key, r.value)
				continue
			}
			s := prefix[r.key]
			if s == nil {
				s = []int64{0}
			}
			prefix[r.key] = append(s, s[len(s)-1]+seq)
			partOf[r.key] = p
		}
	}
	type emission struct {
		partition  int32
		offset     int64
		count, sum int64
	}
	by := map[string][]emission{}
	for _, m := range out {
		k := string(m.Key)
		count, sum, err := parseCountSum(string(m.Value))
		if err != nil {
			f.add("unparsable values", "key %s partition %d offset %d: %v", k, m.Partition, m.Offset, err)
			continue
		}
		want, ok := partOf[k]
		switch {
		case !ok:
			f.add(anomalyNoInput, "key %s partition %d offset %d: %s", k, m.Partition, m.Offset, m.Value)
			continue
		case m.Partition != want:
			f.add("records on the wrong partition", "key %s partition %d offset %d, its input is on partition %d", k, m.Partition, m.Offset, want)
		}
		by[k] = append(by[k], emission{m.Partition, m.Offset, count, sum})
	}
	keys := make([]string, 0, len(prefix))
	for k := range prefix {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		sums := prefix[k]
		n := int64(len(sums) - 1)
		ems := by[k]
		if len(ems) == 0 {
			f.add("wrong final aggregates", "key %s: no output, want count %d sum %d", k, n, sums[n])
			continue
		}
		var high int64 // highest count emitted so far
		for _, e := range ems {
			switch {
			case e.count == high:
				f.add(anomalyDuplicate, "key %s partition %d offset %d: count %d again", k, e.partition, e.offset, e.count)
			case e.count < high:
				f.add(anomalyBackwards, "key %s partition %d offset %d: count %d after %d", k, e.partition, e.offset, e.count, high)
			case e.count > high+1:
				f.add(anomalyLost, "key %s partition %d offset %d: count %d after %d", k, e.partition, e.offset, e.count, high)
			}
			switch {
			case e.count < 1 || e.count > n:
				f.add("counts beyond the input", "key %s partition %d offset %d: count %d, the key has %d input records", k, e.partition, e.offset, e.count, n)
			case e.sum != sums[e.count]:
				f.add("wrong sums", "key %s partition %d offset %d: count %d sum %d, the first %d inputs sum to %d", k, e.partition, e.offset, e.count, e.sum, e.count, sums[e.count])
			}
			high = max(high, e.count)
		}
		if last := ems[len(ems)-1]; last.count != n || last.sum != sums[n] {
			f.add("wrong final aggregates", "key %s partition %d offset %d: final count %d sum %d, want count %d sum %d", k, last.partition, last.offset, last.count, last.sum, n, sums[n])
		}
	}
}

// correctOutput is what echo and agg-out hold after every input record was
// processed exactly once.
func correctOutput(in map[int32][]inRec) (echo, agg []*sarama.ConsumerMessage) {
	count, sum := map[string]int64{}, map[string]int64{}
	for _, p := range slices.Sorted(maps.Keys(in)) {
		for i, r := range in[p] {
			seq, _ := strconv.ParseInt(r.value, 10, 64)
			count[r.key]++
			sum[r.key] += seq
			echo = append(echo, &sarama.ConsumerMessage{Partition: p, Offset: int64(i), Key: []byte(r.key), Value: []byte(r.value)})
			agg = append(agg, &sarama.ConsumerMessage{Partition: p, Offset: int64(i), Key: []byte(r.key), Value: []byte(formatCountSum(count[r.key], sum[r.key]))})
		}
	}
	return echo, agg
}

// TestEOSVerifierFindsViolations pins the verifier without a cluster: it
// accepts a correct output and reports each kind of wrong one.
func TestEOSVerifierFindsViolations(t *testing.T) {
	t.Parallel()
	msgs := eosInput("in", 200, 5, rand.New(rand.NewPCG(3, 4)))
	next := map[int32]int64{}
	for _, m := range msgs {
		k, _ := m.Key.Encode()
		m.Partition = int32(k[len(k)-1]) % 2 // keys k000..k004
		m.Offset = next[m.Partition]
		next[m.Partition]++
	}
	in := inputByPartition(t, msgs, 2)
	// with returns a copy of ms with the record at i replaced by a copy
	// that change modified.
	type out = []*sarama.ConsumerMessage
	with := func(ms out, i int, change func(m *sarama.ConsumerMessage)) out {
		ms = slices.Clone(ms)
		m := *ms[i]
		change(&m)
		ms[i] = &m
		return ms
	}
	for _, tc := range []struct {
		name, echoKind, aggKind string
		mutate                  func(echo, agg out) (out, out)
	}{
		{"correct", "", "", func(e, a out) (out, out) { return e, a }},
		{"echo duplicate", anomalyDuplicate, "", func(e, a out) (out, out) {
			return slices.Insert(slices.Clone(e), 7, e[3]), a
		}},
		{"echo loss", anomalyLost, "", func(e, a out) (out, out) {
			return slices.Delete(slices.Clone(e), 3, 4), a
		}},
		{"echo reordered", "partitions out of order", "", func(e, a out) (out, out) {
			swapped := slices.Clone(e)
			m3, m4 := *e[3], *e[4]
			m3.Key, m3.Value, m4.Key, m4.Value = m4.Key, m4.Value, m3.Key, m3.Value
			swapped[3], swapped[4] = &m3, &m4
			return swapped, a
		}},
		{"echo wrong partition", anomalyNoInput, "", func(e, a out) (out, out) {
			return with(e, 3, func(m *sarama.ConsumerMessage) { m.Partition = 1 - m.Partition }), a
		}},
		{"agg duplicate", "", anomalyDuplicate, func(e, a out) (out, out) {
			return e, slices.Insert(slices.Clone(a), 4, a[3])
		}},
		{"agg count backwards", "", anomalyBackwards, func(e, a out) (out, out) {
			// A key's first emission again, after its second.
			first := map[string]int{}
			for i, m := range a {
				if at, ok := first[string(m.Key)]; ok {
					return e, slices.Insert(slices.Clone(a), i+1, a[at])
				}
				first[string(m.Key)] = i
			}
			panic("no key is emitted twice")
		}},
		{"echo not in the input", anomalyNoInput, "", func(e, a out) (out, out) {
			return with(e, 3, func(m *sarama.ConsumerMessage) { m.Value = []byte("x") }), a
		}},
		{"agg gap", "", anomalyLost, func(e, a out) (out, out) {
			return e, slices.Delete(slices.Clone(a), 0, 1)
		}},
		{"agg wrong sum", "", "wrong sums", func(e, a out) (out, out) {
			return e, with(a, 5, func(m *sarama.ConsumerMessage) {
				c, s, _ := parseCountSum(string(m.Value))
				m.Value = []byte(formatCountSum(c, s+1))
			})
		}},
		{"agg final count short", "", "wrong final aggregates", func(e, a out) (out, out) {
			return e, a[:len(a)-1]
		}},
		{"agg count beyond the input", "", "counts beyond the input", func(e, a out) (out, out) {
			last := *a[len(a)-1]
			c, s, _ := parseCountSum(string(last.Value))
			last.Value = []byte(formatCountSum(c+1, s))
			return e, append(slices.Clone(a), &last)
		}},
		{"agg wrong partition", "", "records on the wrong partition", func(e, a out) (out, out) {
			return e, with(a, 3, func(m *sarama.ConsumerMessage) { m.Partition = 1 - m.Partition })
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			echo, agg := tc.mutate(correctOutput(in))
			echoF, aggF := newFindings("echo"), newFindings("agg-out")
			verifyEcho(echoF, in, echo)
			verifyAgg(aggF, in, agg)
			for _, check := range []struct {
				f    *findings
				kind string
			}{{echoF, tc.echoKind}, {aggF, tc.aggKind}} {
				switch {
				case check.kind == "" && check.f.total() > 0:
					t.Errorf("%s: found %v in an output without that fault", check.f.what, check.f.examples)
				case check.kind != "" && check.f.count[check.kind] == 0:
					t.Errorf("%s: no %q found, only %v", check.f.what, check.kind, check.f.count)
				}
			}
		})
	}
}

// TestExactlyOnceUnderKill9 runs three weir instances in their own
// processes while the input is produced in chunks, kills a random instance
// with SIGKILL six times and restarts it on the same state directory, then
// verifies the read_committed output against the input: the echo topic is
// the input, partition by partition, exactly once and in order; each key's
// aggregate is emitted with counts 1, 2, 3, ... and ends at the key's count
// and sum.
//
// It does not run in parallel with the other tests: it loads both cores on
// purpose, and sharing them would slow both it and the others.
func TestExactlyOnceUnderKill9(t *testing.T) {
	c := kafka.Cluster(t)
	exactlyOnceUnderKill9(t, eosRun{c: c, dataDirs: singleDataDirs(c), records: eosRecords})
}

// TestExactlyOnceUnderKill9WithStandbys is TestExactlyOnceUnderKill9 with
// one standby per task: the kills move tasks between their standbys and
// their owners (a standby yields to its task restoring on the same
// instance, a task closed by a rebalance becomes a standby), and the
// output must stay exact.
func TestExactlyOnceUnderKill9WithStandbys(t *testing.T) {
	c := kafka.Cluster(t)
	exactlyOnceUnderKill9(t, eosRun{c: c, dataDirs: singleDataDirs(c), records: eosRecords, standbys: 1})
}

// eosRun is what one run of the exactly-once verification varies.
type eosRun struct {
	c        *kafka.Env
	records  int
	standbys int
	// fault, when set, is the failure injected in each round instead of
	// the kill of a random instance; it returns what it did, for the log.
	fault func(round int, cl *eosCluster, rng *rand.Rand) string
	// dataDirs are the brokers' data directories, when the test can read
	// them: a violation is then explained from the brokers' logs.
	dataDirs []string
}

// killRandom kills a random instance of cl with SIGKILL and restarts it,
// waiting until it has tasks again.
func killRandom(cl *eosCluster, rng *rand.Rand) string {
	slot := rng.IntN(len(cl.children))
	killed := time.Now()
	cl.kill(slot)
	cl.waitTasks(slot, 60*time.Second)
	return fmt.Sprintf("killed instance %d; restarted, tasks again after %v", slot, time.Since(killed).Round(time.Millisecond))
}

func exactlyOnceUnderKill9(t *testing.T, run eosRun) {
	c, standbys := run.c, run.standbys
	in, echo, aggOut, app := c.Name(t, "in"), c.Name(t, "echo"), c.Name(t, "agg-out"), c.Name(t, "app")
	for _, topic := range []string{in, echo, aggOut} {
		c.CreateTopic(t, topic, eosPartitions, nil)
	}
	seed := eosSeed(t)
	t.Logf("guarantee %s, seed %d (WEIR_EOS_SEED replays its faults and input)", eosGuarantee, seed)
	rng := rand.New(rand.NewPCG(seed, seed>>1))

	base := eosChildConfig{Brokers: c.Brokers, App: app, In: in, Echo: echo, AggOut: aggOut, Guarantee: eosGuarantee, Standbys: standbys}
	// Fail here, with weir's own message, rather than in every child.
	cfg := base.weirConfig(nil)
	cfg.StateDir, cfg.Threads = t.TempDir(), 1
	if _, err := weir.New(eosTopology(in, echo, aggOut), cfg); err != nil {
		t.Fatalf("weir.New: %v", err)
	}

	started := time.Now()
	cl := newEOSCluster(t, base, eosInstances)
	for i := range eosInstances {
		cl.waitTasks(i, 60*time.Second)
	}
	t.Logf("%d instances running after %v", eosInstances, time.Since(started).Round(time.Millisecond))

	// Each round hands some chunks to a producer goroutine and, while they
	// are produced and processed, kills a random instance and restarts it;
	// the last round only produces.
	msgs := eosInput(in, run.records, eosKeys, rng)
	producer := newChunkProducer(t, c)
	chunks := (len(msgs) + eosChunk - 1) / eosChunk
	admin := c.Admin(t)
	for round := range eosKills + 1 {
		from, to := round*chunks/(eosKills+1), (round+1)*chunks/(eosKills+1)
		batch := msgs[from*eosChunk : min(to*eosChunk, len(msgs))]
		done := make(chan error, 1)
		go func() { done <- producer.send(batch) }()
		if round < eosKills {
			// The random delay is the injected failure, not a wait: it
			// puts the kill at a random point of the production and
			// processing of the round's records.
			delay := time.Duration(rng.Int64N(int64(eosMaxKillDelay)))
			time.Sleep(delay)
			cl.checkAlive()
			lag := inputLag(t, c, admin, app, in)
			var did string
			if run.fault != nil {
				did = run.fault(round, cl, rng)
			} else {
				did = killRandom(cl, rng)
			}
			t.Logf("fault %d/%d, %v into round %d (chunks %d-%d), %d input records not committed: %s",
				round+1, eosKills, delay.Round(time.Millisecond), round, from, to-1, lag, did)
		}
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("producing chunks %d-%d: %v", from, to-1, err)
			}
		case <-time.After(2 * time.Minute):
			t.Fatalf("producing chunks %d-%d took more than 2 minutes", from, to-1)
		}
	}
	produced := time.Now()
	t.Logf("%d records over %d keys produced after %v", len(msgs), eosKeys, produced.Sub(started).Round(time.Millisecond))

	input := inputByPartition(t, msgs, eosPartitions)
	waitInputCommitted(t, c, app, in, input, eosCompleteTimeout, cl.checkAlive)
	t.Logf("all input committed %v after the last record was produced", time.Since(produced).Round(time.Millisecond))
	cl.stopAll()

	verified := time.Now()
	verifyInputTopic(t, c, in, input)
	writeSentinels(t, c, echo, eosPartitions)
	writeSentinels(t, c, aggOut, eosPartitions)
	echoRecs := readToSentinels(t, c, echo, eosPartitions, sarama.ReadCommitted)
	echoF := newFindings("echo " + echo)
	verifyEcho(echoF, input, echoRecs)
	aggF := newFindings("agg-out " + aggOut)
	verifyAgg(aggF, input, readToSentinels(t, c, aggOut, eosPartitions, sarama.ReadCommitted))
	echoF.report(t)
	aggF.report(t)
	if len(echoF.in) > 0 && len(run.dataDirs) > 0 {
		t.Logf("the brokers' logs around the violations in %s:\n%s", echo, violationLogs(run.dataDirs, echo, echoF.out, in, app, echoF.in))
	}
	// The kills must have hit open transactions, or the test did not
	// exercise what it is for: their records are in the log, aborted.
	aborted := len(readToSentinels(t, c, echo, eosPartitions, sarama.ReadUncommitted)) - len(echoRecs)
	t.Logf("echo holds %d records of aborted transactions, which read_committed skipped", aborted)
	if eosGuarantee == weir.ExactlyOnce && aborted == 0 {
		t.Errorf("echo holds no record of an aborted transaction: no kill interrupted a transaction, so the test proved nothing")
	}
	t.Logf("verified in %v: %d violations in echo, %d in agg-out; total %v",
		time.Since(verified).Round(time.Millisecond), echoF.total(), aggF.total(), time.Since(started).Round(time.Millisecond))
	t.Logf("the instances' repairs: %s", repairCounts(cl.logs))
	if standbys > 0 {
		// The standbys must have run and been handed over, or the
		// variant tested nothing the plain one does not.
		var started, stopped int
		for _, l := range cl.logs {
			b, err := os.ReadFile(l)
			if err != nil {
				t.Fatal(err)
			}
			started += strings.Count(string(b), "msg=\"standby started\"")
			stopped += strings.Count(string(b), "msg=\"standby stopped\"")
		}
		t.Logf("standbys started %d times, stopped %d times", started, stopped)
		if started == 0 || stopped == 0 {
			t.Errorf("standbys started %d times and stopped %d times: no task moved between a standby and its owner", started, stopped)
		}
	}
}

// kcatPath returns kcat's path. Without kcat the test is skipped, or fails
// when CI is true: CI never skips integration tests.
func kcatPath(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("kcat")
	if err == nil {
		return path
	}
	if ci, perr := strconv.ParseBool(os.Getenv("CI")); perr == nil && ci {
		t.Fatalf("kcat is not installed (Debian package kcat), and integration tests never skip when CI=true: %v", err)
	}
	t.Skipf("kcat is not installed (Debian package kcat): %v", err)
	return ""
}

// kcatRead reads topic from the beginning to its end with kcat at the given
// isolation level and returns one "partition offset key value" line per
// record, sorted.
func kcatRead(t *testing.T, kcat string, c *kafka.Env, topic, isolation string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, kcat, "-b", strings.Join(c.Brokers, ","), "-C", "-t", topic,
		"-o", "beginning", "-e", "-q", "-X", "isolation.level="+isolation, "-f", `%p %o %k %s\n`)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("kcat -X isolation.level=%s on %s: %v\n%s", isolation, topic, err, stderr.String())
	}
	lines := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
	if len(lines) == 1 && lines[0] == "" {
		lines = nil
	}
	slices.Sort(lines)
	return lines
}

// saramaLines formats records the way kcatRead does.
func saramaLines(msgs []*sarama.ConsumerMessage) []string {
	lines := make([]string, len(msgs))
	for i, m := range msgs {
		lines[i] = fmt.Sprintf("%d %d %s %s", m.Partition, m.Offset, m.Key, m.Value)
	}
	slices.Sort(lines)
	return lines
}

// linesMissingFrom returns the lines of a that b lacks, at most maxExamples.
func linesMissingFrom(a, b []string) []string {
	var out []string
	for _, l := range a {
		if _, found := slices.BinarySearch(b, l); !found && len(out) < maxExamples {
			out = append(out, l)
		}
	}
	return out
}

// TestKcatReadsEOSOutputLikeSarama: a reader on another client library
// (kcat, librdkafka) set to read_committed sees exactly what sarama's
// read_committed reader sees in weir's output topics, with an aborted
// transaction in them, and none of the aborted records; read_uncommitted it
// does see them, so the aborted transaction is really there.
func TestKcatReadsEOSOutputLikeSarama(t *testing.T) {
	t.Parallel()
	kcat := kcatPath(t)
	c := kafka.Cluster(t)
	in, echo, aggOut, app := c.Name(t, "in"), c.Name(t, "echo"), c.Name(t, "agg-out"), c.Name(t, "app")
	const partitions, records, keys = 3, 3000, 100
	for _, topic := range []string{in, echo, aggOut} {
		c.CreateTopic(t, topic, partitions, nil)
	}
	msgs := eosInput(in, records, keys, rand.New(rand.NewPCG(1, 2)))
	kafka.Produce(t, c, msgs...)
	input := inputByPartition(t, msgs, partitions)

	cfg := baseConfig(c, app, t)
	cfg.Guarantee = eosGuarantee
	cfg.CommitInterval = 100 * time.Millisecond
	a := start(t, eosTopology(in, echo, aggOut), cfg)
	waitInputCommitted(t, c, app, in, input, 60*time.Second, func() {
		select {
		case err := <-a.done:
			t.Fatalf("Run returned early: %v", err)
		default:
		}
	})
	if err := a.stop(t); err != nil {
		t.Fatalf("Run: %v", err)
	}

	// An aborted transaction in both output topics, after weir's records.
	const aborted = 30
	p := newTxnProducer(t, c, c.Name(t, "txn"))
	if err := p.BeginTxn(); err != nil {
		t.Fatalf("begin: %v", err)
	}
	abortedMsgs := append(keyed(echo, "aborted", "a", aborted), keyed(aggOut, "aborted", "a", aborted)...)
	if err := p.SendMessages(abortedMsgs); err != nil {
		t.Fatalf("send in the aborted transaction: %v", err)
	}
	if err := p.AbortTxn(); err != nil {
		t.Fatalf("abort: %v", err)
	}

	for _, topic := range []string{echo, aggOut} {
		// Sarama first: once it has read past the aborted transaction to
		// the sentinels, the abort markers are written and the last stable
		// offset is at the end, so kcat reads to the same end.
		writeSentinels(t, c, topic, partitions)
		viaSarama := readToSentinels(t, c, topic, partitions, sarama.ReadCommitted)
		f := newFindings(topic + " read by sarama")
		if topic == echo {
			verifyEcho(f, input, viaSarama)
		} else {
			verifyAgg(f, input, viaSarama)
		}
		f.report(t)
		want := saramaLines(viaSarama)

		got := kcatRead(t, kcat, c, topic, "read_committed")
		got = slices.DeleteFunc(got, func(l string) bool { return strings.Contains(l, " "+sentinelPrefix) })
		if !slices.Equal(got, want) {
			t.Errorf("%s: kcat read_committed read %d records, sarama %d; only kcat: %q; only sarama: %q",
				topic, len(got), len(want), linesMissingFrom(got, want), linesMissingFrom(want, got))
		}
		var abortedSeen []string
		for _, l := range got {
			if strings.Contains(l, " aborted-") {
				abortedSeen = append(abortedSeen, l)
			}
		}
		if len(abortedSeen) > 0 {
			t.Errorf("%s: kcat read_committed read %d records of the aborted transaction, e.g. %q", topic, len(abortedSeen), abortedSeen[0])
		}

		all := kcatRead(t, kcat, c, topic, "read_uncommitted")
		n := 0
		for _, l := range all {
			if strings.Contains(l, " aborted-") {
				n++
			}
		}
		if n != aborted {
			t.Errorf("%s: kcat read_uncommitted read %d records of the aborted transaction, want %d: the test did not put an aborted transaction where it reads", topic, n, aborted)
		}
		t.Logf("%s: kcat read %d records read_committed (sarama %d), %d read_uncommitted", topic, len(got), len(want), len(all))
	}
}
