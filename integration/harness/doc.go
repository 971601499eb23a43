// Package harness gives weir's integration tests their Kafka cluster: a real
// Apache Kafka broker and a real schema registry (Apicurio Registry, through
// its Confluent-compatible API), plus the few helpers every test needs to use
// them without colliding with other tests or other runs.
//
// # Where the cluster comes from
//
// [Get] resolves the cluster once per test binary, in this order:
//
//  1. The environment: WEIR_BOOTSTRAP_SERVERS (comma-separated host:port
//     list) and WEIR_SCHEMA_REGISTRY_URL (the registry's Confluent-compatible
//     base URL, e.g. http://127.0.0.1:18081/apis/ccompat/v7). `make kafka-up`
//     starts such a cluster and writes both to ~/.cache/weir/env/env.sh;
//     WEIR_KAFKA_VERSION and WEIR_REGISTRY_VERSION, when set, only label it.
//  2. Testcontainers, when a Docker daemon answers within a few seconds: a
//     Kafka broker (confluent-local) and an Apicurio Registry container,
//     started once and terminated by [Main] when the binary ends.
//  3. Nothing: the test fails when CI=true (CI never skips integration
//     tests) and is skipped otherwise, with a message saying how to get a
//     cluster.
//
// # Use
//
// Every test package calls [Main] from its TestMain, and every test starts
// with [Get]:
//
//	func TestMain(m *testing.M) { harness.Main(m) }
//
//	func TestSomething(t *testing.T) {
//		c := harness.Get(t)
//		topic := c.Name(t, "input")
//		c.CreateTopic(t, topic, 2, nil)
//		...
//	}
//
// Names from [Cluster.Name] are unique per call, so tests may run in
// parallel and repeatedly against the same long-lived cluster. Waiting is
// always bounded polling with [Eventually], never a fixed sleep.
package harness
