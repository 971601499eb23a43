// Package metrics defines weir's Prometheus metrics. Every name starts with
// weir_; labels come from {application, thread, task, topic, partition,
// store, node, result, reason, mode, state} (weir_build_info: version,
// guarantee, process_id) and never carry a record's key or value.
//
// Counters and histograms are updated by the runtime as things happen.
// Gauges that describe the present (lag, ages, stream time, task states)
// are computed when Prometheus scrapes, from a snapshot the runtime gives
// through Source, so a scrape always sees a consistent, current picture and
// the hot path pays nothing for them.
package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are one application's metrics.
type Metrics struct {
	app string

	RecordsProcessed *prometheus.CounterVec // thread, task
	BytesProcessed   *prometheus.CounterVec // thread, task
	Punctuations     *prometheus.CounterVec // thread, task
	RecordsSkipped   *prometheus.CounterVec // thread, task, reason
	RecordsDropped   *prometheus.CounterVec // thread, task, reason = null_key
	LateRecords      *prometheus.CounterVec // thread, task
	DeadLettered     *prometheus.CounterVec // thread, task
	RecordsWritten   *prometheus.CounterVec // thread, task, topic
	NodeFailures     *prometheus.CounterVec // thread, task, node
	EndToEndLatency  *prometheus.HistogramVec

	CommitDuration *prometheus.HistogramVec
	Transactions   *prometheus.CounterVec // thread, result = committed|aborted
	ProducerEvents *prometheus.CounterVec // thread, reason = fenced|rebuilt|dangling_aborted|dangling_committed|dangling_taken_over|dangling_check_failed
	Rebalances     *prometheus.CounterVec // thread
	Rewinds        *prometheus.CounterVec // thread, mode = in_place|rejoin
	LastCommit     *prometheus.GaugeVec   // thread: Unix seconds
	CommitInterval *prometheus.GaugeVec   // thread: seconds
	RecordsLost    *prometheus.CounterVec // topic, partition

	RestoredRecords *prometheus.CounterVec // store, partition
	RestoreDuration *prometheus.HistogramVec
	FullRestores    *prometheus.CounterVec // store, partition, reason = no_state|checkpoint_out_of_range|checkpoint_too_old|log_start_moved

	// Standbys (Config.StandbyReplicas). The lag gauge is set by the
	// standby runner as it polls, not computed at scrape time: only it
	// knows the log end it last saw.
	StandbyRecords *prometheus.CounterVec // store, partition
	StandbyLag     *prometheus.GaugeVec   // store, partition
	// Probes counts the probing rebalances the instance started, per
	// reason = caught_up|interval and result = started|failed.
	Probes *prometheus.CounterVec
}

// Source gives the state the scrape-time gauges are computed from.
type Source interface {
	Snapshot() Snapshot
}

// SourceFunc is a function used as a Source.
type SourceFunc func() Snapshot

// Snapshot returns f().
func (f SourceFunc) Snapshot() Snapshot { return f() }

// Snapshot is the state of an instance at one moment.
type Snapshot struct {
	State      string // the App's state, such as "running"
	Partitions []Partition
	Tasks      []Task
	Restores   []Restore
	Stores     []Store
	Threads    []Thread
}

// Thread is a stream thread's time accounting.
type Thread struct {
	Thread int
	// Busy and Idle split the thread's wall time since it started.
	Busy, Idle time.Duration
	// Backpressured is the time its partitions' fetchers spent blocked on
	// full queues: the thread could not keep up.
	Backpressured time.Duration
}

// Partition is an input partition of a running or restoring task.
type Partition struct {
	Topic     string
	Partition int32
	LogEnd    int64 // high watermark; -1 unknown
	Position  int64 // next offset to process; -1 unknown
	Committed int64 // next offset after a restart; -1 unknown
	// OldestUnread is the timestamp of the next record not yet processed;
	// zero when none is waiting.
	OldestUnread time.Time
	// Retention is the topic's retention.ms; 0 unknown or infinite.
	Retention time.Duration
}

// Task is a task and its stream time.
type Task struct {
	Thread     int
	ID         string
	State      string // restoring | running
	StreamTime time.Time
}

// Restore is a store partition being restored.
type Restore struct {
	Store     string
	Partition int32
	Remaining int64
}

// Store is the estimated disk a store's data takes on this instance (see
// statelog.DB.EstimatedDiskBytes).
type Store struct {
	Store string
	Bytes int64
}

// New creates the metrics of application app and registers them, with the
// collector that computes the scrape-time gauges from src, on reg.
func New(reg prometheus.Registerer, app string, src Source) (*Metrics, error) {
	constLabels := prometheus.Labels{"application": app}
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: "weir_" + name, Help: help, ConstLabels: constLabels}, labels)
	}
	histogram := func(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "weir_" + name, Help: help, ConstLabels: constLabels, Buckets: buckets}, labels)
	}
	m := &Metrics{
		app:              app,
		RecordsProcessed: counter("records_processed_total", "Input records processed, per task.", "thread", "task"),
		BytesProcessed:   counter("bytes_processed_total", "Key and value bytes of the input records processed, per task.", "thread", "task"),
		Punctuations:     counter("punctuations_total", "Punctuator calls, per task.", "thread", "task"),
		RecordsSkipped:   counter("records_skipped_total", "Records skipped by an error policy (Skip), per task and reason: input records (deserialization, timestamp, processing) and refused output records (production; under DeadLetter too, the refused record being dropped). Counted once per record, not again when an aborted transaction is replayed.", "thread", "task", "reason"),
		RecordsDropped:   counter("records_dropped_total", "Input records whose state store writes or repartition records were dropped, per task and reason: null_key (the record's Kafka key was null and the writes were under the empty key). One per input record however many of its writes were dropped, each time it is processed.", "thread", "task", "reason"),
		LateRecords:      counter("records_late_total", "Records dropped because their window had closed, per task.", "thread", "task"),
		DeadLettered:     counter("records_dead_lettered_total", "Input records written to a dead-letter topic by an error policy (DeadLetter), per task. Counted when a record is first passed over; a replay in place after an aborted transaction writes its dead-letter records again without counting them, while a refused output record's dead-letter record counts each time it is written.", "thread", "task"),
		RecordsWritten: counter("records_written_total",
			`Output records a task handed to its thread's producer, per topic: sink and repartition topics, not changelogs. Records of a transaction that aborts count, and count again when replayed; a record refused before it was sent and dropped under ProductionErrors=Skip counts too (and in weir_records_skipped_total{reason="production"}).`,
			"thread", "task", "topic"),
		NodeFailures: counter("node_failures_total",
			"Input records that failed at a node (a RecordError naming the node), per node: a source that could not decode the record (under DeserializationErrors or TimestampErrors = Fail), or a processor or sink that returned an error (whatever ProcessingErrors then did with it). Decoding failures a policy skipped or dead-lettered, and failed sends (refused records, aborted transactions), count elsewhere.",
			"thread", "task", "node"),
		EndToEndLatency: histogram("end_to_end_latency_seconds", "Time from a record's timestamp to its output being handed to the producer, per task.",
			prometheus.ExponentialBuckets(0.001, 4, 10), "task"),
		CommitDuration: histogram("commit_duration_seconds", "Duration of a thread's commit (changelog, flush or transaction, offsets, state).",
			prometheus.ExponentialBuckets(0.001, 2, 14), "thread"),
		Transactions:   counter("transactions_total", "Commits per result: committed, aborted.", "thread", "result"),
		ProducerEvents: counter("producer_events_total", "Producers fenced or rebuilt, and transactions aborted or committed to end records a broker left open (dangling_aborted, dangling_committed; dangling_taken_over for a departed process's), and checks for such records that could not be made yet (dangling_check_failed; the thread starts no transaction until one is), per reason.", "thread", "reason"),
		Rebalances:     counter("rebalances_total", "Assignments received by each thread.", "thread"),
		LastCommit: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "weir_last_commit_timestamp_seconds", ConstLabels: constLabels,
			Help: "When each thread last committed successfully (or found nothing to commit), as Unix seconds: time() minus it is how long a thread has made no progress."},
			[]string{"thread"}),
		CommitInterval: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "weir_commit_interval_seconds", ConstLabels: constLabels,
			Help: "The interval from each thread's last commit to its next: Config.CommitInterval while the thread keeps up with its input, up to Config.MaxCommitInterval while it is behind."},
			[]string{"thread"}),
		Rewinds: counter("rewinds_total", "Aborted transactions after which a thread took its tasks back to their last commit: in place (replaying the records it kept) or by rejoining the group.", "thread", "mode"),
		RecordsLost: counter("records_lost_total",
			"Records an input partition lost before they were processed: its committed offset had fallen below the log start (deleted by retention), so consumption restarted at the oldest record.",
			"topic", "partition"),
		RestoredRecords: counter("restore_records_total", "Changelog records applied by restores.", "store", "partition"),
		RestoreDuration: histogram("restore_duration_seconds", "Duration of a store partition's restore.", prometheus.ExponentialBuckets(0.01, 4, 10), "store"),
		FullRestores: counter("restores_full_total",
			"Restores of a store partition from the changelog's log start, per reason: no_state (no local state), checkpoint_out_of_range (the changelog no longer holds the checkpoint), checkpoint_too_old (older than the changelog's delete.retention.ms, so deletions may be missing), log_start_moved (the log start overtook a full restore, which started over).",
			"store", "partition", "reason"),
		StandbyRecords: counter("standby_records_total", "Changelog records applied to standby copies of store partitions.", "store", "partition"),
		StandbyLag: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "weir_standby_lag_records", ConstLabels: constLabels,
			Help: "Records of each standby store partition's changelog not yet applied, as of the standby's last look at the log end (it looks every 250 ms while caught up): what a failover to this instance would restore. Present only while the instance keeps the standby."},
			[]string{"store", "partition"}),
		Probes: counter("probing_rebalances_total",
			"Probing rebalances this instance started (Config.MaxWarmups), per reason (caught_up: one of its warm-up tasks caught up with its owner; interval: Config.ProbingRebalanceInterval passed while it held warm-ups) and result (started, failed).",
			"reason", "result"),
	}
	cs := []prometheus.Collector{
		m.RecordsProcessed, m.BytesProcessed, m.Punctuations, m.RecordsSkipped, m.RecordsDropped, m.LateRecords, m.DeadLettered, m.RecordsWritten, m.NodeFailures,
		m.EndToEndLatency, m.CommitDuration, m.Transactions, m.ProducerEvents, m.Rebalances, m.Rewinds, m.LastCommit, m.CommitInterval, m.RecordsLost,
		m.RestoredRecords, m.RestoreDuration, m.FullRestores, m.StandbyRecords, m.StandbyLag, m.Probes, newCollector(app, src),
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}
