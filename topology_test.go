package weir

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/weirstream/weir/internal/task"
	"github.com/weirstream/weir/processor"
	"github.com/weirstream/weir/serde"
)

// TestMisspeltChildFailsNew pins item 3 of issue 20: a processor routing
// to "balance-out" through a misspelt name passed New and Init and failed
// on the first record, as a poison record. The name is now checked when
// the topology is built: New fails, before any broker is involved.
func TestMisspeltChildFailsNew(t *testing.T) {
	t.Parallel()
	build := func(child string) *processor.Topology {
		tp := processor.NewTopology()
		payments := tp.AddSource("payments", "payments", serde.String(), serde.Int64())
		var out processor.Child[string, int64]
		balance := tp.AddProcessor("balance", processor.Func(func(ctx processor.Context[string, int64], rec processor.Record[string, int64]) error {
			return ctx.ForwardTo(out, rec)
		}), payments)
		tp.AddSink("balance-out", "balances", serde.String(), serde.Int64(), balance)
		out = balance.Child(child)
		return tp
	}
	cfg := Config{ApplicationID: "payments", Brokers: []string{"localhost:9092"}}
	_, err := New(build("balanceout"), cfg)
	if err == nil || !strings.Contains(err.Error(), `"balance" has no child "balanceout"`) || !strings.Contains(err.Error(), `"balance-out"`) {
		t.Fatalf("New = %v, want an error naming the node, the misspelt child and its children", err)
	}
	app, err := New(build("balance-out"), cfg)
	if err != nil {
		t.Fatalf("New with the right name: %v", err)
	}
	_ = app.Close()
}

// A topology error from the runtime is a *TopologyError, never a
// *RecordError, every field kept.
func TestPublicTopologyError(t *testing.T) {
	t.Parallel()
	te := &task.TopologyError{Task: "0_3", Node: "balance", Err: errors.New("forward to the zero Child")}
	err := publicError(fmt.Errorf("wrapped: %w", te))
	var got *TopologyError
	var re *RecordError
	if !errors.As(err, &got) || *got != TopologyError(*te) || errors.As(err, &re) || err.Error() != te.Error() {
		t.Fatalf("publicError = %#v (%v)", err, err)
	}
	if want := "weir: task 0_3, node balance: topology error: forward to the zero Child"; err.Error() != want {
		t.Errorf("Error() = %q, want %q", err.Error(), want)
	}
}

// Close returns what Run returned: here Run refuses a state directory
// others may write, before it reaches a broker.
func TestCloseReturnsRunsError(t *testing.T) {
	dir := t.TempDir()
	appDir := filepath.Join(dir, "close")
	if err := os.Mkdir(appDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(appDir, 0o777); err != nil {
		t.Fatal(err)
	}
	tp := processor.NewTopology()
	in := tp.AddSource("in", "in", serde.String(), serde.String())
	tp.AddSink("out", "out", serde.String(), serde.String(), in)
	app, err := New(tp, Config{ApplicationID: "close", Brokers: []string{"localhost:1"}, StateDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	runErr := app.Run(t.Context())
	if !errors.Is(runErr, ErrStateDirUnsafe) {
		t.Fatalf("Run = %v, want ErrStateDirUnsafe", runErr)
	}
	if err := app.Close(); err != runErr {
		t.Fatalf("Close = %v, want Run's error %v", err, runErr)
	}
	fresh, err := New(tp, Config{ApplicationID: "close", Brokers: []string{"localhost:1"}, StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if err := fresh.Close(); err != nil {
		t.Fatalf("Close without Run = %v, want nil", err)
	}
}
