package main

import (
	"time"

	"github.com/weirstream/weir/examples/internal/kafkaio"
)

// sampleStart is when the sample's first window starts: a minute
// boundary, so that with the default 1m windows the sample's minutes are
// windows.
var sampleStart = time.Date(2026, time.January, 15, 9, 0, 0, 0, time.UTC)

// sampleLogin is one record of the sample: at is the event time after
// sampleStart, value the raw record value.
type sampleLogin struct {
	user  string
	at    time.Duration
	value string
}

const (
	fail = `{"ok": false, "ip": "203.0.113.7"}`
	ok   = `{"ok": true, "ip": "198.51.100.2"}`
)

func ms(m, s int) time.Duration { return time.Duration(m)*time.Minute + time.Duration(s)*time.Second }

// sampleLogins are the logins the embedded run produces, in order. With
// the default flags (threshold 5, 1m windows, 10s grace) they give two
// alerts: alice in 9:00-9:01 (7 failures), dave in 9:01-9:02 (5, two of
// them out of order within the grace period). bob (4 failures) and carol
// (3 and 3, in two windows) stay below the threshold; erin's fifth failure
// arrives after her window closed and is dropped as late; mallory's
// record is not JSON and is skipped. Every record is at most 10 s older
// than the newest before it, except erin's late one, so which records
// are late does not depend on how users share partitions. Only failed
// logins reach the count, so only they move its stream time and close
// windows (as in Kafka Streams): the last logins, failures at 9:03:30
// (one per user, below the threshold), close every window of the sample.
func sampleLogins() []sampleLogin {
	s := []sampleLogin{
		{"alice", ms(0, 2), fail},
		{"alice", ms(0, 5), fail},
		{"alice", ms(0, 9), fail},
		{"bob", ms(0, 10), fail},
		{"alice", ms(0, 14), fail},
		{"alice", ms(0, 20), fail},
		{"bob", ms(0, 25), fail},
		{"carol", ms(0, 30), fail},
		{"alice", ms(0, 31), fail},
		{"bob", ms(0, 40), fail},
		{"alice", ms(0, 44), fail},
		{"carol", ms(0, 45), fail},
		{"alice", ms(0, 50), ok},
		{"bob", ms(0, 55), fail},
		{"carol", ms(0, 58), fail},
		{"carol", ms(1, 1), fail},
		{"carol", ms(1, 3), fail},
		{"dave", ms(1, 5), fail},
		{"erin", ms(1, 10), fail},
		{"dave", ms(1, 12), fail},
		{"carol", ms(1, 20), fail},
		{"erin", ms(1, 20), fail},
		{"frank", ms(1, 25), ok},
		{"dave", ms(1, 30), fail},
		{"erin", ms(1, 30), fail},
		{"erin", ms(1, 40), fail},
		{"dave", ms(2, 3), fail},
		{"dave", ms(1, 58), fail}, // out of order, within grace
		{"dave", ms(1, 59), fail}, // out of order, within grace
		{"mallory", ms(2, 5), `{"ok": fals`},
		{"erin", ms(2, 20), fail}, // the count's stream time 9:02:20 closes 9:01-9:02
		{"erin", ms(1, 45), fail}, // late: dropped
	}
	for _, u := range []string{"alice", "bob", "carol", "dave", "erin", "frank"} {
		s = append(s, sampleLogin{u, ms(3, 30), fail})
	}
	return s
}

// sampleRecords returns the sample as records to produce.
func sampleRecords() []kafkaio.Record {
	var recs []kafkaio.Record
	for _, l := range sampleLogins() {
		recs = append(recs, kafkaio.Record{Key: []byte(l.user), Value: []byte(l.value), Timestamp: sampleStart.Add(l.at)})
	}
	return recs
}
