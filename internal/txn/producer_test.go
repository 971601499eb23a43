package txn

import (
	"context"
	"errors"
	"testing"

	"github.com/IBM/sarama"
)

// fakeProducer is a sarama.AsyncProducer whose transaction calls fail as a
// test says. Sent messages are acknowledged at once, or failed with
// sendErr.
type fakeProducer struct {
	transactional bool
	status        sarama.ProducerTxnStatusFlag
	commitErr     error
	commitStatus  sarama.ProducerTxnStatusFlag // status after a failed commit
	abortErr      error
	sendErr       error
	aborted       int

	input     chan *sarama.ProducerMessage
	successes chan *sarama.ProducerMessage
	errs      chan *sarama.ProducerError
}

func newFake(transactional bool) *fakeProducer {
	f := &fakeProducer{
		transactional: transactional,
		status:        sarama.ProducerTxnFlagReady,
		input:         make(chan *sarama.ProducerMessage),
		successes:     make(chan *sarama.ProducerMessage, 16),
		errs:          make(chan *sarama.ProducerError, 16),
	}
	go func() {
		for m := range f.input {
			if f.sendErr != nil {
				f.errs <- &sarama.ProducerError{Msg: m, Err: f.sendErr}
			} else {
				f.successes <- m
			}
		}
		close(f.successes)
		close(f.errs)
	}()
	return f
}

func (f *fakeProducer) AsyncClose()                               { close(f.input) }
func (f *fakeProducer) Close() error                              { close(f.input); return nil }
func (f *fakeProducer) Input() chan<- *sarama.ProducerMessage     { return f.input }
func (f *fakeProducer) Successes() <-chan *sarama.ProducerMessage { return f.successes }
func (f *fakeProducer) Errors() <-chan *sarama.ProducerError      { return f.errs }
func (f *fakeProducer) IsTransactional() bool                     { return f.transactional }
func (f *fakeProducer) TxnStatus() sarama.ProducerTxnStatusFlag   { return f.status }
func (f *fakeProducer) BeginTxn() error {
	f.status = sarama.ProducerTxnFlagInTransaction
	return nil
}
func (f *fakeProducer) CommitTxn() error {
	if f.commitErr != nil {
		f.status = f.commitStatus
		return f.commitErr
	}
	f.status = sarama.ProducerTxnFlagReady
	return nil
}
func (f *fakeProducer) AbortTxn() error {
	f.aborted++
	if f.abortErr != nil {
		return f.abortErr
	}
	f.status = sarama.ProducerTxnFlagReady
	return nil
}
func (f *fakeProducer) AddOffsetsToTxn(map[string][]*sarama.PartitionOffsetMetadata, string) error {
	return nil
}
func (f *fakeProducer) AddOffsetsToTxnWithGroupMetadata(map[string][]*sarama.PartitionOffsetMetadata, *sarama.ConsumerGroupMetadata) error {
	return nil
}
func (f *fakeProducer) AddMessageToTxn(*sarama.ConsumerMessage, string, *string) error { return nil }
func (f *fakeProducer) AddMessageToTxnWithGroupMetadata(*sarama.ConsumerMessage, *sarama.ConsumerGroupMetadata, *string) error {
	return nil
}

var offsets = map[string]map[int32]int64{"in": {0: 10}}

func TestCommitClassifiesFailures(t *testing.T) {
	t.Parallel()
	abortable := sarama.ProducerTxnFlagInError | sarama.ProducerTxnFlagAbortableError
	fatal := sarama.ProducerTxnFlagInError | sarama.ProducerTxnFlagFatalError
	cases := []struct {
		name         string
		commitErr    error
		commitStatus sarama.ProducerTxnStatusFlag
		abortErr     error
		want         error
		wantAborts   int
	}{
		{"stale generation is abortable", sarama.ErrIllegalGeneration, abortable, nil, ErrAborted, 1},
		{"fatal status is fenced", sarama.ErrOutOfOrderSequenceNumber, fatal, nil, ErrFenced, 0},
		{"PRODUCER_FENCED is fenced", sarama.ErrProducerFenced, sarama.ProducerTxnFlagInError, nil, ErrFenced, 0},
		{"fenced on abort is fenced", sarama.ErrInvalidTxnState, abortable, sarama.ErrProducerFenced, ErrFenced, 1},
		{"abort failing otherwise is ambiguous", sarama.ErrInvalidTxnState, abortable, sarama.ErrRequestTimedOut, ErrAmbiguous, 1},
		{"unknown outcome is ambiguous", sarama.ErrRequestTimedOut, sarama.ProducerTxnFlagEndTransaction, nil, ErrAmbiguous, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			f := newFake(true)
			f.commitErr, f.commitStatus, f.abortErr = c.commitErr, c.commitStatus, c.abortErr
			p := wrap(f)
			defer p.Close()
			if err := p.Send(&sarama.ProducerMessage{Topic: "out"}); err != nil {
				t.Fatal(err)
			}
			if p.OpenFor() <= 0 {
				t.Error("OpenFor is 0 with a transaction open")
			}
			err := p.Commit(context.Background(), offsets, &Group{GroupID: "g"})
			if !errors.Is(err, c.want) {
				t.Fatalf("Commit = %v, want %v", err, c.want)
			}
			if !errors.Is(err, c.commitErr) {
				t.Errorf("Commit = %v does not wrap the cause %v", err, c.commitErr)
			}
			if f.aborted != c.wantAborts {
				t.Errorf("AbortTxn called %d times, want %d", f.aborted, c.wantAborts)
			}
		})
	}
}

func TestCommitSucceedsAndClosesTheTransaction(t *testing.T) {
	t.Parallel()
	f := newFake(true)
	p := wrap(f)
	defer p.Close()
	for range 3 {
		if err := p.Send(&sarama.ProducerMessage{Topic: "out"}); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Commit(context.Background(), offsets, &Group{GroupID: "g"}); err != nil {
		t.Fatal(err)
	}
	if p.OpenFor() != 0 {
		t.Error("OpenFor is not 0 after the commit")
	}
	// With nothing sent and no offsets there is nothing to commit.
	if err := p.Commit(context.Background(), nil, &Group{GroupID: "g"}); err != nil {
		t.Fatal(err)
	}
}

func TestAtLeastOnceCommitReportsDeliveryFailure(t *testing.T) {
	t.Parallel()
	f := newFake(false)
	f.sendErr = sarama.ErrMessageSizeTooLarge
	p := wrap(f)
	defer p.Close()
	if err := p.Send(&sarama.ProducerMessage{Topic: "out"}); err != nil {
		t.Fatal(err)
	}
	if err := p.Commit(context.Background(), nil, nil); !errors.Is(err, sarama.ErrMessageSizeTooLarge) {
		t.Fatalf("Commit = %v, want the delivery error", err)
	}
	// The failure is reported once; the next interval starts clean.
	if err := p.Commit(context.Background(), nil, nil); err != nil {
		t.Fatalf("second Commit = %v", err)
	}
}

func TestSendIntoAFailedTransactionIsClassified(t *testing.T) {
	t.Parallel()
	f := newFake(true)
	f.sendErr = sarama.ErrProducerFenced
	p := wrap(f)
	defer p.Close()
	p.Send(&sarama.ProducerMessage{Topic: "out"})
	p.flushForTest()
	f.status = sarama.ProducerTxnFlagInError | sarama.ProducerTxnFlagFatalError
	if err := p.Send(&sarama.ProducerMessage{Topic: "out"}); !errors.Is(err, ErrFenced) {
		t.Fatalf("Send after a fenced delivery = %v, want ErrFenced", err)
	}
}

// flushForTest waits for the acknowledgements without consuming the error.
func (p *Producer) flushForTest() {
	p.mu.Lock()
	idle := p.idle
	p.mu.Unlock()
	<-idle
}
