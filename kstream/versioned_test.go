package kstream_test

import (
	"testing"
	"time"

	"github.com/weirstream/weir/kstream"
	"github.com/weirstream/weir/serde"
)

// TestTemporalJoin: a stream joined to a versioned table finds the row as
// of each record's timestamp, whatever order the table's updates and the
// stream's records arrive in; an out-of-order table update goes into the
// history without changing the table's latest value (nothing passed on),
// and a deletion is a version too.
func TestTemporalJoin(t *testing.T) {
	t.Parallel()
	b := kstream.NewBuilder()
	rates := b.VersionedTable("rates", "rates", serde.String(), serde.String(), time.Hour)
	rates.ToStream().To("rate-updates", serde.String(), serde.String())
	b.Stream("payments", "payments", serde.String(), serde.String()).
		LeftJoin(rates, func(_ string, p, rate string, found bool) string {
			if !found {
				rate = "none"
			}
			return p + "@" + rate
		}).To("priced", serde.String(), serde.String())
	d := driver(t, b)
	run(t, d,
		step{topic: "rates", key: "EUR", value: "1.0", ts: 10},
		step{topic: "rates", key: "EUR", value: "1.1", ts: 20},
		step{topic: "payments", key: "EUR", value: "p1", ts: 15}, // late: the rate of 15 is 1.0
		step{topic: "payments", key: "EUR", value: "p2", ts: 25},
		step{topic: "rates", key: "EUR", value: "0.9", ts: 5}, // late: history only
		step{topic: "payments", key: "EUR", value: "p0", ts: 7},
		step{topic: "payments", key: "EUR", value: "p-", ts: 3}, // before any rate
		step{topic: "rates", key: "EUR", del: true, ts: 30},
		step{topic: "payments", key: "EUR", value: "p4", ts: 35},
		step{topic: "payments", key: "EUR", value: "p3", ts: 28},
	)
	expectRows(t, d, "priced", serde.String(),
		"EUR=p1@1.0@15", "EUR=p2@1.1@25", "EUR=p0@0.9@7", "EUR=p-@none@3", "EUR=p4@none@35", "EUR=p3@1.1@28")
	expectRows(t, d, "rate-updates", serde.String(), "EUR=1.0@10", "EUR=1.1@20", "EUR=<deleted>@30")
}
