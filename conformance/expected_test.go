package conformance

// Reasons the outputs of a scenario differ from Kafka Streams'. Each
// names its section of docs/semantics.md: "Differences not fixed yet",
// where the finding is described with a minimal input, unless it says it
// is deliberate and names the section that gives the reason.
const (
	tableFilter    = "deliberate (\"Tables and tombstones\"): weir's table filter passes nothing for a row that was not in its result; Kafka Streams writes a tombstone for every update it rejects"
	sessionCache   = "deliberate (\"Record caches\"): with caching on, Kafka Streams merges a record into a session past the store's retention that its cache still holds, which it does not find with caching off; weir finds the same sessions either way"
	unmatchedLater = "deliberate (\"Left and outer stream-stream joins\"): weir emits every unmatched record once, when its window closes; Kafka Streams emits some later, in another order, or never"
)

// pending lists the scenarios whose output differs from Kafka Streams'
// for reasons not fixed yet, or deliberate. TestConformance requires each
// to differ still, so that a fix takes its scenario off the list.
var pending = map[string][]string{
	"table-filter": {tableFilter},
}

// pendingCached is pending for the pass with the record caches on (see
// sameUnderCaching).
var pendingCached = map[string][]string{
	"count-session":     {sessionCache},
	"aggregate-session": {sessionCache},
}

// relaxed lists the scenarios compared with a rule of their own, for a
// deliberate difference that touches only some of their records (see
// sameUnmatchedLater).
var relaxed = map[string]struct {
	why     string
	compare func(weir, ks []record) string
}{
	"join-left":  {unmatchedLater, sameUnmatchedLater},
	"join-outer": {unmatchedLater, sameUnmatchedLater},
}
