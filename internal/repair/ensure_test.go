package repair

import (
	"slices"
	"testing"

	"github.com/IBM/sarama"

	"github.com/weirstream/weir/txn"
)

// TestCommittedOpenTellsTheCommitsRecordsApart: after a commit, open
// records of the id's producer are the committed transaction's only in
// its epoch, with the coordinator reporting it committed, and on a
// partition it wrote from an offset it wrote at or before (or on the
// group's offsets partition, whose offsets no client learns). Anything
// else (another producer, another epoch, records after the transaction's
// own, a partition it did not write, a last transaction that aborted) is
// not its to end with a commit.
func TestCommittedOpenTellsTheCommitsRecordsApart(t *testing.T) {
	t.Parallel()
	const pid = 42
	committed := LastTransaction{State: "CompleteCommit", ProducerID: pid, ProducerEpoch: 3}
	written := map[txn.Partition]int64{{Topic: "out", Partition: 0}: 100, {Topic: "out", Partition: 1}: 50, {Topic: "log", Partition: 0}: 9}
	offsets := &txn.Partition{Topic: OffsetsTopic, Partition: 7}
	held := func(pid int64, epoch int32, start int64) []sarama.ProducerState {
		return []sarama.ProducerState{{ProducerID: pid, ProducerEpoch: epoch, CurrentTxnStartOffset: start}}
	}
	open := map[string]map[int32][]sarama.ProducerState{
		"out": {
			0: held(pid, 3, 90), // the commit's: it wrote up to 100
			1: held(pid, 3, 51), // after the commit's last record there
			2: held(pid, 3, 0),  // a partition the commit did not write
			3: held(777, 0, 5),  // another producer's open transaction
		},
		"log":        {0: held(pid, 2, 4)}, // an older epoch
		OffsetsTopic: {7: held(pid, 3, 1234)},
	}
	mine, unknown := committedOpen(open, committed, written, offsets)
	wantMine := []DanglingPartition{{OffsetsTopic, 7, 1234, 3}, {"out", 0, 90, 3}}
	wantUnknown := []DanglingPartition{{"log", 0, 4, 2}, {"out", 1, 51, 3}, {"out", 2, 0, 3}}
	if !slices.Equal(mine, wantMine) {
		t.Errorf("the commit's records = %v, want %v", mine, wantMine)
	}
	if !slices.Equal(unknown, wantUnknown) {
		t.Errorf("records left for other checks = %v, want %v", unknown, wantUnknown)
	}
	// An id whose last transaction aborted has no committed records open.
	aborted := committed
	aborted.State = "CompleteAbort"
	if mine, _ := committedOpen(open, aborted, written, offsets); len(mine) != 0 {
		t.Errorf("records taken for committed after an abort: %v", mine)
	}
}
