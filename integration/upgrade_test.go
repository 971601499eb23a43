package integration

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/processor"
	"github.com/weirstream/weir/serde"
	"github.com/weirstream/weir/weirtest/kafka"
)

// upgradeTopology copies in to out through one processor with the given
// stores attached (they are kept by their changelogs, whatever the
// processor does with them).
func upgradeTopology(in, out string, stores ...processor.StoreSpec) *processor.Topology {
	tp := processor.NewTopology()
	src := tp.AddSource("in", in, serde.String(), serde.String())
	p := tp.AddProcessor("p", processor.Func(func(ctx processor.Context[string, string], rec processor.Record[string, string]) error {
		return ctx.Forward(rec)
	}), src)
	for _, s := range stores {
		tp.AddStore(s, p)
	}
	tp.AddSink("out", out, serde.String(), serde.String(), p)
	return tp
}

// The start-time upgrade check on a real broker: the descriptor is written
// to "<app>-topology"; an added store passes; a removed store and a
// changed key serde are refused, listing every difference and changing
// nothing; Config.AllowDropState lets a removal through and deletes the
// store's changelog.
func TestUpgradeChecks(t *testing.T) {
	t.Parallel()
	c := kafka.Cluster(t)
	in, out := c.Name(t, "up-in"), c.Name(t, "up-out")
	c.CreateTopic(t, in, 2, nil)
	c.CreateTopic(t, out, 2, nil)
	id := c.Name(t, "up-app")
	t.Cleanup(func() {
		admin := c.Admin(t)
		for _, topic := range []string{id + "-topology", id + "-totals-changelog", id + "-seen-changelog"} {
			_ = admin.DeleteTopic(topic)
		}
	})
	cfg := weir.Config{ApplicationID: id, Brokers: c.Brokers, StateDir: t.TempDir(), Logger: testLogger(t)}
	totals := processor.KeyValue("totals", serde.String(), serde.Int64())
	seen := processor.KeyValue("seen", serde.String(), serde.String())
	seq := 0
	// run starts the App, waits until a new record went through, stops it.
	run := func(cfg weir.Config, stores ...processor.StoreSpec) {
		t.Helper()
		app, err := weir.New(upgradeTopology(in, out, stores...), cfg)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		stopped := make(chan error, 1)
		go func() { stopped <- app.Run(ctx) }()
		seq++
		key := fmt.Sprintf("k%d", seq)
		kafka.Produce(t, c, &sarama.ProducerMessage{Topic: in, Key: sarama.StringEncoder(key), Value: sarama.StringEncoder("v")})
		kafka.ReadAll(t, c, out, sarama.ReadCommitted, func(got []*sarama.ConsumerMessage) bool {
			return len(got) > 0 && string(got[len(got)-1].Key) == key
		})
		cancel()
		if err := <-stopped; err != nil {
			t.Fatalf("Run: %v", err)
		}
	}
	// refused starts an App that must be refused and returns its error.
	refused := func(cfg weir.Config, stores ...processor.StoreSpec) *weir.UpgradeError {
		t.Helper()
		app, err := weir.New(upgradeTopology(in, out, stores...), cfg)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		var ue *weir.UpgradeError
		if err := app.Run(ctx); !errors.As(err, &ue) {
			t.Fatalf("Run = %v; want an *UpgradeError", err)
		}
		return ue
	}
	descriptor := func() *weir.Descriptor {
		t.Helper()
		end := kafka.EndOffsets(t, c, id+"-topology")[0]
		got := kafka.ReadAll(t, c, id+"-topology", sarama.ReadCommitted, func(got []*sarama.ConsumerMessage) bool {
			return len(got) > 0 && got[len(got)-1].Offset == end-1
		})
		d, err := weir.ParseDescriptor(got[len(got)-1].Value)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	topicExists := func(topic string) bool {
		t.Helper()
		topics, err := c.Admin(t).ListTopics()
		if err != nil {
			t.Fatal(err)
		}
		_, ok := topics[topic]
		return ok
	}

	run(cfg, totals)
	if d := descriptor(); len(d.Stores) != 1 || d.Stores[0].Name != "totals" || d.Stores[0].Partitions != 2 {
		t.Fatalf("first descriptor: %s", d)
	}

	// An added store starts empty.
	run(cfg, totals, seen)
	if d := descriptor(); len(d.Stores) != 2 {
		t.Fatalf("descriptor after adding a store: %s", d)
	}

	// A removed store and a changed key serde are refused, both listed.
	offsets := kafka.EndOffsets(t, c, id+"-topology")
	ue := refused(cfg, processor.KeyValue("seen", serde.Bytes(), serde.String()))
	msg := ue.Error()
	if !strings.Contains(msg, `store "totals": removed`) || !strings.Contains(msg, `store "seen": key serde`) {
		t.Fatalf("refusal: %v", msg)
	}
	if !topicExists(id+"-totals-changelog") || fmt.Sprint(kafka.EndOffsets(t, c, id+"-topology")) != fmt.Sprint(offsets) {
		t.Fatal("a refused start changed the topics")
	}

	// Allowed, the removed store's changelog goes; the start goes on.
	allowed := cfg
	allowed.AllowDropState = []string{"totals"}
	run(allowed, seen)
	kafka.Eventually(t, 30*time.Second, 0, func() (bool, string) {
		return !topicExists(id + "-totals-changelog"), "the dropped store's changelog still exists"
	})
	if d := descriptor(); len(d.Stores) != 1 || d.Stores[0].Name != "seen" {
		t.Fatalf("descriptor after the drop: %s", d)
	}
}
