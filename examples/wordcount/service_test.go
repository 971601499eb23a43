package main

// How a service built on weir tests its topology, at both levels:
//
//   - a unit test on weirtest's in-memory driver: no broker, milliseconds,
//     record by record;
//   - an integration test on a real Kafka broker from weirtest/kafka: the
//     cluster of the environment (WEIR_BOOTSTRAP_SERVERS and
//     WEIR_SCHEMA_REGISTRY_URL, which `make kafka-up` provides), or one
//     Testcontainers starts when Docker is there; skipped without either,
//     failed when CI=true.

import (
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/serde"
	"github.com/weirstream/weir/weirtest"
	"github.com/weirstream/weir/weirtest/kafka"
)

func TestMain(m *testing.M) { kafka.Main(m) }

// The unit level: every running count, in order, on the driver.
func TestCountsOnTheDriver(t *testing.T) {
	t.Parallel()
	d, err := weirtest.New(Topology("lines", "counts", nil), weirtest.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	lines := weirtest.Input(d, "lines", serde.Bytes(), serde.String())
	counts := weirtest.Output(d, "counts", serde.String(), serde.Int64())
	for _, line := range []string{"to be, or not to be", "To err is human"} {
		if err := lines.Pipe(nil, line, time.UnixMilli(0)); err != nil {
			t.Fatal(err)
		}
	}
	got, err := counts.ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	last := map[string]int64{}
	for _, r := range got {
		if r.Value != last[r.Key]+1 {
			t.Fatalf("%q counted %d after %d", r.Key, r.Value, last[r.Key])
		}
		last[r.Key] = r.Value
	}
	if last["to"] != 3 || last["be"] != 2 || last["human"] != 1 || len(got) != 10 {
		t.Fatalf("counts %v in %d records", last, len(got))
	}
}

// The integration level: the same topology on a real broker, exactly once,
// read back with read_committed.
func TestCountsOnKafka(t *testing.T) {
	t.Parallel()
	c := kafka.Cluster(t)
	in, out := c.Name(t, "lines"), c.Name(t, "counts")
	c.CreateTopic(t, in, 2, nil)
	c.CreateTopic(t, out, 2, nil)
	app, err := weir.New(Topology(in, out, nil), weir.Config{
		ApplicationID: c.Name(t, "wordcount"),
		Brokers:       c.Brokers,
		StateDir:      t.TempDir(),
	})
	if err != nil {
		t.Fatal(err)
	}
	kafka.Run(t, app)
	kafka.Produce(t, c,
		&sarama.ProducerMessage{Topic: in, Value: sarama.StringEncoder("to be, or not to be")},
		&sarama.ProducerMessage{Topic: in, Value: sarama.StringEncoder("To err is human")})
	last := map[string]int64{}
	kafka.ReadAll(t, c, out, sarama.ReadCommitted, func(got []*sarama.ConsumerMessage) bool {
		if len(got) > 0 {
			m := got[len(got)-1]
			n, err := serde.Int64().Deserialize(out, m.Value)
			if err != nil {
				t.Fatalf("count of %q: %v", m.Key, err)
			}
			last[string(m.Key)] = n
		}
		return last["to"] == 3 && last["be"] == 2 && last["human"] == 1
	})
}
