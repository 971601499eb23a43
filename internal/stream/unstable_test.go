package stream

import (
	"testing"

	"github.com/IBM/sarama"

	"github.com/weirstream/weir/txn"
)

// groupPartition places groups as Kafka does (Utils.abs(hashCode) %
// partitions). A mask instead of the absolute value put groups with a
// negative hash on the wrong partition.
func TestGroupPartition(t *testing.T) {
	for _, c := range []struct {
		group string
		n     int32
		want  int32
	}{
		// Expected values from Java: Math.abs(s.hashCode()) % n.
		{"", 50, 0},
		{"a", 50, 47},
		{"my-group", 50, 12}, // a negative hash code (-1906497762)
		{"app-wordcount", 50, 49},
		{"grüße", 7, 4},
	} {
		if got := groupPartition(c.group, c.n); got != c.want {
			t.Errorf("groupPartition(%q, %d) = %d, want %d", c.group, c.n, got, c.want)
		}
	}
}

// abandonedBy lets a thread take over only the transactional ids of its
// application's departed processes whose last transaction completed with
// the open records' producer id and epoch.
func TestAbandonedBy(t *testing.T) {
	const (
		app   = "orders"
		self  = "00000000000000000000000000000001"
		live  = "00000000000000000000000000000002"
		gone  = "00000000000000000000000000000003"
		pid   = int64(4000)
		epoch = int16(7)
	)
	open := sarama.ProducerState{ProducerID: pid, ProducerEpoch: int32(epoch), CurrentTxnStartOffset: 12}
	done := func(state string) txn.LastTransaction {
		return txn.LastTransaction{State: state, ProducerID: pid, ProducerEpoch: epoch}
	}
	// This process is not among the members: its threads may all be
	// out of the group while they rejoin.
	members := map[string]bool{live: true}
	tests := []struct {
		name string
		id   string
		last txn.LastTransaction
		may  bool
	}{
		{"departed process, committed", app + "-" + gone + "-0", done("CompleteCommit"), true},
		{"departed process, aborted", app + "-" + gone + "-3", done("CompleteAbort"), true},
		{"this process", app + "-" + self + "-0", done("CompleteCommit"), false},
		{"a member's process", app + "-" + live + "-1", done("CompleteCommit"), false},
		{"another application", "orders-v2-" + gone + "-0", done("CompleteCommit"), false},
		{"not weir's form", "orders-payments", done("CompleteCommit"), false},
		{"in progress", app + "-" + gone + "-0", done("Ongoing"), false},
		{"committing", app + "-" + gone + "-0", done("PrepareCommit"), false},
		{"a later epoch", app + "-" + gone + "-0", txn.LastTransaction{State: "CompleteCommit", ProducerID: pid, ProducerEpoch: epoch + 1}, false},
		{"another producer id", app + "-" + gone + "-0", txn.LastTransaction{State: "CompleteCommit", ProducerID: pid + 1, ProducerEpoch: epoch}, false},
		{"unknown to the coordinator", app + "-" + gone + "-0", txn.LastTransaction{}, false},
	}
	for _, tc := range tests {
		why := abandonedBy(app, self, members, tc.id, open, tc.last)
		if (why == "") != tc.may {
			t.Errorf("%s: abandonedBy = %q; may take over: %v", tc.name, why, tc.may)
		}
	}
}
