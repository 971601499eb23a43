// Package streamtime keeps the stream time that one processor observes:
// the largest timestamp among the records that reached it.
//
// Windowed aggregations close their windows, suppressions emit and
// stream-stream joins expire their stores by this time, not by the task's
// stream time, which every record of the task moves, including those a
// filter before the processor drops and those with a null key. So the
// same records reaching a windowed step give the same results whatever
// the steps before it dropped, as in Kafka Streams, whose processors keep
// an observedStreamTime each.
//
// Kafka Streams keeps that time in memory only: after a restart or a move
// to another instance a processor knows no time, and a late record can
// reopen a window whose result was already emitted (a suppressed window
// can then emit its "final" result twice). weir starts a resumed
// processor at the task's committed stream time instead, which is at
// least the time the processor had observed: a closed window stays
// closed. The price is that after a restart a record the processor would
// have accepted (it was within grace of the processor's own time but not
// of the task's) is dropped as late, and counted.
package streamtime

import "time"

// resumer is the processor context of a task resumed from a commit: the
// task's stream time committed before (zero on a first start).
type resumer interface {
	ResumedStreamTime() time.Time
}

// Observed is one processor instance's stream time, in milliseconds. The
// zero value has observed nothing. It is not safe for concurrent use; a
// processor instance is called from one goroutine.
type Observed struct {
	ms    int64
	known bool
}

// Observe counts a record of timestamp ts (ms) reaching the processor
// and returns the processor's stream time, which includes it. ctx is the
// processor's context; its resumed stream time is the floor of the first
// observation.
func (o *Observed) Observe(ctx any, ts int64) int64 {
	if !o.known {
		o.known, o.ms = true, ts
		if r, ok := ctx.(resumer); ok {
			if t := r.ResumedStreamTime(); !t.IsZero() {
				o.ms = max(ts, t.UnixMilli())
			}
		}
	}
	o.ms = max(o.ms, ts)
	return o.ms
}

// Get returns the stream time observed so far, and false when no record
// has reached the processor since it started.
func (o *Observed) Get() (ms int64, ok bool) { return o.ms, o.known }
