package topics

import (
	"errors"
	"testing"

	"github.com/IBM/sarama"
)

// slowAdmin answers DescribeConfig as a broker that learns of a new topic
// late: UNKNOWN_TOPIC_OR_PARTITION the first unknown times.
type slowAdmin struct {
	sarama.ClusterAdmin
	unknown int
	calls   int
	err     error
}

func (a *slowAdmin) DescribeConfig(sarama.ConfigResource) ([]sarama.ConfigEntry, error) {
	a.calls++
	if a.calls <= a.unknown {
		return nil, &sarama.DescribeConfigError{Err: sarama.ErrUnknownTopicOrPartition}
	}
	if a.err != nil {
		return nil, a.err
	}
	return []sarama.ConfigEntry{{Name: "cleanup.policy", Value: "compact"}}, nil
}

// Several instances starting at once: one creates a changelog, another
// describes it before the broker answering knows it. describe waits for
// the broker rather than failing the start; other errors are returned at
// once.
func TestDescribeWaitsForATopicJustCreated(t *testing.T) {
	t.Parallel()
	r := sarama.ConfigResource{Type: sarama.TopicResource, Name: "app-s-changelog"}
	a := &slowAdmin{unknown: 3}
	entries, err := describe(a, r)
	if err != nil || len(entries) != 1 || a.calls != 4 {
		t.Fatalf("describe = %v, %v after %d calls; want the entries after 4", entries, err, a.calls)
	}
	denied := errors.New("TOPIC_AUTHORIZATION_FAILED")
	b := &slowAdmin{err: denied}
	if _, err := describe(b, r); !errors.Is(err, denied) || b.calls != 1 {
		t.Fatalf("describe = %v after %d calls; want the error at once", err, b.calls)
	}
}
