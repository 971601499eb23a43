package metrics

import (
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Figures are the current values of an application's counters and
// histograms, summed over the labels the console does not show: what the
// operator console (package console) reads at each sample, without going
// through a registry the application may not be able to gather from.
//
// Maps are keyed by one label's value (or several joined by "/"); a key
// is absent until its counter has counted once.
type Figures struct {
	ProcessedByTask   map[string]float64 // weir_records_processed_total, by task
	WrittenByTopic    map[string]float64 // weir_records_written_total, by topic
	SkippedByReason   map[string]float64 // weir_records_skipped_total, by reason
	DroppedByReason   map[string]float64 // weir_records_dropped_total, by reason
	DeadLetteredTotal float64            // weir_records_dead_lettered_total
	LateTotal         float64            // weir_records_late_total
	LostTotal         float64            // weir_records_lost_total
	FailuresByNode    map[string]float64 // weir_node_failures_total, by node

	TxnByResult      map[string]float64 // weir_transactions_total, by result
	ProducerByReason map[string]float64 // weir_producer_events_total, by reason
	RewindsByMode    map[string]float64 // weir_rewinds_total, by mode
	RebalancesTotal  float64            // weir_rebalances_total
	// CommitSeconds is weir_commit_duration_seconds summed over threads:
	// the sum and count of the observations and the cumulative bucket
	// counts by upper bound.
	CommitSeconds Histogram
	// LastCommit is weir_last_commit_timestamp_seconds, the latest over
	// the threads, as Unix seconds; 0 before any.
	LastCommit float64

	RestoredByStore   map[string]float64 // weir_restore_records_total, by "store/partition"
	StandbyByStore    map[string]float64 // weir_standby_records_total, by "store/partition"
	FullRestoresTotal float64            // weir_restores_full_total
}

// Histogram is a histogram's sum, count and cumulative buckets.
type Histogram struct {
	Sum     float64
	Count   float64
	Buckets []Bucket // ascending upper bounds
}

// Bucket is a cumulative histogram bucket.
type Bucket struct {
	Le    float64
	Count float64
}

// Read returns the counters' and histograms' current values. It is
// safe for concurrent use with the runtime updating them; its cost is
// one pass over every child of every vector, so it is meant for sampling
// every few seconds, not for a hot path.
func (m *Metrics) Read() Figures {
	f := Figures{
		ProcessedByTask:  sumBy(m.RecordsProcessed, "task"),
		WrittenByTopic:   sumBy(m.RecordsWritten, "topic"),
		SkippedByReason:  sumBy(m.RecordsSkipped, "reason"),
		DroppedByReason:  sumBy(m.RecordsDropped, "reason"),
		FailuresByNode:   sumBy(m.NodeFailures, "node"),
		TxnByResult:      sumBy(m.Transactions, "result"),
		ProducerByReason: sumBy(m.ProducerEvents, "reason"),
		RewindsByMode:    sumBy(m.Rewinds, "mode"),
		RestoredByStore:  sumBy(m.RestoredRecords, "store", "partition"),
		StandbyByStore:   sumBy(m.StandbyRecords, "store", "partition"),
	}
	f.DeadLetteredTotal = sumBy(m.DeadLettered)[""]
	f.LateTotal = sumBy(m.LateRecords)[""]
	f.LostTotal = sumBy(m.RecordsLost)[""]
	f.RebalancesTotal = sumBy(m.Rebalances)[""]
	f.FullRestoresTotal = sumBy(m.FullRestores)[""]
	each(m.LastCommit, func(d *dto.Metric) {
		f.LastCommit = max(f.LastCommit, d.GetGauge().GetValue())
	})
	buckets := map[float64]float64{}
	var order []float64
	each(m.CommitDuration, func(d *dto.Metric) {
		h := d.GetHistogram()
		f.CommitSeconds.Sum += h.GetSampleSum()
		f.CommitSeconds.Count += float64(h.GetSampleCount())
		for _, b := range h.GetBucket() {
			if _, ok := buckets[b.GetUpperBound()]; !ok {
				order = append(order, b.GetUpperBound())
			}
			buckets[b.GetUpperBound()] += float64(b.GetCumulativeCount())
		}
	})
	for _, le := range order { // every child has the same bounds, ascending
		f.CommitSeconds.Buckets = append(f.CommitSeconds.Buckets, Bucket{Le: le, Count: buckets[le]})
	}
	return f
}

// each calls fn with every metric c collects.
func each(c prometheus.Collector, fn func(*dto.Metric)) {
	ch := make(chan prometheus.Metric, 64)
	go func() {
		c.Collect(ch)
		close(ch)
	}()
	for m := range ch {
		var d dto.Metric
		if m.Write(&d) == nil {
			fn(&d)
		}
	}
}

// sumBy sums the counters c collects by the values of the labels named,
// joined by "/"; with no label, everything is summed under "".
func sumBy(c prometheus.Collector, labels ...string) map[string]float64 {
	out := map[string]float64{}
	each(c, func(d *dto.Metric) {
		parts := make([]string, len(labels))
		for i, name := range labels {
			for _, lp := range d.GetLabel() {
				if lp.GetName() == name {
					parts[i] = lp.GetValue()
				}
			}
		}
		out[strings.Join(parts, "/")] += d.GetCounter().GetValue()
	})
	return out
}
