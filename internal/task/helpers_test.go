package task

import (
	"sync"

	"github.com/IBM/sarama"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/weirstream/weir/internal/metrics"
)

// recordingHost is a task.Host with no broker: it keeps what is sent,
// keeps no record for replay and reports no partitions.
type recordingHost struct {
	mu   sync.Mutex
	sent []*sarama.ProducerMessage
}

func (h *recordingHost) Send(m *sarama.ProducerMessage) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.sent = append(h.sent, m)
	return nil
}

func (*recordingHost) Keep(int) bool                            { return false }
func (*recordingHost) ReplayFailure(string, int32, int64) error { return nil }
func (*recordingHost) Wake()                                    {}
func (*recordingHost) PartitionCount(string) (int32, error)     { return 1, nil }

// noSource is a metrics.Source with nothing to report.
type noSource struct{}

func (noSource) Snapshot() metrics.Snapshot { return metrics.Snapshot{} }

// testMetrics registers weir's metrics on reg.
func testMetrics(reg *prometheus.Registry) (*metrics.Metrics, error) {
	return metrics.New(reg, "app", noSource{})
}
