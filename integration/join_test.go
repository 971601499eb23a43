package integration

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/weirstream/weir/kstream"
	"github.com/weirstream/weir/serde"
	"github.com/weirstream/weir/weirtest"
	"github.com/weirstream/weir/weirtest/kafka"
)

// dslJoins joins tables and a stream: the tables customers (id → name)
// and tiers (id → tier) are joined into profiles ("name/tier", written to
// profile); every order (id → item) is left-joined with its profile
// ("item for name/tier", or "item for nobody"), written to out; and the
// table owners (account → customer id) is joined to customers by that
// foreign key ("account of name", written to accounts).
func dslJoins(orders, customers, tiers, owners, out, profile, accounts string) *kstream.Builder {
	b := kstream.NewBuilder()
	cust := b.Table("customers", customers, serde.String(), serde.String())
	b.Table("owners", owners, serde.String(), serde.String()).
		JoinOnForeignKey("owner-names", cust, func(id string) string { return id }, func(_, name string) string { return "account of " + name }, serde.String()).
		ToStream().To(accounts, serde.String(), serde.String())
	tier := b.Table("tiers", tiers, serde.String(), serde.String())
	profiles := cust.Join(tier, func(_ string, name, tier string) string { return name + "/" + tier })
	profiles.ToStream().To(profile, serde.String(), serde.String())
	b.Stream("orders", orders, serde.String(), serde.String()).
		LeftJoin(profiles, func(_ string, item, who string, found bool) string {
			if !found {
				who = "nobody"
			}
			return item + " for " + who
		}).
		To(out, serde.String(), serde.String())
	return b
}

// TestDSLJoinsSurviveKill9 runs dslJoins in a process of its own under
// exactly once, kills it with SIGKILL while orders and table updates are
// still arriving, and lets another instance finish on the same state
// directory. The committed output of both the stream-table join and the
// table-table join must be weirtest's on the same input, key by key and
// update by update: nothing the killed instance left uncommitted may
// show, nothing may be lost or repeated, and the tables restored from
// their changelogs must answer the joins as before.
//
// Orders refer to customers 0-99 (and 300-309, who do not exist), whose
// rows are all written and committed before the first order; the tier
// updates that arrive with the orders are for customers 100-199, so that
// the results do not depend on how the broker interleaves the topics.
func TestDSLJoinsSurviveKill9(t *testing.T) {
	t.Parallel()
	c := kafka.Cluster(t)
	orders, customers, tiers, owners := c.Name(t, "orders"), c.Name(t, "customers"), c.Name(t, "tiers"), c.Name(t, "owners")
	out, profile, accounts, app := c.Name(t, "out"), c.Name(t, "profile"), c.Name(t, "accounts"), c.Name(t, "app")
	const partitions = 3
	for _, topic := range []string{orders, customers, tiers, owners, out, profile, accounts} {
		c.CreateTopic(t, topic, partitions, nil)
	}
	base := time.Now().Add(-time.Minute).Truncate(time.Millisecond)
	msg := func(topic, key, value string, ts time.Time) *sarama.ProducerMessage {
		return &sarama.ProducerMessage{Topic: topic, Key: sarama.StringEncoder(key), Value: sarama.StringEncoder(value), Timestamp: ts}
	}
	var tablesFirst []*sarama.ProducerMessage
	for i := range 200 {
		id := fmt.Sprintf("c%03d", i)
		tablesFirst = append(tablesFirst, msg(customers, id, fmt.Sprintf("name%d", i), base.Add(time.Duration(i)*time.Millisecond)))
		tablesFirst = append(tablesFirst, msg(tiers, id, "bronze", base.Add(time.Duration(i)*time.Millisecond)))
	}
	// Each round of 100: 100 orders, and 10 tier updates.
	const n = 3000
	var stream []*sarama.ProducerMessage
	for i := range n {
		at := base.Add(time.Second + time.Duration(i)*time.Millisecond)
		id := fmt.Sprintf("c%03d", i%100)
		if i%10 == 9 {
			id = fmt.Sprintf("c%03d", 300+i%10)
		}
		stream = append(stream, msg(orders, id, fmt.Sprintf("item%d", i), at))
		if i%10 == 0 {
			stream = append(stream, msg(tiers, fmt.Sprintf("c%03d", 100+(i/10)%100), fmt.Sprintf("tier%d", i), at))
		}
		if i%10 == 5 {
			// An account moves to another customer (or to one who does
			// not exist, c300-c309).
			stream = append(stream, msg(owners, fmt.Sprintf("a%02d", (i/10)%50), fmt.Sprintf("c%03d", (i*7)%110+200*((i*7)%110/100)), at))
		}
	}

	// What weirtest computes on the same input, in the same order.
	d, err := weirtest.New(dslJoins(orders, customers, tiers, owners, out, profile, accounts), weirtest.Config{ApplicationID: app})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	for _, m := range append(slices.Clone(tablesFirst), stream...) {
		key, _ := m.Key.Encode()
		value, _ := m.Value.Encode()
		if err := weirtest.Input(d, m.Topic, serde.String(), serde.String()).Pipe(string(key), string(value), m.Timestamp); err != nil {
			t.Fatal(err)
		}
	}
	want := map[string]map[string][]string{}
	for _, topic := range []string{out, profile, accounts} {
		recs, err := weirtest.Output(d, topic, serde.String(), serde.String()).ReadAll()
		if err != nil {
			t.Fatal(err)
		}
		want[topic] = map[string][]string{}
		for _, r := range recs {
			want[topic][r.Key] = append(want[topic][r.Key], r.Value)
		}
	}

	admin := c.Admin(t)
	env := map[string]string{
		"BROKERS": strings.Join(c.Brokers, ","), "APP": app, "STATE_DIR": t.TempDir(), "TOPOLOGY": "joins",
		"IN": orders, "CUSTOMERS": customers, "TIERS": tiers, "OWNERS": owners, "OUT": out, "PROFILE": profile, "ACCOUNTS": accounts,
	}
	// The stream's messages in order of their orders: orders[i] and the
	// tier update that goes with it.
	byOrder := make([][]*sarama.ProducerMessage, n)
	i := -1
	for _, m := range stream {
		if m.Topic == orders {
			i++
		}
		byOrder[i] = append(byOrder[i], m)
	}
	killMidStream(t, c, admin, env, app, orders, n, func(from, to int) {
		if from == 0 {
			kafka.Produce(t, c, tablesFirst...)
			kafka.Eventually(t, 60*time.Second, 50*time.Millisecond, func() (bool, string) {
				lc, lt := inputLag(t, c, admin, app, customers), inputLag(t, c, admin, app, tiers)
				return lc == 0 && lt == 0, fmt.Sprintf("tables not yet committed: lag %d and %d", lc, lt)
			})
		}
		var msgs []*sarama.ProducerMessage
		for _, ms := range byOrder[from:to] {
			msgs = append(msgs, ms...)
		}
		kafka.Produce(t, c, msgs...)
	})
	finishAfterKill(t, env, func() {
		for _, topic := range []string{orders, tiers, owners} {
			waitLagZero(t, c, admin, app, topic)
		}
		// The foreign-key join answers through two more topics: done
		// when every account shows its last result. (The lag of a topic
		// written in transactions never reaches zero: its commit
		// markers take offsets.)
		kafka.ReadAll(t, c, accounts, sarama.ReadCommitted, func(ms []*sarama.ConsumerMessage) bool {
			last := map[string]string{}
			for _, m := range ms {
				last[string(m.Key)] = string(m.Value)
			}
			for k, w := range want[accounts] {
				if !sameFinal(last, k, w[len(w)-1]) {
					return false
				}
			}
			return true
		})
	})
	for _, topic := range []string{out, profile, accounts} {
		writeSentinels(t, c, topic, partitions)
		got := map[string][]string{}
		for _, m := range readToSentinels(t, c, topic, partitions, sarama.ReadCommitted) {
			if strings.HasPrefix(string(m.Key), sentinelPrefix) {
				continue
			}
			got[string(m.Key)] = append(got[string(m.Key)], string(m.Value))
		}
		if len(got) != len(want[topic]) && topic != accounts {
			t.Errorf("%s: %d keys, want %d", topic, len(got), len(want[topic]))
		}
		for k, w := range want[topic] {
			g := got[k]
			if topic == accounts {
				// An answer for an account that has changed again since
				// is dropped, so the broker may skip updates weirtest
				// shows: each account's results must be weirtest's in
				// order, some perhaps left out, and end in the same state.
				last := map[string]string{}
				if len(g) > 0 {
					last[k] = g[len(g)-1]
				}
				if !subsequence(g, w) || !sameFinal(last, k, w[len(w)-1]) {
					t.Errorf("%s, key %s:\n got  %v\n want (a subsequence of, ending alike) %v", topic, k, g, w)
				}
				continue
			}
			if !slices.Equal(g, w) {
				t.Errorf("%s, key %s:\n got  %v\n want %v", topic, k, g, w)
			}
		}
	}
}

// sameFinal reports whether key's last value in last is want, where a
// deletion ("", a tombstone) and no record at all are the same state: a
// foreign-key result that the broker skipped (its answer came for a row
// that had changed again) leaves nothing to delete.
func sameFinal(last map[string]string, key, want string) bool {
	v, ok := last[key]
	if want == "" {
		return !ok || v == ""
	}
	return ok && v == want
}

// subsequence reports whether a is b with some elements left out.
func subsequence(a, b []string) bool {
	i := 0
	for _, x := range b {
		if i < len(a) && a[i] == x {
			i++
		}
	}
	return i == len(a)
}
