package main

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// report renders the results as Markdown: one row per run, then the
// ratios weir/peer of every workload and guarantee both ran.
func report(o *options, results []result, started time.Time) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# weir and its peers, %s\n\n", started.UTC().Format(time.RFC3339))
	fmt.Fprintf(&b, "Machine: %s. Broker %s. %d partitions per topic, one stream thread per peer, commit interval %v for every peer and guarantee; Kafka Streams 4.4.0 and weir with their defaults otherwise (both with a 10 MiB record cache), goka 1.1.13 at least once. Each run reads the input from the start with a new application id; its figures count only once its output (read_committed) held every key's exact final count.\n\n",
		machine(), strings.Join(o.brokers, ","), o.partitions, o.commit)
	fmt.Fprintln(&b, "rate = input units per second from the moment the peer's consumer group was first Stable (joined, partitions assigned) until its output was complete; s from start includes the process's start and join; CPU and peak RSS (VmHWM) are the peer process's own, from its start until its output was complete; broker CPU s is the local broker's over the same span (it shares the cores), when -broker-pid-file names it; commits is how often the peer committed until it was stopped, as it reports at exit (weir's commit count, Kafka Streams' commit-total; goka reports none).")
	fmt.Fprintln(&b)
	fmt.Fprintln(&b, "| workload | guarantee | peer | round | rate | s from start | CPU s | CPU s per M | broker CPU s | peak RSS MiB | output records | commits |")
	fmt.Fprintln(&b, "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
	for _, r := range results {
		commits := "-"
		if r.commits >= 0 {
			commits = strconv.FormatInt(r.commits, 10)
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %d | %.0f %s/s | %.1f | %.1f | %.1f | %.1f | %d | %d | %s |\n", r.workload, r.guarantee, r.peer, r.round, r.rate(), r.unit,
			r.total.Seconds(), r.cpu.Seconds(), r.cpu.Seconds()/float64(r.inputs)*1e6, r.brokerCPU.Seconds(), r.peakRSS>>20, r.outputs, commits)
	}
	runs := medians(results)
	fmt.Fprintln(&b)
	if o.rounds > 1 {
		fmt.Fprintf(&b, "Ratios weir / peer of the medians over the %d rounds (rate: above 1 is weir faster; CPU per unit and RSS: below 1 is weir leaner); slowest / median is each peer's slowest run's rate over its median (below 0.9 is a stall):\n", o.rounds)
	} else {
		fmt.Fprintln(&b, "Ratios weir / peer (rate: above 1 is weir faster; CPU per unit and RSS: below 1 is weir leaner):")
	}
	fmt.Fprintln(&b)
	fmt.Fprintln(&b, "| workload | guarantee | peer | rate | CPU per unit | peak RSS | weir slowest / median | peer slowest / median |")
	fmt.Fprintln(&b, "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: |")
	for _, w := range runs {
		if w.peer != "weir" {
			continue
		}
		for _, p := range runs {
			if p.peer == "weir" || p.workload != w.workload || p.guarantee != w.guarantee || p.rate == 0 || p.cpuPerUnit == 0 || p.peakRSS == 0 {
				continue
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %.2f | %.2f | %.2f | %.2f | %.2f |\n", w.workload, w.guarantee, p.peer,
				w.rate/p.rate, w.cpuPerUnit/p.cpuPerUnit, w.peakRSS/p.peakRSS, w.slowest, p.slowest)
		}
	}
	var once []string
	for _, e := range runs {
		if e.guarantee != "exactly_once" {
			continue
		}
		for _, a := range runs {
			if a.peer == e.peer && a.workload == e.workload && a.guarantee == "at_least_once" && a.rate > 0 {
				once = append(once, fmt.Sprintf("| %s | %s | %.2f |", e.workload, e.peer, e.rate/a.rate))
			}
		}
	}
	if len(once) > 0 {
		fmt.Fprintln(&b)
		fmt.Fprintln(&b, "Exactly once / at least once, rate (medians), at the same commit interval:")
		fmt.Fprintln(&b)
		fmt.Fprintln(&b, "| workload | peer | exactly once / at least once |")
		fmt.Fprintln(&b, "| --- | --- | ---: |")
		for _, l := range once {
			fmt.Fprintln(&b, l)
		}
	}
	return b.String()
}

// summary is the median figures of one workload, guarantee and peer over
// its rounds.
type summary struct {
	workload, guarantee, peer string
	rate, cpuPerUnit, peakRSS float64 // medians
	slowest                   float64 // the slowest run's rate over the median rate
}

// medians sums results up per workload, guarantee and peer, in the order
// they first appear.
func medians(results []result) []summary {
	type key struct{ workload, guarantee, peer string }
	var keys []key
	runs := map[key][]result{}
	for _, r := range results {
		k := key{r.workload, r.guarantee, r.peer}
		if _, ok := runs[k]; !ok {
			keys = append(keys, k)
		}
		runs[k] = append(runs[k], r)
	}
	out := make([]summary, 0, len(keys))
	for _, k := range keys {
		rs := runs[k]
		rate := median(rs, func(r result) float64 { return r.rate() })
		s := summary{workload: k.workload, guarantee: k.guarantee, peer: k.peer, rate: rate,
			cpuPerUnit: median(rs, func(r result) float64 { return r.cpu.Seconds() / float64(r.inputs) }),
			peakRSS:    median(rs, func(r result) float64 { return float64(r.peakRSS) })}
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
