package integration

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/weirstream/weir/weirtest/kafka"
)

// The runbook's Kafka tools run on the repository's cluster through
// env/kafka-tool.sh (docs/operations.md): it has no bin/ of its own.
func TestKafkaToolRunsOnTheCluster(t *testing.T) {
	t.Parallel()
	c := kafka.Cluster(t)
	topic := c.Name(t, "tool")
	c.CreateTopic(t, topic, 3, nil)
	run := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("env/kafka-tool.sh", append(args[:1:1], append([]string{"--bootstrap-server", c.Brokers[0]}, args[1:]...)...)...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("kafka-tool.sh %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	if out := run("topics", "--describe", "--topic", topic); !strings.Contains(out, "PartitionCount: 3") {
		t.Fatalf("topics --describe %s:\n%s", topic, out)
	}
	if out := run("configs", "--describe", "--entity-type", "topics", "--entity-name", topic); !strings.Contains(out, topic) {
		t.Fatalf("configs --describe %s:\n%s", topic, out)
	}
	run("transactions", "list")
	run("consumer-groups", "--list")
}
