// Package kafka gives the tests of a service built on weir a Kafka cluster
// and the helpers to use it: a real Apache Kafka broker and a schema
// registry for integration tests ([Cluster]), or an in-process fake broker
// for quick ones ([Embedded]). Unit tests of a topology need neither: they
// run on package weirtest's in-memory driver.
//
// It is a module of its own (github.com/weirstream/weir/weirtest/kafka),
// so that linking weir does not pull in Testcontainers or a Docker client.
// weir's own integration tests use it.
//
// # Where the cluster comes from
//
// [Cluster] resolves the cluster once per test binary, in this order:
//
//  1. The environment: WEIR_BOOTSTRAP_SERVERS (comma-separated host:port
//     list) and WEIR_SCHEMA_REGISTRY_URL (the registry's Confluent-compatible
//     base URL, e.g. http://127.0.0.1:18081/apis/ccompat/v7). weir's
//     `make kafka-up` starts such a cluster from Maven Central with java
//     (no Docker) and writes both to ~/.cache/weir/env/env.sh;
//     WEIR_KAFKA_VERSION and WEIR_REGISTRY_VERSION, when set, only label it.
//  2. Testcontainers, when a Docker daemon answers within a few seconds: a
//     Kafka broker (testcontainers-go's Kafka module with the
//     confluentinc/confluent-local image) and an Apicurio Registry
//     container, started once per test binary and terminated by [Main].
//  3. Nothing: the test fails when CI=true (CI never skips integration
//     tests) and is skipped otherwise, with a message saying how to get a
//     cluster.
//
// # Use
//
// A test package calls [Main] from its TestMain, and each test starts with
// [Cluster]:
//
//	func TestMain(m *testing.M) { kafka.Main(m) }
//
//	func TestOrders(t *testing.T) {
//		c := kafka.Cluster(t)
//		in, out := c.Name(t, "orders"), c.Name(t, "totals")
//		c.CreateTopic(t, in, 2, nil) // deleted when the test ends
//		c.CreateTopic(t, out, 2, nil)
//		app, _ := weir.New(topology(in, out), weir.Config{ApplicationID: c.Name(t, "app"), Brokers: c.Brokers, StateDir: t.TempDir()})
//		kafka.Run(t, app) // runs until the test ends
//		kafka.Produce(t, c, &sarama.ProducerMessage{Topic: in, Key: sarama.StringEncoder("a"), Value: sarama.StringEncoder("1")})
//		kafka.ReadAll(t, c, out, sarama.ReadCommitted, func(got []*sarama.ConsumerMessage) bool { return len(got) == 1 })
//	}
//
// Names from [Env.Name] are unique per call, so tests may run in parallel
// and repeatedly against the same long-lived cluster. Waiting is always
// bounded polling ([Eventually], [ReadAll], [WaitRunning]), never a fixed
// sleep.
//
// # The embedded broker
//
// [Embedded] starts franz-go's kfake in the test's process: no setup, no
// Docker, a fresh broker per test. It is a fake. It speaks the Kafka
// protocol well enough for examples and quick tests of wiring, but no claim
// about Kafka's behaviour (transactions under failure, compaction, fencing,
// rebalancing) may rest on it: test those on [Cluster]. It has no schema
// registry.
package kafka
