package weir_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/kstream"
	"github.com/weirstream/weir/ktable"
	"github.com/weirstream/weir/serde"
)

// A StoreReader names key-value stores of the topology only, and reads
// nothing while the App does not run.
func TestStoreReaderBeforeRun(t *testing.T) {
	t.Parallel()
	b := kstream.NewBuilder()
	g := b.Stream("in", "in", serde.String(), serde.String()).GroupByKey()
	g.Count("counts")
	g.WindowedBy(kstream.Tumbling(time.Minute)).Count("windowed")
	g.SessionWindowedBy(kstream.Sessions(time.Minute)).Count("sessions")
	app, err := weir.New(b, weir.Config{ApplicationID: "app", Brokers: []string{"localhost:1"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := app.StoreReader("nope"); err == nil || !strings.Contains(err.Error(), `no store "nope"`) {
		t.Errorf("StoreReader(nope) = %v, want no such store", err)
	}
	if _, err := app.StoreReader("sessions"); err == nil || !strings.Contains(err.Error(), "session store") {
		t.Errorf("StoreReader(sessions) = %v, want a refusal of a session store", err)
	}
	if _, err := ktable.KeyValue(app, "windowed", serde.String(), serde.Int64()); err == nil {
		t.Error("ktable.KeyValue accepted a window store")
	}
	windows, err := ktable.Window(app, "windowed", serde.String(), serde.Int64())
	if err != nil {
		t.Fatal(err)
	}
	for range windows.Fetch("k", time.UnixMilli(0), time.Now()) {
		t.Error("Fetch yielded a window before Run")
	}
	if err := windows.Err(); err == nil {
		t.Error("Fetch before Run reported no error")
	}
	view, err := ktable.KeyValue(app, "counts", serde.String(), serde.Int64())
	if err != nil {
		t.Fatal(err)
	}
	var ue *weir.StoreUnavailableError
	if _, _, err := view.Get("k"); !errors.As(err, &ue) || ue.Reason != weir.StoreNotRunning {
		t.Errorf("Get before Run = %v, want a StoreUnavailableError (%s)", err, weir.StoreNotRunning)
	}
	for range view.All() {
		t.Error("All yielded an entry before Run")
	}
	if err := view.Err(); !errors.As(err, &ue) {
		t.Errorf("Err after All before Run = %v, want a StoreUnavailableError", err)
	}
	for range view.LookupAll(t.Context()) {
		t.Error("LookupAll yielded an entry before Run")
	}
	if err := view.Err(); !errors.As(err, &ue) {
		t.Errorf("Err after LookupAll before Run = %v, want a StoreUnavailableError", err)
	}
	if ws, err := windows.Lookup(t.Context(), "k", time.UnixMilli(0), time.Now()); len(ws) != 0 || !errors.As(err, &ue) {
		t.Errorf("WindowView.Lookup before Run = %d windows, %v; want a StoreUnavailableError", len(ws), err)
	}
}
