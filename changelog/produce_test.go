package changelog

import (
	"errors"
	"testing"

	"github.com/IBM/sarama"
)

func TestProduceSendsOneRecordPerChange(t *testing.T) {
	t.Parallel()
	var sent []*sarama.ProducerMessage
	send := func(m *sarama.ProducerMessage) error { sent = append(sent, m); return nil }
	changes := []Entry{{Key: []byte("a"), Value: []byte("1")}, {Key: []byte("b"), Deleted: true}, {Key: []byte("c"), Value: nil}}
	last, err := Produce(changes, "app-s-changelog", 3, "meta", send)
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
	last, err = Produce(changes, "t", 0, nil, func(*sarama.ProducerMessage) error {
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
