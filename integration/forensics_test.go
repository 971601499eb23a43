package integration

import (
	"bufio"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/weirstream/weir/internal/repair"
	"github.com/weirstream/weir/txn"
	"github.com/weirstream/weir/weirtest/kafka"
)

// This file reads the brokers' own logs after a fault test found output
// lost or written twice: which producer id and epoch wrote each batch
// around the violation, which markers followed it and on which replicas,
// what the transaction coordinators logged of those producers, and which
// input offsets the group committed. A failure in CI then says whether
// the cluster or weir decided the transaction, without a rerun. The logs
// are read with Kafka's DumpLogSegments (env/kafka-tool.sh dump-log),
// straight from the data directories of the brokers up.sh started.

// span is a range of offsets of one partition, both ends included; the
// zero span holds none.
type span struct {
	lo, hi int64
	set    bool
}

func (s span) with(o int64) span {
	if !s.set {
		return span{o, o, true}
	}
	return span{min(s.lo, o), max(s.hi, o), true}
}

// dumpBatch is one record batch of a DumpLogSegments listing.
type dumpBatch struct {
	base, last int64
	pid        int64
	epoch      int64
	txn        bool
	control    bool
	created    int64    // the batch's CreateTime, ms
	records    []string // the "| offset: ..." lines
}

var (
	batchLine  = regexp.MustCompile(`^baseOffset: (\d+) lastOffset: (\d+) count: \d+ .*producerId: (-?\d+) producerEpoch: (-?\d+) .*isTransactional: (\w+) isControl: (\w+) .*CreateTime: (-?\d+)`)
	markerType = regexp.MustCompile(`endTxnMarker: (\w+) coordinatorEpoch: (\d+)`)
)

// parseDump reads the batches of a DumpLogSegments listing (with
// --print-data-log), by the partition of the segment file they come from
// (the directory "topic-partition" of each "Dumping" line).
func parseDump(out string) map[int32][]dumpBatch {
	batches := map[int32][]dumpBatch{}
	part := int32(-1)
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		line := sc.Text()
		if file, ok := strings.CutPrefix(line, "Dumping "); ok {
			dir := filepath.Base(filepath.Dir(file))
			n, err := strconv.ParseInt(dir[strings.LastIndexByte(dir, '-')+1:], 10, 32)
			if err != nil {
				n = -1
			}
			part = int32(n)
			continue
		}
		if m := batchLine.FindStringSubmatch(line); m != nil {
			b := dumpBatch{txn: m[5] == "true", control: m[6] == "true"}
			b.base, _ = strconv.ParseInt(m[1], 10, 64)
			b.last, _ = strconv.ParseInt(m[2], 10, 64)
			b.pid, _ = strconv.ParseInt(m[3], 10, 64)
			b.epoch, _ = strconv.ParseInt(m[4], 10, 64)
			b.created, _ = strconv.ParseInt(m[7], 10, 64)
			batches[part] = append(batches[part], b)
			continue
		}
		if bs := batches[part]; strings.HasPrefix(line, "| offset:") && len(bs) > 0 {
			bs[len(bs)-1].records = append(bs[len(bs)-1].records, line)
		}
	}
	return batches
}

// describe is one line for b: its offsets, producer, epoch and kind (a
// control batch's marker type and coordinator epoch).
func (b dumpBatch) describe() string {
	kind := fmt.Sprintf("data × %d", b.last-b.base+1)
	if b.control {
		kind = "control"
		if len(b.records) > 0 {
			if m := markerType.FindStringSubmatch(b.records[0]); m != nil {
				kind = m[1] + " marker, coordinator epoch " + m[2]
			}
		}
	}
	txn := ""
	if !b.txn {
		txn = ", not transactional"
	}
	return fmt.Sprintf("%d-%d pid %d epoch %d: %s%s, created %s", b.base, b.last, b.pid, b.epoch, kind, txn, msTime(b.created))
}

func msTime(ms int64) string { return time.UnixMilli(ms).UTC().Format("15:04:05.000") }

// dumpTopic lists the batches of the replicas of topic's partitions
// (all when partitions is empty) in dataDir, by partition: one
// DumpLogSegments run over their segment files, none when the broker holds
// no replica of them.
func dumpTopic(dataDir, topic, decoder string, partitions ...int32) (map[int32][]dumpBatch, error) {
	var segs []string
	dirs, err := filepath.Glob(filepath.Join(dataDir, topic+"-*"))
	if err != nil {
		return nil, err
	}
	for _, dir := range dirs {
		n, err := strconv.ParseInt(strings.TrimPrefix(filepath.Base(dir), topic+"-"), 10, 32)
		if err != nil || len(partitions) > 0 && !slices.Contains(partitions, int32(n)) {
			continue // another topic with topic as a prefix, or another partition
		}
		files, _ := filepath.Glob(filepath.Join(dir, "*.log"))
		segs = append(segs, files...)
	}
	if len(segs) == 0 {
		return nil, nil
	}
	slices.Sort(segs)
	args := []string{"dump-log", "--files", strings.Join(segs, ","), "--print-data-log"}
	if decoder != "" {
		args = append(args, decoder)
	}
	out, err := exec.Command("env/kafka-tool.sh", args...).Output()
	if err != nil {
		return nil, fmt.Errorf("dumping %s in %s: %w", topic, dataDir, err)
	}
	return parseDump(string(out)), nil
}

// replicaLines gathers the lines each broker's replica gives and prints
// each once, with the brokers that hold it: replicas that differ show.
type replicaLines struct {
	order  []string
	holder map[string][]int
}

func (r *replicaLines) add(broker int, line string) {
	if r.holder == nil {
		r.holder = map[string][]int{}
	}
	if _, ok := r.holder[line]; !ok {
		r.order = append(r.order, line)
	}
	r.holder[line] = append(r.holder[line], broker)
}

func (r *replicaLines) String() string {
	var sb strings.Builder
	for _, line := range r.order {
		bs := r.holder[line]
		slices.Sort(bs)
		fmt.Fprintf(&sb, "  brokers %v: %s\n", bs, line)
	}
	return sb.String()
}

// brokerDumps runs dump for every data directory at once and returns
// each one's batches, by broker (1-based, in dataDirs' order).
func brokerDumps(dataDirs []string, dump func(dir string) (map[int32][]dumpBatch, error)) ([]map[int32][]dumpBatch, []error) {
	out, errs := make([]map[int32][]dumpBatch, len(dataDirs)), make([]error, len(dataDirs))
	var wg sync.WaitGroup
	for i, dir := range dataDirs {
		wg.Go(func() { out[i], errs[i] = dump(dir) })
	}
	wg.Wait()
	return out, errs
}

// violationLogs returns what the brokers' logs hold around violations of
// output topic out (offsets by partition, outSpans), written from input
// topic in (the input offsets of the records concerned, inSpans) by
// group: the batches and markers near them, the group's commits of those
// input offsets and the coordinators' records of the producers that
// wrote them.
func violationLogs(dataDirs []string, out string, outSpans map[int32]span, in, group string, inSpans map[int32]span) string {
	var sb strings.Builder
	pids := map[int64]bool{}
	var from, to int64 // broker times of the markers seen, ms
	seen := func(b dumpBatch) {
		pids[b.pid] = true
		if b.control {
			if from == 0 || b.created < from {
				from = b.created
			}
			to = max(to, b.created)
		}
	}
	fail := func(what string, errs []error) {
		for i, err := range errs {
			if err != nil {
				fmt.Fprintf(&sb, "broker %d, %s: %v\n", i+1, what, err)
			}
		}
	}
	const around = 300 // offsets either side of a violation
	outParts := slices.Sorted(maps.Keys(outSpans))
	dumps, errs := brokerDumps(dataDirs, func(dir string) (map[int32][]dumpBatch, error) { return dumpTopic(dir, out, "", outParts...) })
	fail(out, errs)
	for _, p := range outParts {
		s := outSpans[p]
		var lines replicaLines
		for i, d := range dumps {
			for _, b := range d[p] {
				if b.last >= s.lo-around && b.base <= s.hi+around {
					lines.add(i+1, b.describe())
					seen(b)
				}
			}
		}
		fmt.Fprintf(&sb, "%s/%d around offsets %d-%d:\n%s", out, p, s.lo, s.hi, lines.String())
	}
	// The group's commits of the input offsets concerned, with the
	// batches that carried them and the markers of their producers.
	dumps, errs = brokerDumps(dataDirs, func(dir string) (map[int32][]dumpBatch, error) {
		return dumpTopic(dir, "__consumer_offsets", "--offsets-decoder")
	})
	fail("__consumer_offsets", errs)
	for _, p := range slices.Sorted(maps.Keys(inSpans)) {
		s := inSpans[p]
		key := fmt.Sprintf(`"group":%q,"topic":%q,"partition":%d}`, group, in, p)
		var lines replicaLines
		for i, d := range dumps {
			for _, part := range slices.Sorted(maps.Keys(d)) {
				bs := d[part]
				var kept []dumpBatch
				for _, b := range bs {
					for _, r := range b.records {
						if o := recordOffset(r); strings.Contains(r, key) && o >= s.lo-around && o <= s.hi+around {
							kept = append(kept, b)
							lines.add(i+1, fmt.Sprintf("__consumer_offsets/%d %s: commits %s/%d offset %d", part, b.describe(), in, p, o))
							seen(b)
						}
					}
				}
				// Markers of those producers from the first kept batch on.
				for _, b := range bs {
					if len(kept) > 0 && b.control && b.base >= kept[0].base && b.base <= kept[len(kept)-1].last+around &&
						slices.ContainsFunc(kept, func(k dumpBatch) bool { return k.pid == b.pid }) {
						lines.add(i+1, fmt.Sprintf("__consumer_offsets/%d %s", part, b.describe()))
					}
				}
			}
		}
		fmt.Fprintf(&sb, "the group's commits of %s/%d near offsets %d-%d, and their producers' markers:\n%s", in, p, s.lo, s.hi, lines.String())
	}
	// What the transaction coordinators logged of those producers while
	// the markers were written, 10 s either side.
	dumps, errs = brokerDumps(dataDirs, func(dir string) (map[int32][]dumpBatch, error) {
		return dumpTopic(dir, "__transaction_state", "--transaction-log-decoder")
	})
	fail("__transaction_state", errs)
	var lines replicaLines
	for i, d := range dumps {
		for _, part := range slices.Sorted(maps.Keys(d)) {
			for _, b := range d[part] {
				if b.created < from-10_000 || b.created > to+10_000 {
					continue
				}
				for _, r := range b.records {
					if st, ok := txnRecord(r, pids); ok {
						lines.add(i+1, fmt.Sprintf("__transaction_state/%d offset %d, %s: %s", part, b.base, msTime(b.created), st))
					}
				}
			}
		}
	}
	fmt.Fprintf(&sb, "the coordinators' records of producers %v from %s to %s:\n%s", slices.Sorted(maps.Keys(pids)), msTime(from-10_000), msTime(to+10_000), lines.String())
	return sb.String()
}

var (
	offsetField  = regexp.MustCompile(`"offset":(-?\d+)`)
	txnIDField   = regexp.MustCompile(`"transactionalId":"([^"]*)"`)
	txnPIDField  = regexp.MustCompile(`"producerId":(-?\d+)`)
	txnEpoch     = regexp.MustCompile(`"producerEpoch":(-?\d+)`)
	txnStatus    = regexp.MustCompile(`"transactionStatus":"(\w+)"`)
	txnParts     = regexp.MustCompile(`"transactionPartitions":(.*?),"transactionLastUpdateTimestampMs"`)
	txnPartShort = regexp.MustCompile(`\{"topic":"([^"]*)","partitionIds":\[([^\]]*)\]\}`)
)

// recordOffset is the offset an offset-commit record commits, -1 when
// it has none (a tombstone).
func recordOffset(record string) int64 {
	_, payload, _ := strings.Cut(record, "payload:")
	m := offsetField.FindStringSubmatch(payload)
	if m == nil {
		return -1
	}
	o, _ := strconv.ParseInt(m[1], 10, 64)
	return o
}

// txnRecord shortens a transaction-log record of one of pids: the id,
// producer, epoch, state and partitions.
func txnRecord(record string, pids map[int64]bool) (string, bool) {
	field := func(re *regexp.Regexp) string {
		if m := re.FindStringSubmatch(record); m != nil {
			return m[1]
		}
		return "?"
	}
	pid, err := strconv.ParseInt(field(txnPIDField), 10, 64)
	if err != nil || !pids[pid] {
		return "", false
	}
	parts := txnPartShort.ReplaceAllString(field(txnParts), "$1[$2]")
	return fmt.Sprintf("%s pid %d epoch %s %s %s", field(txnIDField), pid, field(txnEpoch), field(txnStatus), parts), true
}

// replicatedDataDirs returns the data directories of the three brokers of
// the replicated cluster, nil when up.sh's directory is not known.
func replicatedDataDirs() []string {
	dir := os.Getenv("WEIR_REPLICATED_ENV_DIR")
	if dir == "" {
		return nil
	}
	return []string{dir + "/kafka-data-1", dir + "/kafka-data-2", dir + "/kafka-data-3"}
}

// singleDataDirs returns the data directory of the single broker up.sh
// started, when c is that broker.
func singleDataDirs(c *kafka.Env) []string {
	dir := os.Getenv("WEIR_ENV_DIR")
	if dir == "" || c.Source != kafka.SourceEnv || strings.Join(c.Brokers, ",") != os.Getenv("WEIR_BOOTSTRAP_SERVERS") {
		return nil
	}
	return []string{dir + "/kafka-data"}
}

// TestViolationLogsShowProducersAndMarkers: read from the broker's data
// directory, the explanation of a violation names the producer id and
// epoch of the batches around it, the commit and abort markers that
// followed them, the group's transactional commit of the input offset
// concerned, and the coordinator's states of that producer.
func TestViolationLogsShowProducersAndMarkers(t *testing.T) {
	t.Parallel()
	c := kafka.Cluster(t)
	dirs := singleDataDirs(c)
	if dirs == nil {
		t.Fatal("the broker's data directory is unknown: WEIR_ENV_DIR and WEIR_BOOTSTRAP_SERVERS come from make kafka-up's env.sh")
	}
	out, in := c.Name(t, "forensic-out"), c.Name(t, "forensic-in")
	c.CreateTopic(t, out, 1, nil)
	c.CreateTopic(t, in, 1, nil)
	group, id := c.Name(t, "forensic-group"), c.Name(t, "forensic-txn")
	p, err := txn.New(txnClient(t, c, id))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx := t.Context()
	send := func(v string) {
		if err := p.Send(&sarama.ProducerMessage{Topic: out, Partition: 0, Value: sarama.StringEncoder(v)}); err != nil {
			t.Fatal(err)
		}
	}
	send("committed")
	if err := p.Commit(ctx, map[string]map[int32]int64{in: {0: 7}}, &txn.Group{GroupID: group, GenerationID: -1}); err != nil {
		t.Fatal(err)
	}
	send("aborted")
	if err := p.Abort(ctx); err != nil {
		t.Fatal(err)
	}
	last, err := repair.DescribeLast(c.Admin(t), id)
	if err != nil {
		t.Fatal(err)
	}
	got := violationLogs(dirs, out, map[int32]span{0: {0, 3, true}}, in, group, map[int32]span{0: {7, 7, true}})
	t.Logf("\n%s", got)
	pe := fmt.Sprintf("pid %d epoch %d", last.ProducerID, last.ProducerEpoch)
	for _, want := range []string{
		"0-0 " + pe + ": data × 1",
		"1-1 " + pe + ": COMMIT marker",
		"2-2 " + pe + ": data × 1",
		"3-3 " + pe + ": ABORT marker",
		fmt.Sprintf("commits %s/0 offset 7", in),
		id + " " + pe + " CompleteCommit",
		id + " " + pe + " PrepareAbort",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the brokers' logs do not show %q", want)
		}
	}
}
