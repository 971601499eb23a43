package repair

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/IBM/sarama"
)

// MetadataRefresher refreshes the cluster metadata that an admin client
// routes its requests by. sarama.Client is one: pass the client an admin
// was made from ([sarama.NewClusterAdminFromClient]).
type MetadataRefresher interface {
	RefreshMetadata(topics ...string) error
}

// CheckOption tunes [OpenTransactions] and [FindDangling].
type CheckOption func(*checkOptions)

type checkOptions struct {
	meta     MetadataRefresher
	attempts int
	backoff  time.Duration
}

// WithMetadata has a partition that did not answer, or answered with an
// error (NOT_LEADER_OR_FOLLOWER after a leader move), asked again after
// refreshing meta's metadata of its topic: without it the admin client
// asks the leader it has cached, which keeps answering the same.
func WithMetadata(meta MetadataRefresher) CheckOption {
	return func(o *checkOptions) { o.meta = meta }
}

// WithAttempts sets how many times a partition that did not answer is
// asked in all (default 3, at least 1), with backoff before the second
// attempt, doubled before each later one (default 200 ms).
func WithAttempts(attempts int, backoff time.Duration) CheckOption {
	return func(o *checkOptions) { o.attempts, o.backoff = max(attempts, 1), max(backoff, 0) }
}

// PartitionError is a partition that could not say which producers hold
// a transaction open on it, and why.
type PartitionError struct {
	Topic     string
	Partition int32
	Err       error
}

// UnansweredError is [OpenTransactions]' answer when some partitions did
// not say, after every attempt, which producers hold transactions open on
// them: a broker that no longer leads a partition answers
// NOT_LEADER_OR_FOLLOWER and no producers, so a partition that did not
// answer cleanly must count as "cannot tell", never as "nothing open".
type UnansweredError struct {
	Partitions []PartitionError
}

func (e *UnansweredError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "txn: %d partition(s) did not say which transactions are open on them:", len(e.Partitions))
	for i, p := range e.Partitions {
		if i == 10 {
			fmt.Fprintf(&b, " and %d more", len(e.Partitions)-i)
			break
		}
		fmt.Fprintf(&b, " %s/%d (%v);", p.Topic, p.Partition, p.Err)
	}
	return b.String()
}

// Unwrap returns the partitions' errors, so that errors.Is finds a
// sarama.KError among them.
func (e *UnansweredError) Unwrap() []error {
	errs := make([]error, len(e.Partitions))
	for i, p := range e.Partitions {
		errs[i] = p.Err
	}
	return errs
}

// OpenTransactions returns, for each partition of topics (each topic to
// its partitions), the producers that hold a transaction open on it
// (CurrentTxnStartOffset ≥ 0), asking each partition's leader
// (DescribeProducers, Kafka 3.0 or later). A partition is answered only
// when its leader answered for it without an error; the others are asked
// again (see [WithAttempts], [WithMetadata]). Those still unanswered make
// the error an [*UnansweredError], and the map holds what the others
// said. A partition with no open transaction is in the map with no
// producers.
func OpenTransactions(admin sarama.ClusterAdmin, topics map[string][]int32, opts ...CheckOption) (map[string]map[int32][]sarama.ProducerState, error) {
	o := checkOptions{attempts: 3, backoff: 200 * time.Millisecond}
	for _, opt := range opts {
		opt(&o)
	}
	ta, ok := admin.(sarama.TransactionClusterAdmin)
	if !ok {
		return nil, ErrCannotDescribe
	}
	open := map[string]map[int32][]sarama.ProducerState{}
	ask := topics
	wait := o.backoff
	var missing []PartitionError
	for attempt := 1; ; attempt++ {
		parts, err := ta.DescribeProducers(ask)
		missing = missing[:0]
		for topic, ps := range ask {
			for _, p := range ps {
				r, answered := parts[topic][p]
				switch {
				case !answered:
					cause := err
					if cause == nil {
						cause = errors.New("no answer")
					}
					missing = append(missing, PartitionError{topic, p, cause})
				case r.ErrorCode != sarama.ErrNoError:
					missing = append(missing, PartitionError{topic, p, r.ErrorCode})
				default:
					if open[topic] == nil {
						open[topic] = map[int32][]sarama.ProducerState{}
					}
					var held []sarama.ProducerState
					for _, ap := range r.ActiveProducers {
						if ap.CurrentTxnStartOffset >= 0 {
							held = append(held, ap)
						}
					}
					open[topic][p] = held
				}
			}
		}
		if len(missing) == 0 {
			return open, nil
		}
		if attempt >= o.attempts {
			break
		}
		ask = map[string][]int32{}
		for _, m := range missing {
			ask[m.Topic] = append(ask[m.Topic], m.Partition)
		}
		time.Sleep(wait)
		wait *= 2
		if o.meta != nil {
			// A failed refresh leaves the cache as it was: the next
			// attempt tells.
			_ = o.meta.RefreshMetadata(slices.Sorted(maps.Keys(ask))...)
		}
	}
	slices.SortFunc(missing, func(a, b PartitionError) int {
		if c := strings.Compare(a.Topic, b.Topic); c != 0 {
			return c
		}
		return int(a.Partition - b.Partition)
	})
	return open, &UnansweredError{Partitions: missing}
}
