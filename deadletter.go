package weir

import "github.com/weirstream/weir/internal/task"

// The headers a dead-letter record gains (see [DeadLetter]), after the
// failed input record's own headers. Values are UTF-8 text; numbers are
// decimal.
const (
	// DeadLetterHeaderApplication is the application id.
	DeadLetterHeaderApplication = task.HeaderApplication
	// DeadLetterHeaderTask is the task that failed, as "<sub-topology>_<partition>".
	DeadLetterHeaderTask = task.HeaderTask
	// DeadLetterHeaderKind is what failed: "deserialization",
	// "timestamp", "processing" or "production".
	DeadLetterHeaderKind = task.HeaderKind
	// DeadLetterHeaderTopic, DeadLetterHeaderPartition and
	// DeadLetterHeaderOffset are the input record's coordinates; absent
	// for a punctuator's refused record, which has no input record.
	DeadLetterHeaderTopic     = task.HeaderTopic
	DeadLetterHeaderPartition = task.HeaderPartition
	DeadLetterHeaderOffset    = task.HeaderOffset
	// DeadLetterHeaderTimestamp is the input record's timestamp, in Unix
	// milliseconds (the dead-letter record keeps it as its own timestamp
	// too).
	DeadLetterHeaderTimestamp = task.HeaderTimestamp
	// DeadLetterHeaderNode is the node that failed: the source for
	// deserialization and timestamp errors, the processor (or sink) that
	// returned the error, or the punctuator whose record was refused.
	DeadLetterHeaderNode = task.HeaderNode
	// DeadLetterHeaderSink is the topic that refused an output record
	// (production errors only).
	DeadLetterHeaderSink = task.HeaderSink
	// DeadLetterHeaderSchemaID is the schema id the record's frame names,
	// when a registry serde failed on it.
	DeadLetterHeaderSchemaID = task.HeaderSchemaID
	// DeadLetterHeaderMessage is the error. weir's errors name
	// coordinates, never payloads.
	DeadLetterHeaderMessage = task.HeaderMessage
)
