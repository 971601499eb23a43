package txn

import (
	"errors"
	"fmt"
	"strings"

	"github.com/IBM/sarama"

	"github.com/weirstream/weir/internal/produce"
)

// Errors a Producer returns, wrapping their cause. Test them with
// errors.Is; the package documentation says what the caller does after
// each.
var (
	// ErrAborted is a commit that failed and was aborted: nothing of the
	// transaction happened and the producer is ready for the next one.
	// Reprocess from the last committed offsets.
	ErrAborted = errors.New("txn: transaction aborted")
	// ErrFenced is a producer fenced by a newer producer with the same
	// transactional id, or by the coordinator after its transaction timed
	// out. The producer is dead: replace it ([Producer.Rebuild]) and
	// reprocess from the last committed offsets.
	ErrFenced = errors.New("txn: producer fenced")
	// ErrAmbiguous is a commit whose outcome is unknown. The producer must
	// not be used again: replace it ([Producer.Rebuild]) and reprocess
	// from the last committed offsets.
	ErrAmbiguous = errors.New("txn: transaction outcome unknown")
	// ErrFailed is a transaction (or, at least once, a commit interval) in
	// which a record could not be delivered: it can never commit. Send and
	// Err return it until Commit, which aborts the transaction, or Abort
	// ends it.
	ErrFailed = errors.New("txn: a record of the transaction failed")
	// ErrClosed is any call on a closed producer.
	ErrClosed = errors.New("txn: producer closed")
)

// RefusedError is a record that can never be delivered as it is: the
// broker refused it (too large for the topic, or invalid, such as a record
// without key on a compacted topic) or it exceeds the client's
// Producer.MaxMessageBytes. Retrying the same record fails the same way;
// [Producer.TakeRefused] returns these records to a caller that skips
// them.
type RefusedError struct {
	// Msg is the refused record, as given to Send; its Metadata field is
	// the caller's, to tell which input the record came from.
	Msg *sarama.ProducerMessage
	// Err is sarama's error.
	Err error
}

// Error names the topic and the record's size, never its contents. It
// has no package prefix: it is read wrapped, after ErrFailed's.
func (e *RefusedError) Error() string {
	return fmt.Sprintf("record of %d bytes refused by %s: %v", e.Msg.ByteSize(2), e.Msg.Topic, e.Err)
}

// Unwrap returns sarama's error.
func (e *RefusedError) Unwrap() error { return e.Err }

// refused reports the errors that a record cannot outlive: retrying it
// meets the same limit or the same validation.
func refused(err error) bool {
	var ce sarama.ConfigurationError
	return errors.As(err, &ce) && strings.Contains(string(ce), "MaxMessageBytes") ||
		errors.Is(err, sarama.ErrMessageSizeTooLarge) || errors.Is(err, sarama.ErrMessageSetSizeTooLarge) ||
		errors.Is(err, sarama.ErrInvalidRecord) || errors.Is(err, sarama.ErrInvalidMessage) ||
		errors.Is(err, sarama.ErrInvalidTimestamp)
}

// deliveryError describes a failed delivery.
func deliveryError(e *sarama.ProducerError) error {
	if refused(e.Err) {
		return &RefusedError{Msg: e.Msg, Err: e.Err}
	}
	return fmt.Errorf("producing to %s: %w", e.Msg.Topic, e.Err)
}

// classify marks errors that fence the producer: sarama's, and those
// after which weir's producer is unusable.
func classify(err error) error {
	if errors.Is(err, sarama.ErrProducerFenced) || errors.Is(err, produce.ErrFatal) {
		return fmt.Errorf("%w: %w", ErrFenced, err)
	}
	return err
}
