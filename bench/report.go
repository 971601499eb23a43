package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime"
	"text/tabwriter"
)

// report is everything one run measured, printed as a table or as JSON.
type report struct {
	Date      string `json:"date"`
	Host      string `json:"host"`
	GoVersion string `json:"go_version"`
	CPUs      int    `json:"cpus"`
	Kafka     string `json:"kafka,omitempty"`
	Brokers   string `json:"brokers"`
	// Records is the load's size; 0 when only the restore workload ran.
	Records        int64  `json:"records"`
	KeyBytes       int    `json:"key_bytes"`
	ValueBytes     int    `json:"value_bytes"`
	Partitions     int32  `json:"partitions"`
	Threads        int    `json:"threads"`
	Guarantee      string `json:"guarantee"`
	CommitInterval string `json:"commit_interval"`
	Rounds         int    `json:"rounds"`

	Results []*result `json:"results"`
	Ratios  []ratio   `json:"ratios"`

	// Restores and RestoreRatios are the restore workload's (restore.go).
	Restores      []*restoreResult `json:"restores,omitempty"`
	RestoreRatios []restoreRatio   `json:"restore_ratios,omitempty"`

	// Rescales are the rescale workload's (rescale.go).
	Rescales []*rescaleResult `json:"rescales,omitempty"`

	// Failovers are the failover workload's (failover.go).
	Failovers []*failoverResult `json:"failovers,omitempty"`

	// Counts and CountRatios are the count workload's (count.go).
	Counts      []*countResult `json:"counts,omitempty"`
	CountRatios []countRatio   `json:"count_ratios,omitempty"`

	// Aborts are the aborts workload's (aborts.go).
	Aborts []*abortsResult `json:"aborts,omitempty"`

	// Wordcounts are the wordcount workload's (wordcount.go).
	Wordcounts []*wordcountResult `json:"wordcounts,omitempty"`

	// JoinTableKeys, Joins and JoinRatios are the join workload's
	// (join.go).
	JoinTableKeys int64         `json:"join_table_keys,omitempty"`
	Joins         []*joinResult `json:"joins,omitempty"`
	JoinRatios    []joinRatio   `json:"join_ratios,omitempty"`
}

// ratio compares a weir workload with the bare sarama consumer group,
// using the median over rounds of each.
type ratio struct {
	Name string `json:"name"`
	// Steady compares the rates from the first to the last record.
	Steady float64 `json:"steady"`
	// EndToEnd compares the rates from the start, join included.
	EndToEnd float64 `json:"end_to_end"`
}

func (r *report) fillHost() {
	r.Host, _ = os.Hostname()
	r.GoVersion = runtime.Version()
	r.CPUs = runtime.GOMAXPROCS(0)
	r.Kafka = os.Getenv("WEIR_KAFKA_VERSION")
}

func (r *report) add(res *result) { r.Results = append(r.Results, res) }

// medians returns the median steady and end-to-end rates of a workload.
func (r *report) medians(workload string) (steady, endToEnd float64, ok bool) {
	var s, e []float64
	for _, res := range r.Results {
		if res.Workload == workload {
			s = append(s, res.SteadyRate)
			e = append(e, res.Rate)
		}
	}
	return median(s), median(e), len(s) > 0
}

func (r *report) computeRatios() {
	for _, w := range []struct{ workload, base, name string }{
		{wlSource, wlSarama, "weir source-only / bare sarama consumer group"},
		{wlPassthrough, wlSarama, "weir passthrough / bare sarama consumer group"},
		{wlPassthrough, wlSaramaPassthrough, "weir passthrough / sarama passthrough"},
		{wlPassthrough, wlSaramaTxn, "weir passthrough / sarama transactional passthrough"},
	} {
		bs, be, ok := r.medians(w.base)
		if !ok || bs == 0 || be == 0 {
			continue
		}
		if s, e, ok := r.medians(w.workload); ok {
			r.Ratios = append(r.Ratios, ratio{Name: w.name, Steady: s / bs, EndToEnd: e / be})
		}
	}
}

func (r *report) writeJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(r); err != nil {
		return fmt.Errorf("writing JSON: %w", err)
	}
	return nil
}

func (r *report) writeTable(w io.Writer) error {
	kafka := r.Kafka
	if kafka == "" {
		kafka = "?"
	}
	fmt.Fprintf(w, "weir bench %s on %s (%d CPUs, %s), Kafka %s at %s\n", r.Date, r.Host, r.CPUs, r.GoVersion, kafka, r.Brokers)
	records := "restore workload only"
	if len(r.Rescales) > 0 {
		records = "rescale and restore workloads only"
	}
	if r.Records > 0 {
		records = fmt.Sprintf("%d records", r.Records)
	}
	fmt.Fprintf(w, "%s, %d-byte keys, %d-byte values, %d partitions; weir: %s, %d thread(s), commit interval %s\n\n",
		records, r.KeyBytes, r.ValueBytes, r.Partitions, r.Guarantee, r.Threads, r.CommitInterval)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	// tabwriter aligns every column right; pad the names to read left.
	width := len("workload")
	for _, res := range r.Results {
		width = max(width, len(res.Name))
	}
	fmt.Fprintf(tw, "%-*s\tround\trecords/s\tMB/s\tfirst rec s\tsteady rec/s\tsteady MB/s\tend s\tCPU s/M rec\tclose s\t\n", width, "workload")
	for _, res := range r.Results {
		fmt.Fprintf(tw, "%-*s\t%d\t%.0f\t%.1f\t%.2f\t%.0f\t%.1f\t%.2f\t%.2f\t%.2f\t\n",
			width, res.Name, res.Round, res.Rate, res.MBRate, res.FirstSeconds, res.SteadyRate, res.SteadyMBRate,
			res.EndSeconds, res.CPUPerMillion, res.CloseSeconds)
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("writing table: %w", err)
	}
	if len(r.Ratios) > 0 {
		fmt.Fprintln(w)
		if r.Rounds > 1 {
			fmt.Fprintf(w, "ratios (medians of %d rounds):\n", r.Rounds)
		} else {
			fmt.Fprintln(w, "ratios:")
		}
		for _, q := range r.Ratios {
			fmt.Fprintf(w, "  %-52s steady %.2f   end to end %.2f\n", q.Name, q.Steady, q.EndToEnd)
		}
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "notes:")
	for _, res := range r.Results {
		if res.Note == "" && res.Verified == nil {
			continue
		}
		line := res.Note
		if res.Verified != nil {
			line += fmt.Sprintf("; output verified: %d records", *res.Verified)
		}
		fmt.Fprintf(w, "  %s (round %d): %s\n", res.Name, res.Round, line)
	}
	_, err := fmt.Fprintln(w, "\nMB = 10^6 bytes of key+value; steady = from the first to the last record; CPU = the bench process (client side) during the measurement.")
	if err != nil {
		return fmt.Errorf("writing table: %w", err)
	}
	if len(r.Counts) > 0 {
		if err := r.writeCountTable(w); err != nil {
			return err
		}
	}
	if len(r.Restores) > 0 {
		if err := r.writeRestoreTable(w); err != nil {
			return err
		}
	}
	if len(r.Rescales) > 0 {
		if err := r.writeRescaleTable(w); err != nil {
			return err
		}
	}
	if len(r.Wordcounts) > 0 {
		if err := r.writeWordcountTable(w); err != nil {
			return err
		}
	}
	if len(r.Joins) > 0 {
		if err := r.writeJoinTable(w); err != nil {
			return err
		}
	}
	if len(r.Failovers) > 0 {
		if err := r.writeFailoverTable(w); err != nil {
			return err
		}
	}
	if len(r.Aborts) > 0 {
		return r.writeAbortsTable(w)
	}
	return nil
}

// writeCountTable prints the count workload's figures.
func (r *report) writeCountTable(w io.Writer) error {
	fmt.Fprintln(w, "\ncount (source -> count in a key-value store -> sink):")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	width := len("variant")
	for _, res := range r.Counts {
		width = max(width, len(res.Variant))
	}
	fmt.Fprintf(tw, "%-*s\tguarantee\tinterval\tround\tsteady rec/s\trec/s\tfirst rec s\tprocessed s\toutput s\tCPU s/M rec\tcommits\tp50 ms\tp99 ms\tmean ms\ttransactions\toutput recs\tclose s\t\n", width, "variant")
	for _, res := range r.Counts {
		verified := "-"
		if res.Verified != nil {
			verified = fmt.Sprint(*res.Verified)
		}
		fmt.Fprintf(tw, "%-*s\t%s\t%s\t%d\t%.0f\t%.0f\t%.2f\t%.2f\t%.2f\t%.2f\t%d\t%.1f\t%.1f\t%.1f\t%s\t%s\t%.2f\t\n",
			width, res.Variant, res.Guarantee, res.CommitInterval, res.Round, res.SteadyRate, res.Rate, res.FirstSeconds,
			res.ProcessedSeconds, res.OutputSeconds, res.CPUPerMillion, res.Commits, res.CommitP50*1e3, res.CommitP99*1e3,
			res.CommitMean*1e3, res.transactionsLabel(), verified, res.CloseSeconds)
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("writing table: %w", err)
	}
	if len(r.CountRatios) > 0 {
		fmt.Fprintf(w, "\nratios (medians of %d round(s)):\n", r.Rounds)
		for _, q := range r.CountRatios {
			fmt.Fprintf(w, "  %-46s steady %.2f   from app.Run %.2f\n", q.Name, q.Steady, q.EndToEnd)
		}
	}
	for _, res := range r.Counts {
		if res.Note != "" {
			fmt.Fprintf(w, "  %s (round %d): %s\n", res.Variant, res.Round, res.Note)
		}
	}
	_, err := fmt.Fprintln(w, "\nsteady = first to last record processed; rec/s = app.Run to the last record processed; output s = app.Run until the output topic held every record (exactly once: committed); CPU = the bench process up to the last record processed; commits and p50/p99/mean = weir_commit_duration_seconds (histogram_quantile-style interpolation; Close's final commit included); transactions = weir_transactions_total; output recs = committed records in the output topic (read_committed).")
	if err != nil {
		return fmt.Errorf("writing table: %w", err)
	}
	return nil
}

// writeRestoreTable prints the restore workload's figures.
func (r *report) writeRestoreTable(w io.Writer) error {
	fmt.Fprintln(w, "\nrestores:")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	width := len("changelog: run")
	for _, res := range r.Restores {
		width = max(width, len(res.label()))
	}
	fmt.Fprintf(tw, "%-*s\tround\trecords\tfull parts\tstartup s\trestore s\trecords/s\tMB/s\tvs sarama\tCPU s\tclose s\t\n", width, "changelog: run")
	for _, res := range r.Restores {
		vs := "-"
		if res.VsSarama > 0 {
			vs = fmt.Sprintf("%.2f", res.VsSarama)
		}
		fmt.Fprintf(tw, "%-*s\t%d\t%d\t%d/%d\t%.2f\t%.2f\t%.0f\t%.1f\t%s\t%.2f\t%.2f\t\n",
			width, res.label(), res.Round, res.Records, res.FullPartitions, res.Partitions, res.StartupSeconds,
			res.Seconds, res.Rate, res.MBRate, vs, res.CPUSeconds, res.CloseSeconds)
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("writing table: %w", err)
	}
	if len(r.RestoreRatios) > 0 {
		fmt.Fprintln(w, "\nweir full restore / sarama read (medians over rounds and both kinds of full restore):")
		for _, q := range r.RestoreRatios {
			fmt.Fprintf(w, "  %d records, %d concurrent restores: %.0f / %.0f records/s = %.2f\n", q.Changelog, q.Concurrency, q.Weir, q.Sarama, q.Ratio)
		}
	}
	fmt.Fprintln(w, "\nnotes:")
	for _, res := range r.Restores {
		line := res.Note
		if res.Verified != nil {
			line += fmt.Sprintf("; store verified: %d keys", *res.Verified)
		}
		fmt.Fprintf(w, "  %s (round %d): %s\n", res.label(), res.Round, line)
	}
	_, err := fmt.Fprintln(w, "\nrestore s = first OnRestoreStart to last OnRestoreEnd (sarama: first ConsumePartition to last record); startup s = app.Run to first OnRestoreStart; CPU = the bench process from startup to the end; vs sarama = rate over the round's sarama read.")
	if err != nil {
		return fmt.Errorf("writing table: %w", err)
	}
	return nil
}
