package processor

import (
	"strconv"

	"github.com/weirstream/weir/internal/graph"
)

// VersionHeader is the header that carries the version of a table update
// in the records weir writes from a table (the DSL's Table.ToStream and
// WindowedTable.ToStream stamp it; a processor can with [StampVersion]
// and [Context.NextVersion]). Its value is the version in decimal ASCII
// digits, an unsigned 64-bit integer.
//
// The versions of a key increase with its updates, so an idempotent sink
// (a database upsert, a cache) can apply an update only if its version is
// larger than the one it holds and so survive what makes a stream job
// write a key's updates again or out of order:
//
//   - a crash under at least once, whose replayed updates carry larger
//     versions than those written before it;
//   - a reset (weir reset) or a fork (weir fork), whose recomputed
//     updates are written later, with larger versions;
//   - a rollback to a fork taken before an upgrade: the fork's updates
//     supersede those of the abandoned version.
//
// A version is a hybrid logical clock of the task that emits the update,
// in microseconds: the wall clock of the instance, or one more than the
// task's last version when the clock is behind it. The task's last
// version is committed with its offsets, so that it never goes back when
// the task moves to another instance. What it assumes: that the
// instances' clocks agree to better than the time a task takes to move
// (NTP does), and that a task gives fewer than a million versions per
// second on average. Exactly once, updates of an aborted transaction are
// never read, and a version may be given again after an abort.
const VersionHeader = graph.VersionHeader

// EpochHeader is the header that carries the application's reset epoch on
// every table update weir writes (a record with [VersionHeader]) once the
// application has been reset (`weir reset` raises the epoch; 0, the
// first, is not written): decimal ASCII digits.
const EpochHeader = graph.EpochHeader

// ReplayHeader marks a record weir wrote for an input record that a reset
// replays: one the application had processed before `weir reset` rewound
// its input (the reset records where each input partition stood; the
// mark travels through repartition topics). Its value is the reset epoch.
//
// A sink that must never move a key back (the replay recomputes updates
// it already holds, from older to newer) applies an update when:
//
//   - it carries ReplayHeader and the sink's row of the key was written in
//     the same epoch ([EpochHeader], 0 when absent) with a smaller
//     version, or the sink has no row of the key; or
//   - it does not carry ReplayHeader and its version is larger than the
//     row's.
//
// So the replay's updates of keys the sink holds are passed over until the
// replay reaches where the application stood, and the sink ends as if the
// reset had not happened when the code is the same. A reset meant to
// correct results (new code) needs the replay applied: a sink that wants
// it applies by version alone, and a key moves back during the replay.
const ReplayHeader = graph.ReplayHeader

// StampVersion returns headers with [VersionHeader] set to version: a new
// slice (forwarded headers are shared), without any VersionHeader that
// headers had (an update read from another application's table gets the
// version of this one).
func StampVersion(headers []Header, version uint64) []Header {
	out := make([]Header, 0, len(headers)+1)
	for _, h := range headers {
		if h.Key != VersionHeader {
			out = append(out, h)
		}
	}
	return append(out, Header{Key: VersionHeader, Value: strconv.AppendUint(nil, version, 10)})
}

// RecordVersion returns the version [VersionHeader] carries in headers,
// false when there is none or its value is not a version.
func RecordVersion(headers []Header) (uint64, bool) {
	for i := len(headers) - 1; i >= 0; i-- {
		if headers[i].Key == VersionHeader {
			v, err := strconv.ParseUint(string(headers[i].Value), 10, 64)
			return v, err == nil
		}
	}
	return 0, false
}
