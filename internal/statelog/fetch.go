package statelog

// The Reader's fetches: one Fetch request at a time at its own position,
// with the last stable offset and aborted transactions of each response,
// retried on the errors a moving leader or coordinator causes.

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"time"

	"github.com/IBM/sarama"
)

// fetchVersion picks the Fetch request version the way sarama's consumer
// does for the configured Kafka version; sarama lowers it further to what
// the broker supports. Version 4 is the first with an isolation level.
func fetchVersion(v sarama.KafkaVersion) (int16, error) {
	switch {
	case v.IsAtLeast(sarama.V2_7_0_0):
		return 12, nil
	case v.IsAtLeast(sarama.V2_3_0_0):
		return 11, nil
	case v.IsAtLeast(sarama.V2_1_0_0):
		return 10, nil
	case v.IsAtLeast(sarama.V2_0_0_0):
		return 8, nil
	case v.IsAtLeast(sarama.V1_1_0_0):
		return 7, nil
	case v.IsAtLeast(sarama.V1_0_0_0):
		return 6, nil
	case v.IsAtLeast(sarama.V0_11_0_0):
		return 5, nil
	}
	return 0, fmt.Errorf("changelog: reading committed data needs a client with Config.Version at least 0.11.0 (weir uses 4.0.0), this one has %s", v)
}

// fetch sends one read_committed fetch of size bytes at pos to the leader
// and returns the partition's block; a block error is returned as the
// KError.
func (r *Reader) fetch(pos int64, size int32) (*sarama.FetchResponseBlock, error) {
	broker, epoch, err := r.client.LeaderAndEpoch(r.topic, r.partition)
	if err != nil {
		return nil, fmt.Errorf("leader: %w", err)
	}
	req := &sarama.FetchRequest{
		Version:     r.fetchVersion,
		MaxWaitTime: r.maxWaitMs,
		MinBytes:    1,
		MaxBytes:    size,
		Isolation:   sarama.ReadCommitted,
	}
	if req.Version >= 7 {
		// No fetch session (KIP-227), as in sarama's consumer.
		req.SessionID, req.SessionEpoch = 0, -1
	}
	// With the leader epoch (KIP-320) a stale leader answers
	// FENCED_LEADER_EPOCH instead of serving a diverged log.
	req.AddBlock(r.topic, r.partition, pos, size, epoch)
	resp, err := broker.Fetch(req)
	if err != nil {
		_ = broker.Close()
		return nil, fmt.Errorf("fetch from broker %d: %w", broker.ID(), err)
	}
	if resp.ErrorCode != 0 {
		return nil, fmt.Errorf("fetch from broker %d: %w", broker.ID(), sarama.KError(resp.ErrorCode))
	}
	block := resp.GetBlock(r.topic, r.partition)
	if block == nil {
		return nil, fmt.Errorf("fetch from broker %d: %w", broker.ID(), sarama.ErrIncompleteResponse)
	}
	if !errors.Is(block.Err, sarama.ErrNoError) {
		return nil, fmt.Errorf("fetch from broker %d: %w", broker.ID(), block.Err)
	}
	return block, nil
}

// collect appends to r.recs the committed data records of block at
// offsets >= pos, and returns the offset after the last batch the block
// covers (pos when it covers none) and whether it ends in a truncated
// batch. This is the read_committed logic of sarama's consumer (and of
// Kafka's Java consumer): a producer's transactional batches are aborted
// from the first offset of an aborted transaction the response lists up
// to that producer's abort marker.
func (r *Reader) collect(block *sarama.FetchResponseBlock, pos int64) (next int64, partial bool, err error) {
	clear(r.aborted)
	// The protocol does not promise the list is sorted.
	txns := slices.SortedFunc(slices.Values(block.AbortedTransactions), func(a, b *sarama.AbortedTransaction) int {
		return cmp.Compare(a.FirstOffset, b.FirstOffset)
	})
	next = pos
	for _, set := range block.RecordsSet {
		b := set.RecordBatch
		if b == nil {
			if set.MsgSet != nil {
				return next, false, fmt.Errorf("changelog: %s/%d at offset %d: legacy message format (magic < 2) is not supported", r.topic, r.partition, next)
			}
			continue
		}
		if b.PartialTrailingRecord {
			// sarama keeps a truncated batch only when it is the first it
			// decoded, so whatever precedes it holds no records.
			next = max(next, b.FirstOffset)
			return next, true, nil
		}
		last := b.LastOffset()
		if last < next {
			continue
		}
		for len(txns) > 0 && txns[0].FirstOffset <= last {
			r.aborted[txns[0].ProducerID] = struct{}{}
			txns = txns[1:]
		}
		// The batch's offset range counts even when compaction left
		// holes in it: LastOffsetDelta is kept.
		next = last + 1
		if b.Control {
			abort, err := isAbortMarker(b)
			if err != nil {
				return next, false, fmt.Errorf("changelog: %s/%d: control batch at offset %d: %w", r.topic, r.partition, b.FirstOffset, err)
			}
			if abort {
				delete(r.aborted, b.ProducerID)
			}
			continue
		}
		if _, ok := r.aborted[b.ProducerID]; ok && b.IsTransactional {
			continue
		}
		for _, rec := range b.Records {
			if off := b.FirstOffset + rec.OffsetDelta; off >= pos {
				r.recs = append(r.recs, Record{Key: rec.Key, Value: rec.Value, Offset: off,
					Time: recordTime(b, rec), Stamped: hasTimeHeader(rec.Headers)})
			}
		}
	}
	if len(block.RecordsSet) == 0 {
		// sarama drops record batches without records from RecordsSet:
		// the empty batches the log cleaner keeps as the last batch of a
		// producer. When a fetch held nothing else, only the offset after
		// the last decoded batch tells how far it reached.
		if n, ok := decodedNext(block); ok && n > next {
			next = n
		}
	}
	return next, block.Partial, nil
}

// isAbortMarker reports whether control batch b is a transaction's abort
// marker. The control record's key is a version (int16) and a type
// (int16): 0 abort, 1 commit; other types are ignored, as Kafka's
// consumers do.
func isAbortMarker(b *sarama.RecordBatch) (bool, error) {
	if len(b.Records) == 0 {
		return false, errors.New("no control record")
	}
	key := b.Records[0].Key
	if len(key) < 4 {
		return false, fmt.Errorf("control record key of %d bytes, want at least 4", len(key))
	}
	return binary.BigEndian.Uint16(key[2:4]) == 0, nil
}

// decodedNext returns the offset after the last record batch sarama
// decoded for block, dropped ones included: the unexported field its own
// consumer uses for the same purpose (FetchResponseBlock.recordsNextOffset
// in v1.61.1). Reading an unexported field through reflect is allowed;
// when a sarama upgrade renames it, ok is false and the stall guard of
// ReadTo reports the problem instead of hanging, and the unit test that
// pins it fails.
func decodedNext(block *sarama.FetchResponseBlock) (next int64, ok bool) {
	f := reflect.ValueOf(block).Elem().FieldByName("recordsNextOffset")
	if !f.IsValid() || f.Kind() != reflect.Pointer || f.Type().Elem().Kind() != reflect.Int64 || f.IsNil() {
		return 0, false
	}
	return f.Elem().Int(), true
}

// stableOffset is the block's last stable offset, or its high watermark
// when the broker sent none.
func stableOffset(block *sarama.FetchResponseBlock) int64 {
	if block.LastStableOffset >= 0 {
		return block.LastStableOffset
	}
	return block.HighWaterMarkOffset
}

// retry calls op until it succeeds, fails with an error that waiting
// cannot fix, or has failed r.attempts times in a row; between attempts it
// refreshes the topic's metadata (the leader may have moved) and backs
// off. ctx is checked before every attempt.
func (r *Reader) retry(ctx context.Context, op func() error) error {
	backoff := r.backoff
	for attempt := 1; ; attempt++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		err := op()
		if err == nil || !retriable(err) {
			return err
		}
		if attempt >= r.attempts {
			return fmt.Errorf("giving up after %d attempts: %w", attempt, err)
		}
		// A failed refresh shows up as the next attempt's error.
		_ = r.client.RefreshMetadata(r.topic)
		if ctxErr := sleep(ctx, backoff); ctxErr != nil {
			return fmt.Errorf("%w (retrying after: %w)", ctxErr, err)
		}
		backoff = min(2*backoff, r.maxBackoff)
	}
}

// retriable reports whether err may go away by itself: a moved or
// unavailable leader, a timeout, a lost connection.
func retriable(err error) bool {
	var kerr sarama.KError
	if errors.As(err, &kerr) {
		switch kerr {
		case sarama.ErrNotLeaderForPartition, sarama.ErrLeaderNotAvailable,
			sarama.ErrUnknownTopicOrPartition, sarama.ErrFencedLeaderEpoch,
			sarama.ErrUnknownLeaderEpoch, sarama.ErrOffsetNotAvailable,
			sarama.ErrReplicaNotAvailable, sarama.ErrNotEnoughReplicas,
			sarama.ErrRequestTimedOut, sarama.ErrBrokerNotAvailable,
			sarama.ErrNetworkException, sarama.ErrKafkaStorageError,
			sarama.ErrThrottlingQuotaExceeded:
			return true
		}
		return false
	}
	// Errors without a Kafka error code come from the connection
	// (refused, reset, timed out, not connected) or from finding the
	// leader (no broker reachable); all are worth another try, except a
	// closed client and a cancelled context.
	return !errors.Is(err, sarama.ErrClosedClient) &&
		!errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded)
}

// sleep waits for d or until ctx ends, and returns ctx.Err() in that case.
func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// recordTime is a record's timestamp in milliseconds: the broker's
// append time, the batch's largest, for a topic that keeps that
// (message.timestamp.type=LogAppendTime), else the producer's.
func recordTime(b *sarama.RecordBatch, rec *sarama.Record) int64 {
	if b.LogAppendTime {
		return b.MaxTimestamp.UnixMilli()
	}
	return b.FirstTimestamp.Add(rec.TimestampDelta).UnixMilli()
}

// hasTimeHeader reports whether a changelog record carries TimeHeader.
func hasTimeHeader(hs []*sarama.RecordHeader) bool {
	for _, h := range hs {
		if h != nil && string(h.Key) == TimeHeader {
			return true
		}
	}
	return false
}
