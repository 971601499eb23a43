package statelog

// Restore reading: one changelog partition, from a checkpoint up to the last
// stable offset, read_committed.
//
// sarama's PartitionConsumer cannot do this job. It exposes neither its
// position nor the partition's last stable offset, and it never delivers
// control records or aborted records, so a reader whose log ends with a
// transaction marker (every transactional changelog does) cannot tell that
// it has reached the end. The Reader therefore fetches with sarama's
// low-level API and keeps the position itself, advancing it past every
// batch a fetch covers, delivered or not.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/IBM/sarama"
)

const (
	// DefaultReaderMaxBytes is ReaderOptions.MaxBytes when it is zero.
	DefaultReaderMaxBytes int32 = 1 << 20
	// DefaultReaderMaxWait is ReaderOptions.MaxWait when it is zero.
	DefaultReaderMaxWait = 100 * time.Millisecond

	// readerAttempts bounds consecutive failed requests (or fetches that
	// make no progress though committed data is there) before giving up.
	readerAttempts = 20
	// readerBackoff and readerMaxBackoff: the wait before the first retry,
	// doubled after every failure up to readerMaxBackoff. With
	// readerAttempts this gives a leader election about 33 s: a broker
	// killed outright keeps its partitions until its session times out
	// (9 s by default in KRaft), and a restore that gave up sooner
	// failed the instance while the cluster was healing.
	readerBackoff    = 100 * time.Millisecond
	readerMaxBackoff = 2 * time.Second
	// maxFetchBytes caps the fetch size grown to read one oversized batch
	// that a broker sent truncated (it should not: since KIP-74 the first
	// batch of a fetch comes whole).
	maxFetchBytes int32 = 64 << 20
)

// Record is one changelog record, the latest value of Key as of Offset. A
// nil Value is a tombstone: Key was deleted. (An empty, non-nil Value is a
// value, not a deletion.)
type Record struct {
	Key, Value []byte
	// Offset is the record's offset in its changelog partition.
	Offset int64
	// Time is the record's timestamp in milliseconds since the epoch;
	// Stamped reports that it is the value's own (the record carries
	// TimeHeader, see Produce).
	Time    int64
	Stamped bool
}

// OffsetOutOfRangeError reports that a changelog partition does not hold
// Offset: it lies below the log start offset (the records were compacted
// away, deleted by retention or DeleteRecords) or beyond the end of the log
// (the topic was recreated, or the checkpoint is newer than the log). State
// checkpointed at Offset cannot be brought up to date from the changelog;
// the caller restores the store partition from scratch, from
// [Reader.Start].
type OffsetOutOfRangeError struct {
	// Topic and Partition name the changelog partition.
	Topic     string
	Partition int32
	// Offset is the offset that was asked for (ReadTo's position).
	Offset int64
}

// Error implements error.
func (e *OffsetOutOfRangeError) Error() string {
	return fmt.Sprintf("changelog: offset %d is out of range of %s/%d", e.Offset, e.Topic, e.Partition)
}

// ReaderOptions tunes a [Reader]. The zero value means the documented
// defaults.
type ReaderOptions struct {
	// MaxBytes bounds the record data one fetch returns, in bytes; zero
	// or less means DefaultReaderMaxBytes (1 MiB). It also bounds how
	// many records one call of ReadTo's apply gets. A record batch larger
	// than MaxBytes still comes whole (KIP-74). Roughly Kafka Streams'
	// restore consumer max.partition.fetch.bytes.
	MaxBytes int32
	// MaxWait is how long the broker may hold a fetch that finds no
	// committed data at the position, before answering empty; zero or
	// less means DefaultReaderMaxWait (100 ms). It is sent in whole
	// milliseconds (at least 1), and must stay below the client's
	// Net.ReadTimeout. Readers sharing a client share its connection to
	// the leader, on which the broker answers requests in order, so a long
	// MaxWait delays the others. Roughly fetch.max.wait.ms.
	MaxWait time.Duration
}

// Reader reads one changelog partition, read_committed, for restoration:
// [Reader.End] tells where the committed log ends now, [Reader.ReadTo]
// reads up to there.
//
// Offsets follow Kafka's "next offset" convention throughout: a position,
// a checkpoint, End and every next passed to apply are the offset of the
// next record to read, one past everything already covered.
//
// A Reader is used by one goroutine at a time. Readers of different
// partitions may share one sarama.Client and run concurrently; the Reader
// never closes the client.
type Reader struct {
	client    sarama.Client
	topic     string
	partition int32
	maxBytes  int32
	maxWaitMs int32
	// err is set by NewReader when the client cannot read committed data.
	err          error
	fetchVersion int16
	// attempts, backoff and maxBackoff are the retry policy; tests shorten
	// them.
	attempts            int
	backoff, maxBackoff time.Duration

	// Scratch reused across fetches: the records handed to apply, and the
	// producers whose transaction is aborted at the current batch.
	recs    []Record
	aborted map[int64]struct{}
}

// NewReader returns a Reader of partition of topic through client. The
// client's Config.Version must be at least V0_11_0_0 (read_committed
// fetches); weir uses V4_0_0_0. A client that is too old is reported by
// every method of the Reader, not here. NewReader does no I/O.
func NewReader(client sarama.Client, topic string, partition int32, opts ReaderOptions) *Reader {
	r := &Reader{
		client:     client,
		topic:      topic,
		partition:  partition,
		maxBytes:   opts.MaxBytes,
		attempts:   readerAttempts,
		backoff:    readerBackoff,
		maxBackoff: readerMaxBackoff,
		aborted:    map[int64]struct{}{},
	}
	if r.maxBytes <= 0 {
		r.maxBytes = DefaultReaderMaxBytes
	}
	wait := opts.MaxWait
	if wait <= 0 {
		wait = DefaultReaderMaxWait
	}
	r.maxWaitMs = int32(max(1, min(wait.Milliseconds(), 1<<31-1)))
	r.fetchVersion, r.err = fetchVersion(client.Config().Version)
	return r
}

// End returns the offset restoration must reach now: the partition's last
// stable offset, the first offset of the oldest open transaction or, when
// there is none, the high watermark. Every record below it is committed or
// aborted for good. The LSO only grows, so a Reader that reached End once
// is up to date as of that call.
//
// Leader changes and network errors are retried a bounded number of times
// with backoff; ctx cancels between attempts.
func (r *Reader) End(ctx context.Context) (int64, error) {
	return r.listOffset(ctx, sarama.OffsetNewest, sarama.ReadCommitted, "end")
}

// HighWatermark returns the partition's high watermark: the offset after
// its last replicated record, committed or not. Above End it means a
// transaction is open on the partition. Retries as End does.
func (r *Reader) HighWatermark(ctx context.Context) (int64, error) {
	return r.listOffset(ctx, sarama.OffsetNewest, sarama.ReadUncommitted, "high watermark")
}

// Start returns the log start offset: the earliest offset the partition
// still holds, where a full restore begins. Offsets below it fail ReadTo
// with an [OffsetOutOfRangeError]. Retries as End does.
func (r *Reader) Start(ctx context.Context) (int64, error) {
	return r.listOffset(ctx, sarama.OffsetOldest, sarama.ReadCommitted, "start")
}

// listOffset asks the leader for the offset at time (OffsetNewest or
// OffsetOldest) with the given isolation.
func (r *Reader) listOffset(ctx context.Context, time int64, isolation sarama.IsolationLevel, what string) (int64, error) {
	if r.err != nil {
		return 0, r.err
	}
	var off int64
	err := r.retry(ctx, func() error {
		broker, err := r.client.Leader(r.topic, r.partition)
		if err != nil {
			return fmt.Errorf("leader: %w", err)
		}
		req := sarama.NewOffsetRequest(r.client.Config().Version)
		req.IsolationLevel = isolation
		req.AddBlock(r.topic, r.partition, time, 1)
		resp, err := broker.GetAvailableOffsets(req)
		if err != nil {
			// Drop the connection, as sarama's own GetOffset does; the
			// next Leader call opens a new one.
			_ = broker.Close()
			return fmt.Errorf("list offsets from broker %d: %w", broker.ID(), err)
		}
		block := resp.GetBlock(r.topic, r.partition)
		switch {
		case block == nil:
			return fmt.Errorf("list offsets from broker %d: %w", broker.ID(), sarama.ErrIncompleteResponse)
		case !errors.Is(block.Err, sarama.ErrNoError):
			return fmt.Errorf("list offsets from broker %d: %w", broker.ID(), block.Err)
		case len(block.Offsets) != 1:
			return fmt.Errorf("list offsets from broker %d: %d offsets in the answer, want 1", broker.ID(), len(block.Offsets))
		}
		off = block.Offsets[0]
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("changelog: %s offset of %s/%d: %w", what, r.topic, r.partition, err)
	}
	return off, nil
}

// ReadTo reads the partition from offset from until its position reaches
// end, and returns the position, end or more. Callers pass End's answer
// as end: a higher end waits, fetch after fetch (MaxWait apart), for
// transactions to complete until ctx is cancelled.
//
// apply is called for each fetch that yields committed data records, in
// offset order, with offsets strictly increasing from call to call and at
// least from (records of the batch containing from that precede it are
// skipped). Control records (transaction markers) and the records of
// aborted transactions are never passed; offsets that compaction removed
// are simply absent. next is the offset after everything the call covers,
// skipped batches included: the checkpoint to store once recs are
// applied. A fetch that yields no data records does not call apply, but
// still moves the position, so the returned position may exceed the
// last next. The last fetch may carry committed records beyond end; they
// are passed too.
//
// recs and the Key and Value slices of its records are valid only during
// the call (they alias the fetch's buffers, which a retained slice would
// pin): apply copies what it keeps, and must not modify them. An error
// from apply stops ReadTo, which returns it wrapped.
//
// A from greater than end reads nothing and returns from, after checking
// that the log reaches from: a checkpoint may be ahead of the last stable
// offset (records committed after a zombie's transaction that is still
// open), but not ahead of the high watermark.
//
// Errors: a from below the log start or beyond the high watermark gives an
// [*OffsetOutOfRangeError], so the caller can fall back to a full restore
// from [Reader.Start]. Leader
// changes (NOT_LEADER_OR_FOLLOWER, fenced or unknown leader epochs) and
// network errors refresh the metadata and are retried with backoff, up
// to 10 consecutive failures (about 11 s), then returned wrapped. A
// legacy (pre-0.11 message format) batch is an error. When ctx ends,
// ReadTo returns ctx.Err() wrapped; a fetch in flight is bounded by
// MaxWait and the client's network timeouts. On any error the returned
// offset is the position after the last batch apply accepted (from when
// there was none).
func (r *Reader) ReadTo(ctx context.Context, from, end int64, apply func(recs []Record, next int64) error) (int64, error) {
	if r.err != nil {
		return from, r.err
	}
	if from < 0 {
		return from, fmt.Errorf("changelog: read %s/%d from offset %d: offsets are not negative", r.topic, r.partition, from)
	}
	if from > end {
		return r.beyond(ctx, from)
	}
	pos, size := from, r.maxBytes
	stalls, backoff := 0, r.backoff
	for pos < end {
		var block *sarama.FetchResponseBlock
		started := time.Now()
		err := r.retry(ctx, func() (err error) {
			block, err = r.fetch(pos, size)
			return err
		})
		if errors.Is(err, sarama.ErrOffsetOutOfRange) {
			return pos, &OffsetOutOfRangeError{Topic: r.topic, Partition: r.partition, Offset: pos}
		}
		if err != nil {
			return pos, fmt.Errorf("changelog: read %s/%d at offset %d: %w", r.topic, r.partition, pos, err)
		}
		next, partial, err := r.collect(block, pos)
		if err == nil && len(r.recs) > 0 {
			if err = apply(r.recs, next); err != nil {
				err = fmt.Errorf("changelog: apply records of %s/%d up to offset %d: %w", r.topic, r.partition, next, err)
			}
		}
		// Zero the scratch so that it pins no fetch buffer.
		clear(r.recs)
		r.recs = r.recs[:0]
		if err != nil {
			return pos, err
		}

		switch lso := stableOffset(block); {
		case next > pos:
			pos, size = next, r.maxBytes
			stalls, backoff = 0, r.backoff
		case partial && size < maxFetchBytes:
			// Only part of the batch at pos came: ask for more.
			size = min(maxFetchBytes/2, size) * 2
		case partial:
			return pos, fmt.Errorf("changelog: read %s/%d at offset %d: record batch larger than %d bytes", r.topic, r.partition, pos, maxFetchBytes)
		case pos < lso:
			// Committed data is there but the fetch covered none of it.
			// Not expected from a broker; bounded so it cannot spin.
			stalls++
			if stalls >= r.attempts {
				return pos, fmt.Errorf("changelog: read %s/%d: no progress at offset %d after %d fetches, though the last stable offset is %d", r.topic, r.partition, pos, stalls, lso)
			}
			if err := sleep(ctx, backoff); err != nil {
				return pos, fmt.Errorf("changelog: read %s/%d at offset %d: %w", r.topic, r.partition, pos, err)
			}
			backoff = min(2*backoff, r.maxBackoff)
		default:
			// Nothing committed at pos yet (an open transaction holds
			// the LSO back, or end is beyond the log). The broker held
			// the fetch for MaxWait; make sure of it, so that a broker
			// answering at once cannot make this a busy loop.
			wait := time.Duration(r.maxWaitMs)*time.Millisecond - time.Since(started)
			if err := sleep(ctx, wait); err != nil {
				return pos, fmt.Errorf("changelog: read %s/%d at offset %d, waiting for offset %d: %w", r.topic, r.partition, pos, end, err)
			}
		}
	}
	return pos, nil
}

// beyond handles a ReadTo whose from is past its end: there is nothing to
// read, but from must exist. A checkpoint may legitimately lie beyond the
// last stable offset: a zombie's transaction, still open, holds the LSO
// below records that this instance committed after it. A checkpoint
// beyond the high watermark, though, belongs to another log (the topic
// was recreated or truncated): restoring "from" it would skip records.
func (r *Reader) beyond(ctx context.Context, from int64) (int64, error) {
	hwm, err := r.listOffset(ctx, sarama.OffsetNewest, sarama.ReadUncommitted, "high watermark")
	if err != nil {
		return from, err
	}
	if from > hwm {
		return from, &OffsetOutOfRangeError{Topic: r.topic, Partition: r.partition, Offset: from}
	}
	return from, nil
}
