package integration

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/weirtest/kafka"
)

// TestReadyClosesOnceRunning: Ready is closed when the App first runs,
// with its tasks assigned and restored, and stays closed; Done closes when
// Run returns.
func TestReadyClosesOnceRunning(t *testing.T) {
	t.Parallel()
	c := kafka.Cluster(t)
	in, out, app := c.Name(t, "in"), c.Name(t, "out"), c.Name(t, "app")
	c.CreateTopic(t, in, 3, nil)
	c.CreateTopic(t, out, 3, nil)
	inst := start(t, passthrough(in, out), baseConfig(c, app, t))
	select {
	case <-inst.app.Ready():
	case <-inst.app.Done():
		t.Fatal("Run returned before the App was ready")
	case <-time.After(60 * time.Second):
		s, err := inst.app.State()
		t.Fatalf("not ready within 60 s: state %v (%v)", s, err)
	}
	if s, err := inst.app.State(); s != weir.StateRunning {
		t.Errorf("State = %v (%v) once ready, want running", s, err)
	}
	if n := len(inst.app.Tasks()); n != 3 {
		t.Errorf("%d tasks once ready, want 3", n)
	}
	if err := inst.stop(t); err != nil {
		t.Fatalf("Run = %v", err)
	}
	select {
	case <-inst.app.Done():
	default:
		t.Fatal("Done is open after Run returned")
	}
	select {
	case <-inst.app.Ready():
	default:
		t.Fatal("Ready reopened after the App stopped")
	}
}

// TestJoiningInstanceIsReadyOnlyWithItsTasks: an instance that joins a
// running group is first given nothing (its share stays with the owner
// until that owner revokes it: the cooperative hand-over); /readyz says
// ready only once it runs its share, never while it waits for the
// follow-up rebalance, so that a rollout does not move on too early.
func TestJoiningInstanceIsReadyOnlyWithItsTasks(t *testing.T) {
	t.Parallel()
	c := kafka.Cluster(t)
	in, out, app := c.Name(t, "in"), c.Name(t, "out"), c.Name(t, "app")
	c.CreateTopic(t, in, 4, nil)
	c.CreateTopic(t, out, 4, nil)
	a := start(t, passthrough(in, out), baseConfig(c, app, t))
	kafka.WaitRunning(t, a.app)

	b := start(t, passthrough(in, out), baseConfig(c, app, t))
	srv := httptest.NewServer(b.app.Handler())
	defer srv.Close()
	ready := func() bool {
		resp, err := http.Get(srv.URL + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}
	var earlyReady int
	kafka.Eventually(t, 60*time.Second, 5*time.Millisecond, func() (bool, string) {
		// Tasks first: a task never leaves b in between, so if b is ready
		// after this read without a task, it was ready without its share.
		tasks := len(b.app.Tasks())
		if !ready() {
			return false, fmt.Sprintf("b not ready, %d task(s)", tasks)
		}
		if tasks == 0 && len(b.app.Tasks()) == 0 {
			earlyReady++
			return false, "b ready without a task"
		}
		return true, ""
	})
	if earlyReady > 0 {
		t.Fatalf("/readyz of the joining instance said ready %d time(s) while it ran no task", earlyReady)
	}
	if n, m := len(a.app.Tasks()), len(b.app.Tasks()); n+m != 4 || m == 0 {
		t.Fatalf("tasks a=%d b=%d; want 4 between them, some on b", n, m)
	}
}
