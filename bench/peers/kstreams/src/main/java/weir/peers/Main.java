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
 * defaults (record cache, 100 ms commits under exactly once) until SIGTERM.
 *
 * <p>Arguments: workload (wordcount, count, windowed or join; join reads its
 * table from the input topic's name with "-table"), bootstrap servers,
 * application id, input topic, output topic, guarantee (exactly_once or
 * at_least_once), state directory, commit interval in milliseconds.
 */
public final class Main {
  private Main() {}

  public static void main(String[] args) throws Exception {
    if (args.length != 8) {
      System.err.println("usage: Main workload brokers app-id input output guarantee state-dir commit-ms");
      System.exit(2);
    }
    String workload = args[0];
    String input = args[3];
    String output = args[4];

    Properties p = new Properties();
    p.put(StreamsConfig.APPLICATION_ID_CONFIG, args[2]);
    p.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, args[1]);
    p.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG,
        args[5].equals("exactly_once") ? StreamsConfig.EXACTLY_ONCE_V2 : StreamsConfig.AT_LEAST_ONCE);
    p.put(StreamsConfig.STATE_DIR_CONFIG, args[6]);
    p.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, Long.parseLong(args[7]));
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
}
