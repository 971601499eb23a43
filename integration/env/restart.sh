#!/usr/bin/env bash
# Restarts a broker of up.sh on its data, for tests of broker restarts:
#   restart.sh [N]         SIGTERM (a controlled shutdown), as an operator would
#   restart.sh -kill [N]   SIGKILL (a crash: the broker recovers its logs)
#   restart.sh -stop [N]   SIGTERM, and leave it stopped
#   restart.sh -start [N]  start a stopped broker again
# N is the broker, 1 to WEIR_BROKERS (default 1); with WEIR_BROKERS=3 it
# restarts a broker of the replicated cluster (WEIR_REPLICATED_ENV_DIR). It waits until every listener accepts again. The registry
# is untouched. It stops a broker by its recorded PID only, and fails when
# that broker is not running.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
serialize

signal=TERM
stop=1
start=1
case "${1:-}" in
  -kill) signal=KILL; shift ;;
  -stop) start=0; shift ;;
  -start) stop=0; shift ;;
esac
n=${1:-1}
if ! [ "$n" -ge 1 ] 2>/dev/null || [ "$n" -gt "$BROKERS" ]; then
  log "broker $n: want 1 to $BROKERS"
  exit 2
fi
pidfile=$(broker_pid "$n")
blog=$(broker_log "$n")
if [ $stop = 1 ]; then
  if ! alive "$pidfile"; then
    log "broker $n of up.sh is not running"
    exit 1
  fi
  pid=$(cat "$pidfile")
  log "stopping broker $n (pid $pid, SIG$signal)"
  kill -"$signal" "$pid"
  deadline=$((SECONDS + 60))
  while alive "$pidfile"; do
    if [ $SECONDS -ge $deadline ]; then
      log "broker $n did not stop within 60 s; killing it"
      kill -KILL "$pid" 2>/dev/null || true
    fi
    sleep 0.1
  done
fi
[ $start = 1 ] || exit 0
if alive "$pidfile"; then
  log "broker $n is running already"
  exit 1
fi
# A broker killed with SIGKILL leaves its lock files; Kafka takes them
# over, as it does after a power loss. A KRaft broker restarted right after
# a SIGKILL may find the controller still holding its previous session
# (until broker.session.timeout.ms) and exit at start ("Received a fatal
# error while waiting for the controller to acknowledge that we are caught
# up"): it is started again, as a supervisor would, up to five times.
attempt=1
launch_broker "$n"
deadline=$((SECONDS + UP_TIMEOUT))
until broker_ready "$n"; do
  if ! running "$pidfile"; then
    if [ $attempt -lt 5 ] && [ $SECONDS -lt $deadline ]; then
      log "broker $n exited during its restart (attempt $attempt); starting it again in 5 s"
      attempt=$((attempt + 1))
      sleep 5
      launch_broker "$n"
      continue
    fi
    log "broker $n exited during its restart; last lines of $blog:"
    tail -n 40 "$blog" >&2
    exit 1
  fi
  if [ $SECONDS -ge $deadline ]; then
    log "broker $n did not come back within ${UP_TIMEOUT}s"
    exit 1
  fi
  sleep 0.1
done
log "broker $n back (pid $(cat "$pidfile"))"
