package main

import (
	"time"

	"github.com/weirstream/weir/kstream"
	"github.com/weirstream/weir/serde"
)

// Login is an input record's value. Other fields of the JSON object are
// ignored.
type Login struct {
	// OK is false for a failed login. A login whose "ok" is missing or
	// null is not counted: only an explicit false is a failure.
	OK *bool `json:"ok"`
}

// failed reports whether l is a failed login.
func (l Login) failed() bool { return l.OK != nil && !*l.OK }

// Alert is an output record's value: user had failures failed logins in
// the window [window_start, window_end), in milliseconds since the Unix
// epoch.
type Alert struct {
	User        string `json:"user"`
	WindowStart int64  `json:"window_start"`
	WindowEnd   int64  `json:"window_end"`
	Failures    int64  `json:"failures"`
}

// params are what the topology is built from.
type params struct {
	input, output string
	threshold     int64
	window, grace time.Duration
}

// probes let the embedded run follow the topology: read is called for
// every input record that deserialized, alert for every alert emitted.
// Both run on the task's goroutine and, after a failure, may run again
// for a record processed again; nil means none.
type probes struct {
	read, alert func()
}

// Topology counts the failed logins of each user in tumbling windows and
// emits one Alert per user and window with at least p.threshold of them,
// when the window closes:
//
//	logins → with a value → failed only → by user → tumbling windows with grace → count
//	       → final count per window → at least threshold → Alert → output
//
// The input is keyed by user, so the grouping needs no repartition: each
// task counts the users of one input partition, and a window closes when
// the count's stream time there (the largest timestamp among the failures
// that reached it) reaches its end plus the grace period.
func Topology(p params, pr probes) *kstream.Builder {
	b := kstream.NewBuilder()
	b.Stream("logins", p.input, serde.String(), serde.JSON[Login]()).
		Peek(func(string, Login) { call(pr.read) }).
		DropTombstones(). // a record without a value is no login (Filter would pass it)
		Filter(func(_ string, l Login) bool { return l.failed() }).
		GroupByKey().
		WindowedBy(kstream.Tumbling(p.window).Grace(p.grace)).
		Count("failures-per-window").
		Suppress("failures-final", kstream.UntilWindowCloses()).
		ToStream(kstream.WindowedKey).
		Filter(func(_ kstream.Windowed[string], n int64) bool { return n >= p.threshold }).
		Map(func(w kstream.Windowed[string], n int64) (string, Alert) {
			return w.Key, Alert{User: w.Key, WindowStart: w.Start.UnixMilli(), WindowEnd: w.End.UnixMilli(), Failures: n}
		}, kstream.Named("alerts")).
		Peek(func(string, Alert) { call(pr.alert) }).
		To(p.output, serde.String(), serde.JSON[Alert]())
	return b
}

func call(f func()) {
	if f != nil {
		f()
	}
}
