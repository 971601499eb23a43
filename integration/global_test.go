package integration

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/kstream"
	"github.com/weirstream/weir/serde"
	"github.com/weirstream/weir/weirtest/kafka"
)

// globalJoin left-joins orders (id → product id) with the global table of
// products (id → name): "order=name", or "order=?" for no product.
func globalJoin(orders, products, out string) *kstream.Builder {
	b := kstream.NewBuilder()
	p := b.GlobalTable("products", products, serde.String(), serde.String())
	b.Stream("orders", orders, serde.String(), serde.String()).
		LeftJoinGlobal(p, func(_, product string) string { return product }, func(order, _ string, name string, found bool) string {
			if !found {
				name = "?"
			}
			return order + "=" + name
		}).
		To(out, serde.String(), serde.String())
	return b
}

// TestGlobalTableBootstrapsAndFollows: a global table is whole before the
// first record is processed (every order finds a product written before
// the start, on any partition of the products topic, whatever partition
// the order is on); updates and deletions written while it runs become
// visible to later records; and after a restart on the same state
// directory the table resumes from its checkpoints, with what changed
// meanwhile (a deletion) applied before the first record.
func TestGlobalTableBootstrapsAndFollows(t *testing.T) {
	t.Parallel()
	c := kafka.Cluster(t)
	orders, products, out, app := c.Name(t, "orders"), c.Name(t, "products"), c.Name(t, "out"), c.Name(t, "app")
	c.CreateTopic(t, orders, 3, nil)
	c.CreateTopic(t, out, 3, nil)
	c.CreateTopic(t, products, 2, map[string]string{"cleanup.policy": "compact"})
	msg := func(topic, key, value string) *sarama.ProducerMessage {
		m := &sarama.ProducerMessage{Topic: topic, Key: sarama.StringEncoder(key)}
		if value != "" {
			m.Value = sarama.StringEncoder(value)
		}
		return m
	}
	var catalog []*sarama.ProducerMessage
	for i := range 1000 {
		catalog = append(catalog, msg(products, fmt.Sprintf("p%d", i), fmt.Sprintf("name%d", i)))
	}
	kafka.Produce(t, c, catalog...)

	cfg := baseConfig(c, app, t)
	cfg.Guarantee = weir.ExactlyOnce
	cfg.Stores.CleanupDelay = time.Second // a global store's state must outlive it
	dir := cfg.StateDir
	in := start(t, globalJoin(orders, products, out), cfg)

	var first []*sarama.ProducerMessage
	for i := range 100 {
		first = append(first, msg(orders, fmt.Sprintf("o%d", i), fmt.Sprintf("p%d", i*9)))
	}
	kafka.Produce(t, c, first...)
	got := map[string]string{}
	read := func(until func() bool) {
		t.Helper()
		clear(got)
		kafka.ReadAll(t, c, out, sarama.ReadCommitted, func(ms []*sarama.ConsumerMessage) bool {
			if len(ms) > 0 {
				m := ms[len(ms)-1]
				order, name, _ := strings.Cut(string(m.Value), "=")
				got[order] = name
			}
			return until()
		})
	}
	read(func() bool { return len(got) == 100 })
	for i := range 100 {
		if want := fmt.Sprintf("name%d", i*9); got[fmt.Sprintf("o%d", i)] != want {
			t.Fatalf("order o%d joined %q, want %q: the global table was not whole before the first record", i, got[fmt.Sprintf("o%d", i)], want)
		}
	}

	// Updates while running: visible some time later.
	kafka.Produce(t, c, msg(products, "p5", "renamed"), msg(products, "p6", ""))
	n := 0
	kafka.Eventually(t, 30*time.Second, 200*time.Millisecond, func() (bool, string) {
		n++
		a, b := fmt.Sprintf("u%d-a", n), fmt.Sprintf("u%d-b", n)
		kafka.Produce(t, c, msg(orders, a, "p5"), msg(orders, b, "p6"))
		read(func() bool { return got[a] != "" && got[b] != "" })
		return got[a] == "renamed" && got[b] == "?", fmt.Sprintf("p5 joins %q and p6 %q", got[a], got[b])
	})
	if err := in.stop(t); err != nil {
		t.Fatal(err)
	}

	// While stopped, a product is deleted; the restart applies it before
	// the first order.
	kafka.Produce(t, c, msg(products, "p7", ""))
	cfg.StateDir = dir
	start(t, globalJoin(orders, products, out), cfg)
	kafka.Produce(t, c, msg(orders, "after-restart-7", "p7"), msg(orders, "after-restart-8", "p8"))
	read(func() bool { return got["after-restart-7"] != "" && got["after-restart-8"] != "" })
	if got["after-restart-7"] != "?" || got["after-restart-8"] != "name8" {
		t.Fatalf("after the restart p7 joins %q (deleted while stopped), p8 %q; want ? and name8", got["after-restart-7"], got["after-restart-8"])
	}
}

// TestGlobalTableRestoresInFullAfterDeleteRetention: a global store whose
// checkpoint is older than its topic's delete.retention.ms when the
// instance starts again restores in full, since a deletion written
// meanwhile may have been compacted away and its key would live on; one
// restarted within it resumes from its checkpoint.
func TestGlobalTableRestoresInFullAfterDeleteRetention(t *testing.T) {
	t.Parallel()
	c := kafka.Cluster(t)
	orders, products, out, app := c.Name(t, "orders"), c.Name(t, "products"), c.Name(t, "out"), c.Name(t, "app")
	c.CreateTopic(t, orders, 1, nil)
	c.CreateTopic(t, out, 1, nil)
	const retention = 20 * time.Second
	c.CreateTopic(t, products, 2, map[string]string{"cleanup.policy": "compact", "delete.retention.ms": fmt.Sprint(retention.Milliseconds())})
	product := func(key, value string) *sarama.ProducerMessage {
		return &sarama.ProducerMessage{Topic: products, Key: sarama.StringEncoder(key), Value: sarama.StringEncoder(value)}
	}
	kafka.Produce(t, c, product("p1", "one"), product("p2", "two"))

	var mu sync.Mutex
	var logs bytes.Buffer
	cfg := baseConfig(c, app, t)
	cfg.Logger = slog.New(slog.NewTextHandler(lockedWriter{&mu, &logs}, &slog.HandlerOptions{Level: slog.LevelInfo}))
	cfg.Stores.CleanupDelay = time.Hour
	dir := cfg.StateDir
	run := func() (full bool) {
		t.Helper()
		mu.Lock()
		logs.Reset()
		mu.Unlock()
		in := start(t, globalJoin(orders, products, out), cfg)
		kafka.Eventually(t, time.Minute, 100*time.Millisecond, func() (bool, string) {
			mu.Lock()
			defer mu.Unlock()
			return strings.Contains(logs.String(), "global store restored"), "the global store was not restored"
		})
		if err := in.stop(t); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		defer mu.Unlock()
		return strings.Contains(logs.String(), "restoring it in full")
	}
	if run() {
		t.Fatal("the first start, with no state, logged a full restore of an old checkpoint")
	}
	kafka.Produce(t, c, product("p1", "uno"))
	cfg.StateDir = dir
	if run() {
		t.Fatal("a restart within delete.retention.ms restored in full")
	}
	// The checkpoint's time is when the store was last in sync, no later
	// than the stop.
	stopped := time.Now()
	kafka.Produce(t, c, product("p2", "dos"))
	kafka.Eventually(t, time.Minute, 100*time.Millisecond, func() (bool, string) {
		return time.Since(stopped) > retention, "delete.retention.ms has not passed"
	})
	if !run() {
		t.Fatalf("a restart %v after the last sync, past delete.retention.ms (%v), resumed from the checkpoint", time.Since(stopped).Round(time.Millisecond), retention)
	}
}

// TestGlobalTableSkipsNullKeys: a record with a null key in a global
// table's topic (possible when the topic is not compacted: a compacted
// topic refuses it) sets no row, as in Kafka Streams; an order for the
// empty product id finds nothing, and the other rows are there.
func TestGlobalTableSkipsNullKeys(t *testing.T) {
	t.Parallel()
	c := kafka.Cluster(t)
	orders, products, out, app := c.Name(t, "orders"), c.Name(t, "products"), c.Name(t, "out"), c.Name(t, "app")
	c.CreateTopic(t, orders, 1, nil)
	c.CreateTopic(t, out, 1, nil)
	c.CreateTopic(t, products, 1, nil)
	kafka.Produce(t, c,
		&sarama.ProducerMessage{Topic: products, Value: sarama.StringEncoder("ghost")},
		&sarama.ProducerMessage{Topic: products, Key: sarama.StringEncoder("p1"), Value: sarama.StringEncoder("one")})
	start(t, globalJoin(orders, products, out), baseConfig(c, app, t))
	kafka.Produce(t, c,
		&sarama.ProducerMessage{Topic: orders, Key: sarama.StringEncoder("onull"), Value: sarama.StringEncoder("")},
		&sarama.ProducerMessage{Topic: orders, Key: sarama.StringEncoder("o1"), Value: sarama.StringEncoder("p1")})
	got := map[string]bool{}
	for _, m := range kafka.ReadAll(t, c, out, sarama.ReadCommitted, func(ms []*sarama.ConsumerMessage) bool { return len(ms) == 2 }) {
		got[string(m.Value)] = true
	}
	if !got["onull=?"] || !got["o1=one"] {
		t.Errorf("joined %v, want onull=? (a record with a null key sets no row) and o1=one", got)
	}
}
