package repair

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/IBM/sarama"

	"github.com/weirstream/weir/txn"
)

// TestDanglingErrorNamesEveryPartition: the error an operator reads names
// the transactional id, the producer id and, for each partition, the
// topic, partition, start offset and epoch, in order, and says how to
// abort them by hand.
func TestDanglingErrorNamesEveryPartition(t *testing.T) {
	t.Parallel()
	err := &DanglingError{TransactionalID: "app-proc-0", ProducerID: 4711, Partitions: []DanglingPartition{
		{Topic: "app-agg-changelog", Partition: 0, StartOffset: 10, ProducerEpoch: 4},
		{Topic: "echo", Partition: 11, StartOffset: 1752, ProducerEpoch: 5},
	}}
	msg := err.Error()
	for _, want := range []string{
		"transactional id app-proc-0 (producer id 4711)",
		"2 partition(s)",
		" app-agg-changelog/0 from offset 10 (epoch 4);",
		" echo/11 from offset 1752 (epoch 5);",
		"kafka-transactions.sh",
		"--start-offset",
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("DanglingError = %q, lacks %q", msg, want)
		}
	}
	if strings.Index(msg, "app-agg-changelog/0") > strings.Index(msg, "echo/11") {
		t.Errorf("DanglingError = %q names the partitions out of order", msg)
	}
	if !strings.HasPrefix(msg, "txn: ") {
		t.Errorf("DanglingError = %q, want the txn: prefix", msg)
	}
}

// TestUnansweredErrorUnwrapsToEachPartition: errors.Is finds the error of
// any partition that did not answer, wrapped or not, and the text names
// each partition with its error, at most ten, then how many more.
func TestUnansweredErrorUnwrapsToEachPartition(t *testing.T) {
	t.Parallel()
	noAnswer := errors.New("no answer")
	err := fmt.Errorf("txn: describing the producers of 2 topic(s): %w", &UnansweredError{Partitions: []PartitionError{
		{Topic: "echo", Partition: 1, Err: sarama.ErrNotLeaderForPartition},
		{Topic: "echo", Partition: 2, Err: fmt.Errorf("broker 3: %w", sarama.ErrTopicAuthorizationFailed)},
		{Topic: "out", Partition: 0, Err: noAnswer},
	}})
	for _, target := range []error{sarama.ErrNotLeaderForPartition, sarama.ErrTopicAuthorizationFailed, noAnswer} {
		if !errors.Is(err, target) {
			t.Errorf("errors.Is(%v, %v) = false", err, target)
		}
	}
	if errors.Is(err, sarama.ErrLeaderNotAvailable) {
		t.Errorf("errors.Is(%v, %v) = true for an error no partition had", err, sarama.ErrLeaderNotAvailable)
	}
	var ue *UnansweredError
	if !errors.As(err, &ue) || len(ue.Unwrap()) != 3 {
		t.Fatalf("errors.As found %+v, want the three partitions", ue)
	}
	msg := err.Error()
	for _, want := range []string{"3 partition(s) did not say", " echo/1 (" + sarama.ErrNotLeaderForPartition.Error() + ");", " out/0 (no answer);"} {
		if !strings.Contains(msg, want) {
			t.Errorf("UnansweredError = %q, lacks %q", msg, want)
		}
	}

	many := &UnansweredError{}
	for p := range int32(13) {
		many.Partitions = append(many.Partitions, PartitionError{Topic: "t", Partition: p, Err: noAnswer})
	}
	msg = many.Error()
	if !strings.Contains(msg, "13 partition(s)") || !strings.Contains(msg, " t/9 (no answer);") ||
		strings.Contains(msg, "t/10 ") || !strings.HasSuffix(msg, " and 3 more") {
		t.Errorf("UnansweredError of 13 partitions = %q, want ten named and 3 more", msg)
	}
}

// TestLastTransactionCommitted: only a commit the coordinator completed
// or decided (PrepareCommit) of the records' producer id and epoch counts
// as theirs; every other state, an unknown id, another producer id or
// another epoch does not.
func TestLastTransactionCommitted(t *testing.T) {
	t.Parallel()
	dp := DanglingPartition{Topic: "out", Partition: 2, StartOffset: 77, ProducerEpoch: 9}
	for _, c := range []struct {
		last LastTransaction
		pid  int64
		want bool
	}{
		{LastTransaction{State: "CompleteCommit", ProducerID: 5, ProducerEpoch: 9}, 5, true},
		{LastTransaction{State: "PrepareCommit", ProducerID: 5, ProducerEpoch: 9}, 5, true},
		{LastTransaction{State: "CompleteAbort", ProducerID: 5, ProducerEpoch: 9}, 5, false},
		{LastTransaction{State: "PrepareAbort", ProducerID: 5, ProducerEpoch: 9}, 5, false},
		{LastTransaction{State: "PrepareEpochFence", ProducerID: 5, ProducerEpoch: 9}, 5, false},
		{LastTransaction{State: "Ongoing", ProducerID: 5, ProducerEpoch: 9}, 5, false},
		{LastTransaction{State: "Empty", ProducerID: 5, ProducerEpoch: 9}, 5, false},
		{LastTransaction{State: "Dead", ProducerID: 5, ProducerEpoch: 9}, 5, false},
		{LastTransaction{State: "completecommit", ProducerID: 5, ProducerEpoch: 9}, 5, false},
		{LastTransaction{}, 0, false}, // an id the coordinator does not know
		{LastTransaction{State: "CompleteCommit", ProducerID: 5, ProducerEpoch: 9}, 6, false},
		{LastTransaction{State: "CompleteCommit", ProducerID: 6, ProducerEpoch: 9}, 5, false},
		{LastTransaction{State: "CompleteCommit", ProducerID: 5, ProducerEpoch: 8}, 5, false},
		{LastTransaction{State: "CompleteCommit", ProducerID: 5, ProducerEpoch: 10}, 5, false},
	} {
		if got := c.last.Committed(c.pid, dp); got != c.want {
			t.Errorf("%+v.Committed(%d, epoch %d) = %v, want %v", c.last, c.pid, dp.ProducerEpoch, got, c.want)
		}
	}
}

// TestCommittedOpenBoundaries: the commit's own records are those of
// last's producer id that start at or before the offset the commit last
// wrote on the partition; a PrepareCommit counts as committed; without an
// offsets partition, __consumer_offsets holds nothing of the commit's; a
// partition held by several producers yields only last's; nothing open
// yields nothing.
func TestCommittedOpenBoundaries(t *testing.T) {
	t.Parallel()
	const pid = 42
	last := LastTransaction{State: "PrepareCommit", ProducerID: pid, ProducerEpoch: 3}
	written := map[txn.Partition]int64{{Topic: "out", Partition: 0}: 100, {Topic: "out", Partition: 1}: 100}
	state := func(pid int64, start int64) sarama.ProducerState {
		return sarama.ProducerState{ProducerID: pid, ProducerEpoch: 3, CurrentTxnStartOffset: start}
	}
	open := map[string]map[int32][]sarama.ProducerState{
		"out": {
			0: {state(7, 10), state(pid, 100), state(9, 11)}, // at the last offset written: the commit's
			1: {state(pid, 101)},                             // one past it: not
		},
		OffsetsTopic: {7: {state(pid, 5)}},
	}
	mine, unknown := committedOpen(open, last, written, nil)
	wantMine := []DanglingPartition{{"out", 0, 100, 3}}
	wantUnknown := []DanglingPartition{{OffsetsTopic, 7, 5, 3}, {"out", 1, 101, 3}}
	if !slices.Equal(mine, wantMine) || !slices.Equal(unknown, wantUnknown) {
		t.Errorf("committedOpen = %v, %v; want %v, %v", mine, unknown, wantMine, wantUnknown)
	}
	// The offsets partition given, but another one of the topic: not it.
	mine, unknown = committedOpen(open, last, written, &txn.Partition{Topic: OffsetsTopic, Partition: 8})
	if !slices.Equal(mine, wantMine) || !slices.Equal(unknown, wantUnknown) {
		t.Errorf("with offsets partition 8: committedOpen = %v, %v; want %v, %v", mine, unknown, wantMine, wantUnknown)
	}
	if mine, unknown := committedOpen(map[string]map[int32][]sarama.ProducerState{"out": {0: nil}}, last, written, nil); mine != nil || unknown != nil {
		t.Errorf("nothing open: committedOpen = %v, %v; want nothing", mine, unknown)
	}
	// Records of other producers only: neither the commit's nor for
	// another check of this id.
	others := map[string]map[int32][]sarama.ProducerState{"out": {0: {state(7, 1)}, 1: {state(8, 2)}}}
	if mine, unknown := committedOpen(others, last, written, nil); mine != nil || unknown != nil {
		t.Errorf("other producers only: committedOpen = %v, %v; want nothing", mine, unknown)
	}
}

// TestAnyOpen: a map of answered partitions with no producers holds
// nothing open.
func TestAnyOpen(t *testing.T) {
	t.Parallel()
	if anyOpen(nil) || anyOpen(map[string]map[int32][]sarama.ProducerState{"out": {0: nil, 1: {}}, "log": {}}) {
		t.Error("anyOpen reports open records where no producer holds any")
	}
	if !anyOpen(map[string]map[int32][]sarama.ProducerState{"out": {0: nil, 1: {{ProducerID: 1, CurrentTxnStartOffset: 0}}}}) {
		t.Error("anyOpen misses a partition holding an open transaction")
	}
}
