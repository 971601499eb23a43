package weir

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/weirstream/weir/processor"
	"github.com/weirstream/weir/serde"
)

// passThrough is a topology of one source and one sink.
func passThrough() *processor.Topology {
	t := processor.NewTopology()
	t.AddSink("out", "out", serde.String(), serde.String(), t.AddSource("in", "in", serde.String(), serde.String()))
	return t
}

// families gathers g's metric families by name.
func families(t *testing.T, g prometheus.Gatherer) map[string]*dto.MetricFamily {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*dto.MetricFamily{}
	for _, mf := range mfs {
		out[mf.GetName()] = mf
	}
	return out
}

// buildInfo returns weir_build_info's labels.
func buildInfo(t *testing.T, mfs map[string]*dto.MetricFamily) map[string]string {
	t.Helper()
	mf := mfs["weir_build_info"]
	if mf == nil || len(mf.GetMetric()) != 1 || mf.GetMetric()[0].GetGauge().GetValue() != 1 {
		t.Fatalf("weir_build_info = %v, want one gauge of 1", mf)
	}
	out := map[string]string{}
	for _, lp := range mf.GetMetric()[0].GetLabel() {
		out[lp.GetName()] = lp.GetValue()
	}
	return out
}

// The App's own registry serves the Go runtime and process collectors next
// to weir's metrics, and weir_build_info; a registry the user gives gets
// weir's metrics and weir_build_info only. The process id appears once Run
// has opened the state directory, even when Run then fails.
func TestAppRegistryCollectors(t *testing.T) {
	t.Parallel()
	cfg := Config{
		ApplicationID: "build-info", Brokers: []string{"127.0.0.1:1"}, // nothing listens
		Guarantee: AtLeastOnce, StateDir: t.TempDir(), Logger: slog.New(slog.DiscardHandler),
	}
	cfg.Net.DialTimeout = time.Second
	cfg.Net.StartupTimeout = -1 // fail at once
	app, err := New(passThrough(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	own := families(t, app.cfg.Metrics.(prometheus.Gatherer))
	for _, name := range []string{"go_goroutines", "go_memstats_heap_alloc_bytes", "process_start_time_seconds", "weir_app_state"} {
		if own[name] == nil {
			t.Errorf("the App's own registry lacks %s", name)
		}
	}
	info := buildInfo(t, own)
	if info["application"] != "build-info" || info["guarantee"] != "at_least_once" || info["version"] == "" || info["process_id"] != "" {
		t.Errorf("weir_build_info before Run = %v, want application build-info, guarantee at_least_once, a version, no process id", info)
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := app.Run(ctx); err == nil {
		t.Fatal("Run succeeded without a broker")
	}
	id, err := os.ReadFile(filepath.Join(cfg.StateDir, cfg.ApplicationID, "process-id"))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := buildInfo(t, families(t, app.cfg.Metrics.(prometheus.Gatherer)))["process_id"], strings.TrimSpace(string(id)); got == "" || got != want {
		t.Errorf("weir_build_info{process_id=%q} after Run, want the state directory's %q", got, want)
	}

	user := prometheus.NewRegistry()
	cfg.Metrics = user
	if _, err := New(passThrough(), cfg); err != nil {
		t.Fatal(err)
	}
	mine := families(t, user)
	for name := range mine {
		if strings.HasPrefix(name, "go_") || strings.HasPrefix(name, "process_") {
			t.Errorf("a user's registry got %s", name)
		}
	}
	if mine["weir_app_state"] == nil {
		t.Error("a user's registry lacks weir_app_state")
	}
	buildInfo(t, mine)
}
