package kafka

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"os"
	"os/exec"
)

// These tests need no cluster: they pin the helpers' contracts.

var legalName = regexp.MustCompile(`^[A-Za-z0-9]+(-[A-Za-z0-9]+)*$`)

func TestNameIsLegalUniqueAndBounded(t *testing.T) {
	c := &Env{}
	for _, sub := range []string{"plain", "with spaces/and.dots_and:colons", strings.Repeat("very-long-", 40)} {
		t.Run(sub, func(t *testing.T) {
			a, b := c.Name(t, "it.topic"), c.Name(t, "it.topic")
			if a == b {
				t.Errorf("two calls gave the same name %q", a)
			}
			for _, n := range []string{a, b} {
				if !legalName.MatchString(n) {
					t.Errorf("name %q has characters outside [A-Za-z0-9-] or empty parts", n)
				}
				if len(n) > maxNameLen {
					t.Errorf("name %q is %d characters, more than %d", n, len(n), maxNameLen)
				}
				if !strings.HasPrefix(n, "it-topic-TestNameIsLegalUniqueAndBounded-") {
					t.Errorf("name %q does not start with the prefix and the test name", n)
				}
			}
		})
	}
}

// The design requires Kafka's Java default partitioner (murmur2). The brief
// this kit was first written from named sarama.NewReferenceHashPartitioner,
// which is FNV-1a; this test pins that SaramaConfig partitions like Java.
func TestSaramaConfigPartitionsLikeJava(t *testing.T) {
	cfg := (&Env{}).SaramaConfig()
	if err := cfg.Validate(); err != nil {
		t.Fatalf("SaramaConfig does not validate: %v", err)
	}
	// murmur2 values of org.apache.kafka.common.utils.Utils.murmur2, as
	// unsigned 32-bit integers (taken from sarama's own test).
	for key, murmur2 := range map[string]uint32{
		"foo": 597841616, "bar": 988958145, "baz": 1973573280,
		"kafka": 3496464228, "sarama": 770765511,
	} {
		const partitions = 7
		want := int32(murmur2&0x7fffffff) % partitions
		p := cfg.Producer.Partitioner("t")
		got, err := p.Partition(&sarama.ProducerMessage{Key: sarama.StringEncoder(key)}, partitions)
		if err != nil {
			t.Fatalf("partition %q: %v", key, err)
		}
		if got != want {
			t.Errorf("key %q goes to partition %d of %d, Java's DefaultPartitioner picks %d", key, got, partitions, want)
		}
	}
}

// recorder is a testing.TB whose Fatalf records instead of stopping.
type recorder struct {
	testing.TB
	fatal string
}

func (r *recorder) Helper() {}

func (r *recorder) Fatalf(format string, args ...any) { r.fatal = fmt.Sprintf(format, args...) }

func TestEventuallyPollsUntilTrue(t *testing.T) {
	calls := 0
	Eventually(t, 5*time.Second, time.Millisecond, func() (bool, string) {
		calls++
		return calls == 3, fmt.Sprintf("call %d", calls)
	})
	if calls != 3 {
		t.Errorf("cond called %d times, want 3", calls)
	}
}

func TestEventuallyFailsWithLastMessage(t *testing.T) {
	r := &recorder{TB: t}
	calls := 0
	start := time.Now()
	Eventually(r, 30*time.Millisecond, 5*time.Millisecond, func() (bool, string) {
		calls++
		return false, fmt.Sprintf("call %d", calls)
	})
	if want := fmt.Sprintf("call %d", calls); !strings.HasSuffix(r.fatal, want) {
		t.Errorf("failure message %q does not end with the last message %q", r.fatal, want)
	}
	if elapsed := time.Since(start); elapsed < 30*time.Millisecond || elapsed > 5*time.Second {
		t.Errorf("gave up after %v, want about 30ms", elapsed)
	}
}

// TestMissingClusterFailsUnderCI: with no cluster at all and CI=true, a
// test asking for one fails, never skips, so a CI run cannot pass by
// skipping its integration tests. The check runs in a child process of
// this test binary, whose environment names no cluster and no Docker
// daemon it could reach.
func TestMissingClusterFailsUnderCI(t *testing.T) {
	if os.Getenv("WEIRTEST_MISSING_CLUSTER_CHILD") == "1" {
		Cluster(t)
		return
	}
	t.Parallel()
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "WEIR_") && !strings.HasPrefix(kv, "CI=") && !strings.HasPrefix(kv, "DOCKER_HOST=") {
			env = append(env, kv)
		}
	}
	env = append(env, "CI=true", "WEIRTEST_MISSING_CLUSTER_CHILD=1", "DOCKER_HOST=unix:///nonexistent/docker.sock", "TESTCONTAINERS_RYUK_DISABLED=true")
	cmd := exec.Command(os.Args[0], "-test.run=^TestMissingClusterFailsUnderCI$", "-test.v")
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "--- FAIL: TestMissingClusterFailsUnderCI") || strings.Contains(string(out), "--- SKIP") {
		t.Fatalf("a test asking for a missing cluster under CI=true: %v\n%s\nwant it failed, not skipped", err, out)
	}
}
