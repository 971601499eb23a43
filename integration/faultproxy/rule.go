package faultproxy

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"
)

// APIKey is a Kafka request type, the api_key of the request header.
type APIKey int16

// The request types weir's clients send. Any other api key passes through
// the proxy and can be named as APIKey(n) in a rule.
const (
	Produce            APIKey = 0
	Fetch              APIKey = 1
	ListOffsets        APIKey = 2
	Metadata           APIKey = 3
	OffsetCommit       APIKey = 8
	OffsetFetch        APIKey = 9
	FindCoordinator    APIKey = 10
	JoinGroup          APIKey = 11
	Heartbeat          APIKey = 12
	LeaveGroup         APIKey = 13
	SyncGroup          APIKey = 14
	ApiVersions        APIKey = 18
	InitProducerId     APIKey = 22
	AddPartitionsToTxn APIKey = 24
	AddOffsetsToTxn    APIKey = 25
	EndTxn             APIKey = 26
	TxnOffsetCommit    APIKey = 28
)

var apiNames = map[APIKey]string{
	Produce: "Produce", Fetch: "Fetch", ListOffsets: "ListOffsets", Metadata: "Metadata",
	OffsetCommit: "OffsetCommit", OffsetFetch: "OffsetFetch", FindCoordinator: "FindCoordinator",
	JoinGroup: "JoinGroup", Heartbeat: "Heartbeat", LeaveGroup: "LeaveGroup", SyncGroup: "SyncGroup",
	ApiVersions: "ApiVersions", InitProducerId: "InitProducerId", AddPartitionsToTxn: "AddPartitionsToTxn",
	AddOffsetsToTxn: "AddOffsetsToTxn", EndTxn: "EndTxn", TxnOffsetCommit: "TxnOffsetCommit",
}

// String returns the request type's name as Kafka's protocol guide spells
// it, or APIKey(n) for a key without a constant here.
func (k APIKey) String() string {
	if name, ok := apiNames[k]; ok {
		return name
	}
	return fmt.Sprintf("APIKey(%d)", int16(k))
}

// Action is what a rule does to the request it fires on.
type Action int

const (
	// DelayRequest holds the request for Rule.Delay before sending it
	// upstream. Later requests of the connection queue behind it, so order
	// is kept. If the client's connection closes meanwhile (or is cut), the
	// held request is still delivered when the delay ends and its response
	// read and discarded: the upstream side stays open for it.
	DelayRequest Action = iota + 1
	// DelayResponse forwards the request at once and holds its response,
	// and every later response of the connection (to keep order), for
	// Rule.Delay from the time it arrives.
	DelayResponse
	// DropResponse forwards the request, discards its response and, after
	// Rule.Delay (0 = at once), cuts the connection: the broker acted, the
	// client never learns the outcome. Responses to other requests pass
	// during the delay.
	DropResponse
	// Duplicate sends the request upstream twice, the copy with the same
	// correlation id, and swallows the second response: the client sees one.
	Duplicate
	// Cut closes the connection instead of forwarding the request. The
	// responses to the requests before it are delivered first, so the cut
	// fails this request and the ones after it, not earlier ones in flight.
	Cut
)

var actionNames = [...]string{
	DelayRequest: "DelayRequest", DelayResponse: "DelayResponse", DropResponse: "DropResponse",
	Duplicate: "Duplicate", Cut: "Cut",
}

// String returns the action's constant name, or Action(n).
func (a Action) String() string {
	if a > 0 && int(a) < len(actionNames) {
		return actionNames[a]
	}
	return fmt.Sprintf("Action(%d)", int(a))
}

// TxnEnd narrows a rule to the EndTxn requests that commit or to those that
// abort.
type TxnEnd int

const (
	// AnyTxnEnd, the zero value, does not look at what an EndTxn asks.
	AnyTxnEnd TxnEnd = iota
	// CommitTxnEnd matches the EndTxn requests that commit.
	CommitTxnEnd
	// AbortTxnEnd matches the EndTxn requests that abort.
	AbortTxnEnd
)

// String returns the constant's name.
func (e TxnEnd) String() string {
	switch e {
	case AnyTxnEnd:
		return "AnyTxnEnd"
	case CommitTxnEnd:
		return "CommitTxnEnd"
	case AbortTxnEnd:
		return "AbortTxnEnd"
	}
	return fmt.Sprintf("TxnEnd(%d)", int(e))
}

// RuleID names an installed rule for [Proxy.Remove]. IDs are never reused
// within one Proxy; 0 names no rule.
type RuleID uint64

// Rule is a fault to inject. A request matches it when its api key is in
// APIs and its client id starts with ClientID. Whether a matching request
// fires the rule is decided by Skip, Once, Every and Probability, meant to
// be used one at a time (with Skip); their zero values mean every matching
// request. Set together they all have to agree: past Skip, an Every-th
// match, won the draw, and (with Once) the rule's first firing. Matches are
// counted across all connections, in the order the proxy reads requests.
type Rule struct {
	// APIs are the request types the rule applies to; empty means every type.
	APIs []APIKey
	// ClientID is a prefix of the request header's client id; "" matches any.
	ClientID string
	// TxnEnd, when CommitTxnEnd or AbortTxnEnd, matches only the EndTxn
	// requests whose committed flag says so (an EndTxn whose body does
	// not parse matches neither); requests of other types are not
	// affected by it.
	TxnEnd TxnEnd
	// Action is what the rule does when it fires.
	Action Action
	// Delay is how long DelayRequest holds the request and DelayResponse the
	// response, and how long after discarding the response DropResponse cuts
	// the connection (0 = at once). Other actions ignore it.
	Delay time.Duration

	// Once fires on the first matching request only (after Skip).
	Once bool
	// Every fires on every Every-th matching request after Skip: the
	// Every-th, 2*Every-th, ...; 0 and 1 mean all.
	Every int
	// Probability fires on each matching request with this probability,
	// drawn from a math/rand/v2 PCG source seeded with (Seed, 0), so a seed
	// gives the same firings for the same sequence of matches. 0 means
	// always (the zero value), as does anything at or above 1.
	Probability float64
	// Seed seeds Probability's source.
	Seed uint64
	// Skip lets the first Skip matching requests through before the rule
	// can fire.
	Skip int
}

// rule is an installed Rule with its counters, guarded by Proxy.mu.
type rule struct {
	Rule
	id      RuleID
	matched int
	fired   int
	rng     *rand.Rand
}

func newRule(r Rule, id RuleID) *rule {
	r.APIs = slices.Clone(r.APIs)
	return &rule{Rule: r, id: id, rng: rand.New(rand.NewPCG(r.Seed, 0))}
}

func (r *rule) matches(h header) bool {
	return (len(r.APIs) == 0 || slices.Contains(r.APIs, h.api)) && strings.HasPrefix(h.clientID, r.ClientID) &&
		(h.api != EndTxn || r.TxnEnd == AnyTxnEnd || r.TxnEnd == h.txnEnd)
}

// fire counts a matching request and reports whether the rule fires on it.
func (r *rule) fire() bool {
	r.matched++
	n := r.matched - r.Skip
	switch {
	case n <= 0:
		return false
	case r.Once && r.fired > 0:
		return false
	case r.Every > 1 && n%r.Every != 0:
		return false
	case r.Probability > 0 && r.rng.Float64() >= r.Probability:
		return false
	}
	r.fired++
	return true
}
