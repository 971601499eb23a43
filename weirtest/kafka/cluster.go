package kafka

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Env describes the Kafka broker and the schema registry that the tests of
// one binary share. [Cluster] returns the same *Env to every test; treat it
// as read-only. Its methods are safe for concurrent use. [Embedded] returns
// an Env of its own per test, with no registry.
type Env struct {
	// Brokers are the bootstrap addresses (host:port) of the Kafka cluster.
	Brokers []string
	// RegistryURL is the base URL of the registry's Confluent-compatible
	// API, without a trailing slash: subjects live at RegistryURL+"/subjects".
	RegistryURL string
	// KafkaVersion labels the broker, e.g. "4.4.0"; empty when unknown. It is
	// informational only: clients speak the protocol versions the broker
	// advertises.
	KafkaVersion string
	// RegistryVersion labels the registry, e.g. "Apicurio Registry 3.3.3";
	// empty when unknown. Informational only.
	RegistryVersion string
	// Source says where the cluster came from: [SourceEnv],
	// [SourceTestcontainers] or [SourceEmbedded].
	Source string
}

// Values of [Env.Source].
const (
	// SourceEnv: the cluster was given by WEIR_BOOTSTRAP_SERVERS and
	// WEIR_SCHEMA_REGISTRY_URL (for example the one `make kafka-up` starts).
	SourceEnv = "env"
	// SourceTestcontainers: the kit started the cluster in Docker and
	// terminates it when [Main] returns.
	SourceTestcontainers = "testcontainers"
	// SourceEmbedded: an in-process fake broker started by [Embedded].
	SourceEmbedded = "embedded"
)

// Environment variables read by the kit.
const (
	envBootstrapServers = "WEIR_BOOTSTRAP_SERVERS"
	envRegistryURL      = "WEIR_SCHEMA_REGISTRY_URL"
	envKafkaVersion     = "WEIR_KAFKA_VERSION"
	envRegistryVersion  = "WEIR_REGISTRY_VERSION"
	envCI               = "CI"
)

// reachTimeout bounds each reachability check of a cluster given by the
// environment, so a stale env.sh fails fast instead of stalling every test.
const reachTimeout = 5 * time.Second

// resolution is the outcome of looking for a cluster, computed once per test
// binary. Exactly one of cluster, err and missing is set.
type resolution struct {
	// cluster is the usable cluster.
	cluster *Env
	// err says why a cluster that was configured or started is unusable;
	// tests fail with it, in or out of CI.
	err error
	// missing says why no cluster is available at all; tests skip with it,
	// or fail under CI.
	missing string
	// stop terminates containers the kit started; nil for the env path.
	// It may be set together with err (a half-started cluster).
	stop func(context.Context) error
}

var (
	resolveOnce sync.Once
	resolved    resolution
)

// resolve finds the cluster on the first call and returns the same outcome
// to every later one. Safe for concurrent use.
func resolve() *resolution {
	resolveOnce.Do(func() { resolved = lookup() })
	return &resolved
}

// lookup applies the resolution order of the package documentation.
func lookup() resolution {
	brokers, registry := os.Getenv(envBootstrapServers), os.Getenv(envRegistryURL)
	switch {
	case brokers != "" && registry != "":
		c := &Env{
			Brokers:         splitBrokers(brokers),
			RegistryURL:     strings.TrimRight(registry, "/"),
			KafkaVersion:    os.Getenv(envKafkaVersion),
			RegistryVersion: os.Getenv(envRegistryVersion),
			Source:          SourceEnv,
		}
		if err := checkReachable(c); err != nil {
			return resolution{err: fmt.Errorf("weirtest/kafka: the cluster given by %s and %s is not reachable (is it running? `make kafka-up` starts it): %w",
				envBootstrapServers, envRegistryURL, err)}
		}
		return resolution{cluster: c}
	case brokers != "" || registry != "":
		return resolution{err: fmt.Errorf("weirtest/kafka: %s and %s must be set together (%s=%q, %s=%q)",
			envBootstrapServers, envRegistryURL, envBootstrapServers, brokers, envRegistryURL, registry)}
	}
	if err := dockerReachable(); err != nil {
		return resolution{missing: fmt.Sprintf(
			"set %s and %s (`make kafka-up` starts Kafka and Apicurio Registry and writes them to ~/.cache/weir/env/env.sh; source that file), or start a Docker daemon for Testcontainers (no Docker: %v)",
			envBootstrapServers, envRegistryURL, err)}
	}
	c, stop, err := startContainers()
	if err != nil {
		return resolution{err: fmt.Errorf("weirtest/kafka: starting the cluster with Testcontainers: %w", err), stop: stop}
	}
	return resolution{cluster: c, stop: stop}
}

// splitBrokers turns "a:1, b:2," into ["a:1" "b:2"].
func splitBrokers(s string) []string {
	var out []string
	for b := range strings.SplitSeq(s, ",") {
		if b = strings.TrimSpace(b); b != "" {
			out = append(out, b)
		}
	}
	return out
}

// checkReachable makes sure that at least one broker accepts TCP
// connections and that the registry lists its subjects.
func checkReachable(c *Env) error {
	var dialErrs []error
	reached := false
	for _, b := range c.Brokers {
		conn, err := net.DialTimeout("tcp", b, reachTimeout)
		if err != nil {
			dialErrs = append(dialErrs, err)
			continue
		}
		_ = conn.Close()
		reached = true
		break
	}
	if !reached {
		return fmt.Errorf("no broker of %v answers: %w", c.Brokers, errors.Join(dialErrs...))
	}
	ctx, cancel := context.WithTimeout(context.Background(), reachTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.RegistryURL+"/subjects", nil)
	if err != nil {
		return fmt.Errorf("registry url %q: %w", c.RegistryURL, err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("registry at %s: %w", c.RegistryURL, err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("registry at %s: GET /subjects answered %s", c.RegistryURL, resp.Status)
	}
	return nil
}

// inCI reports whether CI is set to a true value ("true", "1", ...).
func inCI() bool {
	ci, err := strconv.ParseBool(os.Getenv(envCI))
	return err == nil && ci
}

// Cluster returns the cluster shared by every test of the binary, finding or
// starting it on the first call (see the package documentation for the
// order). When no cluster is available the test is skipped, with a message
// saying how to get one, or fails when CI=true. A cluster that is
// configured but unreachable, or that Testcontainers failed to start, fails
// the test in any case. Safe for concurrent use by parallel tests; call it
// from the test's goroutine.
func Cluster(t testing.TB) *Env {
	t.Helper()
	r := resolve()
	switch {
	case r.cluster != nil:
		return r.cluster
	case r.err != nil:
		t.Fatalf("%v", r.err)
	case inCI():
		t.Fatalf("weirtest/kafka: the Kafka cluster is missing, and integration tests never skip when %s=true: %s", envCI, r.missing)
	default:
		t.Skipf("weirtest/kafka: no Kafka cluster, skipping: %s", r.missing)
	}
	return nil
}

// Main runs the tests of a package that uses [Cluster]; call it from
// TestMain:
//
//	func TestMain(m *testing.M) { kafka.Main(m) }
//
// It resolves the cluster before the first test (so starting containers is
// not charged to one test's time), prints one line to stdout saying which
// cluster the package uses, runs the tests, terminates any containers the
// kit started, and exits the process with the tests' exit code. Without
// Main, [Cluster] still works, but started containers are left for
// Testcontainers' reaper to remove.
func Main(m *testing.M) {
	os.Exit(run(m))
}

// run is Main without the exit, so that its deferred calls run.
func run(m *testing.M) int {
	r := resolve()
	fmt.Println(r.describe())
	code := m.Run()
	if r.stop != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := r.stop(ctx); err != nil {
			// The tests ran; a container that outlives them is Ryuk's to
			// remove, not a reason to fail the run.
			fmt.Fprintf(os.Stderr, "weirtest/kafka: terminating containers: %v\n", err)
		}
	}
	return code
}

// describe is the line Main prints, e.g. "weirtest/kafka: Kafka 4.4.0 at
// 127.0.0.1:19092 (env), Apicurio Registry 3.3.3 at http://...".
func (r *resolution) describe() string {
	switch {
	case r.cluster != nil:
		c := r.cluster
		kafka := "Kafka"
		if c.KafkaVersion != "" {
			kafka += " " + c.KafkaVersion
		}
		registry := c.RegistryVersion
		if registry == "" {
			registry = "schema registry"
		}
		return fmt.Sprintf("weirtest/kafka: %s at %s (%s), %s at %s",
			kafka, strings.Join(c.Brokers, ","), c.Source, registry, c.RegistryURL)
	case r.err != nil:
		return fmt.Sprintf("%v (every test that asks for the cluster will fail)", r.err)
	case inCI():
		return fmt.Sprintf("weirtest/kafka: no cluster and %s=true, every test that asks for one will fail: %s", envCI, r.missing)
	default:
		return fmt.Sprintf("weirtest/kafka: no cluster, every test that asks for one will be skipped: %s", r.missing)
	}
}
