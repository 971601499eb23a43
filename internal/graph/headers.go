package graph

// The headers weir writes on the records of table updates and replays
// (their contracts are in package processor, which exports them).
const (
	// VersionHeader carries a table update's version (processor.VersionHeader).
	VersionHeader = "weir.version"
	// EpochHeader carries the application's reset epoch on a table update,
	// when above 0 (processor.EpochHeader).
	EpochHeader = "weir.epoch"
	// ReplayHeader marks what a task writes for an input record that a
	// reset replays (processor.ReplayHeader).
	ReplayHeader = "weir.replay"
)
