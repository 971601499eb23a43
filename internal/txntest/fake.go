// Package txntest is a fake sarama.AsyncProducer for tests of package txn
// and of the runtime around it, with no broker.
//
// It is internal on purpose. It models sarama's transaction state machine
// only as far as weir's tests need (BeginTxn and AddOffsets never fail,
// every record is acknowledged at once, the exported fields are set
// between calls and not synchronised), so as a public test helper it would
// promise a fidelity it does not have, and tests of users' loops built on
// it could pass where sarama fails. Users test their loops against a real
// protocol implementation instead: an embedded broker (franz-go's kfake)
// in unit tests, as weir's examples do, and a real Kafka broker in
// integration tests.
package txntest

import (
	"slices"
	"sync"
	"time"

	"github.com/IBM/sarama"
)

// Fake is a sarama.AsyncProducer whose transaction calls fail as a
// test says. Sent messages are acknowledged at once, or failed with
// SendErr.
type Fake struct {
	transactional bool
	// Status is what TxnStatus reports; CommitErr, AbortErr and SendErr
	// fail CommitTxn, AbortTxn and every sent message; CommitStatus is the
	// status after a failed commit. Aborted and Committed count calls.
	Status       sarama.ProducerTxnStatusFlag
	CommitErr    error
	CommitStatus sarama.ProducerTxnStatusFlag
	// CommitDelay is how long CommitTxn takes.
	CommitDelay time.Duration
	AbortErr    error
	SendErr     error
	Aborted     int
	Committed   int
	Closed      int
	// Gate, when set before the first Send, holds every acknowledgement
	// until it is closed: records sent meanwhile are in flight together,
	// as a batch is. Up to 16 records wait in the input.
	Gate chan struct{}

	mu   sync.Mutex
	sent []*sarama.ProducerMessage

	input     chan *sarama.ProducerMessage
	successes chan *sarama.ProducerMessage
	errs      chan *sarama.ProducerError
}

// New returns a Fake; transactional is what IsTransactional reports.
func New(transactional bool) *Fake {
	f := &Fake{
		transactional: transactional,
		Status:        sarama.ProducerTxnFlagReady,
		input:         make(chan *sarama.ProducerMessage, 16),
		successes:     make(chan *sarama.ProducerMessage, 16),
		errs:          make(chan *sarama.ProducerError, 16),
	}
	go func() {
		for m := range f.input {
			f.mu.Lock()
			f.sent = append(f.sent, m)
			f.mu.Unlock()
			if f.Gate != nil {
				<-f.Gate
			}
			if f.SendErr != nil {
				f.errs <- &sarama.ProducerError{Msg: m, Err: f.SendErr}
			} else {
				f.successes <- m
			}
		}
		close(f.successes)
		close(f.errs)
	}()
	return f
}

// Sent returns the records sent so far, in the order they were sent.
func (f *Fake) Sent() []*sarama.ProducerMessage {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.sent)
}

func (f *Fake) AsyncClose()                               { close(f.input) }
func (f *Fake) Close() error                              { f.Closed++; close(f.input); return nil }
func (f *Fake) Input() chan<- *sarama.ProducerMessage     { return f.input }
func (f *Fake) Successes() <-chan *sarama.ProducerMessage { return f.successes }
func (f *Fake) Errors() <-chan *sarama.ProducerError      { return f.errs }
func (f *Fake) IsTransactional() bool                     { return f.transactional }
func (f *Fake) TxnStatus() sarama.ProducerTxnStatusFlag   { return f.Status }
func (f *Fake) BeginTxn() error {
	f.Status = sarama.ProducerTxnFlagInTransaction
	return nil
}
func (f *Fake) CommitTxn() error {
	f.Committed++
	time.Sleep(f.CommitDelay)
	if f.CommitErr != nil {
		f.Status = f.CommitStatus
		return f.CommitErr
	}
	f.Status = sarama.ProducerTxnFlagReady
	return nil
}
func (f *Fake) AbortTxn() error {
	f.Aborted++
	if f.AbortErr != nil {
		return f.AbortErr
	}
	f.Status = sarama.ProducerTxnFlagReady
	return nil
}
func (f *Fake) AddOffsetsToTxn(map[string][]*sarama.PartitionOffsetMetadata, string) error {
	return nil
}
func (f *Fake) AddOffsetsToTxnWithGroupMetadata(map[string][]*sarama.PartitionOffsetMetadata, *sarama.ConsumerGroupMetadata) error {
	return nil
}
func (f *Fake) AddMessageToTxn(*sarama.ConsumerMessage, string, *string) error { return nil }
func (f *Fake) AddMessageToTxnWithGroupMetadata(*sarama.ConsumerMessage, *sarama.ConsumerGroupMetadata, *string) error {
	return nil
}
