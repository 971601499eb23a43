package main

import (
	"fmt"
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
	fmt.Fprintln(&b, "| workload | guarantee | peer | rate | s from start | CPU s | CPU s per M | broker CPU s | peak RSS MiB | output records | commits |")
	fmt.Fprintln(&b, "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
	for _, r := range results {
		commits := "-"
		if r.commits >= 0 {
			commits = strconv.FormatInt(r.commits, 10)
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %.0f %s/s | %.1f | %.1f | %.1f | %.1f | %d | %d | %s |\n", r.workload, r.guarantee, r.peer, r.rate(), r.unit,
			r.total.Seconds(), r.cpu.Seconds(), r.cpu.Seconds()/float64(r.inputs)*1e6, r.brokerCPU.Seconds(), r.peakRSS>>20, r.outputs, commits)
	}
	fmt.Fprintln(&b)
	fmt.Fprintln(&b, "Ratios weir / peer (rate: above 1 is weir faster; CPU per unit and RSS: below 1 is weir leaner):")
	fmt.Fprintln(&b)
	fmt.Fprintln(&b, "| workload | guarantee | peer | rate | CPU per unit | peak RSS |")
	fmt.Fprintln(&b, "| --- | --- | --- | ---: | ---: | ---: |")
	for _, w := range results {
		if w.peer != "weir" {
			continue
		}
		for _, p := range results {
			if p.peer == "weir" || p.workload != w.workload || p.guarantee != w.guarantee || p.rate() == 0 || p.cpu == 0 || p.peakRSS == 0 {
				continue
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %.2f | %.2f | %.2f |\n", w.workload, w.guarantee, p.peer,
				w.rate()/p.rate(), w.cpu.Seconds()/p.cpu.Seconds(), float64(w.peakRSS)/float64(p.peakRSS))
		}
	}
	return b.String()
}
