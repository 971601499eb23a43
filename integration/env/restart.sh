#!/usr/bin/env bash
# Restarts the broker of up.sh on its data, for tests of broker restarts:
#   restart.sh         SIGTERM (a controlled shutdown), as an operator would
#   restart.sh -kill   SIGKILL (a crash: the broker recovers its logs)
# and waits until every listener accepts again. The registry is untouched.
# It stops the broker by its recorded PID only, and fails when up.sh's
# broker is not running.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
serialize

signal=TERM
if [ "${1:-}" = "-kill" ]; then
  signal=KILL
fi
if ! alive "$BROKER_PID"; then
  log "no broker of up.sh is running"
  exit 1
fi
pid=$(cat "$BROKER_PID")
log "restarting the broker (pid $pid, SIG$signal)"
kill -"$signal" "$pid"
deadline=$((SECONDS + 60))
while alive "$BROKER_PID"; do
  if [ $SECONDS -ge $deadline ]; then
    log "the broker did not stop within 60 s; killing it"
    kill -KILL "$pid" 2>/dev/null || true
  fi
  sleep 0.1
done
# A broker killed with SIGKILL leaves its lock files; Kafka takes them
# over, as it does after a power loss.
launch_broker
deadline=$((SECONDS + UP_TIMEOUT))
until broker_ready; do
  if ! running "$BROKER_PID"; then
    log "the broker exited during its restart; last lines of $BROKER_LOG:"
    tail -n 40 "$BROKER_LOG" >&2
    exit 1
  fi
  if [ $SECONDS -ge $deadline ]; then
    log "the broker did not come back within ${UP_TIMEOUT}s"
    exit 1
  fi
  sleep 0.1
done
log "broker back (pid $(cat "$BROKER_PID"))"
