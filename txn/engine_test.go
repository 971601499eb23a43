package txn

import (
	"errors"
	"fmt"
	"testing"

	"github.com/IBM/sarama"

	"github.com/weirstream/weir/internal/produce"
)

// TestDeliveredCountsAndClassifies feeds batch results to a Producer on
// weir's producer as its loop would, and checks what Err, TakeRefused,
// the count in flight and LastCommitted's source make of them.
func TestDeliveredCountsAndClassifies(t *testing.T) {
	t.Parallel()
	msgs := func(n int) []*sarama.ProducerMessage {
		ms := make([]*sarama.ProducerMessage, n)
		for i := range ms {
			ms[i] = &sarama.ProducerMessage{Topic: "out", Value: sarama.StringEncoder("v")}
		}
		return ms
	}
	tp := produce.Partition{Topic: "out", Partition: 2}
	tooLarge := fmt.Errorf("producing to out/2: %w", sarama.ErrMessageSizeTooLarge)
	dropped := fmt.Errorf("%w: an earlier batch of out/2 failed: %w", produce.ErrDropped, tooLarge)
	fenced := fmt.Errorf("%w: %w", produce.ErrFatal, sarama.ErrProducerFenced)
	cases := []struct {
		name        string
		results     []produce.Result
		wantErr     error // nil: Err is nil
		wantRefused int
		wantWritten map[Partition]int64
	}{
		{"delivered batches give the last offset", []produce.Result{
			{Partition: tp, Msgs: msgs(3), Offset: 10},
			{Partition: tp, Msgs: msgs(2), Offset: 13},
		}, nil, 0, map[Partition]int64{{"out", 2}: 14}},
		{"a resend the broker had says nowhere", []produce.Result{
			{Partition: tp, Msgs: msgs(2), Offset: -1},
		}, nil, 0, nil},
		{"a refused batch refuses each record; the drops behind it add nothing", []produce.Result{
			{Partition: tp, Msgs: msgs(2), Offset: -1, Err: tooLarge},
			{Partition: tp, Msgs: msgs(3), Offset: -1, Err: dropped},
		}, sarama.ErrMessageSizeTooLarge, 2, nil},
		{"a drop alone fails the transaction, not as a refusal", []produce.Result{
			{Partition: tp, Msgs: msgs(1), Offset: -1, Err: dropped},
		}, produce.ErrDropped, 0, nil},
		{"a fatal batch is fenced", []produce.Result{
			{Partition: tp, Msgs: msgs(1), Offset: -1, Err: fenced},
		}, ErrFenced, 0, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			p := &Producer{transactional: true, idle: make(chan struct{})}
			for _, r := range c.results {
				p.inflight += len(r.Msgs)
			}
			for _, r := range c.results {
				p.delivered(r)
			}
			if p.inflight != 0 {
				t.Errorf("%d records still in flight after every result", p.inflight)
			}
			select {
			case <-p.idle:
			default:
				t.Error("idle was not closed when the last record settled")
			}
			err := p.Err()
			switch {
			case c.wantErr == nil && err != nil:
				t.Errorf("Err = %v, want nil", err)
			case c.wantErr != nil && (!errors.Is(err, c.wantErr) || !errors.Is(err, ErrFailed)):
				t.Errorf("Err = %v, want ErrFailed wrapping %v", err, c.wantErr)
			}
			if _, n := p.TakeRefused(); n != c.wantRefused {
				t.Errorf("TakeRefused counted %d records, want %d", n, c.wantRefused)
			}
			if len(p.written) != len(c.wantWritten) {
				t.Errorf("written = %v, want %v", p.written, c.wantWritten)
			}
			for k, v := range c.wantWritten {
				if p.written[k] != v {
					t.Errorf("written[%v] = %d, want %d", k, p.written[k], v)
				}
			}
		})
	}
}

// TestDeliveredSetsOffsets checks that each delivered record learns its
// offset, as sarama's producer tells it.
func TestDeliveredSetsOffsets(t *testing.T) {
	t.Parallel()
	ms := []*sarama.ProducerMessage{{Topic: "out"}, {Topic: "out"}, {Topic: "out"}}
	p := &Producer{transactional: true, idle: make(chan struct{}), inflight: len(ms)}
	p.delivered(produce.Result{Partition: produce.Partition{Topic: "out"}, Msgs: ms, Offset: 40})
	for i, m := range ms {
		if m.Offset != int64(40+i) {
			t.Errorf("record %d: offset %d, want %d", i, m.Offset, 40+i)
		}
	}
}
