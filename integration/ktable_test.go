package integration

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/kstream"
	"github.com/weirstream/weir/ktable"
	"github.com/weirstream/weir/serde"
	"github.com/weirstream/weir/weirtest/kafka"
)

// holdRestore is a RestoreListener that holds every restore of a store
// partition after its first batch until release is closed.
type holdRestore struct {
	once    sync.Once
	held    chan struct{} // closed when a restore is held
	release chan struct{}
}

func (h *holdRestore) OnRestoreStart(string, int32, int64, int64, bool) {}
func (h *holdRestore) OnBatchRestored(string, int32, int64, int) {
	h.once.Do(func() { close(h.held) })
	<-h.release
}
func (h *holdRestore) OnRestoreEnd(string, int32, int64, time.Duration) {}

// TestKTableViewReadsCommittedState: a ktable view of a running DSL
// count answers every key with its count as committed, through Get and
// All; while the store is being restored (a new instance on an empty state
// directory), a read of it fails with a *weir.StoreUnavailableError that
// says so and names the task, and answers again once the restore is done.
func TestKTableViewReadsCommittedState(t *testing.T) {
	t.Parallel()
	c := kafka.Cluster(t)
	in, app := c.Name(t, "in"), c.Name(t, "app")
	c.CreateTopic(t, in, 3, nil)
	b := kstream.NewBuilder()
	grouped := b.Stream("events", in, serde.String(), serde.String()).GroupByKey()
	grouped.Count("counts")
	grouped.WindowedBy(kstream.Tumbling(time.Hour)).Count("hourly")
	hour := time.Now().Truncate(time.Hour)

	want := map[string]int64{}
	var msgs []*sarama.ProducerMessage
	for i := range 500 {
		k := fmt.Sprintf("k%d", i%10)
		want[k]++
		msgs = append(msgs, &sarama.ProducerMessage{Topic: in, Key: sarama.StringEncoder(k), Value: sarama.StringEncoder("x"), Timestamp: hour})
	}
	kafka.Produce(t, c, msgs...)

	cfg := baseConfig(c, app, t)
	cfg.Guarantee = weir.ExactlyOnce
	first := start(t, b, cfg)
	view, err := ktable.KeyValue(first.app, "counts", serde.String(), serde.Int64())
	if err != nil {
		t.Fatal(err)
	}
	kafka.Eventually(t, 60*time.Second, 100*time.Millisecond, func() (bool, string) {
		for k, w := range want {
			n, found, err := view.Get(k)
			if err != nil || !found || n != w {
				return false, fmt.Sprintf("Get(%s) = %d, %v, %v; want %d", k, n, found, err, w)
			}
		}
		return true, ""
	})
	got := map[string]int64{}
	for k, n := range view.All() {
		got[k] = n
	}
	if err := view.Err(); err != nil || len(got) != len(want) {
		t.Fatalf("All = %v (err %v), want %v", got, err, want)
	}
	for k, w := range want {
		if got[k] != w {
			t.Fatalf("All: %s = %d, want %d", k, got[k], w)
		}
	}
	hourly, err := ktable.Window(first.app, "hourly", serde.String(), serde.Int64())
	if err != nil {
		t.Fatal(err)
	}
	for k, w := range want {
		var windows []string
		for start, n := range hourly.Fetch(k, hour.Add(-time.Hour), hour.Add(time.Hour)) {
			windows = append(windows, fmt.Sprintf("%s=%d", start.Format(time.RFC3339), n))
		}
		if err := hourly.Err(); err != nil || len(windows) != 1 || windows[0] != fmt.Sprintf("%s=%d", hour.UTC().Format(time.RFC3339), w) {
			t.Fatalf("hourly windows of %s = %v (err %v), want one of %d starting %s", k, windows, err, w, hour.UTC().Format(time.RFC3339))
		}
	}
	if err := first.stop(t); err != nil {
		t.Fatal(err)
	}
	if _, _, err := view.Get("k0"); !isUnavailable(err, weir.StoreNotRunning) {
		t.Fatalf("Get after the App stopped = %v, want a StoreUnavailableError (%s)", err, weir.StoreNotRunning)
	}

	// A new instance on an empty state directory restores the store.
	hold := &holdRestore{held: make(chan struct{}), release: make(chan struct{})}
	cfg.StateDir = t.TempDir()
	cfg.Stores.RestoreListener = hold
	second := start(t, b, cfg)
	select {
	case <-hold.held:
	case <-time.After(60 * time.Second):
		close(hold.release)
		t.Fatal("no restore started within 60 s")
	}
	view2, err := ktable.KeyValue(second.app, "counts", serde.String(), serde.Int64())
	if err != nil {
		t.Fatal(err)
	}
	kafka.Eventually(t, 30*time.Second, 50*time.Millisecond, func() (bool, string) {
		for k := range want {
			_, _, err := view2.Get(k)
			var ue *weir.StoreUnavailableError
			if errors.As(err, &ue) && ue.Reason == weir.StoreRestoring && ue.Task != "" {
				return true, ""
			}
		}
		return false, "no key reported its partition as restoring"
	})
	close(hold.release)
	kafka.Eventually(t, 60*time.Second, 100*time.Millisecond, func() (bool, string) {
		for k, w := range want {
			n, found, err := view2.Get(k)
			if err != nil || !found || n != w {
				return false, fmt.Sprintf("after the restore Get(%s) = %d, %v, %v; want %d", k, n, found, err, w)
			}
		}
		return true, ""
	})
}

func isUnavailable(err error, reason weir.StoreUnavailableReason) bool {
	var ue *weir.StoreUnavailableError
	return errors.As(err, &ue) && ue.Reason == reason
}
