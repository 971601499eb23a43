package processor

import "strings"

// ErrorPolicy says what happens to a record that cannot be processed as it
// is: one whose key or value does not deserialize, whose timestamp cannot
// be extracted, on which a processor fails, or an output record Kafka
// refuses. It is Fail, Skip or DeadLetter(topic); the zero value means
// Fail. weir.Config sets them (weir.ErrorPolicy is this type).
type ErrorPolicy string

const (
	// Fail stops the application with an error that names the record's
	// topic, partition and offset (never its contents). The default: a
	// record is never dropped unless the application says so.
	Fail ErrorPolicy = "fail"
	// Skip logs the record's coordinates, counts it and goes on.
	Skip ErrorPolicy = "skip"
	// deadLetterPrefix starts a DeadLetter policy; the topic follows.
	deadLetterPrefix = "dead-letter:"
)

// DeadLetter writes the input record that failed, with its raw key, value
// and headers, to topic and goes on. The record gains headers that say
// where it came from and why it failed (weir's DeadLetterHeader*
// constants); it is counted in weir_records_dead_lettered_total. Under
// exactly once it is written in the transaction that commits the input
// record's offset, so it appears in the topic exactly once, for
// read_committed readers; at least once it may appear more than once after
// a crash. The topic must exist (Run fails at start with a
// *weir.MissingTopicError otherwise); Kafka's refusal of a dead-letter
// record stops the application, as nothing is left to do with it. Kafka
// Streams' errors.dead.letter.queue.topic.name (KIP-1034).
func DeadLetter(topic string) ErrorPolicy { return ErrorPolicy(deadLetterPrefix + topic) }

// DeadLetterTopic returns the topic of a DeadLetter policy, "" for Fail
// and Skip.
func (p ErrorPolicy) DeadLetterTopic() string {
	topic, ok := strings.CutPrefix(string(p), deadLetterPrefix)
	if !ok {
		return ""
	}
	return topic
}

// Fails reports whether p stops at a failed record: Fail, and the zero
// value, which means the default.
func (p ErrorPolicy) Fails() bool { return p == Fail || p == "" }

// Valid reports whether p is Fail, Skip, DeadLetter with a topic, or the
// zero value.
func (p ErrorPolicy) Valid() bool {
	return p.Fails() || p == Skip || p.DeadLetterTopic() != ""
}

// ErrorPolicies are the error policies of one topic (weir.Config's
// TopicErrors); a zero field means the application's policy (the
// weir.Config field of the same name).
type ErrorPolicies struct {
	Deserialization ErrorPolicy // records read from the topic that do not deserialize
	Timestamp       ErrorPolicy // records read from the topic whose timestamp fails
	Processing      ErrorPolicy // records read from the topic that a processor fails on
	Production      ErrorPolicy // records written to the topic that Kafka refuses
}
