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

KAFKA_VERSION=4.4.0
# Apicurio 3.3.x is built for Java 21; 3.0.9 is the newest 3.x that runs on
# Java 17. up.sh uses 3.3.3 when it finds a Java 21+ runtime, else 3.0.9.
APICURIO_NEW=3.3.3
APICURIO_OLD=3.0.9

ENV_SRC="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CACHE_DIR="${WEIR_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/weir}"
RUN_DIR="${WEIR_ENV_DIR:-$CACHE_DIR/env}"
KAFKA_PORT="${WEIR_KAFKA_PORT:-19092}"
CONTROLLER_PORT="${WEIR_CONTROLLER_PORT:-19093}"
SASL_SSL_PORT="${WEIR_SASL_SSL_PORT:-19094}"
PROXIED_PORT="${WEIR_PROXIED_PORT:-19095}"
FAULT_PROXY_PORT="${WEIR_FAULT_PROXY_PORT:-19096}"
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

BROKER_PID="$RUN_DIR/broker.pid"
REGISTRY_PID="$RUN_DIR/registry.pid"
BROKER_LOG="$RUN_DIR/broker.log"
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

# launch_broker: run the broker on $RUN_DIR/server.properties in the
# background and record its PID (up.sh at first, restart.sh again on the
# same data).
launch_broker() {
  KAFKA_LIBS="${KAFKA_LIBS:-$CACHE_DIR/kafka-$KAFKA_VERSION/libs}"
  log "starting Apache Kafka $KAFKA_VERSION on 127.0.0.1:$KAFKA_PORT"
  # The previous run's log is kept in broker-history.log (the last 64 MiB),
  # for a test that restarts the broker and then has to explain a failure.
  if [ -s "$BROKER_LOG" ]; then
    cat "$BROKER_LOG" >>"$RUN_DIR/broker-history.log"
    if [ "$(wc -c <"$RUN_DIR/broker-history.log")" -gt $((64 << 20)) ]; then
      tail -c $((32 << 20)) "$RUN_DIR/broker-history.log" >"$RUN_DIR/broker-history.log.tmp" &&
        mv "$RUN_DIR/broker-history.log.tmp" "$RUN_DIR/broker-history.log"
    fi
  fi
  nohup java -Xms512m -Xmx1g -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -Djava.awt.headless=true \
    -Dlog4j2.configurationFile="$ENV_SRC/log4j2.properties" \
    -cp "$KAFKA_LIBS/*" kafka.Kafka "$RUN_DIR/server.properties" >"$BROKER_LOG" 2>&1 </dev/null 9>&- &
  echo $! >"$BROKER_PID"
}

# broker_ready: the broker logged its start and every listener accepts.
broker_ready() {
  grep -q "Kafka Server started" "$BROKER_LOG" 2>/dev/null && port_open "$KAFKA_PORT" &&
    port_open "$SASL_SSL_PORT" && port_open "$PROXIED_PORT"
}
