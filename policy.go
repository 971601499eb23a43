package weir

import (
	"fmt"
	"slices"

	"github.com/weirstream/weir/internal/task"
)

// Guarantee is the processing guarantee of an application.
type Guarantee int

const (
	// ExactlyOnce commits input offsets, output records and state changes
	// atomically in Kafka transactions: the default. Kafka Streams'
	// exactly_once_v2.
	ExactlyOnce Guarantee = iota
	// AtLeastOnce flushes output and state, then commits input offsets: a
	// crash can repeat the effects of the records processed since the last
	// commit, never lose them. Kafka Streams' at_least_once.
	AtLeastOnce
)

// String returns the guarantee's name as ParseGuarantee reads it.
func (g Guarantee) String() string {
	switch g {
	case ExactlyOnce:
		return "exactly_once"
	case AtLeastOnce:
		return "at_least_once"
	}
	return fmt.Sprintf("Guarantee(%d)", int(g))
}

// ParseGuarantee parses "exactly_once" or "at_least_once".
func ParseGuarantee(s string) (Guarantee, error) {
	switch s {
	case "exactly_once":
		return ExactlyOnce, nil
	case "at_least_once":
		return AtLeastOnce, nil
	}
	return 0, fmt.Errorf("weir: unknown processing guarantee %q (want exactly_once or at_least_once)", s)
}

// ErrorPolicy says what happens to a record that cannot be processed as it
// is: one whose key or value does not deserialize, whose timestamp cannot
// be extracted, on which a processor fails, or an output record Kafka
// refuses. It is Fail, Skip or DeadLetter(topic); the zero value means
// Fail.
type ErrorPolicy string

const (
	// Fail stops the application with an error that names the record's
	// topic, partition and offset (never its contents). The default: a
	// record is never dropped unless the application says so.
	Fail ErrorPolicy = "fail"
	// Skip logs the record's coordinates, counts it and goes on.
	Skip ErrorPolicy = "skip"
)

// ErrorPolicies are the error policies of one topic, in
// Config.TopicErrors; a zero field means the application's policy (the
// Config field of the same name).
type ErrorPolicies struct {
	Deserialization ErrorPolicy // records read from the topic that do not deserialize
	Timestamp       ErrorPolicy // records read from the topic whose timestamp fails
	Processing      ErrorPolicy // records read from the topic that a processor fails on
	Production      ErrorPolicy // records written to the topic that Kafka refuses
}

// DeadLetter writes the input record that failed, with its raw key, value
// and headers, to topic and goes on. The record gains headers that say
// where it came from and why it failed (the DeadLetterHeader* constants); it is
// counted in weir_records_dead_lettered_total. Under ExactlyOnce it is
// written in the transaction that commits the input record's offset, so it
// appears in the topic exactly once, for read_committed readers; at least
// once it may appear more than once after a crash. The topic must exist
// (Run fails at start with a *MissingTopicError otherwise); Kafka's
// refusal of a dead-letter record stops the application, as nothing is
// left to do with it. Kafka Streams' errors.dead.letter.queue.topic.name
// (KIP-1034).
func DeadLetter(topic string) ErrorPolicy { return ErrorPolicy(task.DeadLetter(topic)) }

// DeadLetterTopic returns the topic of a DeadLetter policy, "" for Fail
// and Skip.
func (p ErrorPolicy) DeadLetterTopic() string { return task.Policy(p).DeadLetterTopic() }

// defaultPolicies returns c's application-wide error policies.
func (c *Config) defaultPolicies() ErrorPolicies {
	return ErrorPolicies{c.DeserializationErrors, c.TimestampErrors, c.ProcessingErrors, c.ProductionErrors}
}

// deadLetterTopics returns the topics of c's DeadLetter policies, once
// each, sorted.
func (c *Config) deadLetterTopics() []string {
	var topics []string
	add := func(p ErrorPolicies) {
		for _, p := range []ErrorPolicy{p.Deserialization, p.Timestamp, p.Processing, p.Production} {
			if t := p.DeadLetterTopic(); t != "" && !slices.Contains(topics, t) {
				topics = append(topics, t)
			}
		}
	}
	add(c.defaultPolicies())
	for _, p := range c.TopicErrors {
		add(p)
	}
	slices.Sort(topics)
	return topics
}
