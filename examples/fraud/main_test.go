package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/weirstream/weir/serde"
	"github.com/weirstream/weir/weirtest"
	"github.com/weirstream/weir/weirtest/kafka"
)

func TestFlagsKeepTheirContract(t *testing.T) {
	t.Parallel()
	o, err := parseFlags(nil)
	if err != nil {
		t.Fatal(err)
	}
	want := options{input: "logins", output: "fraud-alerts", appID: "fraud", guarantee: "exactly_once",
		threshold: 5, window: time.Minute, grace: 10 * time.Second}
	if o != want {
		t.Errorf("defaults changed: %+v, want %+v", o, want)
	}
	o, err = parseFlags([]string{"-brokers", "a:1,b:2", "-input", "i", "-output", "o", "-app-id", "x", "-state-dir", "/s",
		"-guarantee", "at_least_once", "-threshold", "3", "-window", "5m", "-grace", "0s"})
	want = options{brokers: "a:1,b:2", input: "i", output: "o", appID: "x", stateDir: "/s", guarantee: "at_least_once",
		threshold: 3, window: 5 * time.Minute, grace: 0}
	if err != nil || o != want {
		t.Errorf("parseFlags = %+v, %v; want %+v", o, err, want)
	}
	for _, args := range [][]string{{"-threshold", "0"}, {"-window", "0s"}, {"-window", "1500us"}, {"-grace", "-1s"}, {"extra"}} {
		if _, err := parseFlags(args); err == nil {
			t.Errorf("parseFlags(%q) accepted", args)
		}
	}
}

// login is one record piped into the topology in a test.
type login struct {
	user  string
	at    time.Duration // after the epoch
	value string
}

// pipeLogins pipes logins through the topology with the default flags on
// weirtest and returns the alerts written after each login (by the
// index of the login that closed their window) and the count of late
// records dropped.
func pipeLogins(t *testing.T, logins []login) (map[int][]Alert, int64) {
	t.Helper()
	o, _ := parseFlags(nil)
	reg := prometheus.NewRegistry()
	d, err := weirtest.New(Topology(o.params(), probes{}), weirtest.Config{Metrics: reg})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	in := weirtest.Input(d, o.input, serde.String(), serde.String())
	out := weirtest.Output(d, o.output, serde.String(), serde.JSON[Alert]())
	alerts := map[int][]Alert{}
	for i, l := range logins {
		if err := in.Pipe(l.user, l.value, time.UnixMilli(0).Add(l.at)); err != nil {
			t.Fatalf("login %d: %v", i, err)
		}
		recs, err := out.ReadAll()
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range recs {
			if r.Key != r.Value.User {
				t.Errorf("alert keyed %q for user %q", r.Key, r.Value.User)
			}
			alerts[i] = append(alerts[i], r.Value)
		}
	}
	return alerts, counter(reg, "weir_records_late_total")
}

func TestOneAlertPerUserAndWindowWhenItCloses(t *testing.T) {
	t.Parallel()
	s := time.Second
	logins := []login{
		{"ann", 1 * s, fail}, // 0: ann, 5 failures in [0, 60 s): at the threshold
		{"ann", 2 * s, fail},
		{"bob", 3 * s, fail}, // bob: 4 failures in [0, 60 s): below it
		{"ann", 4 * s, fail},
		{"bob", 5 * s, fail},
		{"ann", 6 * s, ok},                    // 5: successes are not counted
		{"ann", 7 * s, `{"ip": "192.0.2.1"}`}, // nor logins without "ok"
		{"ann", 8 * s, `{"ok": null}`},        // nor a null one
		{"bob", 10 * s, fail},
		{"ann", 30 * s, fail},
		{"bob", 59 * s, fail}, // 10
		{"bob", 60 * s, fail}, // the end is excluded: bob's only failure in [60 s, 120 s)
		{"cid", 65 * s, fail}, // stream time 65 s; [0, 60 s) is open until 70 s
		{"ann", 55 * s, fail}, // out of order, within grace: ann's 5th
		{"ann", 69 * s, ok},   // a success moves no window's time: still open
		{"fay", 70 * s, fail}, // 15: 60 s + 10 s grace reached: [0, 60 s) closes
		{"ann", 50 * s, fail}, // late: dropped, no second alert
		{"cid", 66 * s, fail}, // cid: 5 failures in [60 s, 120 s), in any order
		{"cid", 119 * s, fail},
		{"cid", 61 * s, fail},
		{"cid", 100 * s, `{"ok": false, "x": 1}`}, // 20: other fields ignored
		{"dan", 125 * s, fail},                    // dan: 4 failures in [120 s, 180 s), then a late one
		{"dan", 126 * s, fail},
		{"dan", 127 * s, fail},
		{"dan", 128 * s, fail},
		{"dan", 129 * s, ok},   // 25
		{"ann", 129 * s, fail}, // stream time 129 s: [60 s, 120 s) stays open
		{"ann", 130 * s, fail}, // 27: 130 s closes [60 s, 120 s)
		{"dan", 190 * s, fail}, // 28: closes [120 s, 180 s)
		{"dan", 121 * s, fail}, // late: dan's 5th, dropped
		{"eve", 300 * s, fail}, // 30: closes everything
	}
	alerts, late := pipeLogins(t, logins)
	want := map[int][]Alert{
		15: {{User: "ann", WindowStart: 0, WindowEnd: 60000, Failures: 5}},
		27: {{User: "cid", WindowStart: 60000, WindowEnd: 120000, Failures: 5}},
	}
	if len(alerts) != len(want) {
		t.Errorf("alerts after logins %v, want after %v", alerts, want)
	}
	for i, w := range want {
		if len(alerts[i]) != len(w) || alerts[i][0] != w[0] {
			t.Errorf("alerts after login %d = %+v, want %+v", i, alerts[i], w)
		}
	}
	if late != 2 {
		t.Errorf("%d late records dropped, want 2", late)
	}
}

// TestThresholdIsInclusive pins the boundary: threshold-1 failures raise
// nothing, threshold failures raise one alert.
func TestThresholdIsInclusive(t *testing.T) {
	t.Parallel()
	var logins []login
	for i := range 5 {
		logins = append(logins, login{"ann", time.Duration(i) * time.Second, fail})
	}
	for i := range 4 {
		logins = append(logins, login{"bob", time.Duration(10+i) * time.Second, fail})
	}
	logins = append(logins, login{"ann", 70 * time.Second, fail}) // closes [0, 60 s)
	alerts, _ := pipeLogins(t, logins)
	if got := alerts[len(logins)-1]; len(alerts) != 1 || len(got) != 1 || got[0].User != "ann" || got[0].Failures != 5 {
		t.Errorf("alerts = %+v, want ann's only", alerts)
	}
}

func TestWindowsAreAlignedToTheEpoch(t *testing.T) {
	t.Parallel()
	o, _ := parseFlags(nil)
	// A record at 09:00:59.999 is in [09:00, 09:01); one at 09:01:00.000 is not.
	base := sampleStart.Sub(time.UnixMilli(0))
	var logins []login
	for range 5 {
		logins = append(logins, login{"ann", base + time.Minute - time.Millisecond, fail})
	}
	logins = append(logins, login{"ann", base + time.Minute, fail}, login{"ann", base + time.Minute + o.grace, fail})
	alerts, _ := pipeLogins(t, logins)
	a := alerts[len(logins)-1]
	if len(a) != 1 || a[0].WindowStart != sampleStart.UnixMilli() || a[0].WindowEnd != sampleStart.Add(time.Minute).UnixMilli() || a[0].Failures != 5 {
		t.Errorf("alerts = %+v", alerts)
	}
}

// TestEmbeddedRun runs the example as `go run ./fraud` does and checks
// its alerts, its skipped and late records and what it prints.
func TestEmbeddedRun(t *testing.T) {
	o, _ := parseFlags(nil)
	cluster, err := kafka.StartEmbedded(4, o.input, o.output)
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	cfg, err := config(o)
	if err != nil {
		t.Fatal(err)
	}
	r, err := detectSample(cluster.Brokers(), o, cfg)
	if err != nil {
		t.Fatal(err)
	}
	got := decodeAlerts(r.alerts)
	t0 := sampleStart.UnixMilli()
	want := []Alert{
		{User: "alice", WindowStart: t0, WindowEnd: t0 + 60000, Failures: 7},
		{User: "dave", WindowStart: t0 + 60000, WindowEnd: t0 + 120000, Failures: 5},
	}
	if len(got) != len(want) {
		t.Fatalf("alerts %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("alert %d = %+v, want %+v", i, got[i], want[i])
		}
	}
	for _, rec := range r.alerts {
		if !strings.HasPrefix(string(rec.Value), `{"user":"`+string(rec.Key)+`",`) {
			t.Errorf("alert %s: %s", rec.Key, rec.Value)
		}
	}
	if r.skipped != 1 || r.late != 1 || r.read != len(sampleLogins())-1 {
		t.Errorf("read %d, skipped %d, late %d; want %d, 1, 1", r.read, r.skipped, r.late, len(sampleLogins())-1)
	}
	var out bytes.Buffer
	printReport(&out, o, r)
	if !strings.Contains(out.String(), "2 alerts in fraud-alerts") || !strings.Contains(out.String(), `"failures":7`) {
		t.Errorf("report:\n%s", out.String())
	}
}

// TestALoginWithoutAValueIsNotAFailure: a record with a null value (a
// tombstone) counts as no login at all, so four failures and a tombstone
// stay below the threshold of five.
func TestALoginWithoutAValueIsNotAFailure(t *testing.T) {
	t.Parallel()
	o, _ := parseFlags(nil)
	d, err := weirtest.New(Topology(o.params(), probes{}), weirtest.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	in := weirtest.Input(d, o.input, serde.String(), serde.String())
	at := func(s int) time.Time { return time.UnixMilli(0).Add(time.Duration(s) * time.Second) }
	for i := range 4 {
		if err := in.Pipe("bob", fail, at(i+1)); err != nil {
			t.Fatal(err)
		}
	}
	if err := in.PipeTombstone("bob", at(10)); err != nil {
		t.Fatal(err)
	}
	if err := in.Pipe("eve", fail, at(300)); err != nil { // closes [0, 60 s)
		t.Fatal(err)
	}
	recs, err := weirtest.Output(d, o.output, serde.String(), serde.JSON[Alert]()).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 0 {
		t.Errorf("alerts %+v, want none: a login without a value is no failure", recs)
	}
}
