package stream

import (
	"context"
	"errors"
	"testing"

	"github.com/weirstream/weir/internal/client"
	"github.com/weirstream/weir/internal/txntest"
	"github.com/weirstream/weir/txn"
)

// TestAbortOverEndsEveryPartition: the transaction that ends records a
// broker left open writes one record to each of their partitions, there
// and nowhere else (the partitioner must keep the partition), and aborts;
// nothing is committed.
func TestAbortOverEndsEveryPartition(t *testing.T) {
	t.Parallel()
	fake := txntest.New(true)
	p := txn.Wrap(fake)
	defer p.Close()
	parts := []txn.DanglingPartition{{Topic: "agg-out", Partition: 2, StartOffset: 0}, {Topic: "__consumer_offsets", Partition: 7, StartOffset: 10}}
	if err := abortOver(context.Background(), p, parts); err != nil {
		t.Fatal(err)
	}
	if fake.Aborted != 1 || fake.Committed != 0 {
		t.Fatalf("aborted %d, committed %d times; want 1 and 0", fake.Aborted, fake.Committed)
	}
	sent := fake.Sent()
	if len(sent) != len(parts) {
		t.Fatalf("sent %d records, want one per partition (%d)", len(sent), len(parts))
	}
	for i, m := range sent {
		o, ok := m.Metadata.(*client.Origin)
		if m.Topic != parts[i].Topic || m.Partition != parts[i].Partition || !ok || !o.Explicit || m.Key == nil {
			t.Fatalf("record %d: %s/%d, origin %+v, key %v; want %s/%d with an explicit partition and a key", i, m.Topic, m.Partition, m.Metadata, m.Key, parts[i].Topic, parts[i].Partition)
		}
	}
}

// TestAbortOverFailsWhenARecordFails: a record that fails makes the
// attempt fail (the caller stops the thread) after aborting.
func TestAbortOverFailsWhenARecordFails(t *testing.T) {
	t.Parallel()
	fake := txntest.New(true)
	fake.SendErr = errors.New("topic deleted")
	p := txn.Wrap(fake)
	defer p.Close()
	err := abortOver(context.Background(), p, []txn.DanglingPartition{{Topic: "gone", Partition: 0}})
	if err == nil {
		t.Fatal("abortOver succeeded although its record failed")
	}
	if fake.Committed != 0 {
		t.Fatalf("committed %d times", fake.Committed)
	}
}
