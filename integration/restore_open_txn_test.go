package integration

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
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

// TestAbandonedChangelogRecordsAreEnded: a process of the application
// that is gone committed a transaction whose record on a changelog
// partition never got its marker (made as missedRecord makes it), so the
// partition's last stable offset stays below it for good. A task
// restoring from that changelog is held (TestRestoreWaitsForAnOpenTransaction);
// weir must then take the abandoned transactional id over and end the
// record as its coordinator recorded the transaction, with a commit, so
// that the restore reads on: the store holds that record and the
// committed ones after it. Not parallel, for missedRecord.
func TestAbandonedChangelogRecordsAreEnded(t *testing.T) {
	c := kafka.Cluster(t)
	in, out, app := c.Name(t, "in"), c.Name(t, "out"), c.Name(t, "app")
	c.CreateTopic(t, in, 1, nil)
	c.CreateTopic(t, out, 1, nil)
	changelog := app + "-" + profiles + "-changelog"
	c.CreateTopic(t, changelog, 1, map[string]string{"cleanup.policy": "compact"})

	admin := c.Admin(t)
	holderID := app + "-0123456789abcdef0123456789abcdef-0"
	cl, holder := txnHolder(t, c, holderID, 0)
	pid, epoch := beginHeld(t, holder, admin, holderID, &sarama.ProducerMessage{Topic: out, Partition: 0,
		Key: sarama.StringEncoder("held"), Value: sarama.StringEncoder("1")})
	missedRecord(t, cl, admin, holderID, pid, epoch, changelog, 0, "held", "1")
	if err := holder.CommitTxn(); err != nil {
		t.Fatal(err)
	}
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

	var mu sync.Mutex
	var logs bytes.Buffer
	cfg := baseConfig(c, app, t)
	cfg.Guarantee = weir.ExactlyOnce
	cfg.Logger = slog.New(slog.NewTextHandler(lockedWriter{&mu, &logs}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	top := usersTopology(in, out, serde.String(), "", func(string, int64, string, bool) (string, string) { return "", "" })
	inst := start(t, top, cfg)
	r, err := inst.app.StoreReader(profiles)
	if err != nil {
		t.Fatal(err)
	}
	// The restore asks for the take-over with each warning (every 30 s);
	// the holder's process must have been out of the group for a minute.
	kafka.Eventually(t, 4*time.Minute, 200*time.Millisecond, func() (bool, string) {
		var got []string
		for _, k := range []string{"held", "after"} {
			v, found, err := r.Get([]byte(k))
			var unavailable *weir.StoreUnavailableError
			if errors.As(err, &unavailable) {
				mu.Lock()
				defer mu.Unlock()
				return false, fmt.Sprintf("store: %v; weir logged:\n%s", err, lastWarnings(logs.String(), 6))
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
	mu.Lock()
	said := strings.Contains(logs.String(), "taking its transactional id over to end them with a commit") && strings.Contains(logs.String(), holderID)
	mu.Unlock()
	if !said {
		t.Errorf("weir did not say it took %s over to commit its records", holderID)
	}
}
