package statelog

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/IBM/sarama"
)

func TestProduceSendsOneRecordPerChange(t *testing.T) {
	t.Parallel()
	var sent []*sarama.ProducerMessage
	send := func(m *sarama.ProducerMessage) error { sent = append(sent, m); return nil }
	changes := []Entry{{Key: []byte("a"), Value: []byte("1")}, {Key: []byte("b"), Deleted: true}, {Key: []byte("c"), Value: nil}}
	last, err := Produce(changes, nil, "app-s-changelog", 3, "meta", send)
	if err != nil || len(sent) != 3 || last != sent[2] {
		t.Fatalf("Produce = %v, %v; sent %d", last, err, len(sent))
	}
	for i, m := range sent {
		if m.Topic != "app-s-changelog" || m.Partition != 3 || m.Metadata != "meta" {
			t.Errorf("record %d: %s/%d meta %v", i, m.Topic, m.Partition, m.Metadata)
		}
	}
	if sent[1].Value != nil {
		t.Error("a deletion is not a tombstone")
	}
	if v, _ := sent[2].Value.Encode(); v == nil || len(v) != 0 {
		t.Errorf("an empty value became %v, want an empty non-null value (not a tombstone)", v)
	}

	boom := errors.New("boom")
	n := 0
	last, err = Produce(changes, nil, "t", 0, nil, func(*sarama.ProducerMessage) error {
		if n++; n == 2 {
			return boom
		}
		return nil
	})
	if !errors.Is(err, boom) || last == nil || string(mustKey(t, last)) != "a" {
		t.Fatalf("Produce after a failed send = %v, %v; want the error and the last record sent", last, err)
	}
}

func mustKey(t *testing.T, m *sarama.ProducerMessage) []byte {
	t.Helper()
	k, err := m.Key.Encode()
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// TestProduceLeavesOutIndexEntries: the entries of a store's local index
// are not sent, and the last record sent is the last primary entry.
func TestProduceLeavesOutIndexEntries(t *testing.T) {
	t.Parallel()
	var sent []string
	send := func(m *sarama.ProducerMessage) error { sent = append(sent, string(mustKey(t, m))); return nil }
	changes := []Entry{
		{Key: []byte("\x01a\x00\x01........"), Value: []byte("1")},
		{Key: []byte("\x01b\x00\x01........"), Deleted: true},
		{Key: []byte("\x02........a\x00\x01"), Value: []byte{}},
		{Key: []byte("\x02........b\x00\x01"), Deleted: true},
	}
	last, err := Produce(changes, WindowIndex(), "t", 0, nil, send)
	if err != nil || len(sent) != 2 || sent[0] != string(changes[0].Key) || sent[1] != string(changes[1].Key) {
		t.Fatalf("Produce sent %q, %v; want the two primary entries", sent, err)
	}
	if string(mustKey(t, last)) != sent[1] {
		t.Errorf("last = %q, want the last primary entry sent", mustKey(t, last))
	}
	if last, err := Produce(changes[2:], WindowIndex(), "t", 0, nil, send); last != nil || err != nil {
		t.Errorf("Produce of index entries only = %v, %v; want nothing sent", last, err)
	}
}

// TestZeroMillis pins the constant to the time it stands for.
func TestZeroMillis(t *testing.T) {
	t.Parallel()
	if got := (time.Time{}).UnixMilli(); got != zeroMillis {
		t.Fatalf("time.Time{}.UnixMilli() = %d, zeroMillis = %d", got, zeroMillis)
	}
}

// A message from NewMessage encodes its key and value as sarama's
// ByteEncoder does, and holds none for nil.
func TestNewMessageEncodesLikeByteEncoder(t *testing.T) {
	t.Parallel()
	m := NewMessage([]byte("k"), []byte{})
	for _, c := range []struct {
		name string
		enc  sarama.Encoder
		want []byte
	}{{"key", m.Key, []byte("k")}, {"value", m.Value, []byte{}}} {
		got, err := c.enc.Encode()
		if err != nil || !bytes.Equal(got, c.want) || got == nil || c.enc.Length() != len(c.want) {
			t.Errorf("%s: Encode = %q, %v; Length %d; want %q", c.name, got, err, c.enc.Length(), c.want)
		}
	}
	if m := NewMessage(nil, nil); m.Key != nil || m.Value != nil {
		t.Errorf("NewMessage(nil, nil) holds key %v and value %v, want none", m.Key, m.Value)
	}
}
