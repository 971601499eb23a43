package repair

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
// nothing is committed. The broker refuses records in __consumer_offsets:
// its partition joins the transaction through the group's offsets
// (addGroup), after the records, and a spare partition carries the
// transaction's record when it is the only one.
func TestAbortOverEndsEveryPartition(t *testing.T) {
	t.Parallel()
	spare := txn.Partition{Topic: "agg-out", Partition: 0}
	for _, c := range []struct {
		parts     []DanglingPartition
		records   []txn.Partition
		addsGroup bool
	}{
		{[]DanglingPartition{{Topic: "agg-out", Partition: 2}, {Topic: "changelog", Partition: 1, StartOffset: 10}}, []txn.Partition{{Topic: "agg-out", Partition: 2}, {Topic: "changelog", Partition: 1}}, false},
		{[]DanglingPartition{{Topic: "agg-out", Partition: 2}, {Topic: OffsetsTopic, Partition: 7, StartOffset: 10}}, []txn.Partition{{Topic: "agg-out", Partition: 2}}, true},
		{[]DanglingPartition{{Topic: OffsetsTopic, Partition: 7, StartOffset: 10}}, []txn.Partition{spare}, true},
	} {
		fake := txntest.New(true)
		p := txn.Wrap(fake)
		added := 0
		addGroup := func() error {
			if len(fake.Sent()) != len(c.records) {
				t.Errorf("the group's offsets joined the transaction before its records were sent")
			}
			added++
			return nil
		}
		if err := abortOver(context.Background(), p, c.parts, spare, addGroup); err != nil {
			t.Fatal(err)
		}
		p.Close()
		if fake.Aborted != 1 || fake.Committed != 0 {
			t.Fatalf("%v: aborted %d, committed %d times; want 1 and 0", c.parts, fake.Aborted, fake.Committed)
		}
		if (added == 1) != c.addsGroup || added > 1 {
			t.Errorf("%v: the group's offsets added %d times, want %v", c.parts, added, c.addsGroup)
		}
		sent := fake.Sent()
		if len(sent) != len(c.records) {
			t.Fatalf("%v: sent %d records, want %d", c.parts, len(sent), len(c.records))
		}
		for i, m := range sent {
			o, ok := m.Metadata.(*client.Origin)
			if m.Topic != c.records[i].Topic || m.Partition != c.records[i].Partition || !ok || !o.Explicit || m.Key == nil {
				t.Fatalf("record %d: %s/%d, origin %+v, key %v; want %s/%d with an explicit partition and a key", i, m.Topic, m.Partition, m.Metadata, m.Key, c.records[i].Topic, c.records[i].Partition)
			}
		}
	}
}

// TestAbortOverFailsWhenTheGroupCannotJoin: when the group's offsets
// partition cannot be added, the attempt fails after aborting.
func TestAbortOverFailsWhenTheGroupCannotJoin(t *testing.T) {
	t.Parallel()
	fake := txntest.New(true)
	p := txn.Wrap(fake)
	defer p.Close()
	err := abortOver(context.Background(), p, []DanglingPartition{{Topic: OffsetsTopic, Partition: 3}}, txn.Partition{Topic: "out"}, func() error { return errors.New("coordinator moved") })
	if err == nil || fake.Aborted != 1 || fake.Committed != 0 {
		t.Fatalf("abortOver = %v, aborted %d, committed %d; want an error after one abort", err, fake.Aborted, fake.Committed)
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
	err := abortOver(context.Background(), p, []DanglingPartition{{Topic: "gone", Partition: 0}}, txn.Partition{Topic: "out"}, func() error { return nil })
	if err == nil {
		t.Fatal("abortOver succeeded although its record failed")
	}
	if fake.Committed != 0 {
		t.Fatalf("committed %d times", fake.Committed)
	}
}

// TestSplitDangling: records left open by the id's last transaction, which
// its coordinator committed (same producer id and epoch), are ended with a
// commit; every other open record (an older epoch, another state, or an
// unknown last transaction) with an abort.
func TestSplitDangling(t *testing.T) {
	t.Parallel()
	de := &DanglingError{TransactionalID: "app-p-0", ProducerID: 7, Partitions: []DanglingPartition{
		{Topic: "out", Partition: 0, StartOffset: 5, ProducerEpoch: 3},
		{Topic: OffsetsTopic, Partition: 2, StartOffset: 9, ProducerEpoch: 3},
		{Topic: "out", Partition: 1, StartOffset: 4, ProducerEpoch: 2},
	}}
	for _, c := range []struct {
		last               LastTransaction
		committed, aborted int
	}{
		{LastTransaction{State: "CompleteCommit", ProducerID: 7, ProducerEpoch: 3}, 2, 1},
		{LastTransaction{State: "CompleteAbort", ProducerID: 7, ProducerEpoch: 3}, 0, 3},
		{LastTransaction{State: "CompleteCommit", ProducerID: 8, ProducerEpoch: 3}, 0, 3},
		{LastTransaction{State: "CompleteCommit", ProducerID: 7, ProducerEpoch: 4}, 0, 3},
		{LastTransaction{}, 0, 3},
	} {
		committed, aborted := splitDangling(de, c.last)
		if len(committed) != c.committed || len(aborted) != c.aborted {
			t.Errorf("last %+v: %d to commit, %d to abort; want %d and %d", c.last, len(committed), len(aborted), c.committed, c.aborted)
		}
		for _, dp := range committed {
			if dp.ProducerEpoch != 3 {
				t.Errorf("last %+v: commits %+v, of another epoch", c.last, dp)
			}
		}
	}
}
