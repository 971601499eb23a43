package console

// The JSON the console's API answers with. docs/console.md documents
// every field; a field is added, never renamed, so that a page of one
// weir version reads the answers of an instance of another during a
// rolling upgrade (an unknown field is ignored, a missing one shows as
// unknown).
//
// Conventions: times are Unix milliseconds (0: never or unknown),
// durations seconds, offsets and lags records; -1 stands for an unknown
// offset or lag.

// Topology is the answer of GET /weir/api/topology: the application's
// topology as a graph.
type Topology struct {
	ApplicationID string        `json:"application_id"`
	Subtopologies []Subtopology `json:"subtopologies"`
	Stores        []TopoStore   `json:"stores"`
}

// Subtopology is a connected part of the topology; its tasks are
// "<id>_<partition>".
type Subtopology struct {
	ID int `json:"id"`
	// Partitions is its partition count, the number of its tasks; 0
	// before the instance has looked at the cluster.
	Partitions int32  `json:"partitions"`
	Nodes      []Node `json:"nodes"`
}

// Node is a source, processor or sink.
type Node struct {
	Name string `json:"name"`
	Kind string `json:"kind"` // "source", "processor" or "sink"
	// Topic is the topic a source reads or a sink writes, as Kafka names
	// it (an internal topic's full name); "" for a processor and a
	// dynamic sink.
	Topic string `json:"topic,omitempty"`
	// Internal marks a repartition topic's source or sink: a sink and a
	// source with the same internal Topic are the two ends of a
	// repartition.
	Internal bool     `json:"internal,omitempty"`
	Dynamic  bool     `json:"dynamic,omitempty"`
	Stores   []string `json:"stores,omitempty"`
	Children []string `json:"children,omitempty"`
}

// TopoStore is a state store of the topology.
type TopoStore struct {
	Name string `json:"name"`
	// Type is the store's type, as the topology descriptor names it:
	// "key-value", "window", "session", "ttl", "versioned", "global".
	Type string `json:"type"`
	// Changelog is the topic it is restored from.
	Changelog string `json:"changelog"`
	// Subtopology is the sub-topology whose tasks own it; -1 for a
	// global store.
	Subtopology int   `json:"subtopology"`
	Partitions  int32 `json:"partitions"`
	// Users are the processors that use it.
	Users []string `json:"users,omitempty"`
}

// Instance is the answer of GET /weir/api/instance: one instance's
// figures, as it sees them now, with the history it sampled.
type Instance struct {
	// Addr is the instance's Config.AdvertisedAddr; "" when it advertises
	// none.
	Addr          string `json:"addr"`
	ProcessID     string `json:"process_id"`
	ApplicationID string `json:"application_id"`
	State         string `json:"state"`
	Version       string `json:"version"`
	Guarantee     string `json:"guarantee"`
	Time          int64  `json:"time"`
	// SampleInterval and HistorySamples are the console's sampling
	// (Config.Console): histories hold up to HistorySamples points
	// SampleInterval apart.
	SampleInterval float64 `json:"sample_interval_seconds"`
	HistorySamples int     `json:"history_samples"`
	// RateWindow is the span, in seconds, the rates were computed over;
	// 0 before the second sample.
	RateWindow float64   `json:"rate_window_seconds"`
	Rebalance  Rebalance `json:"rebalance"`
	Threads    []Thread  `json:"threads"`
	// Tasks are the active tasks, then the standby and warm-up copies,
	// each sorted by id.
	Tasks []Task `json:"tasks"`
	// Partitions are the input partitions of the active tasks (source and
	// repartition topics), the partitions at risk first.
	Partitions []Partition `json:"partitions"`
	Stores     []Store     `json:"stores"`
	Commits    Commits     `json:"commits"`
	Records    Records     `json:"records"`
	Failures   Failures    `json:"failures"`
	// Errors are the last warnings and errors the instance logged,
	// newest first.
	Errors []Event `json:"errors"`
}

// Rebalance is the instance's last rebalance.
type Rebalance struct {
	// Generation is the group generation of the newest assignment a
	// thread received; 0 before any.
	Generation int32 `json:"generation"`
	// At is when that assignment arrived.
	At int64 `json:"at"`
	// Assignments counts the assignments the instance's threads received
	// (weir_rebalances_total).
	Assignments float64 `json:"assignments"`
}

// Thread is a stream thread's time accounting.
type Thread struct {
	Thread int `json:"thread"`
	// BusySeconds, IdleSeconds and BackpressuredSeconds are totals since
	// the thread started (weir_thread_seconds_total).
	BusySeconds          float64 `json:"busy_seconds"`
	IdleSeconds          float64 `json:"idle_seconds"`
	BackpressuredSeconds float64 `json:"backpressured_seconds"`
	// BusyShare is the share of the rate window the thread was busy
	// (0 to 1); BackpressuredShare the time its partitions' fetchers
	// were blocked on full queues over the window's length, summed over
	// partitions (so it can pass 1). -1 before the second sample.
	BusyShare          float64 `json:"busy_share"`
	BackpressuredShare float64 `json:"backpressured_share"`
	Tasks              int     `json:"tasks"`
}

// Task is an active task, or a standby or warm-up copy of one.
type Task struct {
	ID          string `json:"id"`
	Subtopology int    `json:"subtopology"`
	Partition   int32  `json:"partition"`
	// Kind is "active", "standby" or "warmup".
	Kind string `json:"kind"`
	// State is "running" or "restoring" for an active task, "standby"
	// or "warmup" for a copy.
	State string `json:"state"`
	// Thread is the thread running an active task; -1 for a copy.
	Thread     int   `json:"thread"`
	StreamTime int64 `json:"stream_time"`
	// Processed counts its input records (weir_records_processed_total)
	// and RecordsPerSecond is their rate over the rate window.
	Processed        float64   `json:"processed"`
	RecordsPerSecond float64   `json:"records_per_second"`
	Restores         []Restore `json:"restores,omitempty"`
	// StandbyLag is a copy's lag per store, in records; absent until its
	// first update ended, -1 when nobody knows how far behind it is.
	StandbyLag map[string]int64 `json:"standby_lag,omitempty"`
}

// Restore is a store partition of a task restoring.
type Restore struct {
	Store     string `json:"store"`
	Partition int32  `json:"partition"`
	Remaining int64  `json:"remaining"`
	// Total is the most records the restore was seen to have left, so
	// Progress = 1 - Remaining/Total.
	Total    int64   `json:"total"`
	Progress float64 `json:"progress"`
	// RatePerSecond is the records applied per second over the rate
	// window; ETASeconds is Remaining at that rate, -1 unknown.
	RatePerSecond float64 `json:"rate_per_second"`
	ETASeconds    float64 `json:"eta_seconds"`
}

// Partition is an input partition of an active task.
type Partition struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Task      string `json:"task"`
	LogEnd    int64  `json:"log_end"`
	Position  int64  `json:"position"`
	Committed int64  `json:"committed"`
	// Lag is LogEnd - Position (weir_partition_offset_lag), CommittedLag
	// LogEnd - Committed; -1 unknown.
	Lag          int64 `json:"lag"`
	CommittedLag int64 `json:"committed_lag"`
	// OldestUnreadAge is the age of the next record not processed; 0
	// when none is waiting.
	OldestUnreadAge float64 `json:"oldest_unread_age_seconds"`
	// Retention is the topic's retention.ms in seconds, 0 when infinite
	// or not known; Headroom is Retention - OldestUnreadAge, absent then.
	Retention float64  `json:"retention_seconds"`
	Headroom  *float64 `json:"headroom_seconds,omitempty"`
	// Risk is "high" (headroom under a quarter of retention: records may
	// be deleted unread), "rising" (lag grew over the rate window) or
	// "ok".
	Risk          string `json:"risk"`
	QueuedRecords int    `json:"queued_records"`
	// History is the lag at each sample: [time, lag] pairs, oldest first.
	History [][2]int64 `json:"history"`
}

// Store is a store's local state on this instance.
type Store struct {
	Name      string `json:"name"`
	Type      string `json:"type"`
	Changelog string `json:"changelog"`
	// Bytes is the estimate of the disk its partitions here take
	// (weir_store_estimated_disk_bytes).
	Bytes      int64            `json:"bytes"`
	Partitions []StorePartition `json:"partitions"`
}

// StorePartition is one partition of a store held here.
type StorePartition struct {
	Partition int32 `json:"partition"`
	// Role is "active", "restoring", "standby", "warmup", or "idle" for
	// the state of a task that moved away, kept until
	// Stores.CleanupDelay.
	Role string `json:"role"`
	// Checkpoint is the next changelog offset the local state reflects;
	// ChangelogEnd the changelog partition's end as last looked up (-1
	// not known).
	Checkpoint   int64 `json:"checkpoint"`
	ChangelogEnd int64 `json:"changelog_end"`
	// Restored counts the records restores applied to it
	// (weir_restore_records_total), StandbyApplied those a standby
	// applied (weir_standby_records_total).
	Restored       float64 `json:"restored"`
	StandbyApplied float64 `json:"standby_applied"`
	// Remaining is what its restore has left; -1 when not restoring.
	Remaining int64 `json:"remaining"`
	// StandbyLag is a standby or warm-up copy's lag; -1 otherwise or
	// unknown.
	StandbyLag int64 `json:"standby_lag"`
}

// Commits are the instance's commits.
type Commits struct {
	Committed float64 `json:"committed"`
	Aborted   float64 `json:"aborted"`
	// PerSecond and AbortsPerSecond are over the rate window.
	PerSecond       float64 `json:"per_second"`
	AbortsPerSecond float64 `json:"aborts_per_second"`
	// LatencyMean and LatencyP99 are the commits' durations over the rate
	// window, in milliseconds (the p99 is the upper bound of the
	// histogram bucket that holds it); -1 when none committed in it.
	LatencyMean float64 `json:"latency_mean_ms"`
	LatencyP99  float64 `json:"latency_p99_ms"`
	// LastCommit is when a thread last committed.
	LastCommit int64 `json:"last_commit"`
	// Aborts counts the failed transactions by what came of them:
	// "rewound_in_place", "rewound_by_rejoining", "fenced",
	// "outcome_unknown" (the producer rebuilt).
	Aborts map[string]float64 `json:"aborts"`
	// ProducerEvents is weir_producer_events_total by reason.
	ProducerEvents map[string]float64 `json:"producer_events"`
	// History is the commits per second between samples: [time, rate]
	// pairs, oldest first.
	History [][2]float64 `json:"history"`
}

// Records are the instance's record rates, over the rate window.
type Records struct {
	Processed          float64 `json:"processed"`
	ProcessedPerSecond float64 `json:"processed_per_second"`
	// BySubtopology is the input records per second of each
	// sub-topology's tasks here, by sub-topology id.
	BySubtopology map[string]float64 `json:"by_subtopology"`
	// WrittenPerSecond is the output records per second by topic (sinks
	// and repartition topics).
	WrittenPerSecond map[string]float64 `json:"written_per_second"`
}

// Failures are the records the error policies passed over, and the
// failures per node.
type Failures struct {
	// Skipped is weir_records_skipped_total by reason: deserialization,
	// timestamp, processing, production.
	Skipped      map[string]float64 `json:"skipped"`
	DeadLettered float64            `json:"dead_lettered"`
	// Dropped is weir_records_dropped_total by reason (null_key).
	Dropped map[string]float64 `json:"dropped"`
	Late    float64            `json:"late"`
	Lost    float64            `json:"lost"`
	// ByNode is weir_node_failures_total by node.
	ByNode map[string]float64 `json:"by_node"`
}

// Event is a warning or error the instance logged: its message and
// attributes (topic, partition, offset, task, thread, node, store ...),
// which weir fills with coordinates, never with a record's key or value.
type Event struct {
	Time    int64             `json:"time"`
	Level   string            `json:"level"`
	Message string            `json:"message"`
	Attrs   map[string]string `json:"attrs,omitempty"`
	// Error is the text of the error the line carried, sent only to a
	// request the authorizer also allows weir.HealthDetails: it may quote
	// a processor's error or name broker addresses.
	Error string `json:"error,omitempty"`
}

// Cluster is the answer of GET /weir/api/cluster: every instance of the
// group that advertises an address, each with its figures as it answered
// them, or why it did not.
type Cluster struct {
	// Self is the address of the instance that answered ("" when it
	// advertises none).
	Self string `json:"self"`
	Time int64  `json:"time"`
	// Generation is the group generation of the host map the instances
	// come from.
	Generation int32    `json:"generation"`
	Members    []Member `json:"members"`
}

// Member is one instance of the cluster view.
type Member struct {
	Addr string `json:"addr"`
	Self bool   `json:"self"`
	// Status is "ok", "unreachable" (no answer within the peer timeout),
	// "refused" (its authorizer refused this instance's request: 403),
	// "off" (its console is off: 404), or "error" (another answer).
	Status string `json:"status"`
	Error  string `json:"error,omitempty"`
	// Active and Standby are its tasks as the group's host map has them.
	Active  []string `json:"active"`
	Standby []string `json:"standby"`
	// Instance is its answer; absent unless Status is "ok".
	Instance *Instance `json:"instance,omitempty"`
}
