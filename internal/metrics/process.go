package metrics

import (
	"runtime/debug"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// modulePath is weir's module, whose version weir_build_info reports.
const modulePath = "github.com/weirstream/weir"

// Build is what weir_build_info reports about an App.
type Build struct {
	// Version is weir's module version, from Version.
	Version string
	// Guarantee is the processing guarantee: exactly_once or at_least_once.
	Guarantee string
	// ProcessID returns the instance's process id, which lives in the
	// state directory: "" until Run has opened it. Called at every scrape,
	// from the scraping goroutine.
	ProcessID func() string
}

// buildInfo is the collector of weir_build_info: a gauge of 1 whose labels
// are read from the App when Prometheus scrapes, since the process id is
// known only once Run has opened the state directory.
type buildInfo struct {
	desc *prometheus.Desc
	b    Build
}

// NewBuildInfo returns the collector of application app's
// weir_build_info, for the App to register next to its other metrics.
func NewBuildInfo(app string, b Build) prometheus.Collector {
	return &buildInfo{
		desc: prometheus.NewDesc("weir_build_info",
			`Always 1; its labels describe the instance: version is weir's module version ("devel" when the binary does not record it, as for a replaced module), guarantee the processing guarantee, process_id the instance's process id (kept in the state directory; "" until Run has opened it).`,
			[]string{"version", "guarantee", "process_id"}, prometheus.Labels{"application": app}),
		b: b,
	}
}

func (c *buildInfo) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *buildInfo) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, 1, c.b.Version, c.b.Guarantee, c.b.ProcessID())
}

// Version returns the version of weir's module in the running binary, as
// the go command recorded it, or "devel" when it recorded none: a binary
// built without module information, weir replaced by a local directory,
// or weir's own tests.
func Version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "devel"
	}
	return moduleVersion(bi)
}

// moduleVersion finds weir's module in bi: the main module when weir itself
// is being built, else one of the dependencies, replaced or not.
func moduleVersion(bi *debug.BuildInfo) string {
	m := &bi.Main
	if m.Path != modulePath {
		m = nil
		for _, d := range bi.Deps {
			if d.Path == modulePath {
				m = d
				break
			}
		}
	}
	if m == nil {
		return "devel"
	}
	if m.Replace != nil {
		m = m.Replace // a directory has no version; a module has its own
	}
	if m.Version == "" || m.Version == "(devel)" {
		return "devel"
	}
	return m.Version
}

// RegisterRuntime registers the Go runtime collector (go_*) and the
// process collector (process_*) on reg. The App does so only on the
// registry it creates itself: a registry the user gives may have them
// already, and registering them twice fails.
func RegisterRuntime(reg prometheus.Registerer) error {
	for _, c := range []prometheus.Collector{
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	} {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}
