package integration

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/serde"
	"github.com/weirstream/weir/weirtest/kafka"
)

// TestRestoreWaitsForAnOpenTransaction: a task whose changelog holds a
// transaction still open above its checkpoint (a commit whose marker has
// not arrived, or a producer that died) does not start on the state below
// it: the restore waits, the task stays restoring, and once the
// transaction commits the store holds its records and every committed
// record after them.
func TestRestoreWaitsForAnOpenTransaction(t *testing.T) {
	t.Parallel()
	c := kafka.Cluster(t)
	in, out, app := c.Name(t, "in"), c.Name(t, "out"), c.Name(t, "app")
	c.CreateTopic(t, in, 1, nil)
	c.CreateTopic(t, out, 1, nil)
	changelog := app + "-" + profiles + "-changelog"
	c.CreateTopic(t, changelog, 1, map[string]string{"cleanup.policy": "compact"})

	// The changelog: an open transaction's record, then a committed one
	// of another producer, which read_committed readers cannot see yet.
	admin := c.Admin(t)
	holderID := c.Name(t, "holder")
	_, holder := txnHolder(t, c, holderID, time.Minute)
	beginHeld(t, holder, admin, holderID, &sarama.ProducerMessage{Topic: changelog, Partition: 0,
		Key: sarama.StringEncoder("held"), Value: sarama.StringEncoder("1")})
	other := newTxnProducer(t, c, c.Name(t, "other"))
	if err := other.BeginTxn(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := other.SendMessage(&sarama.ProducerMessage{Topic: changelog, Key: sarama.StringEncoder("after"), Value: sarama.StringEncoder("2")}); err != nil {
		t.Fatal(err)
	}
	if err := other.CommitTxn(); err != nil {
		t.Fatal(err)
	}

	cfg := baseConfig(c, app, t)
	cfg.Guarantee = weir.ExactlyOnce
	top := usersTopology(in, out, serde.String(), "", func(string, int64, string, bool) (string, string) { return "", "" })
	inst := start(t, top, cfg)
	restoring := func() bool {
		tasks := inst.app.Tasks()
		return len(tasks) == 1 && tasks[0].Restoring
	}
	kafka.Eventually(t, time.Minute, 50*time.Millisecond, func() (bool, string) {
		return restoring(), fmt.Sprintf("tasks %+v: want the one task, restoring", inst.app.Tasks())
	})
	// Held: still restoring a while later (the commit interval is 100 ms,
	// the restore of two records takes milliseconds).
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if !restoring() {
			t.Fatalf("the task stopped restoring while a transaction on its changelog was open: %+v", inst.app.Tasks())
		}
	}
	if err := holder.CommitTxn(); err != nil {
		t.Fatal(err)
	}
	r, err := inst.app.StoreReader(profiles)
	if err != nil {
		t.Fatal(err)
	}
	kafka.Eventually(t, time.Minute, 50*time.Millisecond, func() (bool, string) {
		var got []string
		for _, k := range []string{"held", "after"} {
			v, found, err := r.Get([]byte(k))
			var unavailable *weir.StoreUnavailableError
			if errors.As(err, &unavailable) {
				return false, fmt.Sprintf("store: %v", err)
			}
			if err != nil {
				t.Fatal(err)
			}
			if found {
				got = append(got, k+"="+string(v))
			}
		}
		return slices.Equal(got, []string{"held=1", "after=2"}), fmt.Sprintf("the store holds %v, want held=1 and after=2", got)
	})
}
