package weir

import (
	"errors"
	"fmt"
	"testing"

	"github.com/weirstream/weir/internal/task"
	"github.com/weirstream/weir/internal/topics"
)

// Run reports the runtime's errors as the public types, every field kept,
// however deep they are wrapped.
func TestPublicErrorKeepsEveryField(t *testing.T) {
	t.Parallel()
	cause := errors.New("cause")
	re := &task.RecordError{Task: "0_1", Node: "n", Topic: "in", Partition: 1, Offset: 7, Err: cause}
	var gotRE *RecordError
	if err := publicError(fmt.Errorf("wrapped: %w", re)); !errors.As(err, &gotRE) || *gotRE != RecordError(*re) || err.Error() != re.Error() {
		t.Errorf("RecordError: %#v (%v)", gotRE, err)
	}
	pe := &task.ProductionError{Task: "0_1", Topic: "in", Partition: 1, Offset: 7, Punctuator: "p", Sink: "out", Store: "s", Size: 10, Limit: 5, Err: ErrRecordTooLarge}
	var gotPE *ProductionError
	err := publicError(pe)
	if !errors.As(err, &gotPE) || *gotPE != ProductionError(*pe) || !errors.Is(err, ErrRecordTooLarge) || err.Error() != pe.Error() {
		t.Errorf("ProductionError: %#v (%v)", gotPE, err)
	}
	var mt *MissingTopicError
	if err := publicError(&topics.MissingError{Topics: []string{"a"}}); !errors.As(err, &mt) || len(mt.Topics) != 1 || mt.Topics[0] != "a" {
		t.Errorf("MissingTopicError: %v", err)
	}
	var ce *CopartitionError
	if err := publicError(&topics.CopartitionError{Subtopology: 2, Partitions: map[string]int32{"a": 1, "b": 2}}); !errors.As(err, &ce) || ce.Subtopology != 2 || ce.Partitions["b"] != 2 {
		t.Errorf("CopartitionError: %v", err)
	}
	if err := publicError(cause); err != cause {
		t.Errorf("an error of no runtime type changed: %v", err)
	}
}
