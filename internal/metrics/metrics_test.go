package metrics

import (
	"runtime/debug"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// noSource is a Source with nothing to report.
type noSource struct{}

func (noSource) Snapshot() Snapshot { return Snapshot{} }

// gather returns reg's metric families by name.
func gather(t *testing.T, reg prometheus.Gatherer) map[string]*dto.MetricFamily {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*dto.MetricFamily{}
	for _, mf := range mfs {
		out[mf.GetName()] = mf
	}
	return out
}

// labels returns a metric's labels as name=value, sorted by name.
func labels(m *dto.Metric) string {
	var parts []string
	for _, lp := range m.GetLabel() {
		parts = append(parts, lp.GetName()+"="+lp.GetValue())
	}
	return strings.Join(parts, ",")
}

// The counters of records written per sink topic and of failures per node
// are registered with the application's label and count per child.
func TestWrittenAndNodeFailureCounters(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m, err := New(reg, "app", noSource{})
	if err != nil {
		t.Fatal(err)
	}
	m.RecordsWritten.WithLabelValues("0", "0_1", "out").Add(3)
	m.RecordsWritten.WithLabelValues("1", "1_0", "app-x-repartition").Inc()
	m.NodeFailures.WithLabelValues("0", "0_1", "parse").Inc()
	mfs := gather(t, reg)
	for name, want := range map[string]map[string]float64{
		"weir_records_written_total": {
			"application=app,task=0_1,thread=0,topic=out":               3,
			"application=app,task=1_0,thread=1,topic=app-x-repartition": 1,
		},
		"weir_node_failures_total": {"application=app,node=parse,task=0_1,thread=0": 1},
	} {
		mf := mfs[name]
		if mf == nil || mf.GetType() != dto.MetricType_COUNTER {
			t.Errorf("%s: %v, want a counter", name, mf)
			continue
		}
		got := map[string]float64{}
		for _, m := range mf.GetMetric() {
			got[labels(m)] = m.GetCounter().GetValue()
		}
		if len(got) != len(want) {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
		for l, v := range want {
			if got[l] != v {
				t.Errorf("%s{%s} = %v, want %v", name, l, got[l], v)
			}
		}
	}
}

// weir_build_info is 1 with the version, the guarantee and the process id
// as the App reports it at each scrape: empty until Run opened the state
// directory, then the id.
func TestBuildInfo(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	pid := ""
	if err := reg.Register(NewBuildInfo("app", Build{Version: "v1.2.3", Guarantee: "exactly_once", ProcessID: func() string { return pid }})); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"", "0123abcd"} {
		pid = id
		mf := gather(t, reg)["weir_build_info"]
		if mf == nil || mf.GetType() != dto.MetricType_GAUGE || len(mf.GetMetric()) != 1 {
			t.Fatalf("weir_build_info = %v, want one gauge", mf)
		}
		m := mf.GetMetric()[0]
		if want := "application=app,guarantee=exactly_once,process_id=" + id + ",version=v1.2.3"; labels(m) != want || m.GetGauge().GetValue() != 1 {
			t.Errorf("weir_build_info{%s} = %v, want {%s} 1", labels(m), m.GetGauge().GetValue(), want)
		}
	}
}

// The version is weir's module version wherever the build records it:
// the main module, a dependency, or a dependency's replacement; "devel"
// when none is recorded.
func TestModuleVersion(t *testing.T) {
	t.Parallel()
	weir := func(v string, replace *debug.Module) *debug.Module {
		return &debug.Module{Path: modulePath, Version: v, Replace: replace}
	}
	other := &debug.Module{Path: "example.com/other", Version: "v9.9.9"}
	for _, c := range []struct {
		name string
		bi   debug.BuildInfo
		want string
	}{
		{"dependency", debug.BuildInfo{Main: *other, Deps: []*debug.Module{other, weir("v0.4.0", nil)}}, "v0.4.0"},
		{"main module, tagged", debug.BuildInfo{Main: *weir("v0.5.1", nil)}, "v0.5.1"},
		{"main module, from a checkout", debug.BuildInfo{Main: *weir("(devel)", nil)}, "devel"},
		{"replaced by a directory", debug.BuildInfo{Main: *other, Deps: []*debug.Module{weir("v0.4.0", &debug.Module{Path: "../weir"})}}, "devel"},
		{"replaced by a fork", debug.BuildInfo{Main: *other, Deps: []*debug.Module{weir("v0.4.0", &debug.Module{Path: "example.com/fork", Version: "v0.4.1"})}}, "v0.4.1"},
		{"absent", debug.BuildInfo{Main: *other}, "devel"},
	} {
		if got := moduleVersion(&c.bi); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
	if v := Version(); v == "" {
		t.Error("Version is empty")
	}
}

// RegisterRuntime adds the Go runtime and process collectors.
func TestRegisterRuntime(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	if err := RegisterRuntime(reg); err != nil {
		t.Fatal(err)
	}
	mfs := gather(t, reg)
	for _, name := range []string{"go_goroutines", "go_memstats_heap_alloc_bytes", "process_start_time_seconds"} {
		if mfs[name] == nil {
			t.Errorf("%s missing", name)
		}
	}
}

// storeSource reports one store's size.
type storeSource struct{}

func (storeSource) Snapshot() Snapshot {
	return Snapshot{Stores: []Store{{Store: "counts", Bytes: 4096}}}
}

// A store's size is exported under the name that says it is an estimate
// of disk, not a count of what the store holds.
func TestStoreEstimatedDiskBytes(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	if _, err := New(reg, "app", storeSource{}); err != nil {
		t.Fatal(err)
	}
	mfs := gather(t, reg)
	mf := mfs["weir_store_estimated_disk_bytes"]
	if mf == nil || len(mf.GetMetric()) != 1 {
		t.Fatalf("weir_store_estimated_disk_bytes = %v, want one gauge", mf)
	}
	if m := mf.GetMetric()[0]; labels(m) != "application=app,store=counts" || m.GetGauge().GetValue() != 4096 {
		t.Errorf("weir_store_estimated_disk_bytes{%s} = %v, want {application=app,store=counts} 4096", labels(m), m.GetGauge().GetValue())
	}
	if mfs["weir_store_size_bytes"] != nil {
		t.Error("weir_store_size_bytes is still exported")
	}
}

// Read sums the counters by the labels the console shows, and the
// commit histograms of every thread.
func TestRead(t *testing.T) {
	t.Parallel()
	m, err := New(prometheus.NewRegistry(), "app", noSource{})
	if err != nil {
		t.Fatal(err)
	}
	m.RecordsProcessed.WithLabelValues("0", "0_1").Add(3)
	m.RecordsProcessed.WithLabelValues("1", "0_1").Add(2)
	m.RecordsSkipped.WithLabelValues("0", "0_1", "deserialization").Inc()
	m.DeadLettered.WithLabelValues("0", "0_1").Add(4)
	m.DeadLettered.WithLabelValues("1", "1_1").Add(1)
	m.Transactions.WithLabelValues("0", "committed").Add(7)
	m.RestoredRecords.WithLabelValues("counts", "2").Add(9)
	m.CommitDuration.WithLabelValues("0").Observe(0.003)
	m.CommitDuration.WithLabelValues("1").Observe(0.005)
	m.LastCommit.WithLabelValues("0").Set(100)
	m.LastCommit.WithLabelValues("1").Set(200)
	f := m.Read()
	if f.ProcessedByTask["0_1"] != 5 || f.SkippedByReason["deserialization"] != 1 || f.DeadLetteredTotal != 5 ||
		f.TxnByResult["committed"] != 7 || f.RestoredByStore["counts/2"] != 9 || f.LastCommit != 200 {
		t.Errorf("figures %+v", f)
	}
	h := f.CommitSeconds
	if h.Count != 2 || h.Sum < 0.0079 || h.Sum > 0.0081 || len(h.Buckets) == 0 {
		t.Fatalf("commit histogram %+v", h)
	}
	for i, b := range h.Buckets {
		if i > 0 && b.Le <= h.Buckets[i-1].Le {
			t.Errorf("buckets not ascending: %+v", h.Buckets)
		}
		if b.Le >= 0.008 && b.Count != 2 {
			t.Errorf("bucket le %v counts %v, want both commits", b.Le, b.Count)
		}
	}
}
