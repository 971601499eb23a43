package integration

// Tests of statelog.Reader, the restore reader, against the real broker:
// plain, transactional, open-transaction, truncated and compacted
// changelogs, and the read rate (BenchmarkReaderReadRate).

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/weirstream/weir/internal/statelog"
	"github.com/weirstream/weir/weirtest/kafka"
)

// readerClient returns a sarama client on the cluster, closed when the test
// ends.
func readerClient(t testing.TB, c *kafka.Env) sarama.Client {
	t.Helper()
	client, err := sarama.NewClient(c.Brokers, c.SaramaConfig())
	if err != nil {
		t.Fatalf("client for %v: %v", c.Brokers, err)
	}
	t.Cleanup(func() { _ = client.Close() })
	return client
}

// readerRec is a copy of a statelog.Record.
type readerRec struct {
	Key, Value string
	Tombstone  bool
	Offset     int64
}

func (r readerRec) String() string { return fmt.Sprintf("%d:%s=%s", r.Offset, r.Key, r.Value) }

// readerRead runs ReadTo(from, end) with a 60 s deadline, copying the
// records, and checks the contract on the way: offsets strictly increase
// across calls and are at least from, next never decreases and is past
// each call's last record. It returns the records, the position, the
// number of apply calls and ReadTo's error.
func readerRead(t *testing.T, r *statelog.Reader, from, end int64) ([]readerRec, int64, int, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	return readerReadCtx(ctx, t, r, from, end)
}

func readerReadCtx(ctx context.Context, t *testing.T, r *statelog.Reader, from, end int64) ([]readerRec, int64, int, error) {
	t.Helper()
	var (
		out      []readerRec
		calls    int
		lastOff  = from - 1
		lastNext = from
	)
	pos, err := r.ReadTo(ctx, from, end, func(recs []statelog.Record, next int64) error {
		calls++
		if len(recs) == 0 {
			t.Errorf("apply call %d got no records", calls)
		}
		for _, rec := range recs {
			if rec.Offset <= lastOff {
				t.Errorf("apply call %d: offset %d after offset %d", calls, rec.Offset, lastOff)
			}
			lastOff = rec.Offset
			out = append(out, readerRec{string(rec.Key), string(rec.Value), rec.Value == nil, rec.Offset})
		}
		if next < lastNext || next <= lastOff {
			t.Errorf("apply call %d: next %d after next %d and last offset %d", calls, next, lastNext, lastOff)
		}
		lastNext = next
		return nil
	})
	if err == nil && pos < end {
		t.Errorf("ReadTo(%d, %d) returned position %d without an error", from, end, pos)
	}
	if pos < lastNext {
		t.Errorf("ReadTo returned position %d below the last next %d", pos, lastNext)
	}
	return out, pos, calls, err
}

// readerEnd calls End and fails the test on error.
func readerEnd(t testing.TB, r *statelog.Reader) int64 {
	t.Helper()
	end, err := r.End(t.Context())
	if err != nil {
		t.Fatalf("End: %v", err)
	}
	return end
}

// readerMsgs builds n records for topic with keys k0..k<keys-1> in turn and
// values value-<i> padded to at least size bytes.
func readerMsgs(topic string, n, keys, size int) []*sarama.ProducerMessage {
	msgs := make([]*sarama.ProducerMessage, n)
	for i := range msgs {
		v := fmt.Sprintf("value-%d-", i)
		if len(v) < size {
			v += strings.Repeat("x", size-len(v))
		}
		msgs[i] = &sarama.ProducerMessage{
			Topic: topic,
			Key:   sarama.StringEncoder(fmt.Sprintf("k%d", i%keys)),
			Value: sarama.StringEncoder(v),
		}
	}
	return msgs
}

// readerWant turns produced messages (their offsets set by the producer)
// into the records a reader should return, in offset order.
func readerWant(t *testing.T, msgs []*sarama.ProducerMessage) []readerRec {
	t.Helper()
	out := make([]readerRec, 0, len(msgs))
	for _, m := range msgs {
		k, _ := m.Key.Encode()
		var v []byte
		if m.Value != nil {
			v, _ = m.Value.Encode()
		}
		out = append(out, readerRec{string(k), string(v), m.Value == nil, m.Offset})
	}
	slices.SortFunc(out, func(a, b readerRec) int { return int(a.Offset - b.Offset) })
	return out
}

// readerTxn runs one transaction on p writing msgs, and commits or aborts
// it.
func readerTxn(t *testing.T, p sarama.SyncProducer, msgs []*sarama.ProducerMessage, commit bool) {
	t.Helper()
	if err := p.BeginTxn(); err != nil {
		t.Fatalf("begin: %v", err)
	}
	if err := p.SendMessages(msgs); err != nil {
		t.Fatalf("send %d records in a transaction: %v", len(msgs), err)
	}
	if commit {
		if err := p.CommitTxn(); err != nil {
			t.Fatalf("commit: %v", err)
		}
	} else if err := p.AbortTxn(); err != nil {
		t.Fatalf("abort: %v", err)
	}
}

// readerDiff describes the first difference between two record lists.
func readerDiff(got, want []readerRec) string {
	for i := range min(len(got), len(want)) {
		if got[i] != want[i] {
			return fmt.Sprintf("record %d is %v, want %v", i, got[i], want[i])
		}
	}
	if len(got) != len(want) {
		return fmt.Sprintf("%d records, want %d", len(got), len(want))
	}
	return ""
}

// A plain (non-transactional) changelog: End is the high watermark, and
// ReadTo returns exactly the records from its start offset, in order.
func TestReaderPlainTopic(t *testing.T) {
	c := kafka.Cluster(t)
	t.Parallel()
	topic := c.Name(t, "reader-plain")
	c.CreateTopic(t, topic, 1, nil)
	msgs := readerMsgs(topic, 5000, 100, 0)
	kafka.Produce(t, c, msgs...)
	want := readerWant(t, msgs)

	r := statelog.NewReader(readerClient(t, c), topic, 0, statelog.ReaderOptions{})
	end := readerEnd(t, r)
	if hwm := kafka.EndOffsets(t, c, topic)[0]; end != hwm || end != 5000 {
		t.Fatalf("End %d, high watermark %d, want both 5000", end, hwm)
	}
	if start, err := r.Start(t.Context()); err != nil || start != 0 {
		t.Errorf("Start: %d, %v; want 0", start, err)
	}

	got, pos, _, err := readerRead(t, r, 0, end)
	if err != nil || pos != end {
		t.Fatalf("ReadTo(0, %d): position %d, %v", end, pos, err)
	}
	if d := readerDiff(got, want); d != "" {
		t.Errorf("ReadTo(0, %d): %s", end, d)
	}

	// From the middle (most likely inside a batch): exactly the tail.
	const mid = 2345
	got, pos, _, err = readerRead(t, r, mid, end)
	if err != nil || pos != end {
		t.Fatalf("ReadTo(%d, %d): position %d, %v", mid, end, pos, err)
	}
	if d := readerDiff(got, want[mid:]); d != "" {
		t.Errorf("ReadTo(%d, %d): %s", mid, end, d)
	}

	// Already at the end: nothing to read, no fetch needed.
	got, pos, calls, err := readerRead(t, r, end, end)
	if err != nil || pos != end || calls != 0 || len(got) != 0 {
		t.Errorf("ReadTo(end, end): position %d, %d calls, %d records, %v", pos, calls, len(got), err)
	}

	// A checkpoint beyond the log, found by the fetch, or by ReadTo
	// checking the high watermark when from > end.
	for _, c := range []struct{ from, end int64 }{{end + 10, end + 20}, {end + 10, end}} {
		_, pos, _, err := readerRead(t, r, c.from, c.end)
		var oor *statelog.OffsetOutOfRangeError
		if !errors.As(err, &oor) || oor.Offset != c.from || oor.Topic != topic || oor.Partition != 0 || pos != c.from {
			t.Errorf("ReadTo(%d, %d): position %d, error %v; want an OffsetOutOfRangeError at %d", c.from, c.end, pos, err, c.from)
		}
	}
}

// A transactional changelog ending with an abort marker: ReadTo yields the
// committed transactions only and its position reaches End, past the
// trailing markers that sarama's consumer never delivers.
func TestReaderTransactions(t *testing.T) {
	c := kafka.Cluster(t)
	t.Parallel()
	topic := c.Name(t, "reader-txn")
	c.CreateTopic(t, topic, 1, nil)
	p := newTxnProducer(t, c, c.Name(t, "txn"))

	a, b, cc, d := keyed(topic, "a", "va", 20), keyed(topic, "b", "vb", 15), keyed(topic, "c", "vc", 10), keyed(topic, "d", "vd", 5)
	readerTxn(t, p, a, true)
	readerTxn(t, p, b, false)
	readerTxn(t, p, cc, true)
	readerTxn(t, p, d, false)
	const hwm = 20 + 1 + 15 + 1 + 10 + 1 + 5 + 1 // records and a marker each

	r := statelog.NewReader(readerClient(t, c), topic, 0, statelog.ReaderOptions{})
	// The coordinator writes the markers after EndTxn returns: poll until
	// the last one is in and nothing is open.
	var end int64
	kafka.Eventually(t, 30*time.Second, 20*time.Millisecond, func() (bool, string) {
		end = readerEnd(t, r)
		return end == hwm, fmt.Sprintf("End %d, want %d", end, hwm)
	})
	if h := kafka.EndOffsets(t, c, topic)[0]; h != hwm {
		t.Fatalf("high watermark %d, want %d", h, hwm)
	}
	want := readerWant(t, append(slices.Clone(a), cc...))

	for _, maxBytes := range []int32{0, 1} {
		// MaxBytes 1: one batch per fetch, so the aborted transaction
		// spans fetches and each response must list it again.
		r := statelog.NewReader(readerClient(t, c), topic, 0, statelog.ReaderOptions{MaxBytes: maxBytes})
		got, pos, _, err := readerRead(t, r, 0, end)
		if err != nil {
			t.Fatalf("MaxBytes %d: ReadTo(0, %d): %v", maxBytes, end, err)
		}
		if pos != end {
			t.Errorf("MaxBytes %d: position %d, want End %d: the trailing markers were not passed", maxBytes, pos, end)
		}
		if d := readerDiff(got, want); d != "" {
			t.Errorf("MaxBytes %d: %s; got %v", maxBytes, d, got)
		}
	}

	// From inside the aborted transaction B: C only.
	got, pos, _, err := readerRead(t, r, 25, end)
	if err != nil || pos != end {
		t.Fatalf("ReadTo(25, %d): position %d, %v", end, pos, err)
	}
	if d := readerDiff(got, readerWant(t, cc)); d != "" {
		t.Errorf("ReadTo(25, %d): %s", end, d)
	}
	// From the last abort marker: nothing, and done.
	got, pos, _, err = readerRead(t, r, end-1, end)
	if err != nil || pos != end || len(got) != 0 {
		t.Errorf("ReadTo(%d, %d): position %d, records %v, %v", end-1, end, pos, got, err)
	}
}

// An open transaction holds the last stable offset back: End is below the
// high watermark, ReadTo to End returns at once with the records before the
// transaction, and ReadTo beyond End waits until its context ends.
func TestReaderOpenTransaction(t *testing.T) {
	c := kafka.Cluster(t)
	t.Parallel()
	topic := c.Name(t, "reader-open")
	c.CreateTopic(t, topic, 1, nil)
	before := keyed(topic, "before", "v", 10)
	kafka.Produce(t, c, before...)

	p := newTxnProducer(t, c, c.Name(t, "txn"))
	if err := p.BeginTxn(); err != nil {
		t.Fatalf("begin: %v", err)
	}
	open := false
	t.Cleanup(func() {
		if open {
			_ = p.AbortTxn()
		}
	})
	open = true
	if err := p.SendMessages(keyed(topic, "open", "v", 5)); err != nil {
		t.Fatalf("send in the open transaction: %v", err)
	}

	r := statelog.NewReader(readerClient(t, c), topic, 0, statelog.ReaderOptions{})
	end := readerEnd(t, r)
	hwm := kafka.EndOffsets(t, c, topic)[0]
	if end != 10 || hwm != 15 {
		t.Fatalf("End %d and high watermark %d, want the last stable offset 10 below the high watermark 15", end, hwm)
	}
	began := time.Now()
	got, pos, _, err := readerRead(t, r, 0, end)
	if took := time.Since(began); err != nil || pos != end || took > 5*time.Second {
		t.Fatalf("ReadTo(0, %d): position %d after %v, %v", end, pos, took, err)
	}
	if d := readerDiff(got, readerWant(t, before)); d != "" {
		t.Errorf("ReadTo(0, %d): %s", end, d)
	}

	// Beyond the LSO ReadTo waits for the transaction until ctx ends.
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	got, pos, _, err = readerReadCtx(ctx, t, r, 0, hwm)
	if !errors.Is(err, context.DeadlineExceeded) || pos != end || len(got) != len(before) {
		t.Errorf("ReadTo(0, %d) under a 1 s deadline: position %d, %d records, %v; want the deadline at %d with %d records", hwm, pos, len(got), err, end, len(before))
	}

	// A checkpoint above the LSO but within the high watermark (records
	// committed after a zombie's open transaction) is not out of range:
	// nothing to read yet.
	got, pos, _, err = readerRead(t, r, hwm, end)
	if err != nil || pos != hwm || len(got) != 0 {
		t.Errorf("ReadTo(%d, %d): position %d, records %v, %v; want %d, none, no error", hwm, end, pos, got, err, hwm)
	}

	open = false
	if err := p.AbortTxn(); err != nil {
		t.Fatalf("abort: %v", err)
	}
	kafka.Eventually(t, 30*time.Second, 20*time.Millisecond, func() (bool, string) {
		end = readerEnd(t, r)
		return end == hwm+1, fmt.Sprintf("End %d, want %d (after the abort marker)", end, hwm+1)
	})
	got, pos, _, err = readerRead(t, r, 10, end)
	if err != nil || pos != end || len(got) != 0 {
		t.Errorf("ReadTo(10, %d) over the aborted transaction: position %d, records %v, %v", end, pos, got, err)
	}
}

// Records deleted from the start of the log (DeleteRecords; retention does
// the same): reading from before the log start is an OffsetOutOfRangeError,
// Start gives the new log start, and a full restore from there works.
func TestReaderDeletedStart(t *testing.T) {
	c := kafka.Cluster(t)
	t.Parallel()
	topic := c.Name(t, "reader-deleted")
	// Kafka refuses DeleteRecords on compact-only topics; window and
	// session store changelogs are compact,delete.
	c.CreateTopic(t, topic, 1, map[string]string{"cleanup.policy": "compact,delete", "retention.ms": "-1"})
	msgs := readerMsgs(topic, 100, 100, 0)
	kafka.Produce(t, c, msgs...)
	if err := c.Admin(t).DeleteRecords(topic, map[int32]int64{0: 40}); err != nil {
		t.Fatalf("delete records below 40: %v", err)
	}

	r := statelog.NewReader(readerClient(t, c), topic, 0, statelog.ReaderOptions{})
	end := readerEnd(t, r)
	for _, from := range []int64{0, 39} {
		_, pos, _, err := readerRead(t, r, from, end)
		var oor *statelog.OffsetOutOfRangeError
		if !errors.As(err, &oor) || oor.Offset != from || oor.Topic != topic || oor.Partition != 0 || pos != from {
			t.Errorf("ReadTo(%d, %d): position %d, error %v; want an OffsetOutOfRangeError at %d", from, end, pos, err, from)
		}
	}
	start, err := r.Start(t.Context())
	if err != nil || start != 40 {
		t.Fatalf("Start: %d, %v; want 40", start, err)
	}
	got, pos, _, err := readerRead(t, r, start, end)
	if err != nil || pos != end || end != 100 {
		t.Fatalf("ReadTo(%d, %d): position %d, %v", start, end, pos, err)
	}
	if d := readerDiff(got, readerWant(t, msgs)[40:]); d != "" {
		t.Errorf("ReadTo(%d, %d): %s", start, end, d)
	}
}

// A compacted changelog has holes between and inside batches, and empty
// batches: the cleaner keeps the last batch of every producer, emptied
// (each kafka.Produce call is a new idempotent producer). With MaxBytes
// 512 many fetches hold nothing but such batches, which sarama's decoder
// drops, so the Reader must take the position from the decoder (seen on
// Kafka 4.4: fetches at 0, 40, 80 and 120 came back so). Once compaction
// ran, ReadTo from 0 reaches End and returns exactly what sarama's
// consumer reads.
func TestReaderCompactedGaps(t *testing.T) {
	c := kafka.Cluster(t)
	t.Parallel()
	topic := c.Name(t, "reader-compacted")
	c.CreateTopic(t, topic, 1, map[string]string{
		"cleanup.policy":            "compact",
		"segment.ms":                "100",
		"min.cleanable.dirty.ratio": "0.01",
		"delete.retention.ms":       "100",
		"min.compaction.lag.ms":     "0",
	})
	const keys, updates = 5, 40
	for u := range updates {
		msgs := make([]*sarama.ProducerMessage, 0, keys)
		for k := range keys {
			m := &sarama.ProducerMessage{Topic: topic, Key: sarama.StringEncoder(fmt.Sprintf("key-%d", k)), Value: sarama.StringEncoder(fmt.Sprintf("update-%02d", u))}
			if k == keys-1 && u == updates-1 {
				m.Value = nil // the last write of key-4 deletes it
			}
			msgs = append(msgs, m)
		}
		kafka.Produce(t, c, msgs...)
	}

	r := statelog.NewReader(readerClient(t, c), topic, 0, statelog.ReaderOptions{MaxBytes: 512})
	fillers := 0
	var (
		got []readerRec
		end int64
	)
	kafka.Eventually(t, 90*time.Second, 300*time.Millisecond, func() (bool, string) {
		// Each filler rolls the segment once segment.ms has passed, making
		// the updates cleanable.
		fillers++
		kafka.Produce(t, c, &sarama.ProducerMessage{Topic: topic, Key: sarama.StringEncoder("filler"), Value: sarama.StringEncoder(fmt.Sprint(fillers))})
		end = readerEnd(t, r)
		var (
			pos int64
			err error
		)
		got, pos, _, err = readerRead(t, r, 0, end)
		if err != nil || pos != end {
			t.Fatalf("ReadTo(0, %d) after %d fillers: position %d, %v", end, fillers, pos, err)
		}
		perKey := map[string]int{}
		for _, g := range got {
			perKey[g.Key]++
		}
		for k := range keys - 1 {
			if perKey[fmt.Sprintf("key-%d", k)] != 1 {
				return false, fmt.Sprintf("after %d fillers, %d records read; per key %v", fillers, len(got), perKey)
			}
		}
		return true, ""
	})
	t.Logf("compacted after %d fillers: %d records left below offset %d", fillers, len(got), end)

	for _, g := range got {
		switch {
		case g.Key == "key-4" && !g.Tombstone:
			t.Errorf("key-4 read with value %q, want only its tombstone (or nothing)", g.Value)
		case strings.HasPrefix(g.Key, "key-") && g.Key != "key-4" && g.Value != fmt.Sprintf("update-%02d", updates-1):
			t.Errorf("key %q read with value %q, want the latest", g.Key, g.Value)
		}
	}
	if got[0].Offset == 0 {
		t.Errorf("offset 0 survived compaction; the test does not cover a hole at the start")
	}

	// sarama's consumer, read_uncommitted (the topic has no transactions),
	// reads the same records up to end.
	all := kafka.ReadAll(t, c, topic, sarama.ReadUncommitted, func(ms []*sarama.ConsumerMessage) bool {
		return len(ms) > 0 && ms[len(ms)-1].Offset >= end-1
	})
	// The cleaner goes on while the two read: a filler, and key-4's
	// tombstone (delete.retention.ms is 100 ms), may be gone by the time
	// sarama reads. The other keys' records are cleaned for good.
	settled := func(key string) bool { return key != "filler" && key != "key-4" }
	var want []readerRec
	for _, m := range all {
		if m.Offset < end && settled(string(m.Key)) {
			want = append(want, readerRec{string(m.Key), string(m.Value), m.Value == nil, m.Offset})
		}
	}
	got = slices.DeleteFunc(got, func(g readerRec) bool { return !settled(g.Key) })
	if d := readerDiff(got, want); d != "" {
		t.Errorf("reader and sarama's consumer differ: %s", d)
	}
}

// With a small MaxBytes, apply is called once per fetch, many times, in
// order (the checks are in readerRead).
func TestReaderBatches(t *testing.T) {
	c := kafka.Cluster(t)
	t.Parallel()
	topic := c.Name(t, "reader-batches")
	c.CreateTopic(t, topic, 1, nil)
	const n = 3000
	msgs := readerMsgs(topic, n, 100, 100)
	// Small producer batches (about 2.5 KiB), so that a 4 KiB fetch holds
	// one or two.
	cfg := c.SaramaConfig()
	cfg.Producer.Idempotent = true
	cfg.Producer.RequiredAcks = sarama.WaitForAll
	cfg.Net.MaxOpenRequests = 1
	cfg.Producer.Flush.MaxMessages = 20
	p, err := sarama.NewSyncProducer(c.Brokers, cfg)
	if err != nil {
		t.Fatalf("producer: %v", err)
	}
	err = p.SendMessages(msgs)
	_ = p.Close()
	if err != nil {
		t.Fatalf("produce: %v", err)
	}

	r := statelog.NewReader(readerClient(t, c), topic, 0, statelog.ReaderOptions{MaxBytes: 4 << 10})
	end := readerEnd(t, r)
	got, pos, calls, err := readerRead(t, r, 0, end)
	if err != nil || pos != end || end != n {
		t.Fatalf("ReadTo(0, %d): position %d, %v", end, pos, err)
	}
	if d := readerDiff(got, readerWant(t, msgs)); d != "" {
		t.Errorf("ReadTo(0, %d): %s", end, d)
	}
	// 3000 records of about 125 bytes on the wire in 4 KiB fetches.
	if calls < n*125/(4<<10) {
		t.Errorf("apply called %d times, want at least %d", calls, n*125/(4<<10))
	}
	t.Logf("%d records in %d apply calls", len(got), calls)
}

// BenchmarkReaderReadRate measures the read rate of the restore reader on
// this broker: 1,000,000 records with 100-byte values on one partition.
// Run it without -race, which slows the client several times:
//
//	go test -run '^$' -bench ReaderReadRate -benchtime 1x ./
func BenchmarkReaderReadRate(t *testing.B) {
	c := kafka.Cluster(t)
	topic := c.Name(t, "reader-rate")
	c.CreateTopic(t, topic, 1, nil)
	const n, chunk = 1_000_000, 100_000
	began := time.Now()
	var wireBytes int64
	for i := 0; i < n; i += chunk {
		msgs := make([]*sarama.ProducerMessage, chunk)
		value := strings.Repeat("v", 100)
		for j := range msgs {
			key := fmt.Sprintf("key-%07d", (i+j)%100_000)
			wireBytes += int64(len(key) + len(value))
			msgs[j] = &sarama.ProducerMessage{Topic: topic, Key: sarama.StringEncoder(key), Value: sarama.StringEncoder(value)}
		}
		kafka.Produce(t, c, msgs...)
	}
	t.Logf("produced %d records in %v", n, time.Since(began).Round(time.Millisecond))

	for _, maxBytes := range []int32{0, 4 << 20, 16 << 20} {
		r := statelog.NewReader(readerClient(t, c), topic, 0, statelog.ReaderOptions{MaxBytes: maxBytes})
		end := readerEnd(t, r)
		count, calls := 0, 0
		began := time.Now()
		pos, err := r.ReadTo(t.Context(), 0, end, func(recs []statelog.Record, next int64) error {
			count += len(recs)
			calls++
			return nil
		})
		took := time.Since(began)
		if err != nil || pos != end || count != n {
			t.Fatalf("ReadTo(0, %d): position %d, %d records, %v", end, pos, count, err)
		}
		t.Logf("MaxBytes %d: %d records (%.0f MB of keys and values) in %v, %d apply calls: %.0f records/s, %.1f MB/s",
			maxBytes, count, float64(wireBytes)/1e6, took.Round(time.Millisecond), calls,
			float64(count)/took.Seconds(), float64(wireBytes)/1e6/took.Seconds())
	}

	// For comparison: sarama's PartitionConsumer, read_committed, stopping
	// at the last record (it cannot find the end by itself).
	cfg := c.SaramaConfig()
	cfg.Consumer.IsolationLevel = sarama.ReadCommitted
	consumer, err := sarama.NewConsumer(c.Brokers, cfg)
	if err != nil {
		t.Fatalf("consumer: %v", err)
	}
	defer func() { _ = consumer.Close() }()
	began = time.Now()
	pc, err := consumer.ConsumePartition(topic, 0, sarama.OffsetOldest)
	if err != nil {
		t.Fatalf("consume: %v", err)
	}
	defer func() { _ = pc.Close() }()
	count := 0
	for m := range pc.Messages() {
		count++
		if m.Offset == n-1 {
			break
		}
	}
	took := time.Since(began)
	t.Logf("sarama PartitionConsumer: %d records in %v: %.0f records/s", count, took.Round(time.Millisecond), float64(count)/took.Seconds())
}
