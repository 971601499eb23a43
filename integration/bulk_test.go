package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/weirstream/weir/weirtest/kafka"
)

// TestBulkRestoreRebuildsTheExactState: with the state directory lost, a
// full restore through the bulk path rebuilds every key of the changelog,
// and the instance goes on processing into the loaded stores.
func TestBulkRestoreRebuildsTheExactState(t *testing.T) {
	t.Parallel()
	c := kafka.Cluster(t)
	in, out, app := c.Name(t, "in"), c.Name(t, "out"), c.Name(t, "app")
	c.CreateTopic(t, in, 2, nil)
	c.CreateTopic(t, out, 2, nil)
	const keys, seqs = 3000, 3
	kafka.Produce(t, c, seqRecords(in, keys, 0, seqs)...)
	cfg := baseConfig(c, app, t)
	a := start(t, maxSeqTopology(in, out), cfg)
	waitProcessed(t, c, out, keys, seqs)
	if err := a.stop(t); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(cfg.StateDir, app)); err != nil {
		t.Fatal(err)
	}

	var logs logCapture
	cfg.Logger = logs.logger()
	cfg.Stores.BulkRestoreMinRecords = 1
	events := &restoreLog{}
	cfg.Stores.RestoreListener = events
	b := start(t, maxSeqTopology(in, out), cfg)
	kafka.Eventually(t, 30*time.Second, 50*time.Millisecond, func() (bool, string) {
		_, ended := restored(events.snapshot())
		return ended == 2, fmt.Sprintf("%d of 2 restores ended", ended)
	})
	for _, e := range events.snapshot() {
		if e.Kind == "start" && !e.Full {
			t.Errorf("restore of partition %d without local state was not full", e.Partition)
		}
	}
	if n := strings.Count(logs.String(), "bulk=true"); n != 2 {
		t.Errorf("%d restores went through the bulk path, want 2; log:\n%s", n, logs.String())
	}
	// Writes after the load win over the loaded values.
	kafka.Produce(t, c, seqRecords(in, keys, seqs, seqs+1)...)
	waitProcessed(t, c, out, keys, seqs+1)
	if err := b.stop(t); err != nil {
		t.Fatal(err)
	}
	equalStores(t, readStore(t, cfg.StateDir, app, 2), wantLatest(keys, seqs+1))
}

// TestBulkRestoreKilledMidwayRestoresAgain kills an instance with SIGKILL
// during bulk restores, twice: once while the first batches are sorted into
// runs, once when the first partition has finished (the other may be
// writing its tables). The next start recognises what did not finish and
// restores it again: the state equals the changelog's.
func TestBulkRestoreKilledMidwayRestoresAgain(t *testing.T) {
	t.Parallel()
	c := kafka.Cluster(t)
	in, out, app := c.Name(t, "in"), c.Name(t, "out"), c.Name(t, "app")
	c.CreateTopic(t, in, 2, nil)
	c.CreateTopic(t, out, 2, nil)
	const keys, seqs = 40_000, 2
	env := map[string]string{
		"BROKERS": strings.Join(c.Brokers, ","), "APP": app, "IN": in, "OUT": out,
		"STATE_DIR": t.TempDir(), "COMMIT": "200ms", "BULK_MIN": "1",
	}
	first := startChild(t, env)
	kafka.Produce(t, c, seqRecords(in, keys, 0, seqs)...)
	waitProcessed(t, c, out, keys, seqs)
	stopChild(t, first)
	if err := os.RemoveAll(filepath.Join(env["STATE_DIR"], app)); err != nil {
		t.Fatal(err)
	}

	killAt := func(kind string) {
		ch := startChild(t, env)
		kafka.Eventually(t, 60*time.Second, 5*time.Millisecond, func() (bool, string) {
			for _, e := range ch.snapshot() {
				if e.Kind == kind {
					return true, ""
				}
			}
			return false, "no " + kind + " event yet"
		})
		if err := ch.cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		<-ch.done
	}
	killAt("batch")
	// The kill came in the middle of a load: its runs are on disk.
	bulkDir := filepath.Join(env["STATE_DIR"], app, "state-bulk")
	if runs, _ := filepath.Glob(filepath.Join(bulkDir, "runs-*")); len(runs) == 0 {
		t.Errorf("no bulk load under way at the kill: %s holds no runs", bulkDir)
	}
	killAt("end")

	last := startChild(t, env)
	kafka.Eventually(t, 60*time.Second, 50*time.Millisecond, func() (bool, string) {
		_, ended := restored(last.snapshot())
		return ended == 2, fmt.Sprintf("%d of 2 restores ended", ended)
	})
	kafka.Produce(t, c, seqRecords(in, keys, seqs, seqs+1)...)
	waitProcessed(t, c, out, keys, seqs+1)
	stopChild(t, last)
	if left, _ := os.ReadDir(bulkDir); len(left) != 0 {
		t.Errorf("%s holds %d entries after the restores finished", bulkDir, len(left))
	}
	equalStores(t, readStore(t, env["STATE_DIR"], app, 2), wantLatest(keys, seqs+1))
}
