package weir.conformance;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.Writer;
import java.nio.charset.StandardCharsets;
import java.nio.file.DirectoryStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;
import java.util.function.Function;

import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.TestInputTopic;
import org.apache.kafka.streams.TestOutputTopic;
import org.apache.kafka.streams.TopologyTestDriver;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.JoinWindows;
import org.apache.kafka.streams.kstream.KGroupedStream;
import org.apache.kafka.streams.kstream.KStream;
import org.apache.kafka.streams.kstream.KTable;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.kstream.SessionWindows;
import org.apache.kafka.streams.kstream.SlidingWindows;
import org.apache.kafka.streams.kstream.StreamJoined;
import org.apache.kafka.streams.kstream.Suppressed;
import org.apache.kafka.streams.kstream.TimeWindows;
import org.apache.kafka.streams.kstream.Branched;
import org.apache.kafka.streams.kstream.GlobalKTable;
import org.apache.kafka.streams.kstream.Named;
import org.apache.kafka.streams.kstream.Windowed;
import org.apache.kafka.streams.state.Stores;
import org.apache.kafka.streams.test.TestRecord;

/**
 * Runs every case file of an input directory through the scenario its name
 * starts with (conformance/README.md) on TopologyTestDriver, and writes what
 * the topic "out" received to the output directory, or the failure.
 */
public final class Runner {
    private static final Consumed<String, String> IN = Consumed.with(Serdes.String(), Serdes.String());
    private static final Produced<String, String> OUT = Produced.with(Serdes.String(), Serdes.String());
    private static final StreamJoined<String, String, String> JOINED =
            StreamJoined.with(Serdes.String(), Serdes.String(), Serdes.String());
    private static final JoinWindows SYMMETRIC = JoinWindows.ofTimeDifferenceAndGrace(Duration.ofSeconds(5), Duration.ofSeconds(2));
    // b joins a's record from 2 s before it to 6 s after it: before() moves
    // the start of the window (records of the other stream earlier than
    // this one's), after() its end.
    private static final JoinWindows ASYMMETRIC = JoinWindows.ofTimeDifferenceAndGrace(Duration.ofSeconds(6), Duration.ofSeconds(1))
            .before(Duration.ofSeconds(2)).after(Duration.ofSeconds(6));

    private Runner() {}

    public static void main(String[] args) throws IOException {
        if (args.length != 2) {
            System.err.println("usage: Runner <in-dir> <out-dir>");
            System.exit(2);
        }
        Path in = Path.of(args[0]), out = Path.of(args[1]);
        Files.createDirectories(out);
        Path stateDir = Files.createTempDirectory("weir-conformance-state");
        try (DirectoryStream<Path> files = Files.newDirectoryStream(in, "*.jsonl")) {
            for (Path f : files) {
                String file = f.getFileName().toString();
                String kase = file.substring(0, file.length() - ".jsonl".length());
                runCase(kase, f, out, stateDir);
            }
        } finally {
            try (var paths = Files.walk(stateDir)) {
                for (Path p : paths.sorted(java.util.Comparator.reverseOrder()).toList()) {
                    Files.deleteIfExists(p);
                }
            }
        }
    }

    private static void runCase(String kase, Path input, Path outDir, Path stateDir) throws IOException {
        String scenario = kase.substring(0, kase.indexOf('.') < 0 ? kase.length() : kase.indexOf('.'));
        List<String[]> records = new ArrayList<>();
        try (BufferedReader r = Files.newBufferedReader(input, StandardCharsets.UTF_8)) {
            for (String line; (line = r.readLine()) != null; ) {
                if (!line.isBlank()) {
                    records.add(Json.parseRecord(line));
                }
            }
        }
        int at = -1;
        try {
            StreamsBuilder b = new StreamsBuilder();
            build(scenario, b);
            Properties props = new Properties();
            props.put(StreamsConfig.APPLICATION_ID_CONFIG, "conformance");
            props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, "dummy:1234");
            // A case named <scenario>.cached-<seed> runs with the record
            // caches on (Kafka Streams' default size), every other with
            // them off.
            props.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, kase.contains(".cached-") ? 10L << 20 : 0L);
            // A state directory of this run's own: two runs on one machine
            // (a developer's and CI's) must not share /tmp/kafka-streams.
            props.put(StreamsConfig.STATE_DIR_CONFIG, stateDir.toString());
            props.put(StreamsConfig.DEFAULT_KEY_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
            props.put(StreamsConfig.DEFAULT_VALUE_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
            try (TopologyTestDriver d = new TopologyTestDriver(b.build(), props, Instant.EPOCH)) {
                TestInputTopic<String, String> a = d.createInputTopic("a", new StringSerializer(), new StringSerializer());
                TestInputTopic<String, String> bt = usesB(scenario)
                        ? d.createInputTopic("b", new StringSerializer(), new StringSerializer()) : null;
                TestOutputTopic<String, String> o = d.createOutputTopic("out", new StringDeserializer(), new StringDeserializer());
                for (at = 0; at < records.size(); at++) {
                    String[] rec = records.get(at);
                    TestInputTopic<String, String> t = "b".equals(rec[0]) ? bt : a;
                    if (t == null) {
                        throw new IllegalArgumentException("record for topic " + rec[0] + " in a scenario that reads only a");
                    }
                    t.pipeInput(new TestRecord<>(rec[1], rec[2], null, Instant.ofEpochMilli(Long.parseLong(rec[3]))));
                }
                at = -1;
                try (Writer w = Files.newBufferedWriter(outDir.resolve(kase + ".jsonl"), StandardCharsets.UTF_8)) {
                    for (TestRecord<String, String> r : o.readRecordsToList()) {
                        w.write("{\"key\":" + Json.quote(r.key()) + ",\"value\":" + Json.quote(r.value())
                                + ",\"ts\":" + r.timestamp() + "}\n");
                    }
                }
            }
        } catch (RuntimeException e) {
            Files.writeString(outDir.resolve(kase + ".error"), e + " (input record " + at + ")\n", StandardCharsets.UTF_8);
        }
    }

    private static boolean usesB(String scenario) {
        return scenario.startsWith("join-") || scenario.startsWith("stream-table-") || scenario.startsWith("table-")
                && !scenario.startsWith("table-groupby-") || scenario.startsWith("fk-") || scenario.startsWith("global-")
                || scenario.equals("versioned-join");
    }

    /** A failed login of examples/fraud: "ok" is false. */
    private static final java.util.regex.Pattern FAILED = java.util.regex.Pattern.compile("\"ok\"\\s*:\\s*false");

    private static int num(String v) {
        return Integer.parseInt(v);
    }

    private static String s(String v) {
        return v == null ? "null" : v;
    }

    private static String text(Long n) {
        return n == null ? null : String.valueOf(n);
    }

    private static String windowKey(Windowed<String> w) {
        return w.key() + "@" + w.window().start() + "-" + w.window().end();
    }

    private static void countWindows(KTable<Windowed<String>, Long> t) {
        t.toStream((w, v) -> windowKey(w)).mapValues(Runner::text).to("out", OUT);
    }

    private static KStream<String, String> values(StreamsBuilder b) {
        return b.stream("a", IN).filter((k, v) -> v != null);
    }

    private static KGroupedStream<String, String> filteredByKey(StreamsBuilder b) {
        return b.stream("a", IN).filter((k, v) -> v != null && num(v) % 3 != 0).groupByKey();
    }

    private static void build(String scenario, StreamsBuilder b) {
        switch (scenario) {
            case "count" -> b.stream("a", IN).groupByKey().count().toStream().mapValues(Runner::text).to("out", OUT);
            case "reduce-sum" -> b.stream("a", IN).groupByKey()
                    .reduce((x, y) -> String.valueOf(num(x) + num(y))).toStream().to("out", OUT);
            case "aggregate-concat" -> b.stream("a", IN).filter((k, v) -> v != null).groupByKey()
                    .aggregate(() -> "", (k, v, agg) -> agg + v + ";", Materialized.with(Serdes.String(), Serdes.String()))
                    .toStream().to("out", OUT);
            case "count-tumbling" -> countWindows(b.stream("a", IN).groupByKey()
                    .windowedBy(TimeWindows.ofSizeAndGrace(Duration.ofSeconds(10), Duration.ofSeconds(5))).count());
            case "filter-count-tumbling" -> countWindows(filteredByKey(b)
                    .windowedBy(TimeWindows.ofSizeAndGrace(Duration.ofSeconds(10), Duration.ofSeconds(5))).count());
            case "filter-count-suppress" -> countWindows(filteredByKey(b)
                    .windowedBy(TimeWindows.ofSizeAndGrace(Duration.ofSeconds(10), Duration.ofSeconds(5))).count()
                    .suppress(Suppressed.untilWindowCloses(Suppressed.BufferConfig.unbounded())));
            case "count-hopping" -> countWindows(b.stream("a", IN).groupByKey()
                    .windowedBy(TimeWindows.ofSizeAndGrace(Duration.ofSeconds(10), Duration.ofSeconds(2)).advanceBy(Duration.ofSeconds(5)))
                    .count());
            case "count-sliding" -> countWindows(b.stream("a", IN).groupByKey()
                    .windowedBy(SlidingWindows.ofTimeDifferenceAndGrace(Duration.ofSeconds(5), Duration.ofSeconds(2))).count());
            case "count-session" -> countWindows(b.stream("a", IN).groupByKey()
                    .windowedBy(SessionWindows.ofInactivityGapAndGrace(Duration.ofSeconds(5), Duration.ofSeconds(2))).count());
            case "join-inner" -> b.stream("a", IN)
                    .join(b.stream("b", IN), (l, r) -> l + "|" + r, SYMMETRIC, JOINED).to("out", OUT);
            case "join-left" -> b.stream("a", IN)
                    .leftJoin(b.stream("b", IN), (l, r) -> l + "|" + s(r), SYMMETRIC, JOINED).to("out", OUT);
            case "join-outer" -> b.stream("a", IN)
                    .outerJoin(b.stream("b", IN), (l, r) -> s(l) + "|" + s(r), SYMMETRIC, JOINED).to("out", OUT);
            case "join-asymmetric" -> b.stream("a", IN)
                    .join(b.stream("b", IN), (l, r) -> l + "|" + r, ASYMMETRIC, JOINED).to("out", OUT);
            case "stream-table-join" -> b.stream("a", IN)
                    .join(b.table("b", IN), (l, r) -> l + "|" + r).to("out", OUT);
            case "stream-table-left-join" -> b.stream("a", IN)
                    .leftJoin(b.table("b", IN), (l, r) -> l + "|" + s(r)).to("out", OUT);
            case "table" -> b.table("a", IN).toStream().to("out", OUT);
            case "table-filter" -> b.table("a", IN).filter((k, v) -> num(v) % 3 != 0).toStream().to("out", OUT);
            case "table-join" -> b.table("a", IN)
                    .join(b.table("b", IN), (l, r) -> l + "|" + r).toStream().to("out", OUT);
            case "table-left-join" -> b.table("a", IN)
                    .leftJoin(b.table("b", IN), (l, r) -> l + "|" + s(r)).toStream().to("out", OUT);
            case "table-outer-join" -> b.table("a", IN)
                    .outerJoin(b.table("b", IN), (l, r) -> s(l) + "|" + s(r)).toStream().to("out", OUT);
            case "fk-join" -> {
                Function<String, String> fk = v -> "k" + (num(v) % 5);
                b.table("a", IN).join(b.table("b", IN), fk, (l, r) -> l + "|" + r).toStream().to("out", OUT);
            }
            case "fk-left-join" -> {
                Function<String, String> fk = v -> "k" + (num(v) % 5);
                b.table("a", IN).leftJoin(b.table("b", IN), fk, (l, r) -> l + "|" + s(r)).toStream().to("out", OUT);
            }
            case "table-groupby-reduce" -> b.table("a", IN)
                    .groupBy((k, v) -> KeyValue.pair("g" + (num(v) % 3), v), Grouped.with(Serdes.String(), Serdes.String()))
                    .reduce((x, y) -> String.valueOf(num(x) + num(y)), (x, y) -> String.valueOf(num(x) - num(y)))
                    .toStream().to("out", OUT);
            case "table-groupby-count" -> b.table("a", IN)
                    .groupBy((k, v) -> KeyValue.pair("g" + (num(v) % 3), v), Grouped.with(Serdes.String(), Serdes.String()))
                    .count().toStream().mapValues(Runner::text).to("out", OUT);
            case "table-groupby-aggregate" -> b.table("a", IN)
                    .groupBy((k, v) -> KeyValue.pair("g" + (num(v) % 3), v), Grouped.with(Serdes.String(), Serdes.String()))
                    .aggregate(() -> "0", (k, v, agg) -> String.valueOf(num(agg) + num(v)), (k, v, agg) -> String.valueOf(num(agg) - num(v)),
                            Materialized.with(Serdes.String(), Serdes.String()))
                    .toStream().to("out", OUT);
            case "reduce-tumbling" -> values(b).groupByKey()
                    .windowedBy(TimeWindows.ofSizeAndGrace(Duration.ofSeconds(10), Duration.ofSeconds(5)))
                    .reduce((x, y) -> String.valueOf(num(x) + num(y)))
                    .toStream((w, v) -> windowKey(w)).to("out", OUT);
            case "aggregate-hopping" -> values(b).groupByKey()
                    .windowedBy(TimeWindows.ofSizeAndGrace(Duration.ofSeconds(10), Duration.ofSeconds(2)).advanceBy(Duration.ofSeconds(5)))
                    .aggregate(() -> "", (k, v, agg) -> agg + v + ";", Materialized.with(Serdes.String(), Serdes.String()))
                    .toStream((w, v) -> windowKey(w)).to("out", OUT);
            case "aggregate-session" -> values(b).groupByKey()
                    .windowedBy(SessionWindows.ofInactivityGapAndGrace(Duration.ofSeconds(5), Duration.ofSeconds(2)))
                    .aggregate(() -> "0", (k, v, agg) -> String.valueOf(num(agg) + num(v)),
                            (k, x, y) -> String.valueOf(num(x) + num(y)), Materialized.with(Serdes.String(), Serdes.String()))
                    .toStream((w, v) -> windowKey(w)).to("out", OUT);
            case "suppress-time-limit" -> countWindows(b.stream("a", IN).groupByKey()
                    .windowedBy(TimeWindows.ofSizeAndGrace(Duration.ofSeconds(10), Duration.ofSeconds(5))).count()
                    .suppress(Suppressed.untilTimeLimit(Duration.ofSeconds(3), Suppressed.BufferConfig.maxRecords(1000).emitEarlyWhenFull())));
            case "global-join" -> {
                GlobalKTable<String, String> g = b.globalTable("b", IN);
                b.stream("a", IN).join(g, (k, v) -> k, (l, r) -> l + "|" + r).to("out", OUT);
            }
            case "global-left-join" -> {
                GlobalKTable<String, String> g = b.globalTable("b", IN);
                b.stream("a", IN).leftJoin(g, (k, v) -> k, (l, r) -> l + "|" + s(r)).to("out", OUT);
            }
            case "versioned-join" -> b.stream("a", IN)
                    .join(b.table("b", IN, Materialized.as(Stores.persistentVersionedKeyValueStore("vt", Duration.ofSeconds(10)))),
                            (l, r) -> l + "|" + r)
                    .to("out", OUT);
            case "split-merge" -> {
                var branches = values(b).split(Named.as("s-"))
                        .branch((k, v) -> num(v) % 2 == 0, Branched.withFunction(x -> x.mapValues(v -> "e" + v), "even"))
                        .defaultBranch(Branched.withFunction(x -> x.mapValues(v -> "o" + v), "odd"));
                branches.get("s-even").merge(branches.get("s-odd")).to("out", OUT);
            }
            case "rekey-count" -> b.stream("a", IN).filter((k, v) -> v != null)
                    .selectKey((k, v) -> "r" + (num(v) % 4)).groupByKey().count().toStream().mapValues(Runner::text).to("out", OUT);
            // examples/fraud: one alert per user and minute with five failed
            // logins or more, when the minute closes (10 s grace).
            case "fraud" -> b.stream("a", IN)
                    .filter((k, v) -> v != null && FAILED.matcher(v).find())
                    .groupByKey()
                    .windowedBy(TimeWindows.ofSizeAndGrace(Duration.ofMinutes(1), Duration.ofSeconds(10)))
                    .count()
                    .suppress(Suppressed.untilWindowCloses(Suppressed.BufferConfig.unbounded()))
                    .toStream()
                    .filter((w, n) -> n >= 5)
                    .map((w, n) -> KeyValue.pair(w.key(), "{\"user\":" + Json.quote(w.key()) + ",\"window_start\":"
                            + w.window().start() + ",\"window_end\":" + w.window().end() + ",\"failures\":" + n + "}"))
                    .to("out", OUT);
            default -> throw new IllegalArgumentException("unknown scenario " + scenario);
        }
    }

    /** The flat JSON objects of the case files. */
    static final class Json {
        private Json() {}

        static String quote(String s) {
            if (s == null) {
                return "null";
            }
            StringBuilder b = new StringBuilder("\"");
            for (char c : s.toCharArray()) {
                switch (c) {
                    case '"' -> b.append("\\\"");
                    case '\\' -> b.append("\\\\");
                    case '\n' -> b.append("\\n");
                    case '\r' -> b.append("\\r");
                    case '\t' -> b.append("\\t");
                    default -> {
                        if (c < 0x20) {
                            b.append(String.format("\\u%04x", (int) c));
                        } else {
                            b.append(c);
                        }
                    }
                }
            }
            return b.append('"').toString();
        }

        /** Returns topic, key, value and ts of an input line (key and value may be null). */
        static String[] parseRecord(String line) {
            String[] out = new String[4];
            int[] pos = {skip(line, 0)};
            expect(line, pos, '{');
            while (true) {
                pos[0] = skip(line, pos[0]);
                if (line.charAt(pos[0]) == '}') {
                    break;
                }
                String name = string(line, pos);
                pos[0] = skip(line, pos[0]);
                expect(line, pos, ':');
                pos[0] = skip(line, pos[0]);
                String value;
                if (line.startsWith("null", pos[0])) {
                    value = null;
                    pos[0] += 4;
                } else if (line.charAt(pos[0]) == '"') {
                    value = string(line, pos);
                } else {
                    int start = pos[0];
                    while (pos[0] < line.length() && "-0123456789".indexOf(line.charAt(pos[0])) >= 0) {
                        pos[0]++;
                    }
                    value = line.substring(start, pos[0]);
                }
                switch (name) {
                    case "topic" -> out[0] = value;
                    case "key" -> out[1] = value;
                    case "value" -> out[2] = value;
                    case "ts" -> out[3] = value;
                    default -> throw new IllegalArgumentException("unknown field " + name + " in " + line);
                }
                pos[0] = skip(line, pos[0]);
                if (line.charAt(pos[0]) == ',') {
                    pos[0]++;
                }
            }
            if (out[0] == null || out[3] == null) {
                throw new IllegalArgumentException("record without topic or ts: " + line);
            }
            return out;
        }

        private static int skip(String s, int i) {
            while (i < s.length() && Character.isWhitespace(s.charAt(i))) {
                i++;
            }
            return i;
        }

        private static void expect(String s, int[] pos, char c) {
            if (s.charAt(pos[0]) != c) {
                throw new IllegalArgumentException("expected " + c + " at " + pos[0] + " of " + s);
            }
            pos[0]++;
        }

        private static String string(String s, int[] pos) {
            expect(s, pos, '"');
            StringBuilder b = new StringBuilder();
            while (true) {
                char c = s.charAt(pos[0]++);
                if (c == '"') {
                    return b.toString();
                }
                if (c != '\\') {
                    b.append(c);
                    continue;
                }
                char e = s.charAt(pos[0]++);
                switch (e) {
                    case 'n' -> b.append('\n');
                    case 'r' -> b.append('\r');
                    case 't' -> b.append('\t');
                    case 'b' -> b.append('\b');
                    case 'f' -> b.append('\f');
                    case 'u' -> {
                        b.append((char) Integer.parseInt(s.substring(pos[0], pos[0] + 4), 16));
                        pos[0] += 4;
                    }
                    default -> b.append(e);
                }
            }
        }
    }
}
