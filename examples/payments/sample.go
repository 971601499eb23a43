package main

import (
	"time"

	"github.com/weirstream/weir/examples/internal/kafkaio"
)

// sampleStart is the event time of the sample's first payment.
var sampleStart = time.Date(2026, time.January, 15, 9, 0, 0, 0, time.UTC)

// samplePayment is one record of the sample: at is the event time after
// sampleStart, value the raw record value.
type samplePayment struct {
	account string
	at      time.Duration
	value   string
}

// samplePayments are the payments the embedded run produces, in order:
// 14 records, of which 4 are duplicates (a producer retry, a replay of
// an upstream batch), all within a minute of the first sighting. acc-1004
// has a payment "p-1" of its own, which is not acc-1001's "p-1". The
// final balances are acc-1001 9499, acc-1002 4050, acc-1003 60000 and
// acc-1004 1734 cents.
func samplePayments() []samplePayment {
	return []samplePayment{
		{"acc-1001", 1 * time.Second, `{"id": "p-1", "amount": 10000}`},
		{"acc-1002", 2 * time.Second, `{"id": "p-4", "amount": 5000}`},
		{"acc-1003", 3 * time.Second, `{"id": "p-7", "amount": 75000}`},
		{"acc-1001", 5 * time.Second, `{"id": "p-2", "amount": -2500}`},
		{"acc-1001", 6 * time.Second, `{"id": "p-2", "amount": -2500}`}, // duplicate
		{"acc-1002", 8 * time.Second, `{"id": "p-5", "amount": -1250}`},
		{"acc-1004", 9 * time.Second, `{"id": "p-9", "amount": 1234}`},
		{"acc-1003", 12 * time.Second, `{"id": "p-8", "amount": -15000}`},
		{"acc-1002", 15 * time.Second, `{"id": "p-4", "amount": 5000}`},   // duplicate
		{"acc-1003", 20 * time.Second, `{"id": "p-8", "amount": -15000}`}, // duplicate
		{"acc-1001", 25 * time.Second, `{"id": "p-3", "amount": 1999}`},
		{"acc-1004", 30 * time.Second, `{"id": "p-1", "amount": 500}`},
		{"acc-1002", 40 * time.Second, `{"id": "p-6", "amount": 300}`},
		{"acc-1003", 60 * time.Second, `{"id": "p-8", "amount": -15000}`}, // duplicate
	}
}

// sampleRecords returns the sample as records to produce.
func sampleRecords() []kafkaio.Record {
	var recs []kafkaio.Record
	for _, p := range samplePayments() {
		recs = append(recs, kafkaio.Record{Key: []byte(p.account), Value: []byte(p.value), Timestamp: sampleStart.Add(p.at)})
	}
	return recs
}
