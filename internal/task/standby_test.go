package task

import (
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/weirstream/weir/changelog"
	"github.com/weirstream/weir/internal/assign"
	"github.com/weirstream/weir/internal/graph"
	"github.com/weirstream/weir/internal/statelog"
	"github.com/weirstream/weir/internal/topics"
)

// testStandby returns a standby of task 0_0 with one key-value store, s.
func testStandby(t *testing.T) *Standby {
	t.Helper()
	db, err := statelog.Open(t.TempDir(), changelog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	m, err := testMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	n := &graph.Node{Name: "p", Kind: graph.KindProcessor}
	g := &graph.Graph{Nodes: []*graph.Node{n}, Stores: []*graph.Store{{Name: "s", Users: []*graph.Node{n}}}}
	sh := &Shared{Config: Config{ApplicationID: "app"}, Graph: g, DB: db, Metrics: m,
		Layout: &topics.Layout{Subs: []*graph.Subtopology{{ID: 0, Nodes: []*graph.Node{n}}}}}
	return NewStandby(sh, slog.New(slog.DiscardHandler), assign.TaskID{})
}

// A standby read never spans the drop of a full copy: the drop waits for
// the read under way, and a read after it finds the copy behind and does
// not run.
func TestStandbyReadsDoNotSpanADrop(t *testing.T) {
	t.Parallel()
	sb := testStandby(t)
	st := sb.t.stores["s"]
	reading, release := make(chan struct{}), make(chan struct{})
	read := make(chan error, 1)
	go func() {
		_, ran, err := sb.Read("s", 0, func() error {
			close(reading)
			<-release
			return nil
		})
		if err == nil && !ran {
			t.Error("a read of a caught-up copy did not run")
		}
		read <- err
	}()
	<-reading
	dropped := make(chan error, 1)
	go func() { dropped <- st.empty(500) }()
	select {
	case <-dropped:
		t.Fatal("the store was emptied while a read of it was under way")
	case <-time.After(100 * time.Millisecond):
	}
	close(release)
	if err := <-read; err != nil {
		t.Fatal(err)
	}
	if err := <-dropped; err != nil {
		t.Fatal(err)
	}
	lag, ran, err := sb.Read("s", 100, func() error { t.Error("a read of an emptied copy ran"); return nil })
	if ran || err != nil || lag != 500 {
		t.Fatalf("read after the drop = lag %d, ran %v, %v; want lag 500, not run", lag, ran, err)
	}
	if _, ran, _ := sb.Read("none", 100, func() error { return nil }); ran {
		t.Fatal("a read of a store the task does not have ran")
	}
}
