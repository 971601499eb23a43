#!/usr/bin/env bash
# Runs a Kafka command-line tool against the cluster of up.sh, which has no
# bin/ directory: the same classes as Kafka's kafka-<tool>.sh scripts, from
# the jars up.sh fetched.
#   kafka-tool.sh topics --alter --topic orders --partitions 12
#   kafka-tool.sh consumer-groups --describe --group my-service
#   kafka-tool.sh transactions list
#   kafka-tool.sh configs --alter --entity-type topics --entity-name T --add-config retention.ms=...
#   kafka-tool.sh dump-log --files DATA/orders-0/00000000000000000000.log --print-data-log
# dump-log reads a broker's log segments from its data directory (Kafka's
# DumpLogSegments: batches with their producer ids and epochs, transaction
# markers) and takes no --bootstrap-server.
# --bootstrap-server defaults to $WEIR_BOOTSTRAP_SERVERS (env.sh sets it)
# when the arguments do not give one.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"

case "${1:-}" in
  topics) class=org.apache.kafka.tools.TopicCommand ;;
  consumer-groups) class=org.apache.kafka.tools.consumer.group.ConsumerGroupCommand ;;
  transactions) class=org.apache.kafka.tools.TransactionsCommand ;;
  configs) class=org.apache.kafka.tools.ConfigCommand ;;
  dump-log) class=org.apache.kafka.tools.DumpLogSegments ;;
  *)
    log "usage: kafka-tool.sh topics|consumer-groups|transactions|configs|dump-log ARGS..."
    exit 2
    ;;
esac
shift
libs="${KAFKA_LIBS:-$CACHE_DIR/kafka-$KAFKA_VERSION/libs}"
if ! ls "$libs"/kafka-tools-*.jar >/dev/null 2>&1; then
  log "no Kafka tools in $libs: run make kafka-up (it fetches them) first"
  exit 1
fi
args=("$@")
if [[ $class != *DumpLogSegments && " $* " != *" --bootstrap-server "* && -n "${WEIR_BOOTSTRAP_SERVERS:-}" ]]; then
  args=(--bootstrap-server "$WEIR_BOOTSTRAP_SERVERS" "${args[@]}")
fi
exec java -cp "$libs/*" -Dlog4j2.configurationFile="$ENV_SRC/log4j2.properties" "$class" "${args[@]}"
