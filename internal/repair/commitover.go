package repair

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/IBM/sarama"

	"github.com/weirstream/weir/txn"
)

// OffsetsTopic is Kafka's topic of group offsets, which a transaction's
// offset commits are written to.
const OffsetsTopic = "__consumer_offsets"

// LastTransaction is what the coordinator of a transactional id says of
// its last transaction (DescribeTransactions). Asked before a producer
// of the id is initialised, it tells whether records its previous
// incarnation left open belong to a transaction that committed (see
// [LastTransaction.Committed]).
type LastTransaction struct {
	// State is Kafka's name of the transaction's state: "Empty",
	// "Ongoing", "PrepareCommit", "CompleteCommit", "CompleteAbort", ...
	State         string
	ProducerID    int64
	ProducerEpoch int16
}

// DescribeLast returns what the coordinator of transactionalID says of
// its last transaction. A transactional id the coordinator does not know
// is State "" and no error.
func DescribeLast(admin sarama.ClusterAdmin, transactionalID string) (LastTransaction, error) {
	ta, ok := admin.(sarama.TransactionClusterAdmin)
	if !ok {
		return LastTransaction{}, ErrCannotDescribe
	}
	states, err := ta.DescribeTransactions([]string{transactionalID})
	if err != nil {
		return LastTransaction{}, fmt.Errorf("txn: describing transactional id %s: %w", transactionalID, err)
	}
	st, ok := states[transactionalID]
	switch {
	case !ok || st.ErrorCode == errTransactionalIDNotFound:
		return LastTransaction{}, nil
	case st.ErrorCode != sarama.ErrNoError:
		return LastTransaction{}, fmt.Errorf("txn: describing transactional id %s: %w", transactionalID, st.ErrorCode)
	}
	return LastTransaction{State: st.TransactionState, ProducerID: st.ProducerID, ProducerEpoch: st.ProducerEpoch}, nil
}

// Committed reports whether records that dp holds open, in a transaction
// of producerID, belong to this last transaction and it committed: its
// coordinator completed a commit with the same producer id and epoch. The
// commit's marker then never reached the partition, and ending the
// records with an abort (as a [DanglingError] is usually ended) would
// drop output whose input offsets are committed. Records of an earlier
// transaction of the same epoch that a lost abort marker left open would
// look the same; a producer that checks after each of its own aborts (as
// weir's threads do) has ended those before its next transaction.
//
// A transaction described as PrepareCommit counts as committed: its
// coordinator logged the decision to commit, and completes it (also when
// the next InitProducerId of the id finds it so) whatever happens next.
func (l LastTransaction) Committed(producerID int64, dp DanglingPartition) bool {
	return (l.State == "CompleteCommit" || l.State == "PrepareCommit") && l.ProducerID == producerID && int32(l.ProducerEpoch) == dp.ProducerEpoch
}

// errTransactionalIDNotFound is Kafka's TRANSACTIONAL_ID_NOT_FOUND (105),
// which sarama does not name.
const errTransactionalIDNotFound sarama.KError = 105

// commitOverAttempts and commitOverBackoff bound CommitOver's retries of
// one request the coordinator answers with a retriable error (loading,
// moving, a concurrent transaction still ending).
const (
	commitOverAttempts = 10
	commitOverBackoff  = 100 * time.Millisecond
)

// CommitOver ends with a commit marker the records that parts hold open
// in a transaction of transactionalID's producer id, one whose coordinator
// completed a commit but whose marker did not reach them
// ([LastTransaction.Committed]). It runs a transaction of the id's current
// producer id and epoch that adds those partitions (the group's offsets
// partition through AddOffsetsToTxn for group, when parts name
// OffsetsTopic) and commits, writing no record: the broker ends every
// open record of the producer id on a partition with its next marker, as
// committed here. client reaches the coordinator; it must not be used by
// a producer of the id meanwhile, nor have a transaction of the id open:
// CommitOver refuses one in progress with [ErrTxnInProgress]. A fenced
// producer epoch is [txn.ErrFenced]. The caller checks the partitions again
// once the markers are written (FindDangling).
func CommitOver(ctx context.Context, client sarama.Client, admin sarama.ClusterAdmin, transactionalID, group string, parts []DanglingPartition) error {
	last, err := DescribeLast(admin, transactionalID)
	if err != nil {
		return err
	}
	if last.State == "Ongoing" || strings.HasPrefix(last.State, "Prepare") {
		return fmt.Errorf("%w: %s is %s", ErrTxnInProgress, transactionalID, last.State)
	}
	return endOver(ctx, client, transactionalID, group, last.ProducerID, last.ProducerEpoch, parts, true)
}

// takeOverTimeout is the transaction timeout EndAbandoned initialises a
// transactional id with: its transaction only adds partitions and ends,
// in milliseconds, and one that timed out would be aborted.
const takeOverTimeout = time.Minute

// EndAbandoned ends the records that parts hold open in a transaction of
// transactionalID whose producer is gone (no producer of the id will end
// them), as the id's coordinator recorded that transaction. last, which
// the caller described when it found the records, must be a completed
// commit or abort of the records' producer id and epoch: the marker that
// never reached the partitions. Anything else (a transaction still in
// progress, another epoch) is refused without acting: an ongoing
// transaction ends by itself within its timeout, and records of an older
// epoch belong to a transaction whose outcome the coordinator no longer
// says.
//
// EndAbandoned takes the id over: InitProducerId bumps its epoch, which
// fences a producer of the id should one still run, so that no
// transaction of the id can start beside this one. A transaction of the
// new epoch then adds parts (the group's offsets partition through
// AddOffsetsToTxn for group, for OffsetsTopic) and ends as last did,
// writing no record; the broker ends every open record of the producer id
// on a partition with its next marker. When the epoch moved more than
// once meanwhile, another producer of the id acted, and its markers
// decide: EndAbandoned ends nothing and returns nil. ended reports whether
// it wrote markers. The caller checks the partitions again.
func EndAbandoned(ctx context.Context, client sarama.Client, transactionalID, group string, parts []DanglingPartition, last LastTransaction) (ended bool, err error) {
	if len(parts) == 0 {
		return false, nil
	}
	var commit bool
	switch last.State {
	case "CompleteCommit":
		commit = true
	case "CompleteAbort":
	default:
		return false, fmt.Errorf("%w: %s is %q", ErrTxnInProgress, transactionalID, last.State)
	}
	for _, dp := range parts {
		if dp.ProducerEpoch != int32(last.ProducerEpoch) {
			return false, fmt.Errorf("txn: %s/%d holds records of epoch %d of %s, whose coordinator describes epoch %d: their outcome is unknown",
				dp.Topic, dp.Partition, dp.ProducerEpoch, transactionalID, last.ProducerEpoch)
		}
	}
	id := transactionalID
	var pid int64
	var epoch int16
	err = retryCoordinator(ctx, client, id, func(b *sarama.Broker) error {
		r, err := b.InitProducerID(&sarama.InitProducerIDRequest{Version: 4, TransactionalID: &id, TransactionTimeout: takeOverTimeout, ProducerID: -1, ProducerEpoch: -1})
		if err != nil {
			return err
		}
		pid, epoch = r.ProducerID, r.ProducerEpoch
		return errOrNil(r.Err)
	})
	if err != nil {
		return false, fmt.Errorf("txn: taking over transactional id %s: %w", id, err)
	}
	if pid != last.ProducerID || epoch != last.ProducerEpoch+1 {
		return false, nil
	}
	if err := endOver(ctx, client, id, group, pid, epoch, parts, commit); err != nil {
		return false, err
	}
	return true, nil
}

// endOver runs a transaction of transactionalID's producer id pid and
// epoch that adds the partitions of parts and ends with a commit or an
// abort, writing no record.
func endOver(ctx context.Context, client sarama.Client, transactionalID, group string, pid int64, epoch int16, parts []DanglingPartition, commit bool) error {
	topics := map[string][]int32{}
	offsets := false
	for _, dp := range parts {
		if dp.Topic == OffsetsTopic {
			offsets = true
			continue
		}
		topics[dp.Topic] = append(topics[dp.Topic], dp.Partition)
	}
	id := transactionalID
	if len(topics) > 0 {
		err := retryCoordinator(ctx, client, id, func(b *sarama.Broker) error {
			r, err := b.AddPartitionsToTxn(&sarama.AddPartitionsToTxnRequest{Version: 3, TransactionalID: id, ProducerID: pid, ProducerEpoch: epoch, TopicPartitions: topics})
			if err != nil {
				return err
			}
			for _, pes := range r.Errors {
				for _, pe := range pes {
					if pe.Err != sarama.ErrNoError {
						return pe.Err
					}
				}
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("txn: adding %d topic(s) to the transaction of %s: %w", len(topics), id, err)
		}
	}
	if offsets {
		err := retryCoordinator(ctx, client, id, func(b *sarama.Broker) error {
			r, err := b.AddOffsetsToTxn(&sarama.AddOffsetsToTxnRequest{Version: 3, TransactionalID: id, ProducerID: pid, ProducerEpoch: epoch, GroupID: group})
			if err != nil {
				return err
			}
			return errOrNil(r.Err)
		})
		if err != nil {
			return fmt.Errorf("txn: adding the offsets of group %s to the transaction of %s: %w", group, id, err)
		}
	}
	if len(topics) == 0 && !offsets {
		return nil
	}
	// Once partitions are added, the transaction must end as asked: left
	// to time out, it would be aborted, and the abort marker would end
	// committed records as aborted.
	err := retryCoordinator(ctx, client, id, func(b *sarama.Broker) error {
		r, err := b.EndTxn(&sarama.EndTxnRequest{Version: 3, TransactionalID: id, ProducerID: pid, ProducerEpoch: epoch, TransactionResult: commit})
		if err != nil {
			return err
		}
		return errOrNil(r.Err)
	})
	if err != nil {
		return fmt.Errorf("txn: ending the open records of %s (commit %t): %w", id, commit, err)
	}
	return nil
}

func errOrNil(k sarama.KError) error {
	if k == sarama.ErrNoError {
		return nil
	}
	return k
}

// retryCoordinator runs call on transactionalID's coordinator, again after
// a retriable error (at most commitOverAttempts times, finding the
// coordinator again after NOT_COORDINATOR); a fenced epoch is txn.ErrFenced.
func retryCoordinator(ctx context.Context, client sarama.Client, transactionalID string, call func(*sarama.Broker) error) error {
	var err error
	for attempt := 1; ; attempt++ {
		var b *sarama.Broker
		if b, err = client.TransactionCoordinator(transactionalID); err == nil {
			if err = call(b); err == nil {
				return nil
			}
		}
		switch {
		case errors.Is(err, sarama.ErrProducerFenced), errors.Is(err, sarama.ErrInvalidProducerEpoch):
			return fmt.Errorf("%w: %w", txn.ErrFenced, err)
		case errors.Is(err, sarama.ErrNotCoordinatorForConsumer):
			_ = client.RefreshTransactionCoordinator(transactionalID)
		case !errors.Is(err, sarama.ErrConcurrentTransactions) && !errors.Is(err, sarama.ErrOffsetsLoadInProgress) &&
			!errors.Is(err, sarama.ErrConsumerCoordinatorNotAvailable) && !errors.Is(err, sarama.ErrRequestTimedOut):
			var kerr sarama.KError
			if errors.As(err, &kerr) {
				return err // a refusal: asking again gets the same answer
			}
		}
		if attempt >= commitOverAttempts {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(commitOverBackoff):
		}
	}
}

// ensureAttempts bounds the commits EnsureCommitted runs over records it
// finds still open, and the checks after them.
const ensureAttempts = 5

// markerGrace is how long EnsureCommitted keeps looking at records of a
// transaction its coordinator reports complete before it takes their
// marker for lost: under load a partition may show a marker a few
// milliseconds after the coordinator's DescribeTransactions reports the
// transaction complete (seen on Kafka 4.4 in about one commit in twenty of
// integration/chaos_test.go's instances, every one ended within 5 ms),
// while a lost marker never comes. Looks are markerFirstLook apart,
// doubled each time.
const (
	markerGrace     = time.Second
	markerFirstLook = 5 * time.Millisecond
)

// EnsureCommitted makes sure that the records of transactionalID's last
// committed transaction are not left open: Kafka's coordinator completes
// a transaction without writing its marker to a partition whose leader it
// cannot find (it takes the partition for deleted), which happens while a
// broker restarts, and the records there stay open. Left open, they hold
// back every read_committed reader of the partition, and the next marker
// of the producer id there decides them: an abort marker (a later
// transaction of the id that aborts, or a check that finds them and takes
// them for aborted) would drop output, changelog records or offsets whose
// commit the application already relied on.
//
// written is what the transaction wrote ([Producer.LastCommitted]), and
// offsets, when the transaction committed offsets of group, is the
// partition of __consumer_offsets that holds them. Call it after the
// commit and before the id's next transaction begins: records of the id
// open on those partitions, in the epoch of the coordinator's last
// transaction, which it reports committed, are then that transaction's
// (on a partition of written, only those from an offset the transaction
// wrote at or before). EnsureCommitted looks at them again for up to
// markerGrace (a marker may show a little late), then ends those still
// open with a commit marker ([CommitOver]'s transaction of no record) and
// looks again; ended lists the partitions it ended. A call can take about
// a second when it ends records, and milliseconds when it does not.
//
// It returns [ErrTxnInProgress] while the coordinator is still writing
// the transaction's markers (ask again a moment later), an
// [*UnansweredError] when some partition could not say what it holds, and
// a [*DanglingError] for records of the id it leaves open because it
// cannot tell that they are the committed transaction's (another epoch,
// or starting after the transaction's last record there): those are for
// the checks of an initialising producer or of the next abort.
func EnsureCommitted(ctx context.Context, client sarama.Client, admin sarama.ClusterAdmin, transactionalID, group string, written map[txn.Partition]int64, offsets *txn.Partition, opts ...CheckOption) (ended []DanglingPartition, err error) {
	topics := partitionsOf(written, offsets)
	if len(topics) == 0 {
		return nil, nil
	}
	var last LastTransaction
	var left []DanglingPartition // open, and not the commit's
	done := func() error {
		if len(left) > 0 {
			return &DanglingError{TransactionalID: transactionalID, ProducerID: last.ProducerID, Partitions: left}
		}
		return nil
	}
	described := false
	var firstSeen time.Time
	look := markerFirstLook
	for attempt := 1; ; {
		open, err := OpenTransactions(admin, topics, opts...)
		if err != nil {
			return ended, err
		}
		if !anyOpen(open) {
			return ended, done()
		}
		// Some producer holds records open there: is it this id's, and
		// has its coordinator finished writing the markers?
		if !described {
			if last, err = describeCompleted(admin, transactionalID); err != nil {
				return ended, err
			}
			described = true
		}
		mine, unknown := committedOpen(open, last, written, offsets)
		if attempt == 1 && firstSeen.IsZero() {
			left = unknown
		}
		if len(mine) == 0 {
			return ended, done()
		}
		// Only the partitions still holding the commit's records are
		// asked again.
		topics = partitionsOf(nil, nil, mine...)
		if firstSeen.IsZero() {
			firstSeen = time.Now()
		}
		if time.Since(firstSeen) < markerGrace {
			select {
			case <-ctx.Done():
				return ended, ctx.Err()
			case <-time.After(look):
			}
			look *= 2
			continue
		}
		if attempt > ensureAttempts {
			// Not wrapping the DanglingError, which names records left
			// for other checks: these are the commit's, still open.
			return ended, fmt.Errorf("txn: records of the last committed transaction of %s still open after %d commits over them: %v",
				transactionalID, ensureAttempts, &DanglingError{TransactionalID: transactionalID, ProducerID: last.ProducerID, Partitions: mine})
		}
		if err := endOver(ctx, client, transactionalID, group, last.ProducerID, last.ProducerEpoch, mine, true); err != nil {
			return ended, err
		}
		ended = append(ended, mine...)
		attempt++
		// The commit's own markers are written after it returns: the
		// coordinator is asked again whether they are, and the
		// partitions are given the grace again.
		described = false
		firstSeen, look = time.Time{}, markerFirstLook
	}
}

// partitionsOf lists the partitions of written, offsets (when not nil)
// and parts by topic.
func partitionsOf(written map[txn.Partition]int64, offsets *txn.Partition, parts ...DanglingPartition) map[string][]int32 {
	topics := map[string][]int32{}
	for tp := range written {
		topics[tp.Topic] = append(topics[tp.Topic], tp.Partition)
	}
	if offsets != nil {
		topics[offsets.Topic] = append(topics[offsets.Topic], offsets.Partition)
	}
	for _, dp := range parts {
		topics[dp.Topic] = append(topics[dp.Topic], dp.Partition)
	}
	return topics
}

// describeCompleted is DescribeLast of a transaction that must be
// complete: ErrTxnInProgress while its coordinator still has it open or
// is writing its markers (ask again a moment later).
func describeCompleted(admin sarama.ClusterAdmin, transactionalID string) (LastTransaction, error) {
	last, err := DescribeLast(admin, transactionalID)
	if err != nil {
		return last, err
	}
	if last.State == "Ongoing" || strings.HasPrefix(last.State, "Prepare") {
		return last, fmt.Errorf("%w: %s is %s", ErrTxnInProgress, transactionalID, last.State)
	}
	return last, nil
}

// committedOpen sorts the records that open shows open of last's
// producer id: mine are the committed transaction's (see
// EnsureCommitted), unknown the others. Both come sorted by partition.
func committedOpen(open map[string]map[int32][]sarama.ProducerState, last LastTransaction, written map[txn.Partition]int64, offsets *txn.Partition) (mine, unknown []DanglingPartition) {
	for topic, ps := range open {
		for p, held := range ps {
			for _, ap := range held {
				if ap.ProducerID != last.ProducerID {
					continue
				}
				dp := DanglingPartition{topic, p, ap.CurrentTxnStartOffset, ap.ProducerEpoch}
				off, wrote := written[txn.Partition{Topic: topic, Partition: p}]
				isOffsets := offsets != nil && topic == offsets.Topic && p == offsets.Partition
				if last.Committed(last.ProducerID, dp) && (isOffsets || wrote && dp.StartOffset <= off) {
					mine = append(mine, dp)
				} else {
					unknown = append(unknown, dp)
				}
			}
		}
	}
	byPartition := func(a, b DanglingPartition) int {
		if c := strings.Compare(a.Topic, b.Topic); c != 0 {
			return c
		}
		return int(a.Partition - b.Partition)
	}
	slices.SortFunc(mine, byPartition)
	slices.SortFunc(unknown, byPartition)
	return mine, unknown
}

// anyOpen reports whether a partition of open holds an open transaction.
func anyOpen(open map[string]map[int32][]sarama.ProducerState) bool {
	for _, ps := range open {
		for _, held := range ps {
			if len(held) > 0 {
				return true
			}
		}
	}
	return false
}
