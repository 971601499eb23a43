package main

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// report renders the results as Markdown: the workloads, one row per
// run, the ratios weir/peer of every point (workload, key space,
// guarantee, record cache) both ran, exactly once over at least once, and
// the curves over the word count's vocabulary and the restored store's
// size.
func report(o *options, results []result, abouts []string, started time.Time) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# weir and its peers, %s\n\n", started.UTC().Format(time.RFC3339))
	fmt.Fprintf(&b, "Machine: %s. Broker %s. %d partitions per topic, one stream thread per peer, commit interval %v for every peer and guarantee; Kafka Streams 4.4.0 and weir with their defaults otherwise, except the record cache, which the cache column gives (weir's Config.CacheMaxBytes, Kafka Streams' statestore.cache.max.bytes; 0: none, every update forwarded); goka 1.1.13 (no cache: every update forwarded) at least once. Each run reads the input from the start with a new application id; its figures count only once its output (read_committed) held every key's exact final count (and, without a cache, every update).\n\n",
		machine(), strings.Join(o.brokers, ","), o.partitions, o.commit)
	if len(abouts) > 0 {
		fmt.Fprintln(&b, "Workloads (keys: the point on the key space, the word count's distinct words to draw from, the restored store's size):")
		fmt.Fprintln(&b)
		for _, a := range abouts {
			fmt.Fprintf(&b, "- %s\n", a)
		}
		fmt.Fprintln(&b)
	}
	fmt.Fprintln(&b, "rate = input units per second from the moment the peer's consumer group was first Stable (joined, partitions assigned) until its output was complete; s from start includes the process's start and join; CPU and peak RSS (VmHWM) are the peer process's own, from its start until its output was complete; broker CPU s is the local broker's over the same span (it shares the cores), when -broker-pid-file names it; commits is how often the peer committed until it was stopped, as it reports at exit (weir's commit count, Kafka Streams' commit-total; goka reports none).")
	fmt.Fprintln(&b)
	fmt.Fprintln(&b, "| workload | keys | guarantee | cache | peer | round | rate | s from start | CPU s | CPU s per M | broker CPU s | peak RSS MiB | output records | commits |")
	fmt.Fprintln(&b, "| --- | ---: | --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
	for _, r := range results {
		commits := "-"
		if r.commits >= 0 {
			commits = strconv.FormatInt(r.commits, 10)
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %d | %.0f %s/s | %.1f | %.1f | %.1f | %.1f | %d | %d | %s |\n", r.workload, shortCount(r.keys), r.guarantee, cacheLabel(r.cache), r.peer, r.round,
			r.rate(), r.unit, r.total.Seconds(), r.cpu.Seconds(), r.cpu.Seconds()/float64(r.inputs)*1e6, r.brokerCPU.Seconds(), r.peakRSS>>20, r.outputs, commits)
	}
	runs := medians(results)
	fmt.Fprintln(&b)
	if o.rounds > 1 {
		fmt.Fprintf(&b, "Ratios weir / peer of the medians over the %d rounds, at the same point and record cache (goka, which has none, against weir at each cache size: \"10 MiB / none\"); rate: above 1 is weir faster; CPU per unit and RSS: below 1 is weir leaner; slowest / median is each peer's slowest run's rate over its median (below 0.9 is a stall):\n", o.rounds)
	} else {
		fmt.Fprintln(&b, "Ratios weir / peer at the same point and record cache (goka, which has none, against weir at each cache size: \"10 MiB / none\"); rate: above 1 is weir faster; CPU per unit and RSS: below 1 is weir leaner:")
	}
	fmt.Fprintln(&b)
	fmt.Fprintln(&b, "| workload | keys | guarantee | cache | peer | rate | CPU per unit | peak RSS | weir slowest / median | peer slowest / median |")
	fmt.Fprintln(&b, "| --- | ---: | --- | ---: | --- | ---: | ---: | ---: | ---: | ---: |")
	for _, pr := range pairs(runs) {
		w, p := pr.weir, pr.peer
		if p.rate == 0 || p.cpuPerUnit == 0 || p.peakRSS == 0 {
			continue
		}
		cache := cacheLabel(w.cache)
		if p.cache != w.cache {
			cache += " / " + cacheLabel(p.cache)
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %.2f | %.2f | %.2f | %.2f | %.2f |\n", w.workload, shortCount(w.keys), w.guarantee, cache, p.name,
			w.rate/p.rate, w.cpuPerUnit/p.cpuPerUnit, w.peakRSS/p.peakRSS, w.slowest, p.slowest)
	}
	var once []string
	for _, e := range runs {
		if e.guarantee != "exactly_once" {
			continue
		}
		for _, a := range runs {
			if a.name == e.name && a.workload == e.workload && a.keys == e.keys && a.cache == e.cache && a.guarantee == "at_least_once" && a.rate > 0 {
				once = append(once, fmt.Sprintf("| %s | %s | %s | %s | %.2f |", e.workload, shortCount(e.keys), cacheLabel(e.cache), e.name, e.rate/a.rate))
			}
		}
	}
	if len(once) > 0 {
		fmt.Fprintln(&b)
		fmt.Fprintln(&b, "Exactly once / at least once, rate (medians), at the same commit interval:")
		fmt.Fprintln(&b)
		fmt.Fprintln(&b, "| workload | keys | cache | peer | exactly once / at least once |")
		fmt.Fprintln(&b, "| --- | ---: | ---: | --- | ---: |")
		for _, l := range once {
			fmt.Fprintln(&b, l)
		}
	}
	if rows := keySpace(runs); len(rows) > 0 {
		fmt.Fprintln(&b)
		fmt.Fprintln(&b, "Word count over its key space: CPU per line (medians) at each number of distinct words, and over the same peer's at the smallest number, at the same guarantee and cache (the goal for weir: at 1M words at most 2x its 10k figure):")
		fmt.Fprintln(&b)
		fmt.Fprintln(&b, "| guarantee | cache | words | weir CPU µs per line | weir / smallest | Kafka Streams CPU µs per line | Kafka Streams / smallest |")
		fmt.Fprintln(&b, "| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
		for _, r := range rows {
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s |\n", r.guarantee, cacheLabel(r.cache), shortCount(r.keys),
				figure(r.weir.perUnit*1e6, "%.1f"), figure(r.weir.relative, "%.2f"), figure(r.kstreams.perUnit*1e6, "%.1f"), figure(r.kstreams.relative, "%.2f"))
		}
	}
	if rows := restoreCurve(runs); len(rows) > 0 {
		fmt.Fprintln(&b)
		fmt.Fprintln(&b, "Restore over the store's size: the restore's time (medians; from the restarted process's start, whose fixed cost weighs on small stores, until every partition's new record is counted) per million records, and over the same peer's at the smallest store (flat: the restore's cost grows with the store and no faster); the peak RSS during the restore, and the RSS of the same peer started again on the restored state once it has counted one more record per partition (idle); and the marginal time per million records, from the peer's next smaller store to this one, which the fixed cost leaves out, with its ratio to the first such figure (flat: each million more records costs what the first million more did):")
		fmt.Fprintln(&b)
		fmt.Fprintln(&b, "| peer | guarantee | cache | keys | restore s | s per M records | / smallest | peak RSS MiB | idle RSS MiB | peak over idle MiB | marginal s per M | marginal / first |")
		fmt.Fprintln(&b, "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
		for _, r := range rows {
			idle, over := "-", "-"
			if r.idleRSS > 0 {
				idle, over = fmt.Sprintf("%.0f", r.idleRSS/(1<<20)), fmt.Sprintf("%.0f", (r.peakRSS-r.idleRSS)/(1<<20))
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %.1f | %.2f | %.2f | %.0f | %s | %s | %s | %s |\n", r.peer, r.guarantee, cacheLabel(r.cache), shortCount(r.keys), r.seconds, r.perUnit*1e6, r.relative, r.peakRSS/(1<<20), idle, over,
				figure(r.marginal*1e6, "%.2f"), figure(r.marginalRelative, "%.2f"))
		}
	}
	return b.String()
}

// figure formats v, or "-" for none (negative).
func figure(v float64, format string) string {
	if v < 0 {
		return "-"
	}
	return fmt.Sprintf(format, v)
}

// point is where a run sits: its workload, key space, guarantee and
// record cache. Ratios compare peers at the same point.
type point struct {
	workload  string
	keys      int
	guarantee string
	cache     int64
}

// summary is the median figures of one point and peer over its rounds.
type summary struct {
	point
	name                      string // the peer
	inputs                    int
	rate, cpuPerUnit, peakRSS float64 // medians
	idleRSS                   float64 // median; restores only, 0 unknown
	seconds                   float64 // median time to a complete output, from the group's start
	slowest                   float64 // the slowest run's rate over the median rate
}

// medians sums results up per point and peer, in the order they first
// appear.
func medians(results []result) []summary {
	type key struct {
		point
		peer string
	}
	var keys []key
	runs := map[key][]result{}
	for _, r := range results {
		k := key{point{r.workload, r.keys, r.guarantee, r.cache}, r.peer}
		if _, ok := runs[k]; !ok {
			keys = append(keys, k)
		}
		runs[k] = append(runs[k], r)
	}
	out := make([]summary, 0, len(keys))
	for _, k := range keys {
		rs := runs[k]
		rate := median(rs, func(r result) float64 { return r.rate() })
		s := summary{point: k.point, name: k.peer, inputs: rs[0].inputs, rate: rate,
			cpuPerUnit: median(rs, func(r result) float64 { return r.cpu.Seconds() / float64(r.inputs) }),
			peakRSS:    median(rs, func(r result) float64 { return float64(r.peakRSS) }),
			idleRSS:    median(rs, func(r result) float64 { return float64(r.idleRSS) }),
			seconds:    median(rs, func(r result) float64 { return r.steady.Seconds() })}
		if rate > 0 {
			low := rs[0].rate()
			for _, r := range rs[1:] {
				low = min(low, r.rate())
			}
			s.slowest = low / rate
		}
		out = append(out, s)
	}
	return out
}

// pair is weir and one peer at the same point; a peer without a cache
// (goka) is paired with weir at every cache size.
type pair struct{ weir, peer summary }

// pairs returns weir's summaries paired with every other peer's at the
// same point, in the order of weir's, then of the peers'.
func pairs(runs []summary) []pair {
	var out []pair
	for _, w := range runs {
		if w.name != "weir" {
			continue
		}
		for _, p := range runs {
			if p.name == "weir" || p.workload != w.workload || p.keys != w.keys || p.guarantee != w.guarantee {
				continue
			}
			if p.cache == w.cache || p.cache == noCache {
				out = append(out, pair{w, p})
			}
		}
	}
	return out
}

// relative is a peer's figure per unit at a point and that over its
// figure at the smallest point of the same curve; both -1 when the peer
// did not run there.
type relative struct{ perUnit, relative float64 }

// keySpaceRow is one point of the word count's curve over its
// vocabulary.
type keySpaceRow struct {
	point
	weir, kstreams relative
}

// keySpace returns the word count's CPU per line at each vocabulary, per
// guarantee and cache, for weir and Kafka Streams, each relative to its
// own at the smallest vocabulary; none when no curve has two points.
func keySpace(runs []summary) []keySpaceRow {
	curve := func(peer string, p point) relative {
		var at, low *summary
		for i, s := range runs {
			if s.name != peer || s.workload != p.workload || s.guarantee != p.guarantee || s.cache != p.cache {
				continue
			}
			if s.keys == p.keys {
				at = &runs[i]
			}
			if low == nil || s.keys < low.keys {
				low = &runs[i]
			}
		}
		if at == nil || low.cpuPerUnit == 0 {
			return relative{-1, -1}
		}
		return relative{at.cpuPerUnit, at.cpuPerUnit / low.cpuPerUnit}
	}
	// The curves, one per guarantee and cache, in the order they first
	// ran, each with its points in theirs.
	var curves []point
	for _, s := range runs {
		if c := (point{s.workload, 0, s.guarantee, s.cache}); s.name == "weir" && s.workload == "wordcount" && !slices.Contains(curves, c) {
			curves = append(curves, c)
		}
	}
	var rows []keySpaceRow
	long := false
	for _, c := range curves {
		n := 0
		for _, s := range runs {
			if s.name == "weir" && s.workload == c.workload && s.guarantee == c.guarantee && s.cache == c.cache {
				rows = append(rows, keySpaceRow{s.point, curve("weir", s.point), curve("kstreams", s.point)})
				n++
			}
		}
		long = long || n > 1
	}
	if !long {
		return nil
	}
	return rows
}

// restoreRow is one point of a peer's restore curve over the store's
// size.
type restoreRow struct {
	point
	peer     string
	seconds  float64 // the restore's median time
	perUnit  float64 // seconds per record
	relative float64 // perUnit over the peer's at its smallest store
	// peakRSS and idleRSS are the median peak during the restore and the
	// median RSS idle on the restored state, bytes (idle 0: unknown).
	peakRSS, idleRSS float64
	// marginal is the seconds per record from the peer's next smaller
	// store to this one, and marginalRelative it over the marginal at the
	// peer's second smallest store; both -1 where there is none.
	marginal, marginalRelative float64
}

// restoreCurve returns every restore's time per record, per peer,
// guarantee and cache, relative to the same peer's at the smallest store,
// grouped by peer in the order the peers first ran.
func restoreCurve(runs []summary) []restoreRow {
	var rows []restoreRow
	var peers []string
	for _, s := range runs {
		if s.workload == "restore" && !slices.Contains(peers, s.name) {
			peers = append(peers, s.name)
		}
	}
	for _, peer := range peers {
		for _, s := range runs {
			if s.workload != "restore" || s.name != peer || s.inputs == 0 {
				continue
			}
			low := s
			for _, t := range runs {
				if t.workload == "restore" && t.name == peer && t.guarantee == s.guarantee && t.cache == s.cache && t.keys < low.keys && t.inputs > 0 {
					low = t
				}
			}
			per, lowPer := s.seconds/float64(s.inputs), low.seconds/float64(low.inputs)
			r := restoreRow{point: s.point, peer: peer, seconds: s.seconds, perUnit: per, peakRSS: s.peakRSS, idleRSS: s.idleRSS, marginal: -1, marginalRelative: -1}
			if lowPer > 0 {
				r.relative = per / lowPer
			}
			rows = append(rows, r)
		}
	}
	// The marginal figures, along each peer's stores at one guarantee and
	// cache in the order of their size (a restore's inputs are its keys).
	same := func(a, b restoreRow) bool {
		return a.peer == b.peer && a.guarantee == b.guarantee && a.cache == b.cache
	}
	for i, r := range rows {
		var prev *restoreRow
		for j, o := range rows {
			if same(o, r) && o.keys < r.keys && (prev == nil || o.keys > prev.keys) {
				prev = &rows[j]
			}
		}
		if prev != nil {
			rows[i].marginal = (r.seconds - prev.seconds) / float64(r.keys-prev.keys)
		}
	}
	for i, r := range rows {
		first := r // the marginal at the second smallest store
		for _, o := range rows {
			if same(o, r) && o.marginal >= 0 && o.keys < first.keys {
				first = o
			}
		}
		if r.marginal >= 0 && first.marginal > 0 {
			rows[i].marginalRelative = r.marginal / first.marginal
		}
	}
	return rows
}

// shortCount writes a key count as the flags' points read: 10k, 1M, or
// the number when it is not a round thousand.
func shortCount(n int) string {
	switch {
	case n != 0 && n%1_000_000 == 0:
		return strconv.Itoa(n/1_000_000) + "M"
	case n != 0 && n%1_000 == 0:
		return strconv.Itoa(n/1_000) + "k"
	}
	return strconv.Itoa(n)
}

// cacheLabel writes a record cache size for the table: "10 MiB", "512
// KiB", "1000 B", "0" (none, every update forwarded), or "none" for a peer
// without a cache.
func cacheLabel(bytes int64) string {
	switch {
	case bytes == noCache:
		return "none"
	case bytes == 0:
		return "0"
	case bytes%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", bytes>>20)
	case bytes%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", bytes>>10)
	}
	return fmt.Sprintf("%d B", bytes)
}

// cacheName writes a record cache size for application ids and topic
// names: its bytes, or "none".
func cacheName(bytes int64) string {
	if bytes == noCache {
		return "none"
	}
	return strconv.FormatInt(bytes, 10)
}

// median is the median of f over rs (the mean of the middle two for an
// even count); rs is not empty.
func median(rs []result, f func(result) float64) float64 {
	v := make([]float64, len(rs))
	for i, r := range rs {
		v[i] = f(r)
	}
	slices.Sort(v)
	n := len(v)
	if n%2 == 0 {
		return (v[n/2-1] + v[n/2]) / 2
	}
	return v[n/2]
}
