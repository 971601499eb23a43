package console

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/weirstream/weir/internal/metrics"
)

// rateSamples is how many sample intervals the rates span: they compare
// now with the newest sample at least that old (or the oldest one kept,
// when none is).
const rateSamples = 3

// Instance returns the instance's figures now, with the history it
// sampled; details includes the error texts of its events.
func (c *Console) Instance(details bool) *Instance {
	raw := c.b.Raw()
	hist := c.hist.all()
	now := newSample(raw)
	ref := c.reference(hist, raw.Time)
	in := &Instance{
		Addr: raw.Addr, ProcessID: raw.ProcessID, ApplicationID: raw.ApplicationID, State: raw.State,
		Version: raw.Version, Guarantee: raw.Guarantee, Time: raw.Time.UnixMilli(),
		SampleInterval: c.cfg.SampleInterval.Seconds(), HistorySamples: c.hist.size(),
		Rebalance: Rebalance{Generation: raw.Generation, At: ms(raw.RebalancedAt), Assignments: raw.Figures.RebalancesTotal},
		Errors:    c.events.Last(details),
	}
	var window float64
	if ref != nil {
		window = raw.Time.Sub(ref.t).Seconds()
		in.RateWindow = window
	}
	rate := func(now, then float64) float64 {
		if window <= 0 {
			return 0
		}
		return max(now-then, 0) / window
	}
	in.Threads = threads(raw, ref, window)
	in.Tasks = c.tasks(raw, ref, rate)
	in.Partitions = partitions(raw, hist, ref)
	in.Stores = c.stores(raw)
	in.Commits = commits(raw, now, ref, hist, rate)
	in.Records = records(raw, now, ref, rate)
	f := raw.Figures
	in.Failures = Failures{Skipped: orEmpty(f.SkippedByReason), DeadLettered: f.DeadLetteredTotal, Dropped: orEmpty(f.DroppedByReason),
		Late: f.LateTotal, Lost: f.LostTotal, ByNode: orEmpty(f.FailuresByNode)}
	return in
}

// reference returns the sample rates are computed from: the newest at
// least rateSamples intervals older than now, else the oldest older than
// now; nil when there is none.
func (c *Console) reference(hist []*sample, now time.Time) *sample {
	span := rateSamples * c.cfg.SampleInterval
	for _, s := range slices.Backward(hist) {
		if now.Sub(s.t) >= span {
			return s
		}
	}
	if len(hist) > 0 && now.After(hist[0].t) {
		return hist[0]
	}
	return nil
}

func threads(raw Raw, ref *sample, window float64) []Thread {
	count := map[int]int{}
	for _, t := range raw.Tasks {
		count[t.Thread]++
	}
	out := make([]Thread, 0, len(raw.Threads))
	for _, th := range raw.Threads {
		t := Thread{Thread: th.Thread, BusySeconds: th.Busy.Seconds(), IdleSeconds: th.Idle.Seconds(),
			BackpressuredSeconds: th.Backpressured.Seconds(), BusyShare: -1, BackpressuredShare: -1, Tasks: count[th.Thread]}
		if old, ok := ref.thread(th.Thread); ok && window > 0 {
			busy, wall := (th.Busy - old.Busy).Seconds(), (th.Busy + th.Idle - old.Busy - old.Idle).Seconds()
			if wall > 0 {
				t.BusyShare = clamp(busy / wall)
			}
			t.BackpressuredShare = max((th.Backpressured-old.Backpressured).Seconds()/window, 0)
		}
		out = append(out, t)
	}
	slices.SortFunc(out, func(a, b Thread) int { return a.Thread - b.Thread })
	return out
}

// thread returns thread i as s had it; false when s is nil or had none.
func (s *sample) thread(i int) (RawThread, bool) {
	if s == nil {
		return RawThread{}, false
	}
	th, ok := s.threads[i]
	return th, ok
}

func (c *Console) tasks(raw Raw, ref *sample, rate func(now, then float64) float64) []Task {
	c.mu.Lock()
	totals := c.totals
	c.mu.Unlock()
	out := []Task{}
	for _, t := range raw.Tasks {
		task := Task{ID: t.ID, Subtopology: t.Subtopology, Partition: t.Partition, Kind: "active", State: "running",
			Thread: t.Thread, StreamTime: ms(t.StreamTime), Processed: raw.Figures.ProcessedByTask[t.ID]}
		if ref != nil {
			task.RecordsPerSecond = rate(task.Processed, ref.processed[t.ID])
		}
		if t.Restoring {
			task.State = "restoring"
		}
		for _, r := range t.Restores {
			k := restoreKey{r.Store, r.Partition}
			res := Restore{Store: r.Store, Partition: r.Partition, Remaining: r.Remaining, Total: max(totals[k], r.Remaining), ETASeconds: -1}
			if res.Total > 0 {
				res.Progress = 1 - float64(res.Remaining)/float64(res.Total)
			}
			if then, ok := ref.restore(k); ok {
				res.RatePerSecond = rate(float64(then), float64(r.Remaining))
				if res.RatePerSecond > 0 {
					res.ETASeconds = math.Round(float64(r.Remaining) / res.RatePerSecond)
				}
			}
			task.Restores = append(task.Restores, res)
		}
		out = append(out, task)
	}
	slices.SortFunc(out, func(a, b Task) int { return compareTasks(a.ID, b.ID) })
	var copies []Task
	for _, sb := range raw.Standbys {
		task := Task{ID: sb.ID, Subtopology: sb.Subtopology, Partition: sb.Partition, Kind: "standby", State: "standby", Thread: -1}
		if sb.Warmup {
			task.Kind, task.State = "warmup", "warmup"
		}
		if len(sb.Lags) > 0 {
			task.StandbyLag = map[string]int64{}
			for store, lag := range sb.Lags {
				task.StandbyLag[store] = knownLag(lag)
			}
		}
		copies = append(copies, task)
	}
	slices.SortFunc(copies, func(a, b Task) int { return compareTasks(a.ID, b.ID) })
	return append(out, copies...)
}

// restore returns what restore k had left at s.
func (s *sample) restore(k restoreKey) (int64, bool) {
	if s == nil {
		return 0, false
	}
	rem, ok := s.restores[k]
	return rem, ok
}

// compareTasks orders task ids "<sub>_<partition>" numerically.
func compareTasks(a, b string) int {
	sa, pa, _ := strings.Cut(a, "_")
	sb, pb, _ := strings.Cut(b, "_")
	na, _ := strconv.Atoi(sa)
	nb, _ := strconv.Atoi(sb)
	if na != nb {
		return na - nb
	}
	qa, _ := strconv.Atoi(pa)
	qb, _ := strconv.Atoi(pb)
	if qa != qb {
		return qa - qb
	}
	return strings.Compare(a, b)
}

// headroomShare is the share of a topic's retention below which a
// partition's headroom puts it at risk.
const headroomShare = 0.25

func partitions(raw Raw, hist []*sample, ref *sample) []Partition {
	out := []Partition{}
	for _, in := range inputs(raw) {
		p := in.raw
		tp := TopicPartition{p.Topic, p.Partition}
		part := Partition{Topic: p.Topic, Partition: p.Partition, Task: in.task, LogEnd: p.LogEnd, Position: p.Position,
			Committed: p.Committed, Lag: lagOf(p), CommittedLag: -1, Retention: p.Retention.Seconds(), Risk: "ok",
			QueuedRecords: p.QueuedRecords, History: [][2]int64{}}
		if p.LogEnd >= 0 && p.Committed >= 0 {
			part.CommittedLag = max(p.LogEnd-p.Committed, 0)
		}
		if !p.OldestUnread.IsZero() {
			part.OldestUnreadAge = max(raw.Time.Sub(p.OldestUnread).Seconds(), 0)
		}
		if p.Retention > 0 {
			h := part.Retention - part.OldestUnreadAge
			part.Headroom = &h
		}
		for _, s := range hist {
			if lag, ok := s.lags[tp]; ok {
				part.History = append(part.History, [2]int64{s.t.UnixMilli(), lag})
			}
		}
		if part.Lag >= 0 {
			part.History = append(part.History, [2]int64{raw.Time.UnixMilli(), part.Lag})
		}
		switch {
		case part.Headroom != nil && *part.Headroom < headroomShare*part.Retention:
			part.Risk = "high"
		case ref != nil && part.Lag > 0 && part.Lag > ref.lagOr(tp, part.Lag):
			part.Risk = "rising"
		}
		out = append(out, part)
	}
	slices.SortFunc(out, comparePartitions)
	return out
}

// lagOr returns tp's lag at s, or def when s has none.
func (s *sample) lagOr(tp TopicPartition, def int64) int64 {
	if lag, ok := s.lags[tp]; ok {
		return lag
	}
	return def
}

// riskRank ranks the risks, most urgent first.
func riskRank(risk string) int {
	switch risk {
	case "high":
		return 0
	case "rising":
		return 1
	}
	return 2
}

// comparePartitions puts partitions at risk first: by risk, then least
// headroom, then most lag, then by name.
func comparePartitions(a, b Partition) int {
	if c := cmp.Compare(riskRank(a.Risk), riskRank(b.Risk)); c != 0 {
		return c
	}
	ha, hb := math.Inf(1), math.Inf(1)
	if a.Headroom != nil {
		ha = *a.Headroom
	}
	if b.Headroom != nil {
		hb = *b.Headroom
	}
	if c := cmp.Compare(ha, hb); c != 0 {
		return c
	}
	if c := cmp.Compare(b.Lag, a.Lag); c != 0 {
		return c
	}
	if c := strings.Compare(a.Topic, b.Topic); c != 0 {
		return c
	}
	return int(a.Partition) - int(b.Partition)
}

func (c *Console) stores(raw Raw) []Store {
	c.mu.Lock()
	ends := c.ends
	c.mu.Unlock()
	top := c.b.Topology()
	role := map[restoreKey]string{}
	remaining := map[restoreKey]int64{}
	for _, t := range raw.Tasks {
		for _, st := range top.Stores {
			if st.Subtopology == t.Subtopology {
				role[restoreKey{st.Name, t.Partition}] = "active"
			}
		}
		for _, r := range t.Restores {
			role[restoreKey{r.Store, r.Partition}] = "restoring"
			remaining[restoreKey{r.Store, r.Partition}] = r.Remaining
		}
	}
	standbyLag := map[restoreKey]int64{}
	for _, sb := range raw.Standbys {
		kind := "standby"
		if sb.Warmup {
			kind = "warmup"
		}
		for _, st := range top.Stores {
			if st.Subtopology == sb.Subtopology {
				k := restoreKey{st.Name, sb.Partition}
				role[k] = kind
				if lag, ok := sb.Lags[st.Name]; ok {
					standbyLag[k] = knownLag(lag)
				}
			}
		}
	}
	out := []Store{}
	for _, st := range top.Stores {
		if st.Subtopology < 0 {
			continue // a global store is every instance's whole copy of its topic
		}
		s := Store{Name: st.Name, Type: st.Type, Changelog: st.Changelog, Bytes: raw.StoreBytes[st.Name], Partitions: []StorePartition{}}
		for _, cp := range raw.Checkpoints {
			if cp.Store != st.Name {
				continue
			}
			k := restoreKey{cp.Store, cp.Partition}
			sp := StorePartition{Partition: cp.Partition, Role: cmp.Or(role[k], "idle"), Checkpoint: cp.Offset, ChangelogEnd: -1,
				Remaining: -1, StandbyLag: -1,
				Restored:       raw.Figures.RestoredByStore[fmt.Sprintf("%s/%d", cp.Store, cp.Partition)],
				StandbyApplied: raw.Figures.StandbyByStore[fmt.Sprintf("%s/%d", cp.Store, cp.Partition)]}
			if end, ok := ends[TopicPartition{st.Changelog, cp.Partition}]; ok {
				sp.ChangelogEnd = end
			}
			if rem, ok := remaining[k]; ok {
				sp.Remaining = rem
			}
			if lag, ok := standbyLag[k]; ok {
				sp.StandbyLag = lag
			}
			s.Partitions = append(s.Partitions, sp)
		}
		out = append(out, s)
	}
	return out
}

func commits(raw Raw, now, ref *sample, hist []*sample, rate func(now, then float64) float64) Commits {
	f := raw.Figures
	c := Commits{Committed: now.committed, Aborted: now.aborted, LatencyMean: -1, LatencyP99: -1,
		LastCommit: int64(f.LastCommit * 1000), History: [][2]float64{},
		Aborts: map[string]float64{
			"rewound_in_place":     f.RewindsByMode["in_place"],
			"rewound_by_rejoining": f.RewindsByMode["rejoin"],
			"fenced":               f.ProducerByReason["fenced"],
			"outcome_unknown":      f.ProducerByReason["rebuilt"],
		},
		ProducerEvents: orEmpty(f.ProducerByReason),
	}
	if ref != nil {
		c.PerSecond = rate(now.committed, ref.committed)
		c.AbortsPerSecond = rate(now.aborted, ref.aborted)
		c.LatencyMean, c.LatencyP99 = latency(now.commits, ref.commits)
	}
	for i := 1; i < len(hist); i++ {
		a, b := hist[i-1], hist[i]
		if dt := b.t.Sub(a.t).Seconds(); dt > 0 {
			c.History = append(c.History, [2]float64{float64(b.t.UnixMilli()), max(b.committed-a.committed, 0) / dt})
		}
	}
	return c
}

// latency returns the mean and the 99th percentile, in milliseconds, of
// the commits between then and now (the percentile is the upper bound of
// the bucket that holds it); -1 when there were none.
func latency(now, then metrics.Histogram) (mean, p99 float64) {
	n := now.Count - then.Count
	if n <= 0 {
		return -1, -1
	}
	mean = (now.Sum - then.Sum) / n * 1000
	p99 = -1
	for i, b := range now.Buckets {
		below := b.Count
		if i < len(then.Buckets) {
			below -= then.Buckets[i].Count
		}
		if below >= 0.99*n {
			p99 = b.Le * 1000
			break
		}
	}
	if p99 < 0 && len(now.Buckets) > 0 {
		p99 = now.Buckets[len(now.Buckets)-1].Le * 1000 // in the +Inf bucket: at least the largest bound
	}
	return mean, p99
}

func records(raw Raw, now, ref *sample, rate func(now, then float64) float64) Records {
	r := Records{BySubtopology: map[string]float64{}, WrittenPerSecond: map[string]float64{}}
	subOf := map[string]int{}
	for _, t := range raw.Tasks {
		subOf[t.ID] = t.Subtopology
	}
	var then float64
	for task, n := range now.processed {
		r.Processed += n
		if ref != nil {
			then += ref.processed[task]
		}
		sub, ok := subOf[task]
		if !ok || ref == nil {
			continue // a task that moved away counts in the total only
		}
		key := strconv.Itoa(sub)
		r.BySubtopology[key] += rate(n, ref.processed[task])
	}
	if ref == nil {
		return r
	}
	r.ProcessedPerSecond = rate(r.Processed, then)
	for topic, n := range now.written {
		r.WrittenPerSecond[topic] = rate(n, ref.written[topic])
	}
	return r
}

// knownLag maps UnknownLag to -1.
func knownLag(lag int64) int64 {
	if lag == UnknownLag {
		return -1
	}
	return lag
}

// clamp returns v within [0, 1].
func clamp(v float64) float64 { return min(max(v, 0), 1) }

// ms returns t as Unix milliseconds, 0 for the zero time.
func ms(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

// orEmpty returns m, or an empty map for nil (JSON {} rather than null).
func orEmpty(m map[string]float64) map[string]float64 {
	if m == nil {
		return map[string]float64{}
	}
	return m
}
