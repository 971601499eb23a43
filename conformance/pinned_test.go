package conformance

import "testing"

// A pinnedCase is a hand-written input for a scenario, short enough to
// read: the minimal inputs of docs/semantics.md and of the findings the
// suite was built for, each run through both sides in every pass (the
// seeded generator may take many seeds to meet them). A case with a
// reason shows a difference (deliberate, or not fixed yet) and must
// differ; every other case must agree record by record.
type pinnedCase struct {
	scenario, label string
	why             string
	in              []record
}

// in is an input record: topic, key and value (nil for null), timestamp
// in milliseconds.
func in(topic string, key, value *string, ts int64) record {
	return record{Topic: topic, Key: key, Value: value, TS: ts}
}

func p(s string) *string { return &s }

var pinned = []pinnedCase{
	// A window store keeps a record while its time is later than the
	// store's stream time minus the retention, not at the boundary
	// itself: the join's retention is 5 s + 5 s + 2 s grace, so a at 12 s
	// expires A at 0, and b at 4 s finds nothing.
	{scenario: "join-inner", label: "retention-boundary", in: []record{
		in("a", p("k"), p("1"), 0),
		in("a", p("x"), p("2"), 12000),
		in("b", p("k"), p("3"), 4000),
	}},
	// One ms inside the retention, the record is still there.
	{scenario: "join-inner", label: "retention-inside", in: []record{
		in("a", p("k"), p("1"), 1),
		in("a", p("x"), p("2"), 12000),
		in("b", p("k"), p("3"), 4000),
	}},
	// Each side's store expires by the newest time put into it: b's
	// records do not expire a's, so b at 3 s still finds a at 1 s after b
	// reached 20 s.
	{scenario: "join-inner", label: "per-side-expiry", in: []record{
		in("a", p("k"), p("1"), 1000),
		in("b", p("x"), p("2"), 20000),
		in("b", p("k"), p("3"), 3000),
	}},
	// A null-key record moves neither the join's time nor a store's.
	{scenario: "join-inner", label: "null-key-moves-no-time", in: []record{
		in("a", p("k"), p("1"), 1000),
		in("a", nil, p("2"), 30000),
		in("b", p("k"), p("3"), 3000),
	}},
	// A left (for an outer join, either side's) record with a null key
	// and a value is emitted at once as unmatched, with its null key and
	// time (KIP-962); it moves no time: k's record at 1 s waits until k
	// at 40 s closes its window, not the null-key record at 30 s.
	{scenario: "join-left", label: "null-key-unmatched", in: []record{
		in("a", nil, p("1"), 1000),
		in("a", p("k"), p("2"), 2000),
		in("b", nil, p("3"), 2500),
		in("b", p("k"), p("4"), 3000),
		in("a", p("j"), p("5"), 4000),
		in("a", nil, p("6"), 30000),
		in("a", nil, nil, 30000),
		in("a", p("k"), p("7"), 40000),
	}},
	{scenario: "join-outer", label: "null-key-unmatched", in: []record{
		in("a", nil, p("1"), 1000),
		in("b", nil, p("3"), 2500),
		in("b", p("k"), p("4"), 3000),
		in("a", p("k"), p("2"), 3000),
		in("b", nil, nil, 30000),
	}},
	// A global table skips a record with a null key: the stream record
	// with a null key finds no row (its key maps to the empty id).
	{scenario: "global-left-join", label: "null-key-row", in: []record{
		in("b", nil, p("7"), 1000),
		in("a", nil, p("1"), 2000),
		in("a", p("k"), p("2"), 3000),
	}},
	// A versioned table's history (10 s) reaches back from the largest
	// time the table read (20 s), not the task's (the stream's 31 s):
	// a at 12 s finds v1. A table record from before the history (5 s)
	// is dropped; a lookup before it finds only a latest version valid
	// then.
	{scenario: "versioned-join", label: "history", in: []record{
		in("b", p("k"), p("v0"), 8000),
		in("b", p("k"), p("v1"), 11000),
		in("b", p("j"), p("w"), 20000),
		in("a", p("x"), p("0"), 31000),
		in("a", p("k"), p("1"), 12000),
		in("b", p("k"), p("v2"), 5000),
		in("a", p("k"), p("2"), 6000),
		in("a", p("j"), p("3"), 6000),
	}},
	// A windowed count closes its windows by the stream time it observed:
	// a record its filter drops (3 at 50 s), a tombstone the filter drops
	// and a record with a null key (at 60 s) move nothing, so 2 s and 4 s
	// still count in [0 s, 10 s) (grace 5 s).
	{scenario: "filter-count-tumbling", label: "dropped-records-close-nothing", in: []record{
		in("a", p("k"), p("1"), 1000),
		in("a", p("k"), p("3"), 50000),
		in("a", p("k"), nil, 55000),
		in("a", p("k"), p("2"), 2000),
		in("a", nil, p("1"), 60000),
		in("a", p("k"), p("4"), 4000),
	}},
	{scenario: "filter-count-suppress", label: "dropped-records-close-nothing", in: []record{
		in("a", p("k"), p("1"), 1000),
		in("a", p("k"), p("3"), 50000),
		in("a", p("k"), p("2"), 2000),
		in("a", p("j"), p("1"), 16000),
		in("a", p("k"), p("4"), 4000),
	}},
	// A tombstone for a key the table does not hold is passed on.
	{scenario: "table", label: "absent-tombstone", in: []record{
		in("a", p("k"), nil, 1000),
		in("a", p("k"), p("1"), 2000),
		in("a", p("k"), nil, 3000),
		in("a", p("k"), nil, 4000),
	}},
	// ... and deletes a join result again where the other table holds
	// the key.
	{scenario: "table-join", label: "absent-tombstone", in: []record{
		in("b", p("k"), p("1"), 1000),
		in("a", p("k"), nil, 2000),
	}},
	{scenario: "table-left-join", label: "absent-tombstone", in: []record{
		in("a", p("k"), p("1"), 1000),
		in("b", p("k"), nil, 2000),
		in("b", p("j"), p("2"), 3000),
		in("a", p("j"), nil, 4000),
	}},
	// A foreign-key inner join deletes the result of a row that is new or
	// moves to a foreign key without a row, and of a deleted row, even
	// when it had none; an update under the same foreign key without a
	// row emits nothing. The foreign key of v is "k" + (v % 5).
	{scenario: "fk-join", label: "tombstones", in: []record{
		in("a", p("x"), p("1"), 1000), // k1: no row
		in("a", p("x"), p("6"), 2000), // k1 still: nothing
		in("a", p("x"), p("2"), 3000), // k2: no row
		in("b", p("k3"), p("30"), 4000),
		in("a", p("x"), p("3"), 5000), // k3: a result
		in("a", p("y"), p("4"), 6000), // k4: no row
		in("a", p("y"), nil, 7000),    // deleted
		in("a", p("z"), nil, 8000),    // deleted, never held
		in("b", p("k4"), nil, 9000),   // k4 deleted, no subscriber left
		in("b", p("k3"), nil, 10000),  // x's row deleted
	}},
	// Sliding windows (5 s, grace 2 s): records earlier than 5 s share
	// the window [0, 5 s]; a record out of order updates the windows that
	// hold it, the latest first.
	{scenario: "count-sliding", label: "early-and-out-of-order", in: []record{
		in("a", p("k"), p("1"), 1000),
		in("a", p("k"), p("2"), 3000),
		in("a", p("k"), p("3"), 10000),
		in("a", p("k"), p("4"), 12000),
		in("a", p("k"), p("5"), 13000),
		in("a", p("k"), p("6"), 14000),
		in("a", p("k"), p("7"), 12500),
	}},
	// Result timestamps (docs/semantics.md, "Result timestamps"): an
	// aggregation's update carries the largest timestamp its key (window)
	// has seen, so a late record's update is stamped 5 s, not 3 s.
	{scenario: "count", label: "late-update-time", in: []record{
		in("a", p("k"), p("1"), 5000),
		in("a", p("k"), p("2"), 3000),
	}},
	{scenario: "count-tumbling", label: "late-update-time", in: []record{
		in("a", p("k"), p("1"), 5000),
		in("a", p("k"), p("2"), 3000),
	}},
	// A grouped table's update: the largest timestamp of the changes of
	// its group ("g1" gets 1 at 5 s, then 4 at 2 s).
	{scenario: "table-groupby-reduce", label: "late-update-time", in: []record{
		in("a", p("x"), p("1"), 5000),
		in("a", p("y"), p("4"), 2000),
	}},
	// A table-table join's result: the later of the two rows' times.
	{scenario: "table-join", label: "later-row-time", in: []record{
		in("b", p("k"), p("1"), 5000),
		in("a", p("k"), p("2"), 3000),
		in("a", p("k"), nil, 4000),
	}},
	{scenario: "table-outer-join", label: "later-row-time", in: []record{
		in("a", p("k"), p("1"), 5000),
		in("b", p("k"), p("2"), 3000),
		in("b", p("k"), nil, 4000),
	}},
	// A foreign-key join: a row's answer carries the later of its time
	// and the foreign row's; a change of the foreign row, its own time.
	{scenario: "fk-join", label: "later-row-time", in: []record{
		in("b", p("k1"), p("10"), 5000),
		in("a", p("x"), p("1"), 3000), // k1
		in("b", p("k1"), p("11"), 4000),
		in("a", p("x"), nil, 2000),
	}},
	{scenario: "fk-left-join", label: "later-row-time", in: []record{
		in("b", p("k1"), p("10"), 5000),
		in("a", p("x"), p("1"), 3000), // k1
		in("a", p("x"), nil, 2000),
	}},
	// An early record (before the time difference, 5 s) updates the
	// windows that hold it earliest first, as Kafka Streams' forward scan
	// of early records does: 3.7 s updates [2.088 s, 7.088 s] before
	// [2.256 s, 7.256 s].
	{scenario: "count-sliding", label: "early-updates-in-order", in: []record{
		in("a", p("k"), p("1"), 2255),
		in("a", p("k"), p("2"), 7088),
		in("a", p("k"), p("3"), 3723),
	}},
	// An early record earlier than [0, 5 s]'s records gets the window
	// right after it, holding them: 4.1 s makes [4.101 s, 9.101 s] with
	// the record at 4.896 s.
	{scenario: "count-sliding", label: "early-right-window", in: []record{
		in("a", p("k"), p("1"), 4896),
		in("a", p("k"), p("2"), 4100),
	}},
	// A table filter writes a tombstone for every update it rejects in
	// Kafka Streams, also of a row never in its result; weir writes none.
	{scenario: "table-filter", label: "rejected-update", why: tableFilter, in: []record{
		in("a", p("k"), p("3"), 1000),
	}},
}

// TestPinnedCases runs the pinned cases through both sides.
func TestPinnedCases(t *testing.T) {
	byName := map[string]scenario{}
	for _, sc := range scenarios {
		byName[sc.name] = sc
	}
	inputs := map[string][]record{}
	for _, c := range pinned {
		if _, ok := byName[c.scenario]; !ok {
			t.Fatalf("pinned case %s: no scenario %q", c.label, c.scenario)
		}
		inputs[c.scenario+".pinned-"+c.label] = c.in
	}
	ks, ksFailed := runKStreams(t, inputs)
	for _, c := range pinned {
		name := c.scenario + ".pinned-" + c.label
		if ksFailed[name] != "" {
			t.Errorf("%s: Kafka Streams failed: %s", name, ksFailed[name])
			continue
		}
		got, err := runWeir(byName[c.scenario], c.in, false)
		if err != nil {
			t.Errorf("%s: weir failed: %v", name, err)
			continue
		}
		msg := firstDifference(got, ks[name])
		switch {
		case c.why == "" && msg != "":
			t.Errorf("%s: %s", name, msg)
		case c.why != "" && msg == "":
			t.Errorf("%s shows a difference (%s) but gave Kafka Streams' output %v", name, c.why, got)
		case c.why != "":
			t.Logf("%s differs as expected (%s): %s", name, c.why, firstLine(msg))
		}
	}
}
