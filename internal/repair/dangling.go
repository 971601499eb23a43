package repair

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/IBM/sarama"
)

// DanglingError reports records that a partition holds in an open
// transaction of a producer id whose coordinator has no transaction open:
// the coordinator ended the transaction (an abort after a timeout or a
// fencing) without its marker reaching that partition. Kafka lets the next
// marker of the same producer id on the partition end those records too,
// so the next commit of this transactional id would commit records of a
// transaction that was aborted: duplicates downstream. A producer that
// finds them must not commit before it has ended them, which an aborted
// transaction of its own over those partitions does (the broker ends every
// open record of the producer id on a partition with the marker).
//
// Seen on Kafka 4.4 when a broker restarts while transactions end
// (integration/chaos_test.go's broker restarts): its coordinator logs
// "Couldn't find leader endpoint for partitions ... these partitions are
// likely deleted already and hence can be skipped", drops those
// partitions from the transaction and completes it, commit or abort,
// without their markers. The partitions exist, and hold the records open.
// A commit's records left so are ended by [EnsureCommitted].
type DanglingError struct {
	TransactionalID string
	ProducerID      int64
	Partitions      []DanglingPartition
}

// DanglingPartition is a partition holding records of a transaction that
// is no longer open at its coordinator, from StartOffset on.
type DanglingPartition struct {
	Topic         string
	Partition     int32
	StartOffset   int64
	ProducerEpoch int32
}

func (e *DanglingError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "txn: transactional id %s (producer id %d): %d partition(s) hold records of a transaction its coordinator no longer has open, so that the next commit would commit them:",
		e.TransactionalID, e.ProducerID, len(e.Partitions))
	for _, p := range e.Partitions {
		fmt.Fprintf(&b, " %s/%d from offset %d (epoch %d);", p.Topic, p.Partition, p.StartOffset, p.ProducerEpoch)
	}
	b.WriteString(" abort each with `kafka-transactions.sh --bootstrap-server ... abort --topic T --partition P --start-offset O`, then start again")
	return b.String()
}

// ErrTxnInProgress is FindDangling's answer while a transaction of the
// transactional id is still open or ending (its markers not all written):
// ask again once it has ended.
var ErrTxnInProgress = errors.New("txn: a transaction of the transactional id is in progress")

// ErrCannotDescribe is the answer of the open-transaction checks
// ([FindDangling], [OpenTransactions], [DescribeLast]) given an admin
// client without the calls (not a [sarama.TransactionClusterAdmin]).
var ErrCannotDescribe = errors.New("txn: the admin client cannot describe transactions and producers")

// FindDangling checks, for a transactional id whose producer was just
// initialised (so that none of its transactions is open), that no
// partition of topics holds an open transaction of its producer id, and
// returns a [*DanglingError] naming those that do. It returns another
// error when it cannot tell: [ErrTxnInProgress] while a transaction of the
// id is open or ending, an [*UnansweredError] when a partition's leader
// did not answer for it cleanly after opts' attempts (a leader that just
// lost the partition answers NOT_LEADER_OR_FOLLOWER and no producers,
// which is no evidence that nothing is open), or another (a broker before
// Kafka 3.0, missing permissions), after which the caller decides whether
// to go on. topics maps each topic to its partitions. Records found are
// reported even when other partitions did not answer.
func FindDangling(admin sarama.ClusterAdmin, transactionalID string, topics map[string][]int32, opts ...CheckOption) error {
	ta, ok := admin.(sarama.TransactionClusterAdmin)
	if !ok {
		return ErrCannotDescribe
	}
	states, err := ta.DescribeTransactions([]string{transactionalID})
	if err != nil {
		return fmt.Errorf("txn: describing transactional id %s: %w", transactionalID, err)
	}
	st, ok := states[transactionalID]
	switch {
	case !ok:
		return fmt.Errorf("txn: the coordinator did not describe transactional id %s", transactionalID)
	case st.ErrorCode != sarama.ErrNoError:
		return fmt.Errorf("txn: describing transactional id %s: %w", transactionalID, st.ErrorCode)
	case st.TransactionState == "Ongoing" || strings.HasPrefix(st.TransactionState, "Prepare"):
		return fmt.Errorf("%w: %s is %s", ErrTxnInProgress, transactionalID, st.TransactionState)
	}
	open, err := OpenTransactions(admin, topics, opts...)
	found := &DanglingError{TransactionalID: transactionalID, ProducerID: st.ProducerID}
	for topic, ps := range open {
		for p, held := range ps {
			for _, ap := range held {
				if ap.ProducerID == st.ProducerID {
					found.Partitions = append(found.Partitions, DanglingPartition{topic, p, ap.CurrentTxnStartOffset, ap.ProducerEpoch})
				}
			}
		}
	}
	if len(found.Partitions) > 0 {
		slices.SortFunc(found.Partitions, func(a, b DanglingPartition) int {
			if c := strings.Compare(a.Topic, b.Topic); c != 0 {
				return c
			}
			return int(a.Partition - b.Partition)
		})
		return found
	}
	if err != nil {
		return fmt.Errorf("txn: describing the producers of %d topic(s): %w", len(topics), err)
	}
	return nil
}
