#!/usr/bin/env bash
# Starts the real test cluster of weir on 127.0.0.1:
#   - Apache Kafka 4.4.0, one KRaft node that is broker and controller,
#     with a PLAINTEXT listener, a SASL_SSL one (TLS with a certificate
#     made here by the JDK's keytool; SASL PLAIN, SCRAM-SHA-256 and
#     SCRAM-SHA-512 with the test users of common.sh) and a PLAINTEXT one
#     named PROXIED that advertises the address of the chaos tests' fault
#     proxy (integration/faultproxy), so that a client bootstrapped at the
#     proxy keeps every connection going through it,
#   - Apicurio Registry 3.x with in-memory storage, used through its
#     Confluent-compatible API (/apis/ccompat/v7).
# Both come from Maven Central (fetched once into $WEIR_CACHE_DIR) and run
# with the machine's java. With WEIR_BROKERS=3 it starts instead a
# replicated cluster of three brokers (see common.sh), with no registry,
# each with a PROXIED listener that advertises its route of the fault
# proxy, and writes WEIR_REPLICATED_* variables to its own env.sh. Running up.sh while the cluster is up does nothing
# but print the environment again. Stop it with down.sh.
#
# On success it prints, and writes to $WEIR_ENV_DIR/env.sh:
#   export WEIR_BOOTSTRAP_SERVERS=127.0.0.1:19092
#   export WEIR_SCHEMA_REGISTRY_URL=http://127.0.0.1:18081/apis/ccompat/v7
# the SASL_SSL listener's address, CA file and users (WEIR_SASL_SSL_*), and
# the run directory with the brokers' logs (WEIR_ENV_DIR).
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"

mkdir -p "$RUN_DIR" "$CACHE_DIR"
serialize

# fail MSG LOGFILE: report a service that did not come up, with its log tail.
fail() {
  log "$1"
  if [ -f "$2" ]; then
    log "last lines of $2:"
    tail -n 40 "$2" >&2
  fi
  exit 1
}

# java_major JAVA: the feature version of a java binary (17, 21, 25, ...).
java_major() {
  "$1" -XshowSettings:properties -version 2>&1 |
    awk -F'= ' '/java.specification.version/ {print $2; exit}' | cut -d. -f1
}

# registry_java: the first java of version 21 or newer, or nothing.
registry_java() {
  local j m
  for j in "${WEIR_REGISTRY_JAVA:-}" "${JAVA_HOME:+$JAVA_HOME/bin/java}" "$(command -v java || true)" /usr/lib/jvm/*/bin/java; do
    [ -n "$j" ] && [ -x "$j" ] || continue
    m=$(java_major "$j")
    if [ -n "$m" ] && [ "$m" -ge 21 ]; then
      echo "$j"
      return 0
    fi
  done
  return 0
}

fetch_kafka() {
  # The marker names the pom's checksum: a pom with more jars fetches again.
  local dir="$CACHE_DIR/kafka-$KAFKA_VERSION" mark
  mark=".complete-$(sha256sum "$ENV_SRC/pom.xml" | cut -c1-12)"
  if [ ! -f "$dir/$mark" ]; then
    log "fetching Apache Kafka $KAFKA_VERSION from Maven Central into $dir"
    rm -rf "$dir"
    mvn -q -B -f "$ENV_SRC/pom.xml" dependency:copy-dependencies \
      -DoutputDirectory="$dir/libs" -DincludeScope=runtime >"$RUN_DIR/mvn.log" 2>&1 ||
      fail "fetching Kafka from Maven Central failed" "$RUN_DIR/mvn.log"
    touch "$dir/$mark"
  fi
  KAFKA_LIBS="$dir/libs"
}

fetch_registry() {
  local version=$1 dir="$CACHE_DIR/apicurio-$1"
  if [ ! -f "$dir/.complete" ]; then
    log "fetching Apicurio Registry $version from Maven Central into $dir"
    rm -rf "$dir"
    mkdir -p "$dir/dist"
    mvn -q -B -f "$ENV_SRC/pom.xml" dependency:copy \
      -Dartifact="io.apicurio:apicurio-registry-app:$version:tar.gz:all" \
      -DoutputDirectory="$dir" >"$RUN_DIR/mvn.log" 2>&1 ||
      fail "fetching Apicurio Registry $version from Maven Central failed" "$RUN_DIR/mvn.log"
    tar -xzf "$dir"/apicurio-registry-app-"$version"-all.tar.gz -C "$dir/dist"
    rm -f "$dir"/apicurio-registry-app-"$version"-all.tar.gz
    touch "$dir/.complete"
  fi
  # 3.1 and later ship Quarkus' fast-jar layout; 3.0 a runner jar.
  if [ -f "$dir/dist/quarkus-run.jar" ]; then
    REGISTRY_JAR="$dir/dist/quarkus-run.jar"
  else
    REGISTRY_JAR=$(ls "$dir"/dist/*-runner.jar)
  fi
}

start_broker() {
  if alive "$BROKER_PID"; then
    log "broker already running (pid $(cat "$BROKER_PID"))"
    if ! port_open "$SASL_SSL_PORT" || ! port_open "$PROXIED_PORT"; then
      fail "the running broker has no SASL_SSL listener on $SASL_SSL_PORT or no PROXIED one on $PROXIED_PORT (started by an older up.sh?): run down.sh, then up.sh" /dev/null
    fi
    return 0
  fi
  if port_open "$KAFKA_PORT"; then
    fail "port $KAFKA_PORT is taken by a process up.sh did not start; set WEIR_KAFKA_PORT" /dev/null
  fi
  if port_open "$SASL_SSL_PORT"; then
    fail "port $SASL_SSL_PORT is taken by a process up.sh did not start; set WEIR_SASL_SSL_PORT" /dev/null
  fi
  if port_open "$PROXIED_PORT"; then
    fail "port $PROXIED_PORT is taken by a process up.sh did not start; set WEIR_PROXIED_PORT" /dev/null
  fi
  fetch_kafka
  make_tls
  local conf="$RUN_DIR/server.properties"
  rm -rf "$RUN_DIR/kafka-data" "$RUN_DIR/kafka-meta"
  cat >"$conf" <<EOF
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$CONTROLLER_PORT
listeners=PLAINTEXT://127.0.0.1:$KAFKA_PORT,CONTROLLER://127.0.0.1:$CONTROLLER_PORT,SASL_SSL://127.0.0.1:$SASL_SSL_PORT,PROXIED://127.0.0.1:$PROXIED_PORT
# PROXIED advertises the fault proxy, which forwards to it.
advertised.listeners=PLAINTEXT://127.0.0.1:$KAFKA_PORT,SASL_SSL://127.0.0.1:$SASL_SSL_PORT,PROXIED://127.0.0.1:$FAULT_PROXY_PORT
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SASL_SSL:SASL_SSL,PROXIED:PLAINTEXT
# The SASL_SSL listener: TLS with make_tls's certificate, then SASL.
sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512
listener.name.sasl_ssl.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required user_$PLAIN_USER="$PLAIN_PASSWORD";
listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
ssl.keystore.type=PKCS12
ssl.keystore.location=$TLS_DIR/broker.p12
ssl.keystore.password=$TLS_PASSWORD
ssl.key.password=$TLS_PASSWORD
log.dirs=$RUN_DIR/kafka-data
metadata.log.dir=$RUN_DIR/kafka-meta
num.partitions=1
auto.create.topics.enable=false
# One node: every internal topic has one replica.
offsets.topic.replication.factor=1
offsets.topic.num.partitions=8
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=8
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
min.insync.replicas=1
group.initial.rebalance.delay.ms=0
# Tests kill instances and wait for the group to notice; allow short sessions.
group.min.session.timeout.ms=1000
# A dead transactional producer blocks read_committed readers until its
# transaction times out; tests choose short timeouts.
transaction.abort.timed.out.transaction.cleanup.interval.ms=1000
# Compaction within seconds: the cleaner wakes every 500 ms; topics that want
# to be compacted quickly set segment.ms and min.cleanable.dirty.ratio.
log.cleaner.enable=true
log.cleaner.backoff.ms=500
log.cleaner.threads=1
log.cleaner.dedupe.buffer.size=33554432
log.retention.check.interval.ms=1000
log.segment.delete.delay.ms=1000
log.initial.task.delay.ms=1000
delete.topic.enable=true
EOF
  local cluster_id
  cluster_id=$(new_cluster_id)
  java -cp "$KAFKA_LIBS/*" -Dlog4j2.configurationFile="$ENV_SRC/log4j2.properties" \
    kafka.tools.StorageTool format -t "$cluster_id" -c "$conf" \
    --add-scram "SCRAM-SHA-256=[name=$SCRAM_USER,password=$SCRAM_PASSWORD]" \
    --add-scram "SCRAM-SHA-512=[name=$SCRAM_USER,password=$SCRAM_PASSWORD]" >"$RUN_DIR/format.log" 2>&1 ||
    fail "formatting the broker's storage failed" "$RUN_DIR/format.log"
  launch_broker
}

# start_replicated: three KRaft nodes, each broker and controller, on one
# cluster id; replicated internal topics and min.insync.replicas 2.
start_replicated() {
  local n port voters="" cluster_id any=0
  for n in 1 2 3; do
    if alive "$(broker_pid "$n")"; then any=1; fi
  done
  if [ $any = 1 ]; then
    for n in 1 2 3; do
      alive "$(broker_pid "$n")" || fail "broker $n of the replicated cluster is not running while others are: run down.sh, then up.sh (WEIR_BROKERS=3)" /dev/null
      port_open "$(proxied_port "$n")" || fail "broker $n of the replicated cluster has no PROXIED listener on $(proxied_port "$n") (started by an older up.sh?): run down.sh, then up.sh (WEIR_BROKERS=3)" /dev/null
    done
    log "replicated cluster already running"
    return 0
  fi
  for n in 1 2 3; do
    for port in "$(broker_port "$n")" "$(controller_port "$n")" "$(proxied_port "$n")"; do
      if port_open "$port"; then
        fail "port $port is taken by a process up.sh did not start; set WEIR_KAFKA_PORT and WEIR_CONTROLLER_PORT" /dev/null
      fi
    done
    voters="$voters${voters:+,}$n@127.0.0.1:$(controller_port "$n")"
  done
  fetch_kafka
  cluster_id=$(new_cluster_id)
  for n in 1 2 3; do
    rm -rf "$(broker_data "$n")" "$(broker_meta "$n")"
    cat >"$(broker_conf "$n")" <<EOF
process.roles=broker,controller
node.id=$n
controller.quorum.voters=$voters
listeners=PLAINTEXT://127.0.0.1:$(broker_port "$n"),CONTROLLER://127.0.0.1:$(controller_port "$n"),PROXIED://127.0.0.1:$(proxied_port "$n")
# PROXIED advertises this broker's route of the chaos tests' fault proxy.
advertised.listeners=PLAINTEXT://127.0.0.1:$(broker_port "$n"),PROXIED://127.0.0.1:$(fault_proxy_port "$n")
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,PROXIED:PLAINTEXT
log.dirs=$(broker_data "$n")
metadata.log.dir=$(broker_meta "$n")
num.partitions=1
auto.create.topics.enable=false
# Replicated as production clusters are: a produce needs two in-sync
# replicas, so one broker may be down.
default.replication.factor=3
min.insync.replicas=2
offsets.topic.replication.factor=3
offsets.topic.num.partitions=8
transaction.state.log.replication.factor=3
transaction.state.log.min.isr=2
transaction.state.log.num.partitions=8
share.coordinator.state.topic.replication.factor=3
share.coordinator.state.topic.min.isr=2
group.initial.rebalance.delay.ms=0
group.min.session.timeout.ms=1000
transaction.abort.timed.out.transaction.cleanup.interval.ms=1000
# Leaders go back to their preferred replica only when a test says so.
auto.leader.rebalance.enable=false
# A stopped broker drops out of the ISR within seconds, not 30.
replica.lag.time.max.ms=5000
log.cleaner.enable=true
log.cleaner.backoff.ms=500
log.cleaner.threads=1
log.cleaner.dedupe.buffer.size=16777216
log.retention.check.interval.ms=1000
log.segment.delete.delay.ms=1000
log.initial.task.delay.ms=1000
delete.topic.enable=true
EOF
    # Eligible leader replicas (KIP-966) stay off: with them, Kafka 4.4's
    # controller kept a deleted topic in its ISR index and then failed
    # every registration of a broker that had been out of that topic's ISR
    # ("Topic ID ... existed in isrMembers, but not in the topics map"), so
    # the broker never came back. Seen in make chaos.
    java -cp "$KAFKA_LIBS/*" -Dlog4j2.configurationFile="$ENV_SRC/log4j2.properties" \
      kafka.tools.StorageTool format -t "$cluster_id" -c "$(broker_conf "$n")" \
      --feature eligible.leader.replicas.version=0 >"$RUN_DIR/format-$n.log" 2>&1 ||
      fail "formatting broker $n's storage failed" "$RUN_DIR/format-$n.log"
  done
  for n in 1 2 3; do
    launch_broker "$n"
  done
}

# make_tls: a key pair and a self-signed certificate for the broker's
# SASL_SSL listener (names localhost and 127.0.0.1), made with the JDK's
# keytool; clients trust the certificate itself ($TLS_DIR/ca.pem).
make_tls() {
  local keytool
  keytool=$(command -v keytool || true)
  if [ -z "$keytool" ]; then
    # keytool sits next to java in every JDK.
    keytool="$(dirname "$(readlink -f "$(command -v java)")")/keytool"
  fi
  TLS_PASSWORD=weir-test-keystore
  rm -rf "$TLS_DIR"
  mkdir -p "$TLS_DIR"
  "$keytool" -genkeypair -alias broker -keyalg EC -groupname secp256r1 -validity 3650 \
    -dname "CN=localhost" -ext "SAN=dns:localhost,ip:127.0.0.1" \
    -keystore "$TLS_DIR/broker.p12" -storetype PKCS12 -storepass "$TLS_PASSWORD" -keypass "$TLS_PASSWORD" \
    >"$RUN_DIR/keytool.log" 2>&1 || fail "making the broker's TLS certificate failed" "$RUN_DIR/keytool.log"
  "$keytool" -exportcert -rfc -alias broker -keystore "$TLS_DIR/broker.p12" -storetype PKCS12 \
    -storepass "$TLS_PASSWORD" -file "$TLS_DIR/ca.pem" \
    >>"$RUN_DIR/keytool.log" 2>&1 || fail "exporting the broker's TLS certificate failed" "$RUN_DIR/keytool.log"
}

start_registry() {
  if alive "$REGISTRY_PID"; then
    log "registry already running (pid $(cat "$REGISTRY_PID"))"
    return 0
  fi
  if port_open "$REGISTRY_PORT"; then
    fail "port $REGISTRY_PORT is taken by a process up.sh did not start; set WEIR_REGISTRY_PORT" /dev/null
  fi
  local java version
  java=$(registry_java)
  if [ -n "$java" ]; then
    version=$APICURIO_NEW
  else
    java=java
    version=$APICURIO_OLD
    log "no Java 21+ found (set WEIR_REGISTRY_JAVA); using Apicurio $version on Java 17"
  fi
  fetch_registry "$version"
  log "starting Apicurio Registry $version on 127.0.0.1:$REGISTRY_PORT"
  nohup "$java" -Xms128m -Xmx512m -Djava.awt.headless=true \
    -Dquarkus.http.host=127.0.0.1 -Dquarkus.http.port="$REGISTRY_PORT" \
    -Dquarkus.management.host=127.0.0.1 -Dquarkus.management.port="$REGISTRY_MGMT_PORT" \
    -Dquarkus.log.level=WARN -Dquarkus.banner.enabled=false \
    -jar "$REGISTRY_JAR" >"$REGISTRY_LOG" 2>&1 </dev/null 9>&- &
  echo $! >"$REGISTRY_PID"
}

wait_broker() {
  local deadline=$((SECONDS + UP_TIMEOUT)) n
  for n in $(seq 1 "$BROKERS"); do
    until broker_ready "$n"; do
      running "$(broker_pid "$n")" || fail "broker $n exited during start" "$(broker_log "$n")"
      [ $SECONDS -lt $deadline ] || fail "broker $n did not start within ${UP_TIMEOUT}s" "$(broker_log "$n")"
      sleep 0.2
    done
  done
}

wait_registry() {
  local deadline=$((SECONDS + UP_TIMEOUT)) base="http://127.0.0.1:$REGISTRY_PORT/apis/ccompat/v7"
  until curl -sf -o /dev/null "$base/subjects"; do
    alive "$REGISTRY_PID" || fail "the registry exited during start" "$REGISTRY_LOG"
    [ $SECONDS -lt $deadline ] || fail "the registry did not start within ${UP_TIMEOUT}s" "$REGISTRY_LOG"
    sleep 0.2
  done
  # Apicurio checks compatibility on registration only once a level is set;
  # BACKWARD is the Confluent default that clients expect. Apicurio refuses
  # to set the level a second time (409), so look first.
  if ! curl -sf "$base/config" | grep -q '"BACKWARD"'; then
    curl -sf -o /dev/null -X PUT -H 'Content-Type: application/vnd.schemaregistry.v1+json' \
      --data '{"compatibility":"BACKWARD"}' "$base/config" ||
      fail "setting the registry's global compatibility level failed" "$REGISTRY_LOG"
  fi
}

t0=$SECONDS
if [ "$BROKERS" = 3 ]; then
  start_replicated
  wait_broker
  log "replicated cluster ready after $((SECONDS - t0))s"
  servers="" proxied="" proxies=""
  for n in 1 2 3; do
    servers="$servers${servers:+,}127.0.0.1:$(broker_port "$n")"
    proxied="$proxied${proxied:+,}127.0.0.1:$(proxied_port "$n")"
    proxies="$proxies${proxies:+,}127.0.0.1:$(fault_proxy_port "$n")"
  done
  cat >"$ENV_FILE" <<EOF
export WEIR_REPLICATED_BOOTSTRAP_SERVERS=$servers
export WEIR_REPLICATED_PROXIED_UPSTREAMS=$proxied
export WEIR_REPLICATED_FAULT_PROXY_ADDRS=$proxies
export WEIR_REPLICATED_ENV_DIR=$RUN_DIR
export WEIR_REPLICATED_RESTART="$ENV_SRC/restart.sh"
EOF
  cat "$ENV_FILE"
  exit 0
fi
start_broker
start_registry
wait_broker
log "broker ready after $((SECONDS - t0))s"
wait_registry
log "registry ready after $((SECONDS - t0))s"

info=$(curl -sf "http://127.0.0.1:$REGISTRY_PORT/apis/registry/v3/system/info" || true)
registry_version=$(printf '%s' "$info" | sed -n 's/.*"version" *: *"\([^"]*\)".*/\1/p')
cat >"$ENV_FILE" <<EOF
export WEIR_BOOTSTRAP_SERVERS=127.0.0.1:$KAFKA_PORT
export WEIR_SCHEMA_REGISTRY_URL=http://127.0.0.1:$REGISTRY_PORT/apis/ccompat/v7
export WEIR_KAFKA_VERSION=$KAFKA_VERSION
export WEIR_REGISTRY_VERSION="Apicurio Registry ${registry_version:-unknown}"
export WEIR_SASL_SSL_BOOTSTRAP_SERVERS=127.0.0.1:$SASL_SSL_PORT
export WEIR_PROXIED_UPSTREAM=127.0.0.1:$PROXIED_PORT
export WEIR_FAULT_PROXY_ADDR=127.0.0.1:$FAULT_PROXY_PORT
export WEIR_BROKER_RESTART="$ENV_SRC/restart.sh"
export WEIR_ENV_DIR=$RUN_DIR
export WEIR_SASL_SSL_CA_FILE=$TLS_DIR/ca.pem
export WEIR_SASL_SSL_SCRAM_USER=$SCRAM_USER
export WEIR_SASL_SSL_SCRAM_PASSWORD=$SCRAM_PASSWORD
export WEIR_SASL_SSL_PLAIN_USER=$PLAIN_USER
export WEIR_SASL_SSL_PLAIN_PASSWORD=$PLAIN_PASSWORD
EOF
cat "$ENV_FILE"
