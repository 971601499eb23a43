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
	"encoding/json"
	"fmt"
	"net"
	"net/http"
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

// Two instances with -advertised-addr answer GET /words/<word> for every
// word, whichever of them counts it: the other's counts are asked of it
// over HTTP.
func TestWordQueriesAcrossInstances(t *testing.T) {
	t.Parallel()
	c := kafka.Cluster(t)
	in, out, id := c.Name(t, "lines"), c.Name(t, "counts"), c.Name(t, "wordcount")
	c.CreateTopic(t, in, 4, nil)
	c.CreateTopic(t, out, 4, nil)
	var addrs []string
	var apps []*weir.App
	for range 2 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		addrs = append(addrs, addr)
		app, err := weir.New(Topology(in, out, nil), weir.Config{
			ApplicationID:  id,
			Brokers:        c.Brokers,
			StateDir:       t.TempDir(),
			AdvertisedAddr: addr,
			Authorizer:     countsOnly(false),
			Consumer:       weir.ConsumerConfig{SessionTimeout: 6 * time.Second, HeartbeatInterval: 500 * time.Millisecond},
		})
		if err != nil {
			t.Fatal(err)
		}
		h, err := handler(app, true)
		if err != nil {
			t.Fatal(err)
		}
		srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = srv.Serve(ln) }()
		t.Cleanup(func() { _ = srv.Close() })
		kafka.Run(t, app)
		apps = append(apps, app)
	}
	want := map[string]int64{}
	var msgs []*sarama.ProducerMessage
	for _, l := range sampleText() {
		for _, w := range Words(l) {
			want[w]++
		}
		msgs = append(msgs, &sarama.ProducerMessage{Topic: in, Value: sarama.StringEncoder(l)})
	}
	kafka.Produce(t, c, msgs...)
	kafka.Eventually(t, 90*time.Second, 200*time.Millisecond, func() (bool, string) {
		// Both instances count: half the words are the other one's.
		if len(apps[0].Tasks()) == 0 || len(apps[1].Tasks()) == 0 {
			return false, "an instance has no tasks yet"
		}
		for w, n := range want {
			resp, err := http.Get("http://" + addrs[0] + "/words/" + w)
			if err != nil {
				t.Fatal(err)
			}
			var body struct {
				Count int64  `json:"count"`
				Error string `json:"error"`
			}
			err = json.NewDecoder(resp.Body).Decode(&body)
			resp.Body.Close()
			if err != nil || resp.StatusCode != http.StatusOK || body.Count != n {
				return false, fmt.Sprintf("GET /words/%s = HTTP %d, %+v (%v); want count %d", w, resp.StatusCode, body, err, n)
			}
		}
		return true, ""
	})
}
