package kafka

// The Testcontainers path: used only when the environment names no cluster
// and a Docker daemon answers. It cannot run on machines without Docker, so
// it is kept small and leans on the kafka module for the broker.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/testcontainers/testcontainers-go"
	tckafka "github.com/testcontainers/testcontainers-go/modules/kafka"
	"github.com/testcontainers/testcontainers-go/wait"
)

const (
	// kafkaImage is the broker image; the kafka module supports the
	// confluent-local images (KRaft). confluent-local 7.6.0 ships Apache
	// Kafka 3.6; sarama negotiates protocol versions down from the
	// V4_0_0_0 it is configured with (it asks the broker for ApiVersions).
	kafkaImage = "confluentinc/confluent-local:7.6.0"
	// kafkaImageVersion labels the broker in Env.KafkaVersion.
	kafkaImageVersion = "3.6 (confluent-local 7.6.0)"
	// registryImage is the schema registry, the same Apicurio Registry
	// release `make kafka-up` runs.
	registryImage = "apicurio/apicurio-registry:3.3.3"
	// registryVersion labels the registry in Env.RegistryVersion.
	registryVersion = "Apicurio Registry 3.3.3"
	// registryPort is the port Apicurio listens on inside its container.
	registryPort = "8080/tcp"
	// ccompatPath is the Confluent-compatible API under the registry's root.
	ccompatPath = "/apis/ccompat/v7"

	// dockerProbeTimeout bounds the check for a Docker daemon, so a machine
	// without one (or with a dead socket) skips at once instead of hanging.
	dockerProbeTimeout = 3 * time.Second
	// startTimeout bounds starting both containers, image pulls included.
	startTimeout = 5 * time.Minute
)

// brokerEnv mirrors the broker settings of integration/env/up.sh that tests
// rely on: short group sessions, a cleaner that wakes every 500 ms, quick
// cleanup of timed-out transactions and no auto-created topics. The
// confluent images turn KAFKA_FOO_BAR into the property foo.bar.
var brokerEnv = map[string]string{
	"KAFKA_AUTO_CREATE_TOPICS_ENABLE":                                   "false",
	"KAFKA_GROUP_MIN_SESSION_TIMEOUT_MS":                                "1000",
	"KAFKA_LOG_CLEANER_BACKOFF_MS":                                      "500",
	"KAFKA_LOG_RETENTION_CHECK_INTERVAL_MS":                             "1000",
	"KAFKA_LOG_SEGMENT_DELETE_DELAY_MS":                                 "1000",
	"KAFKA_TRANSACTION_ABORT_TIMED_OUT_TRANSACTION_CLEANUP_INTERVAL_MS": "1000",
}

// dockerReachable reports, within dockerProbeTimeout, whether Testcontainers
// can talk to a Docker daemon. Testcontainers' host discovery can panic when
// no Docker host is configured and does not take a deadline everywhere, so
// the probe runs in its own goroutine, converts a panic into an error, and
// is abandoned when the deadline passes (the goroutine then finishes, or
// stays blocked, on its own; the process never uses Docker in that case).
func dockerReachable() error {
	ctx, cancel := context.WithTimeout(context.Background(), dockerProbeTimeout)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		defer func() {
			if r := recover(); r != nil {
				done <- fmt.Errorf("docker host discovery: %v", r)
			}
		}()
		p, err := testcontainers.NewDockerProvider()
		if err != nil {
			done <- fmt.Errorf("docker provider: %w", err)
			return
		}
		// Health closes the provider.
		if err := p.Health(ctx); err != nil {
			done <- fmt.Errorf("docker daemon: %w", err)
			return
		}
		done <- nil
	}()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("docker daemon did not answer within %v: %w", dockerProbeTimeout, ctx.Err())
	}
}

// startContainers starts the broker and the registry and returns the
// cluster and a function that terminates both. On error, stop terminates
// whatever did start (it may be nil when nothing did).
func startContainers() (c *Env, stop func(context.Context) error, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()

	var started []testcontainers.Container
	stop = func(ctx context.Context) error {
		var errs []error
		for _, ctr := range started {
			if err := ctr.Terminate(ctx); err != nil {
				errs = append(errs, fmt.Errorf("terminate %s: %w", ctr.GetContainerID(), err))
			}
		}
		return errors.Join(errs...)
	}

	kc, err := tckafka.Run(ctx, kafkaImage, testcontainers.WithEnv(brokerEnv))
	if kc != nil {
		started = append(started, kc)
	}
	if err != nil {
		return nil, stop, fmt.Errorf("kafka container %s: %w", kafkaImage, err)
	}
	brokers, err := kc.Brokers(ctx)
	if err != nil {
		return nil, stop, fmt.Errorf("kafka container brokers: %w", err)
	}

	rc, err := testcontainers.Run(ctx, registryImage,
		testcontainers.WithExposedPorts(registryPort),
		testcontainers.WithWaitStrategy(
			wait.ForHTTP(ccompatPath+"/subjects").WithPort(registryPort).WithStartupTimeout(3*time.Minute)),
	)
	if rc != nil {
		started = append(started, rc)
	}
	if err != nil {
		return nil, stop, fmt.Errorf("registry container %s: %w", registryImage, err)
	}
	endpoint, err := rc.PortEndpoint(ctx, registryPort, "http")
	if err != nil {
		return nil, stop, fmt.Errorf("registry container endpoint: %w", err)
	}
	registryURL := endpoint + ccompatPath
	if err := setGlobalCompatibility(ctx, registryURL, "BACKWARD"); err != nil {
		return nil, stop, err
	}
	return &Env{
		Brokers:         brokers,
		RegistryURL:     registryURL,
		KafkaVersion:    kafkaImageVersion,
		RegistryVersion: registryVersion,
		Source:          SourceTestcontainers,
	}, stop, nil
}

// setGlobalCompatibility sets the registry-wide compatibility level. Apicurio
// checks compatibility on registration only once a level is set; BACKWARD is
// the Confluent default that clients expect (up.sh does the same).
func setGlobalCompatibility(ctx context.Context, registryURL, level string) error {
	body := bytes.NewBufferString(`{"compatibility":"` + level + `"}`)
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, registryURL+"/config", body)
	if err != nil {
		return fmt.Errorf("registry config request: %w", err)
	}
	req.Header.Set("Content-Type", "application/vnd.schemaregistry.v1+json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("set registry compatibility %s: %w", level, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return fmt.Errorf("set registry compatibility %s: %s: %s", level, resp.Status, msg)
	}
	return nil
}
