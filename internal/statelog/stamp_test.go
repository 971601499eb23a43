package statelog

import (
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/weirstream/weir/changelog"
)

// A value's timestamp goes the whole way a value goes: through the write
// buffer and a commit into Badger (read back through the read cache and,
// after reopening, from Badger), out to the changelog as the record's
// timestamp with TimeHeader, and back from the changelog by a restore.
// Values put without one stay without one everywhere.
func TestTimestampsTravelWithValues(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db, err := Open(dir, changelog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	sp := db.Space("s", 0)
	buf := NewBuffer(sp)
	if err := buf.PutStamped([]byte("a"), []byte("1"), 1_700_000_000_123); err != nil {
		t.Fatal(err)
	}
	if err := buf.Put([]byte("b"), []byte("2")); err != nil {
		t.Fatal(err)
	}
	changes := buf.Changes()

	var sent []*sarama.ProducerMessage
	if _, err := Produce(changes, nil, "app-s-changelog", 0, nil, func(m *sarama.ProducerMessage) error {
		sent = append(sent, m)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(sent) != 2 {
		t.Fatalf("sent %d records, want 2", len(sent))
	}
	if a := sent[0]; !a.Timestamp.Equal(time.UnixMilli(1_700_000_000_123)) || len(a.Headers) != 1 || string(a.Headers[0].Key) != TimeHeader {
		t.Errorf("the stamped value's record has timestamp %v and headers %v; want its timestamp and %s", a.Timestamp, a.Headers, TimeHeader)
	}
	if b := sent[1]; !b.Timestamp.IsZero() || len(b.Headers) != 0 {
		t.Errorf("a value without a timestamp went out with timestamp %v and headers %v", b.Timestamp, b.Headers)
	}

	c := db.NewCommit()
	if err := c.Stage(sp, changes); err != nil {
		t.Fatal(err)
	}
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
	buf.Clear()
	check := func(from string, s Bytes) {
		t.Helper()
		v, ts, ok, err := s.GetStamped([]byte("a"))
		if err != nil || string(v) != "1" || !ok || ts != 1_700_000_000_123 {
			t.Errorf("%s: a = %q, %d, %v, %v; want 1 stamped 1700000000123", from, v, ts, ok, err)
		}
		v, _, ok, err = s.GetStamped([]byte("b"))
		if err != nil || string(v) != "2" || ok {
			t.Errorf("%s: b = %q, stamped %v, %v; want 2 without a timestamp", from, v, ok, err)
		}
		if got := collect(s.Range(nil, nil)); len(got) != 2 || got[0] != "a=1" || got[1] != "b=2" {
			t.Errorf("%s: Range = %v, want the values without their timestamps", from, got)
		}
	}
	check("read cache", sp)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if db, err = Open(dir, changelog.Options{}); err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	check("Badger", db.Space("s", 0))

	// A restore gives a record with TimeHeader its timestamp back; a
	// record without it has none, unless the changelog is the store's
	// source topic, whose record timestamps are the rows'.
	recs := []Record{
		{Key: []byte("a"), Value: []byte("1"), Offset: 0, Time: 42, Stamped: true},
		{Key: []byte("b"), Value: []byte("2"), Offset: 1, Time: 43},
		{Key: []byte("c"), Offset: 2, Time: 44, Stamped: true},
	}
	for _, fromSource := range []bool{false, true} {
		got, err := RestoreEntries(nil, recs, nil, fromSource)
		if err != nil || len(got) != 3 {
			t.Fatalf("RestoreEntries = %v, %v", got, err)
		}
		if !got[0].Stamped || got[0].Time != 42 {
			t.Errorf("fromSource %v: a record with %s restored as %+v", fromSource, TimeHeader, got[0])
		}
		if got[1].Stamped != fromSource || (fromSource && got[1].Time != 43) {
			t.Errorf("fromSource %v: a record without %s restored as %+v", fromSource, TimeHeader, got[1])
		}
		if !got[2].Deleted || got[2].Stamped {
			t.Errorf("fromSource %v: a tombstone restored as %+v", fromSource, got[2])
		}
	}
}

// A fetched record's time is its producer's timestamp, or the broker's
// append time for a topic that keeps that; TimeHeader marks a stamped one.
func TestRecordTimeAndTimeHeader(t *testing.T) {
	t.Parallel()
	first := time.UnixMilli(1_700_000_000_000)
	b := &sarama.RecordBatch{FirstTimestamp: first, MaxTimestamp: first.Add(9 * time.Second)}
	r := &sarama.Record{TimestampDelta: 2 * time.Second, Headers: []*sarama.RecordHeader{{Key: []byte("other")}, {Key: []byte(TimeHeader)}}}
	if got := recordTime(b, r); got != first.Add(2*time.Second).UnixMilli() {
		t.Errorf("CreateTime record: %d, want the first timestamp plus the delta", got)
	}
	b.LogAppendTime = true
	if got := recordTime(b, r); got != b.MaxTimestamp.UnixMilli() {
		t.Errorf("LogAppendTime record: %d, want the batch's append time", got)
	}
	if !hasTimeHeader(r.Headers) || hasTimeHeader(r.Headers[:1]) || hasTimeHeader(nil) {
		t.Error("hasTimeHeader does not find exactly the weir.time header")
	}
}
