package main

import (
	"time"

	"github.com/weirstream/weir/examples/internal/kafkaio"
)

// sampleStart is the event time of the sample's first record.
var sampleStart = time.Date(2026, time.March, 2, 8, 0, 0, 0, time.UTC)

// sampleRecord is one record of the sample: at is the event time after
// sampleStart, value the raw record value, nil for a tombstone.
type sampleRecord struct {
	key   string
	at    time.Duration
	value []byte
}

// sampleCustomers are the customer records the embedded run produces
// first, in order: four customers, then c-1003 moves up from bronze to
// silver and c-1004 is deleted. Each record changes the table, so the
// table passes on one change per record.
func sampleCustomers() []sampleRecord {
	return []sampleRecord{
		{"c-1001", 1 * time.Second, []byte(`{"name": "Ana Ruiz", "tier": "gold"}`)},
		{"c-1002", 2 * time.Second, []byte(`{"name": "Ben Okafor", "tier": "silver"}`)},
		{"c-1003", 3 * time.Second, []byte(`{"name": "Chen Wei", "tier": "bronze"}`)},
		{"c-1004", 4 * time.Second, []byte(`{"name": "Dora Novak", "tier": "silver"}`)},
		{"c-1003", 5 * time.Second, []byte(`{"name": "Chen Wei", "tier": "silver"}`)},
		{"c-1004", 6 * time.Second, nil}, // deleted
	}
}

// sampleProducts are the products the embedded run produces with the
// customers, before the application starts.
func sampleProducts() []sampleRecord {
	return []sampleRecord{
		{"p-10", 1 * time.Second, []byte(`{"name": "Espresso beans 1 kg", "price": 2450}`)},
		{"p-11", 2 * time.Second, []byte(`{"name": "Burr grinder", "price": 8900}`)},
		{"p-12", 3 * time.Second, []byte(`{"name": "Milk jug", "price": 1275}`)},
		{"p-13", 4 * time.Second, []byte(`{"name": "Paper filters x100", "price": 399}`)},
	}
}

// sampleOrders are the orders the embedded run produces once the
// application has applied every customer record, a minute after them in
// event time: ten orders, o-5 by a customer never created (c-1009), o-7
// by the deleted c-1004 and o-6 of a product that does not exist (p-99).
// The totals are 4900, 8900, 3825, 1995, 2450, 0, 1275, 9800, 8900 and
// 3990 cents.
func sampleOrders() []sampleRecord {
	return []sampleRecord{
		{"c-1001", 60 * time.Second, []byte(`{"id": "o-1", "product": "p-10", "qty": 2}`)},
		{"c-1002", 61 * time.Second, []byte(`{"id": "o-2", "product": "p-11", "qty": 1}`)},
		{"c-1003", 62 * time.Second, []byte(`{"id": "o-3", "product": "p-12", "qty": 3}`)},
		{"c-1001", 63 * time.Second, []byte(`{"id": "o-4", "product": "p-13", "qty": 5}`)},
		{"c-1009", 64 * time.Second, []byte(`{"id": "o-5", "product": "p-10", "qty": 1}`)}, // unknown customer
		{"c-1002", 65 * time.Second, []byte(`{"id": "o-6", "product": "p-99", "qty": 2}`)}, // unknown product
		{"c-1004", 66 * time.Second, []byte(`{"id": "o-7", "product": "p-12", "qty": 1}`)}, // deleted customer
		{"c-1003", 67 * time.Second, []byte(`{"id": "o-8", "product": "p-10", "qty": 4}`)},
		{"c-1001", 68 * time.Second, []byte(`{"id": "o-9", "product": "p-11", "qty": 1}`)},
		{"c-1002", 69 * time.Second, []byte(`{"id": "o-10", "product": "p-13", "qty": 10}`)},
	}
}

// records returns sample records as records to produce.
func records(sample []sampleRecord) []kafkaio.Record {
	recs := make([]kafkaio.Record, len(sample))
	for i, s := range sample {
		recs[i] = kafkaio.Record{Key: []byte(s.key), Value: s.value, Timestamp: sampleStart.Add(s.at)}
	}
	return recs
}
