package integration

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/kstream"
	"github.com/weirstream/weir/serde"
	"github.com/weirstream/weir/weirtest/kafka"
)

// countRestored counts the records restored into one store.
type countRestored struct {
	store string
	n     atomic.Int64
}

func (c *countRestored) OnRestoreStart(string, int32, int64, int64, bool) {}
func (c *countRestored) OnBatchRestored(store string, _ int32, _ int64, records int) {
	if store == c.store {
		c.n.Add(int64(records))
	}
}
func (c *countRestored) OnRestoreEnd(string, int32, int64, time.Duration) {}

// TestTableFollowsItsCompactedTopic: a table read from a compacted topic
// has no changelog topic of its own; a new instance on an empty state
// directory restores it from the topic, up to the committed offset, with
// the updates and deletions it held, and joins as before. A table read
// from a topic that is not compacted keeps a changelog; when the topic is
// made compacted, the next start does not take the old changelog's
// checkpoint for an offset of the topic: it restores from the topic.
func TestTableFollowsItsCompactedTopic(t *testing.T) {
	t.Parallel()
	for _, compacted := range []bool{true, false} {
		t.Run(fmt.Sprint("compacted=", compacted), func(t *testing.T) {
			t.Parallel()
			c := kafka.Cluster(t)
			customers, orders, out, app := c.Name(t, "customers"), c.Name(t, "orders"), c.Name(t, "out"), c.Name(t, "app")
			var cfgs map[string]string
			if compacted {
				cfgs = map[string]string{"cleanup.policy": "compact"}
			}
			c.CreateTopic(t, customers, 3, cfgs)
			c.CreateTopic(t, orders, 3, nil)
			c.CreateTopic(t, out, 3, nil)
			b := kstream.NewBuilder()
			table := b.Table("customers", customers, serde.String(), serde.String())
			b.Stream("orders", orders, serde.String(), serde.String()).
				LeftJoin(table, func(_ string, order, name string, found bool) string {
					if !found {
						name = "?"
					}
					return order + "=" + name
				}).To(out, serde.String(), serde.String())

			msg := func(topic, key, value string) *sarama.ProducerMessage {
				m := &sarama.ProducerMessage{Topic: topic, Key: sarama.StringEncoder(key)}
				if value != "" {
					m.Value = sarama.StringEncoder(value)
				}
				return m
			}
			var rows []*sarama.ProducerMessage
			for i := range 60 {
				rows = append(rows, msg(customers, fmt.Sprintf("c%d", i), fmt.Sprintf("old%d", i)))
			}
			for i := range 60 {
				switch {
				case i%3 == 0:
					rows = append(rows, msg(customers, fmt.Sprintf("c%d", i), fmt.Sprintf("name%d", i)))
				case i%3 == 1:
					rows = append(rows, msg(customers, fmt.Sprintf("c%d", i), "")) // deleted
				}
			}
			kafka.Produce(t, c, rows...)

			cfg := baseConfig(c, app, t)
			cfg.Guarantee = weir.ExactlyOnce
			first := start(t, b, cfg)
			admin := c.Admin(t)
			waitLagZero(t, c, admin, app, customers)
			if err := first.stop(t); err != nil {
				t.Fatal(err)
			}
			changelog := app + "-customers-changelog"
			names, err := admin.ListTopics()
			if err != nil {
				t.Fatal(err)
			}
			if _, exists := names[changelog]; exists == compacted {
				t.Fatalf("changelog topic %s exists: %v; want %v", changelog, exists, !compacted)
			}

			restored := &countRestored{store: "customers"}
			if compacted {
				// A new instance on an empty state directory.
				cfg.StateDir = t.TempDir()
			} else {
				// The topic becomes compacted: the next start on the same
				// state directory finds a checkpoint of the store's old
				// changelog, which is no offset of the topic, and
				// restores from the topic in full.
				policy := "compact"
				if err := admin.AlterConfig(sarama.TopicResource, customers, map[string]*string{"cleanup.policy": &policy}, false); err != nil {
					t.Fatal(err)
				}
			}
			cfg.Stores.RestoreListener = restored
			start(t, b, cfg)
			var orderMsgs []*sarama.ProducerMessage
			for i := range 60 {
				orderMsgs = append(orderMsgs, msg(orders, fmt.Sprintf("c%d", i), fmt.Sprintf("o%d", i)))
			}
			kafka.Produce(t, c, orderMsgs...)
			got := map[string]string{}
			kafka.ReadAll(t, c, out, sarama.ReadCommitted, func(ms []*sarama.ConsumerMessage) bool {
				if len(ms) > 0 {
					order, name, _ := strings.Cut(string(ms[len(ms)-1].Value), "=")
					got[order] = name
				}
				return len(got) == 60
			})
			for i := range 60 {
				want := fmt.Sprintf("name%d", i)
				switch i % 3 {
				case 1:
					want = "?"
				case 2:
					want = fmt.Sprintf("old%d", i)
				}
				if g := got[fmt.Sprintf("o%d", i)]; g != want {
					t.Errorf("order o%d joined %q after the restore, want %q", i, g, want)
				}
			}
			// Both restores read the whole topic: 60 rows, 20 updates and
			// 20 deletions.
			if n := restored.n.Load(); n != 100 {
				t.Errorf("%d records restored into the table, want the topic's 100", n)
			}
			t.Logf("restored %d records into the table", restored.n.Load())
		})
	}
}
