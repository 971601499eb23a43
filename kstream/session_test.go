package kstream_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/weirstream/weir/kstream"
	"github.com/weirstream/weir/serde"
	"github.com/weirstream/weir/weirtest"
)

// sessionCounts counts "in" by key in sessions w into the store "sessions",
// writes every update to "out" and, when final, the final results of a
// Suppress(UntilWindowCloses) to "final".
func sessionCounts(w kstream.SessionWindows, final bool) *kstream.Builder {
	b := kstream.NewBuilder()
	counts := b.Stream("in", "in", serde.String(), serde.String()).GroupByKey().SessionWindowedBy(w).Count("sessions")
	keys := kstream.SessionWindowedSerde(serde.String())
	counts.ToStream(kstream.WindowedKey).To("out", keys, serde.Int64())
	if final {
		counts.Suppress("final-sessions", kstream.UntilWindowCloses()).ToStream(kstream.WindowedKey, kstream.Named("final-tostream")).To("final", keys, serde.Int64())
	}
	return b
}

// sessionRows reads topic as "key[start,end]=count@ts", "=<deleted>" for a
// tombstone.
func sessionRows(t *testing.T, d *weirtest.Driver, topic string) []string {
	t.Helper()
	recs, err := weirtest.Output(d, topic, kstream.SessionWindowedSerde(serde.String()), serde.Int64()).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	out := []string{}
	for _, r := range recs {
		v := fmt.Sprint(r.Value)
		if r.Tombstone {
			v = "<deleted>"
		}
		out = append(out, fmt.Sprintf("%s[%d,%d]=%s@%d", r.Key.Key, r.Key.Start.UnixMilli(), r.Key.End.UnixMilli(), v, r.Timestamp.UnixMilli()))
	}
	return out
}

func expectSessions(t *testing.T, d *weirtest.Driver, topic string, want ...string) {
	t.Helper()
	if want == nil {
		want = []string{}
	}
	if got := sessionRows(t, d, topic); !slices.Equal(got, want) {
		t.Errorf("%s:\n got  %v\n want %v", topic, got, want)
	}
}

// TestSessionWindowsMerge ports Kafka Streams' session aggregation tests
// (KStreamSessionWindowAggregateProcessorTest, without a cache): a record
// within the gap of a session grows it; one that bridges sessions merges
// them; each merged session is deleted (a tombstone stamped with its end)
// before the merged one is written (stamped with its end); a record at a
// session's only time updates it in place.
func TestSessionWindowsMerge(t *testing.T) {
	t.Parallel()
	// A grace period keeps sessions open for records out of order.
	d := driver(t, sessionCounts(kstream.Sessions(100*time.Millisecond).Grace(100*time.Millisecond), false))
	run(t, d,
		step{topic: "in", key: "a", value: "1", ts: 0},
		step{topic: "in", key: "b", value: "1", ts: 0},
		step{topic: "in", key: "b", value: "2", ts: 0}, // the same time: in place
		step{topic: "in", key: "d", value: "1", ts: 0},
		step{topic: "in", key: "d", value: "2", ts: 50},
		step{topic: "in", key: "a", value: "2", ts: 101}, // beyond the gap: a new session
		step{topic: "in", key: "a", value: "3", ts: 151},
		step{topic: "in", key: "a", value: "4", ts: 60}, // bridges a[0,0] and a[101,151]
		step{topic: "in", key: "e", value: "1", ts: 160},
		step{topic: "in", key: "e", value: "2", ts: 300}, // more than the gap after 160
		step{topic: "in", key: "e", value: "3", ts: 210}, // bridges e's two sessions
	)
	expectSessions(t, d, "out",
		"a[0,0]=1@0", "b[0,0]=1@0", "b[0,0]=2@0", "d[0,0]=1@0",
		"d[0,0]=<deleted>@0", "d[0,50]=2@50",
		"a[101,101]=1@101",
		"a[101,101]=<deleted>@101", "a[101,151]=2@151",
		"a[0,0]=<deleted>@0", "a[101,151]=<deleted>@151", "a[0,151]=4@151",
		"e[160,160]=1@160", "e[300,300]=1@300",
		"e[160,160]=<deleted>@160", "e[300,300]=<deleted>@300", "e[160,300]=3@300")
}

// A record that would fall in a session stream time has closed (its end
// plus gap plus grace passed) is late: dropped, counted, nothing emitted.
// Kafka Streams' shouldLogAndMeterWhenSkippingLateRecordWith(Zero|Nonzero)Grace.
func TestSessionWindowsLateRecords(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		grace time.Duration
		steps []step
		want  []string
	}{
		{0, []step{
			{topic: "in", key: "dummy", value: "x", ts: 0},
			{topic: "in", key: "OnTime1", value: "x", ts: 0},
			{topic: "in", key: "dummy", value: "x", ts: 11},
			{topic: "in", key: "Late1", value: "x", ts: 0},
		}, []string{"dummy[0,0]=1@0", "OnTime1[0,0]=1@0", "dummy[11,11]=1@11"}},
		{time.Millisecond, []step{
			{topic: "in", key: "dummy", value: "x", ts: 0},
			{topic: "in", key: "OnTime1", value: "x", ts: 0},
			{topic: "in", key: "dummy", value: "x", ts: 11},
			{topic: "in", key: "OnTime2", value: "x", ts: 0},
			{topic: "in", key: "dummy", value: "x", ts: 12},
			{topic: "in", key: "Late1", value: "x", ts: 0},
		}, []string{"dummy[0,0]=1@0", "OnTime1[0,0]=1@0", "dummy[11,11]=1@11", "OnTime2[0,0]=1@0",
			"dummy[11,11]=<deleted>@11", "dummy[11,12]=2@12"}},
	} {
		t.Run(fmt.Sprint("grace ", c.grace), func(t *testing.T) {
			t.Parallel()
			d := driver(t, sessionCounts(kstream.Sessions(10*time.Millisecond).Grace(c.grace), false))
			run(t, d, c.steps...)
			expectSessions(t, d, "out", c.want...)
		})
	}
}

// Suppress(UntilWindowCloses) emits each session's final count once, when
// stream time passes its end plus the gap; a session merged into another
// never shows.
func TestSessionWindowsFinalResults(t *testing.T) {
	t.Parallel()
	d := driver(t, sessionCounts(kstream.Sessions(10*time.Millisecond), true))
	run(t, d,
		step{topic: "in", key: "a", value: "x", ts: 0},
		step{topic: "in", key: "a", value: "x", ts: 5},  // merges a[0,0] into a[0,5]
		step{topic: "in", key: "b", value: "x", ts: 15}, // a[0,5] still open: 15 is not past 5+10
	)
	expectSessions(t, d, "final")
	run(t, d,
		step{topic: "in", key: "b", value: "x", ts: 16}, // closes a[0,5]
		step{topic: "in", key: "c", value: "x", ts: 100},
	)
	expectSessions(t, d, "final", "a[0,5]=2@5", "b[15,16]=2@16")
}

// Without a grace period, a session closes as soon as a record is more
// than the gap after it, so a late record cannot reopen it: it starts a
// session of its own if it is within the gap of nothing open.
func TestSessionWindowsClosedSessionIsGone(t *testing.T) {
	t.Parallel()
	d := driver(t, sessionCounts(kstream.Sessions(100*time.Millisecond), false))
	run(t, d,
		step{topic: "in", key: "a", value: "1", ts: 0},
		step{topic: "in", key: "a", value: "2", ts: 101},
		step{topic: "in", key: "a", value: "3", ts: 151},
		step{topic: "in", key: "a", value: "4", ts: 60}, // grows a[101,151] back; a[0,0] has closed
	)
	expectSessions(t, d, "out", "a[0,0]=1@0", "a[101,101]=1@101",
		"a[101,101]=<deleted>@101", "a[101,151]=2@151", "a[101,151]=<deleted>@151", "a[60,151]=3@151")
}

// Build checks session windows.
func TestSessionWindowsBuildChecks(t *testing.T) {
	t.Parallel()
	b := kstream.NewBuilder()
	b.Stream("in", "in", serde.String(), serde.String()).GroupByKey().
		SessionWindowedBy(kstream.Sessions(0).Grace(-time.Millisecond)).Count("s")
	if _, err := b.Build(); err == nil {
		t.Fatal("Build accepted a zero gap and a negative grace")
	}
}
