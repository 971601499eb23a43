package metrics

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// collector computes the gauges that describe the present at scrape time.
type collector struct {
	src Source
	now func() time.Time

	lag, committedLag, age, headroom    *prometheus.Desc
	streamTime, eventLag, tasks, states *prometheus.Desc
	remaining, storeSize, threadTime    *prometheus.Desc
}

// appStates are the values of weir_app_state's state label.
var appStates = []string{"created", "starting", "restoring", "running", "rebalancing", "stopping", "stopped", "failed", "degraded"}

func newCollector(app string, src Source) *collector {
	c := prometheus.Labels{"application": app}
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("weir_"+name, help, labels, c)
	}
	return &collector{
		src: src,
		now: time.Now,
		lag: d("partition_offset_lag", "Records between an input partition's log end and the next record to process.", "topic", "partition"),
		committedLag: d("partition_committed_offset_lag",
			"Records between an input partition's log end and its committed offset: what a restart would reprocess or still has to process.", "topic", "partition"),
		age: d("partition_oldest_unread_age_seconds",
			"Age of the next record of an input partition not yet processed (now − its timestamp); 0 when caught up. Compare it with retention: a record older than retention is lost.", "topic", "partition"),
		headroom: d("partition_retention_headroom_seconds",
			"The topic's retention.ms minus the oldest unread age: how long until unread records start to be deleted. Absent for infinite retention.", "topic", "partition"),
		streamTime: d("task_stream_time_seconds", "A task's stream time (largest event time seen), as Unix seconds.", "thread", "task"),
		eventLag:   d("task_event_time_lag_seconds", "Now − a task's stream time.", "thread", "task"),
		tasks:      d("tasks", "Tasks of this instance per state (restoring, running).", "state"),
		states:     d("app_state", "1 for the App's current state, 0 for the others.", "state"),
		remaining:  d("restore_records_remaining", "Changelog records a restore still has to apply.", "store", "partition"),
		storeSize: d("store_estimated_disk_bytes",
			"Badger's estimate of the disk a store's data takes on this instance, all its partitions on disk together (those of tasks that moved away too, until Stores.CleanupDelay drops them): the compressed size of the table files holding only this store's keys, stale versions and deletions not yet compacted included. Writes still in memtables and tables shared with another store are not counted, so a store of about one table or less (2 to 16 MiB with the default options) can read 0; a value of 1 MiB or more counts only by its pointer into the value log.",
			"store"),
		threadTime: d("thread_seconds_total",
			"Seconds a thread spent busy (processing, committing) or idle (waiting for records): together they advance with wall time. backpressured is the time the fetchers of its partitions spent stopped on a full queue because the thread did not keep up (summed over partitions): a thread that is busy and backpressured is a bottleneck.",
			"thread", "state"),
	}
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.lag, c.committedLag, c.age, c.headroom, c.streamTime, c.eventLag, c.tasks, c.states, c.remaining, c.storeSize, c.threadTime} {
		ch <- d
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	s := c.src.Snapshot()
	now := c.now()
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	for _, p := range s.Partitions {
		part := strconv.Itoa(int(p.Partition))
		if p.LogEnd >= 0 && p.Position >= 0 {
			gauge(c.lag, float64(max(p.LogEnd-p.Position, 0)), p.Topic, part)
		}
		if p.LogEnd >= 0 && p.Committed >= 0 {
			gauge(c.committedLag, float64(max(p.LogEnd-p.Committed, 0)), p.Topic, part)
		}
		age := 0.0
		if !p.OldestUnread.IsZero() {
			age = max(now.Sub(p.OldestUnread).Seconds(), 0)
		}
		gauge(c.age, age, p.Topic, part)
		if p.Retention > 0 {
			gauge(c.headroom, p.Retention.Seconds()-age, p.Topic, part)
		}
	}
	counts := map[string]float64{"restoring": 0, "running": 0}
	for _, t := range s.Tasks {
		counts[t.State]++
		if t.StreamTime.IsZero() {
			continue
		}
		th := strconv.Itoa(t.Thread)
		gauge(c.streamTime, float64(t.StreamTime.UnixMilli())/1000, th, t.ID)
		gauge(c.eventLag, max(now.Sub(t.StreamTime).Seconds(), 0), th, t.ID)
	}
	for state, n := range counts {
		gauge(c.tasks, n, state)
	}
	for _, st := range appStates {
		v := 0.0
		if st == s.State {
			v = 1
		}
		gauge(c.states, v, st)
	}
	for _, r := range s.Restores {
		gauge(c.remaining, float64(r.Remaining), r.Store, strconv.Itoa(int(r.Partition)))
	}
	for _, st := range s.Stores {
		gauge(c.storeSize, float64(st.Bytes), st.Store)
	}
	for _, th := range s.Threads {
		id := strconv.Itoa(th.Thread)
		for state, d := range map[string]time.Duration{"busy": th.Busy, "idle": th.Idle, "backpressured": th.Backpressured} {
			ch <- prometheus.MustNewConstMetric(c.threadTime, prometheus.CounterValue, d.Seconds(), id, state)
		}
	}
}
