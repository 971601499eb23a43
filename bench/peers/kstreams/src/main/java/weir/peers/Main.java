package weir.peers;

import java.time.Duration;
import java.util.Arrays;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.kstream.TimeWindows;

/**
 * One workload of weir's peer benchmark, run by Kafka Streams with its
 * defaults but for the commit interval and the record cache the driver
 * gives, until SIGTERM.
 *
 * <p>Arguments: workload (wordcount, count, windowed or join; join reads its
 * table from the input topic's name with "-table"), bootstrap servers,
 * application id, input topic, output topic, guarantee (exactly_once or
 * at_least_once), state directory, commit interval in milliseconds, record
 * cache in bytes (statestore.cache.max.bytes; 0: every update forwarded).
 * The driver's peerUsage (bench/peers/peers.go) names them the same.
 */
public final class Main {
  private Main() {}

  static final String USAGE =
      "usage: Main workload brokers app-id input output guarantee state-dir commit-ms cache-bytes";

  public static void main(String[] args) throws Exception {
    if (args.length != 9) {
      System.err.println(USAGE);
      System.exit(2);
    }
    String workload = args[0];
    String input = args[3];
    String output = args[4];
    String guarantee;
    switch (args[5]) {
      case "exactly_once":
        guarantee = StreamsConfig.EXACTLY_ONCE_V2;
        break;
      case "at_least_once":
        guarantee = StreamsConfig.AT_LEAST_ONCE;
        break;
      default:
        System.err.println("guarantee \"" + args[5] + "\": want exactly_once or at_least_once\n" + USAGE);
        System.exit(2);
        return;
    }

    Properties p = new Properties();
    p.put(StreamsConfig.APPLICATION_ID_CONFIG, args[2]);
    p.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, args[1]);
    p.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, guarantee);
    p.put(StreamsConfig.STATE_DIR_CONFIG, args[6]);
    p.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, nonNegative("commit-ms", args[7]));
    p.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, nonNegative("cache-bytes", args[8]));
    p.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, 1);
    p.put(StreamsConfig.consumerPrefix(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG), "earliest");

    StreamsBuilder b = new StreamsBuilder();
    switch (workload) {
      case "wordcount":
        b.stream(input, Consumed.with(Serdes.String(), Serdes.String()))
            .flatMapValues(line -> Arrays.asList(line.split(" ")))
            .groupBy((key, word) -> word, Grouped.with("by-word", Serdes.String(), Serdes.String()))
            .count(Materialized.as("counts"))
            .toStream()
            .to(output, Produced.with(Serdes.String(), Serdes.Long()));
        break;
      case "count":
        b.stream(input, Consumed.with(Serdes.String(), Serdes.ByteArray()))
            .groupByKey()
            .count(Materialized.as("counts"))
            .toStream()
            .to(output, Produced.with(Serdes.String(), Serdes.Long()));
        break;
      case "windowed":
        b.stream(input, Consumed.with(Serdes.String(), Serdes.ByteArray()))
            .groupByKey()
            .windowedBy(TimeWindows.ofSizeAndGrace(Duration.ofSeconds(10), Duration.ofDays(1)))
            .count(Materialized.as("window-counts"))
            .toStream()
            .map((w, n) -> KeyValue.pair(w.key() + "@" + w.window().start(), n))
            .to(output, Produced.with(Serdes.String(), Serdes.Long()));
        break;
      case "join":
        org.apache.kafka.streams.kstream.KTable<String, Long> table =
            b.table(input + "-table", Consumed.with(Serdes.String(), Serdes.Long()));
        b.stream(input, Consumed.with(Serdes.String(), Serdes.Long()))
            .join(table, (rank, row) -> rank * 1_000_000L + row)
            .to(output, Produced.with(Serdes.String(), Serdes.Long()));
        break;
      default:
        System.err.println("unknown workload " + workload);
        System.exit(2);
    }

    KafkaStreams streams = new KafkaStreams(b.build(), p);
    CountDownLatch stopped = new CountDownLatch(1);
    Runtime.getRuntime().addShutdownHook(new Thread(() -> {
      // The driver reads how often the thread committed: Kafka Streams'
      // commit-total, next to weir's count of commits.
      streams.metrics().forEach((name, metric) -> {
        if (name.name().equals("commit-total") && name.group().equals("stream-thread-metrics")) {
          System.err.println("peer-commits " + ((Number) metric.metricValue()).longValue());
        }
      });
      streams.close(Duration.ofSeconds(30));
      stopped.countDown();
    }));
    streams.setUncaughtExceptionHandler(e -> {
      e.printStackTrace();
      return org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse.SHUTDOWN_CLIENT;
    });
    streams.start();
    stopped.await();
  }

  /**
   * Parses argument name, v, as a count: decimal digits only (no sign), as
   * the Go peers take it; anything else ends the process with the usage.
   */
  private static long nonNegative(String name, String v) {
    try {
      if (!v.isEmpty() && v.chars().allMatch(c -> c >= '0' && c <= '9')) {
        return Long.parseLong(v);
      }
    } catch (NumberFormatException e) {
      // Digits, but too many for a long: refused below.
    }
    System.err.println(name + " \"" + v + "\": not a non-negative integer\n" + USAGE);
    System.exit(2);
    return 0;
  }
}
