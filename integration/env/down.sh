#!/usr/bin/env bash
# Stops the test cluster that up.sh started, by the PIDs it recorded (never by
# process name, so another Kafka on the machine is left alone), and deletes
# its data. Stopping a cluster that is not running is not an error.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
serialize

# stop NAME PIDFILE: SIGTERM, wait up to 30 s for a clean exit, then SIGKILL.
stop() {
  local name=$1 pidfile=$2 pid i
  if ! alive "$pidfile"; then
    rm -f "$pidfile"
    return 0
  fi
  pid=$(cat "$pidfile")
  log "stopping $name (pid $pid)"
  kill -TERM "$pid" 2>/dev/null || true
  for i in $(seq 1 300); do
    alive "$pidfile" || break
    sleep 0.1
  done
  if alive "$pidfile"; then
    log "$name did not stop within 30 s; killing it"
    kill -KILL "$pid" 2>/dev/null || true
    for i in $(seq 1 50); do
      alive "$pidfile" || break
      sleep 0.1
    done
  fi
  rm -f "$pidfile"
}

stop registry "$REGISTRY_PID"
for n in $(seq 1 "$BROKERS"); do
  stop "broker $n" "$(broker_pid "$n")"
  rm -rf "$(broker_data "$n")" "$(broker_meta "$n")"
done
rm -f "$ENV_FILE"
log "down"
