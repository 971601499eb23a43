package statelog

// Unit tests of the restore reader without a Kafka broker: collect is tested
// on fetch response blocks built in memory, ReadTo end to end against
// sarama's MockBroker (which encodes the responses, so sarama's decoder runs
// as it does against a real broker). The integration module tests the same
// against Kafka.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
)

const testTopic = "store-changelog"

// data is a record batch of producer pid at offsets first, first+1, ...
// with one record per key; key "k=" makes a tombstone.
func data(first, pid int64, txn bool, keys ...string) *sarama.Records {
	b := &sarama.RecordBatch{
		Version: 2, FirstOffset: first, LastOffsetDelta: int32(len(keys) - 1),
		ProducerID: pid, IsTransactional: txn,
	}
	for i, k := range keys {
		rec := &sarama.Record{OffsetDelta: int64(i), Key: []byte(k), Value: []byte("v" + k)}
		if name, ok := strings.CutSuffix(k, "="); ok {
			rec.Key, rec.Value = []byte(name), nil
		}
		b.Records = append(b.Records, rec)
	}
	return &sarama.Records{RecordBatch: b}
}

// marker is a control batch at off ending producer pid's transaction.
func marker(off, pid int64, typ sarama.ControlRecordType) *sarama.Records {
	return &sarama.Records{RecordBatch: &sarama.RecordBatch{
		Version: 2, FirstOffset: off, ProducerID: pid, IsTransactional: true, Control: true,
		Records: []*sarama.Record{{Key: []byte{0, 0, 0, byte(typ)}, Value: []byte{0, 0, 0, 0, 0, 0}}},
	}}
}

// empty is a batch whose records were all compacted away, kept by the log
// cleaner because it was the last batch of its producer.
func empty(first, last, pid int64) *sarama.Records {
	return &sarama.Records{RecordBatch: &sarama.RecordBatch{
		Version: 2, FirstOffset: first, LastOffsetDelta: int32(last - first), ProducerID: pid,
	}}
}

type got struct {
	key, value string
	tombstone  bool
	offset     int64
}

func (g got) String() string {
	if g.tombstone {
		return fmt.Sprintf("%d:%s=<nil>", g.offset, g.key)
	}
	return fmt.Sprintf("%d:%s=%s", g.offset, g.key, g.value)
}

func gotOf(recs []Record) []got {
	var out []got
	for _, r := range recs {
		out = append(out, got{string(r.Key), string(r.Value), r.Value == nil, r.Offset})
	}
	return out
}

func rec(off int64, key string) got { return got{key, "v" + key, false, off} }

func TestCollect(t *testing.T) {
	t.Parallel()
	const p1, p2 = 1001, 1002
	tests := []struct {
		name        string
		pos         int64
		sets        []*sarama.Records
		aborted     []*sarama.AbortedTransaction
		want        []got
		next        int64
		partial     bool
		errContains string
	}{{
		name: "records before the position in the first batch are skipped",
		pos:  3,
		sets: []*sarama.Records{data(0, -1, false, "a", "b", "c", "d", "e"), data(5, -1, false, "f")},
		want: []got{rec(3, "d"), rec(4, "e"), rec(5, "f")},
		next: 6,
	}, {
		name: "aborted transaction skipped, committed one kept, markers covered",
		sets: []*sarama.Records{
			data(0, p1, true, "a", "b"),
			data(2, p2, true, "c", "d"),
			marker(4, p1, sarama.ControlRecordAbort),
			marker(5, p2, sarama.ControlRecordCommit),
			data(6, p1, true, "e"),
			marker(7, p1, sarama.ControlRecordCommit),
		},
		aborted: []*sarama.AbortedTransaction{{ProducerID: p1, FirstOffset: 0}},
		want:    []got{rec(2, "c"), rec(3, "d"), rec(6, "e")},
		next:    8,
	}, {
		name: "transaction aborted before the position started",
		pos:  10,
		sets: []*sarama.Records{
			data(10, p1, true, "a", "b"),
			marker(12, p1, sarama.ControlRecordAbort),
			data(13, -1, false, "c"),
		},
		aborted: []*sarama.AbortedTransaction{{ProducerID: p1, FirstOffset: 5}},
		want:    []got{rec(13, "c")},
		next:    14,
	}, {
		name: "unsorted aborted list; a producer's later transaction commits",
		sets: []*sarama.Records{
			data(0, p2, true, "a"),
			data(1, p1, true, "b"),
			marker(2, p2, sarama.ControlRecordAbort),
			marker(3, p1, sarama.ControlRecordAbort),
			data(4, p1, true, "c"),
			data(5, p2, true, "d"),
			marker(6, p1, sarama.ControlRecordCommit),
			marker(7, p2, sarama.ControlRecordAbort),
		},
		aborted: []*sarama.AbortedTransaction{{ProducerID: p2, FirstOffset: 5}, {ProducerID: p1, FirstOffset: 1}, {ProducerID: p2, FirstOffset: 0}},
		want:    []got{rec(4, "c")},
		next:    8,
	}, {
		name: "non-transactional batch of a producer with an aborted transaction is kept",
		sets: []*sarama.Records{
			data(0, p1, true, "a"),
			data(1, p1, false, "b"),
			marker(2, p1, sarama.ControlRecordAbort),
		},
		aborted: []*sarama.AbortedTransaction{{ProducerID: p1, FirstOffset: 0}},
		want:    []got{rec(1, "b")},
		next:    3,
	}, {
		name:    "only markers and aborted records: nothing, but the position moves",
		pos:     20,
		sets:    []*sarama.Records{data(20, p1, true, "a"), marker(21, p1, sarama.ControlRecordAbort)},
		aborted: []*sarama.AbortedTransaction{{ProducerID: p1, FirstOffset: 20}},
		next:    22,
	}, {
		name: "compacted batch: holes inside and between batches",
		pos:  0,
		sets: func() []*sarama.Records {
			b := data(0, -1, false, "a", "b")
			b.RecordBatch.Records[1].OffsetDelta = 7
			b.RecordBatch.LastOffsetDelta = 9
			return []*sarama.Records{b, data(15, -1, false, "c")}
		}(),
		want: []got{rec(0, "a"), rec(7, "b"), rec(15, "c")},
		next: 16,
	}, {
		name: "tombstone has a nil value, an empty value is not nil",
		sets: func() []*sarama.Records {
			b := data(0, -1, false, "a=", "b")
			b.RecordBatch.Records[1].Value = []byte{}
			return []*sarama.Records{b}
		}(),
		want: []got{{"a", "", true, 0}, {"b", "", false, 1}},
		next: 2,
	}, {
		name:    "truncated first batch: the position moves to it, and more is asked",
		pos:     15,
		sets:    []*sarama.Records{{RecordBatch: &sarama.RecordBatch{Version: 2, FirstOffset: 20, PartialTrailingRecord: true}}},
		next:    20,
		partial: true,
	}, {
		name:        "legacy message set",
		sets:        []*sarama.Records{{MsgSet: &sarama.MessageSet{}}},
		errContains: "legacy message format",
	}, {
		name: "control batch without a control record",
		sets: func() []*sarama.Records {
			m := marker(0, p1, sarama.ControlRecordCommit)
			m.RecordBatch.Records[0].Key = []byte{0}
			return []*sarama.Records{m}
		}(),
		errContains: "control record key",
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := &Reader{topic: testTopic, aborted: map[int64]struct{}{}}
			block := &sarama.FetchResponseBlock{RecordsSet: tt.sets, AbortedTransactions: tt.aborted}
			next, partial, err := r.collect(block, tt.pos)
			if tt.errContains != "" {
				if err == nil || !strings.Contains(err.Error(), tt.errContains) {
					t.Fatalf("error %v, want one containing %q", err, tt.errContains)
				}
				return
			}
			if err != nil {
				t.Fatalf("collect: %v", err)
			}
			if g := gotOf(r.recs); !slices.Equal(g, tt.want) {
				t.Errorf("records %v, want %v", g, tt.want)
			}
			if next != tt.next || partial != tt.partial {
				t.Errorf("next %d partial %v, want %d %v", next, partial, tt.next, tt.partial)
			}
		})
	}
}

// fetchResponse answers a fetch of testTopic/0 with block, which gets a
// high watermark and last stable offset of end unless set.
func fetchResponse(end int64, block *sarama.FetchResponseBlock) *sarama.FetchResponse {
	if block.HighWaterMarkOffset == 0 {
		block.HighWaterMarkOffset = end
	}
	if block.LastStableOffset == 0 {
		block.LastStableOffset = end
	}
	block.PreferredReadReplica = -1
	return &sarama.FetchResponse{
		Version: 12,
		Blocks:  map[string]map[int32]*sarama.FetchResponseBlock{testTopic: {0: block}},
	}
}

// mockReader returns a Reader of testTopic/0 on a MockBroker that answers
// fetches with the given responses in turn (repeating the last) and offset
// requests from offsets (time → offset), with retries shortened.
func mockReader(t *testing.T, offsets map[int64]int64, fetches ...any) (*Reader, *sarama.MockBroker) {
	t.Helper()
	b := sarama.NewMockBroker(t, 1)
	t.Cleanup(b.Close)
	handlers := map[string]sarama.MockResponse{
		"MetadataRequest": sarama.NewMockMetadataResponse(t).
			SetBroker(b.Addr(), b.BrokerID()).SetLeader(testTopic, 0, b.BrokerID()),
	}
	if len(fetches) > 0 {
		handlers["FetchRequest"] = sarama.NewMockSequence(fetches...)
	}
	if offsets != nil {
		or := sarama.NewMockOffsetResponse(t)
		for tm, off := range offsets {
			or.SetOffset(testTopic, 0, tm, off)
		}
		handlers["OffsetRequest"] = or
	}
	b.SetHandlerByMap(handlers)
	cfg := sarama.NewConfig()
	cfg.Version = sarama.V4_0_0_0
	cfg.ApiVersionsRequest = false
	cfg.Metadata.Retry.Backoff = time.Millisecond
	client, err := sarama.NewClient([]string{b.Addr()}, cfg)
	if err != nil {
		t.Fatalf("client: %v", err)
	}
	t.Cleanup(func() { _ = client.Close() })
	r := NewReader(client, testTopic, 0, ReaderOptions{MaxWait: 5 * time.Millisecond})
	r.backoff, r.maxBackoff = time.Millisecond, 2*time.Millisecond
	return r, b
}

// readAll runs ReadTo(from, end) with a deadline and returns the records.
func readAll(t *testing.T, r *Reader, from, end int64) ([]got, int64, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	var out []got
	pos, err := r.ReadTo(ctx, from, end, func(recs []Record, next int64) error {
		out = append(out, gotOf(recs)...)
		if last := recs[len(recs)-1].Offset; next <= last {
			t.Errorf("next %d is not after the last record's offset %d", next, last)
		}
		return nil
	})
	return out, pos, err
}

// fetches counts the fetch requests the broker received.
func fetches(b *sarama.MockBroker) int {
	n := 0
	for _, rr := range b.History() {
		var req any = rr.Request
		if _, ok := req.(*sarama.FetchRequest); ok {
			n++
		}
	}
	return n
}

// sarama's decoder drops record batches without records from RecordsSet,
// so a fetch that returns only such batches (the log cleaner keeps the
// last batch of each producer, emptied) looks like no data at all. Without
// the offset the decoder saw, ReadTo would refetch the same offset forever.
func TestReadToPassesEmptyBatches(t *testing.T) {
	t.Parallel()
	const end = 10
	r, _ := mockReader(t, nil,
		fetchResponse(end, &sarama.FetchResponseBlock{RecordsSet: []*sarama.Records{data(0, -1, false, "a", "b", "c", "d", "e")}}),
		fetchResponse(end, &sarama.FetchResponseBlock{RecordsSet: []*sarama.Records{empty(5, 7, 7), empty(8, 9, 8)}}),
	)
	recs, pos, err := readAll(t, r, 0, end)
	if err != nil {
		t.Fatalf("ReadTo: %v", err)
	}
	if pos != end {
		t.Errorf("position %d, want %d", pos, end)
	}
	if want := []got{rec(0, "a"), rec(1, "b"), rec(2, "c"), rec(3, "d"), rec(4, "e")}; !slices.Equal(recs, want) {
		t.Errorf("records %v, want %v", recs, want)
	}
}

// The case sarama's consumer cannot detect: the log ends with an abort
// marker, which no consumer delivers; the position must still reach the
// end.
func TestReadToEndsPastTrailingAbortMarker(t *testing.T) {
	t.Parallel()
	const end = 6
	r, _ := mockReader(t, nil,
		fetchResponse(end, &sarama.FetchResponseBlock{
			RecordsSet: []*sarama.Records{
				data(0, 7, true, "a", "b"), marker(2, 7, sarama.ControlRecordCommit),
				data(3, 7, true, "c", "d"), marker(5, 7, sarama.ControlRecordAbort),
			},
			AbortedTransactions: []*sarama.AbortedTransaction{{ProducerID: 7, FirstOffset: 3}},
		}),
	)
	recs, pos, err := readAll(t, r, 0, end)
	if err != nil {
		t.Fatalf("ReadTo: %v", err)
	}
	if want := []got{rec(0, "a"), rec(1, "b")}; !slices.Equal(recs, want) || pos != end {
		t.Errorf("records %v position %d, want %v and %d", recs, pos, want, end)
	}
}

func TestReadToRetriesLeaderChanges(t *testing.T) {
	t.Parallel()
	const end = 2
	r, _ := mockReader(t, nil,
		fetchResponse(end, &sarama.FetchResponseBlock{Err: sarama.ErrNotLeaderForPartition}),
		fetchResponse(end, &sarama.FetchResponseBlock{Err: sarama.ErrFencedLeaderEpoch}),
		fetchResponse(end, &sarama.FetchResponseBlock{RecordsSet: []*sarama.Records{data(0, -1, false, "a", "b")}}),
	)
	recs, pos, err := readAll(t, r, 0, end)
	if err != nil {
		t.Fatalf("ReadTo: %v", err)
	}
	if want := []got{rec(0, "a"), rec(1, "b")}; !slices.Equal(recs, want) || pos != end {
		t.Errorf("records %v position %d, want %v and %d", recs, pos, want, end)
	}
}

func TestReadToGivesUpAfterBoundedRetries(t *testing.T) {
	t.Parallel()
	r, b := mockReader(t, nil, fetchResponse(5, &sarama.FetchResponseBlock{Err: sarama.ErrNotLeaderForPartition}))
	_, pos, err := readAll(t, r, 0, 5)
	if !errors.Is(err, sarama.ErrNotLeaderForPartition) {
		t.Fatalf("error %v, want one wrapping NOT_LEADER_OR_FOLLOWER", err)
	}
	if pos != 0 {
		t.Errorf("position %d after the failure, want 0", pos)
	}
	if n := fetches(b); n != readerAttempts {
		t.Errorf("%d fetches, want %d", n, readerAttempts)
	}
}

func TestReadToOffsetOutOfRange(t *testing.T) {
	t.Parallel()
	// The broker answers 5 to the high watermark query of ReadTo(7, 5).
	r, _ := mockReader(t, map[int64]int64{sarama.OffsetNewest: 5}, fetchResponse(5, &sarama.FetchResponseBlock{Err: sarama.ErrOffsetOutOfRange}))
	for _, c := range []struct{ from, end int64 }{{0, 5}, {7, 5}} {
		_, pos, err := readAll(t, r, c.from, c.end)
		var oor *OffsetOutOfRangeError
		if !errors.As(err, &oor) {
			t.Fatalf("ReadTo(%d, %d): error %v, want *OffsetOutOfRangeError", c.from, c.end, err)
		}
		if oor.Topic != testTopic || oor.Partition != 0 || oor.Offset != c.from || pos != c.from {
			t.Errorf("ReadTo(%d, %d): %+v at position %d", c.from, c.end, oor, pos)
		}
	}
}

// A checkpoint ahead of the last stable offset but within the high
// watermark (records committed after a zombie's open transaction) is not
// an error: there is nothing to read yet.
func TestReadToFromAheadOfEnd(t *testing.T) {
	t.Parallel()
	r, b := mockReader(t, map[int64]int64{sarama.OffsetNewest: 8})
	pos, err := r.ReadTo(t.Context(), 6, 5, func([]Record, int64) error {
		t.Error("apply called")
		return nil
	})
	if err != nil || pos != 6 {
		t.Errorf("ReadTo(6, 5): position %d, %v; want 6 and no error", pos, err)
	}
	for _, rr := range b.History() {
		var req any = rr.Request
		if o, ok := req.(*sarama.OffsetRequest); ok && o.IsolationLevel != sarama.ReadUncommitted {
			t.Errorf("high watermark asked with isolation %d, want read_uncommitted", o.IsolationLevel)
		}
	}
}

func TestReadToApplyErrorStops(t *testing.T) {
	t.Parallel()
	r, _ := mockReader(t, nil, fetchResponse(4, &sarama.FetchResponseBlock{RecordsSet: []*sarama.Records{data(0, -1, false, "a", "b", "c", "d")}}))
	boom := errors.New("boom")
	pos, err := r.ReadTo(t.Context(), 1, 4, func([]Record, int64) error { return boom })
	if !errors.Is(err, boom) || pos != 1 {
		t.Errorf("ReadTo: position %d error %v, want 1 and one wrapping %v", pos, err, boom)
	}
}

// With end beyond the last stable offset ReadTo waits, fetch after fetch,
// until ctx ends, without spinning.
func TestReadToWaitsUntilCancelled(t *testing.T) {
	t.Parallel()
	r, b := mockReader(t, nil, fetchResponse(3, &sarama.FetchResponseBlock{HighWaterMarkOffset: 8, LastStableOffset: 3}))
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	pos, err := r.ReadTo(ctx, 3, 8, func([]Record, int64) error { return nil })
	if !errors.Is(err, context.DeadlineExceeded) || pos != 3 {
		t.Errorf("ReadTo: position %d error %v, want 3 and the deadline", pos, err)
	}
	// MaxWait is 5 ms: at most about 40 fetches in 200 ms.
	if n := fetches(b); n > 60 {
		t.Errorf("%d fetches in 200 ms with a 5 ms MaxWait: busy loop", n)
	}
}

func TestEndAndStart(t *testing.T) {
	t.Parallel()
	r, b := mockReader(t, map[int64]int64{sarama.OffsetNewest: 42, sarama.OffsetOldest: 7})
	end, err := r.End(t.Context())
	if err != nil || end != 42 {
		t.Errorf("End: %d, %v; want 42", end, err)
	}
	start, err := r.Start(t.Context())
	if err != nil || start != 7 {
		t.Errorf("Start: %d, %v; want 7", start, err)
	}
	for _, rr := range b.History() {
		var req any = rr.Request
		if o, ok := req.(*sarama.OffsetRequest); ok && o.IsolationLevel != sarama.ReadCommitted {
			t.Errorf("ListOffsets with isolation %d, want read_committed", o.IsolationLevel)
		}
	}
}

func TestReaderNeedsReadCommittedClient(t *testing.T) {
	t.Parallel()
	b := sarama.NewMockBroker(t, 1)
	defer b.Close()
	b.SetHandlerByMap(map[string]sarama.MockResponse{
		"MetadataRequest": sarama.NewMockMetadataResponse(t).SetBroker(b.Addr(), b.BrokerID()),
	})
	cfg := sarama.NewConfig()
	cfg.Version = sarama.V0_10_2_0
	cfg.ApiVersionsRequest = false
	client, err := sarama.NewClient([]string{b.Addr()}, cfg)
	if err != nil {
		t.Fatalf("client: %v", err)
	}
	defer func() { _ = client.Close() }()
	r := NewReader(client, testTopic, 0, ReaderOptions{})
	if _, err := r.ReadTo(t.Context(), 0, 1, nil); err == nil || !strings.Contains(err.Error(), "0.11.0") {
		t.Errorf("ReadTo: %v, want an error naming the needed version", err)
	}
	if _, err := r.End(t.Context()); err == nil {
		t.Error("End: no error")
	}
}

func TestReaderOptionsDefaults(t *testing.T) {
	t.Parallel()
	r, _ := mockReader(t, nil)
	d := NewReader(r.client, testTopic, 0, ReaderOptions{})
	if d.maxBytes != DefaultReaderMaxBytes || d.maxWaitMs != int32(DefaultReaderMaxWait/time.Millisecond) {
		t.Errorf("defaults: max bytes %d, max wait %d ms", d.maxBytes, d.maxWaitMs)
	}
	s := NewReader(r.client, testTopic, 0, ReaderOptions{MaxBytes: 4096, MaxWait: time.Microsecond})
	if s.maxBytes != 4096 || s.maxWaitMs != 1 {
		t.Errorf("set: max bytes %d, max wait %d ms", s.maxBytes, s.maxWaitMs)
	}
}
