# Shared settings of up.sh and down.sh; sourced, not run.
#
# Everything can be overridden from the environment:
#   WEIR_ENV_DIR        run directory: data, logs, pid files, env.sh
#   WEIR_CACHE_DIR      where Maven artifacts are unpacked (kept across runs)
#   WEIR_KAFKA_PORT     broker listener on 127.0.0.1 (default 19092)
#   WEIR_CONTROLLER_PORT KRaft controller listener (default 19093)
#   WEIR_SASL_SSL_PORT  broker SASL_SSL listener on 127.0.0.1 (default 19094)
#   WEIR_PROXIED_PORT   broker PROXIED listener on 127.0.0.1 (default 19095),
#                       advertised as the fault proxy's address
#   WEIR_FAULT_PROXY_PORT where the chaos tests' fault proxy listens and what
#                       the PROXIED listener advertises (default 19096)
#   WEIR_REGISTRY_PORT  Apicurio HTTP port (default 18081)
#   WEIR_REGISTRY_MGMT_PORT Apicurio management (health) port (default 18082)
#   WEIR_REGISTRY_JAVA  java binary (version 21 or newer) for Apicurio 3.3.x
#   WEIR_UP_TIMEOUT     seconds to wait for each service (default 120)
#   WEIR_BROKERS        1 (default): one broker with every listener, and the
#                       registry; 3: a replicated three-broker KRaft cluster
#                       (each node broker and controller, its own process,
#                       data and ports; replication factor 3 and
#                       min.insync.replicas 2 by default), PLAINTEXT only and
#                       no registry, in its own run directory
#                       (WEIR_REPLICATED_ENV_DIR, default $CACHE/env3)
#                       on ports 29092.. by default, so both can run at once.
#                       Broker N listens on WEIR_KAFKA_PORT + 10*(N-1), its
#                       controller on WEIR_CONTROLLER_PORT + 10*(N-1), its
#                       PROXIED listener on WEIR_PROXIED_PORT + 10*(N-1)
#                       (default 29095..), advertised as the fault proxy's
#                       route to it, WEIR_FAULT_PROXY_PORT + 10*(N-1)
#                       (default 29096..).

KAFKA_VERSION=4.4.0
# Apicurio 3.3.x is built for Java 21; 3.0.9 is the newest 3.x that runs on
# Java 17. up.sh uses 3.3.3 when it finds a Java 21+ runtime, else 3.0.9.
APICURIO_NEW=3.3.3
APICURIO_OLD=3.0.9

ENV_SRC="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CACHE_DIR="${WEIR_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/weir}"
BROKERS="${WEIR_BROKERS:-1}"
case "$BROKERS" in
  1)
    RUN_DIR="${WEIR_ENV_DIR:-$CACHE_DIR/env}"
    KAFKA_PORT="${WEIR_KAFKA_PORT:-19092}"
    CONTROLLER_PORT="${WEIR_CONTROLLER_PORT:-19093}"
    ;;
  3)
    RUN_DIR="${WEIR_REPLICATED_ENV_DIR:-$CACHE_DIR/env3}"
    KAFKA_PORT="${WEIR_KAFKA_PORT:-29092}"
    CONTROLLER_PORT="${WEIR_CONTROLLER_PORT:-29093}"
    PROXIED_PORT="${WEIR_PROXIED_PORT:-29095}"
    FAULT_PROXY_PORT="${WEIR_FAULT_PROXY_PORT:-29096}"
    ;;
  *)
    printf 'weir-env: WEIR_BROKERS=%s: want 1 or 3\n' "$BROKERS" >&2
    exit 2
    ;;
esac
SASL_SSL_PORT="${WEIR_SASL_SSL_PORT:-19094}"
PROXIED_PORT="${PROXIED_PORT:-${WEIR_PROXIED_PORT:-19095}}"
FAULT_PROXY_PORT="${FAULT_PROXY_PORT:-${WEIR_FAULT_PROXY_PORT:-19096}}"
# The SASL_SSL listener's test credentials (not secrets: a test cluster on
# 127.0.0.1). SCRAM_USER exists for SCRAM-SHA-256 and SCRAM-SHA-512.
SCRAM_USER=weir-scram
SCRAM_PASSWORD=weir-scram-secret
PLAIN_USER=weir-plain
PLAIN_PASSWORD=weir-plain-secret
TLS_DIR="$RUN_DIR/tls"
REGISTRY_PORT="${WEIR_REGISTRY_PORT:-18081}"
REGISTRY_MGMT_PORT="${WEIR_REGISTRY_MGMT_PORT:-$((REGISTRY_PORT + 1))}"
UP_TIMEOUT="${WEIR_UP_TIMEOUT:-120}"

REGISTRY_PID="$RUN_DIR/registry.pid"
REGISTRY_LOG="$RUN_DIR/registry.log"
ENV_FILE="$RUN_DIR/env.sh"

log() { printf 'weir-env: %s\n' "$*" >&2; }

# running PIDFILE: the process of PIDFILE exists and is not a zombie,
# whatever it runs: just after launch_broker it can still be the shell
# that is about to exec java, which alive would take for another process.
running() {
  local pid state
  [ -f "$1" ] || return 1
  pid=$(cat "$1" 2>/dev/null) || return 1
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 1
  state=$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null || true)
  [ "$state" != "Z" ]
}

# alive PIDFILE: the recorded process still runs (a zombie does not count)
# and is still a java process: after a reboot or a long pause its PID may
# belong to something else, which must be neither trusted nor stopped.
alive() {
  running "$1" || return 1
  tr '\0' ' ' <"/proc/$(cat "$1")/cmdline" 2>/dev/null | grep -q java
}

# serialize: hold an exclusive lock on the run directory for the rest of
# the script, so concurrent up.sh and down.sh calls take turns. The
# services are started with fd 9 closed, so they never hold the lock.
serialize() {
  mkdir -p "$RUN_DIR"
  exec 9>"$RUN_DIR/.lock"
  flock -w 300 9 || { log "another up.sh or down.sh holds $RUN_DIR/.lock"; exit 1; }
}

# port_open PORT: something accepts TCP connections on 127.0.0.1:PORT.
port_open() {
  (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# Per broker N (1..BROKERS): its files and ports. The single broker keeps
# the names it always had (broker.pid, broker.log, server.properties,
# kafka-data), which tools outside this directory read.
# new_cluster_id prints a random KRaft cluster id: 16 random bytes in
# URL-safe base64 without padding (22 characters), as Kafka writes one.
# An id that starts with '-' is drawn again: the storage tool would read
# it as an option (-t -x... fails with "expected one argument"), which
# happened once in 64 starts.
new_cluster_id() {
  local id
  while :; do
    id=$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | cut -c1-22)
    case $id in -*) ;; *) break ;; esac
  done
  printf '%s\n' "$id"
}

broker_file() { # broker_file N NAME EXT: $RUN_DIR/NAME.EXT, or NAME-N.EXT
  if [ "$BROKERS" = 1 ]; then echo "$RUN_DIR/$2$3"; else echo "$RUN_DIR/$2-$1$3"; fi
}
broker_pid() { broker_file "$1" broker .pid; }
broker_log() { broker_file "$1" broker .log; }
broker_conf() { broker_file "$1" server .properties; }
broker_data() { broker_file "$1" kafka-data ""; }
broker_meta() { broker_file "$1" kafka-meta ""; }
broker_port() { echo $((KAFKA_PORT + 10 * ($1 - 1))); }
controller_port() { echo $((CONTROLLER_PORT + 10 * ($1 - 1))); }
proxied_port() { echo $((PROXIED_PORT + 10 * ($1 - 1))); }
fault_proxy_port() { echo $((FAULT_PROXY_PORT + 10 * ($1 - 1))); }
BROKER_PID=$(broker_pid 1)
BROKER_LOG=$(broker_log 1)

# launch_broker N: run broker N on its server.properties in the background
# and record its PID (up.sh at first, restart.sh again on the same data).
launch_broker() {
  local n=${1:-1} blog
  blog=$(broker_log "$n")
  KAFKA_LIBS="${KAFKA_LIBS:-$CACHE_DIR/kafka-$KAFKA_VERSION/libs}"
  log "starting Apache Kafka $KAFKA_VERSION broker $n on 127.0.0.1:$(broker_port "$n")"
  # The previous run's log is kept in *-history.log (the last 64 MiB), for
  # a test that restarts the broker and then has to explain a failure.
  local hist="${blog%.log}-history.log"
  if [ -s "$blog" ]; then
    cat "$blog" >>"$hist"
    if [ "$(wc -c <"$hist")" -gt $((64 << 20)) ]; then
      tail -c $((32 << 20)) "$hist" >"$hist.tmp" && mv "$hist.tmp" "$hist"
    fi
  fi
  local heap=1g
  [ "$BROKERS" = 1 ] || heap=768m
  nohup java -Xms256m -Xmx$heap -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -Djava.awt.headless=true \
    -Dlog4j2.configurationFile="$ENV_SRC/log4j2.properties" \
    -cp "$KAFKA_LIBS/*" kafka.Kafka "$(broker_conf "$n")" >"$blog" 2>&1 </dev/null 9>&- &
  echo $! >"$(broker_pid "$n")"
}

# broker_ready N: broker N logged its start and every listener accepts.
broker_ready() {
  local n=${1:-1}
  grep -q "Kafka Server started" "$(broker_log "$n")" 2>/dev/null && port_open "$(broker_port "$n")" || return 1
  if [ "$BROKERS" = 1 ]; then
    port_open "$SASL_SSL_PORT" && port_open "$PROXIED_PORT"
  else
    port_open "$(proxied_port "$n")"
  fi
}
