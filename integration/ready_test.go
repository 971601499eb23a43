package integration

import (
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
