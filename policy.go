package weir

import (
	"fmt"
	"slices"

	"github.com/weirstream/weir/processor"
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

// ErrorPolicy says what happens to a record that cannot be processed as
// it is: Fail, Skip or DeadLetter(topic); the zero value means Fail. It is
// processor.ErrorPolicy, whose documentation says what each does.
type ErrorPolicy = processor.ErrorPolicy

// The error policies (processor.Fail and processor.Skip).
const (
	// Fail stops the application with an error that names the record's
	// topic, partition and offset (never its contents). The default.
	Fail = processor.Fail
	// Skip logs the record's coordinates, counts it and goes on.
	Skip = processor.Skip
)

// ErrorPolicies are the error policies of one topic, in
// Config.TopicErrors; a zero field means the application's policy (the
// Config field of the same name). It is processor.ErrorPolicies.
type ErrorPolicies = processor.ErrorPolicies

// DeadLetter writes the input record that failed, with its raw key, value
// and headers, to topic and goes on (processor.DeadLetter says how). The
// topic must exist: Run fails at start with a *MissingTopicError
// otherwise.
func DeadLetter(topic string) ErrorPolicy { return processor.DeadLetter(topic) }

// defaultPolicies returns c's application-wide error policies.
func (c *Config) defaultPolicies() ErrorPolicies {
	return ErrorPolicies{Deserialization: c.DeserializationErrors, Timestamp: c.TimestampErrors, Processing: c.ProcessingErrors, Production: c.ProductionErrors}
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
