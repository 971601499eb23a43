package schema

// Part says which part of a record a schema describes.
type Part uint8

// Parts of a record. The zero value is Value, the common case.
const (
	Value Part = iota
	Key
)

// String returns "key" or "value", the suffix of the part's subjects.
func (p Part) String() string {
	if p == Key {
		return "key"
	}
	return "value"
}

// TopicSubject returns the subject of the key or value schema of records in
// topic: "<topic>-key" or "<topic>-value", Confluent's TopicNameStrategy,
// so weir's records and those of other clients share subjects.
func TopicSubject(topic string, p Part) string { return topic + "-" + p.String() }

// StoreSubject returns the subject of the key or value schema of a state
// store: "<application id>-<store>-key" or "-value". They do not depend on
// the changelog topic's name, so they stay stable if it ever changes.
func StoreSubject(applicationID, store string, p Part) string {
	return applicationID + "-" + store + "-" + p.String()
}
