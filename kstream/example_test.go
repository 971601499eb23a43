package kstream_test

import (
	"fmt"
	"strings"
	"time"

	"github.com/weirstream/weir/kstream"
	"github.com/weirstream/weir/serde"
	"github.com/weirstream/weir/weirtest"
)

// A stream of login results: keep the failures, change their value and
// write them to a topic.
// The example runs on weirtest, which needs no broker.
func ExampleStream() {
	b := kstream.NewBuilder()
	b.Stream("logins", "logins", serde.String(), serde.String()).
		Filter(func(user, result string) bool { return result == "failed" }).
		MapValues(func(result string) string { return "alert: " + result }).
		To("alerts", serde.String(), serde.String())

	d, err := weirtest.New(b, weirtest.Config{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer d.Close()
	in := weirtest.Input(d, "logins", serde.String(), serde.String())
	for i, l := range []struct{ user, result string }{{"ann", "ok"}, {"bob", "failed"}, {"ann", "failed"}} {
		if err := in.Pipe(l.user, l.result, time.UnixMilli(int64(i))); err != nil {
			fmt.Println(err)
			return
		}
	}
	alerts, err := weirtest.Output(d, "alerts", serde.String(), serde.String()).ReadAll()
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, a := range alerts {
		fmt.Printf("%s: %s\n", a.Key, a.Value)
	}
	// Output:
	// bob: alert: failed
	// ann: alert: failed
}

// Word count: split lines into words, group them by word through the
// repartition topic "<application id>-by-word-repartition" and count
// them in the store "counts". Every update of a count is emitted.
func ExampleGrouped_Count() {
	b := kstream.NewBuilder()
	b.Stream("lines", "text-input", serde.Bytes(), serde.String()).
		FlatMapValues(strings.Fields).
		GroupBy("by-word", func(_ []byte, word string) string { return word }, serde.String(), serde.String()).
		Count("counts").
		ToStream().
		To("word-counts", serde.String(), serde.Int64())

	d, err := weirtest.New(b, weirtest.Config{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer d.Close()
	if err := weirtest.Input(d, "text-input", serde.Bytes(), serde.String()).Pipe(nil, "to be or not to be", time.UnixMilli(0)); err != nil {
		fmt.Println(err)
		return
	}
	counts, err := weirtest.Output(d, "word-counts", serde.String(), serde.Int64()).ReadAll()
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, c := range counts {
		fmt.Println(c.Key, c.Value)
	}
	n, _, _ := weirtest.KeyValueStore(d, "counts", serde.String(), serde.Int64()).Get("be")
	fmt.Println("store: be =", n)
	// Output:
	// to 1
	// be 1
	// or 1
	// not 1
	// to 2
	// be 2
	// store: be = 2
}

// Failed logins per user in one-minute windows, with ten seconds of
// grace for records out of order: each window's final count is emitted
// once, when it closes, and only counts of 3 or more become alerts. The
// login at 0:30, arriving after stream time reached 1:10, is late and
// dropped. Only the failures reach the count, so only they move its
// stream time and close its windows: the successful logins close nothing.
func ExampleWindowedTable_Suppress() {
	w := kstream.Tumbling(time.Minute).Grace(10 * time.Second)
	b := kstream.NewBuilder()
	b.Stream("logins", "logins", serde.String(), serde.String()).
		Filter(func(user, result string) bool { return result == "failed" }).
		GroupByKey().
		WindowedBy(w).
		Count("failed-logins-per-minute").
		Suppress("failed-logins-final", kstream.UntilWindowCloses()).
		ToStream(kstream.WindowedKey).
		Filter(func(_ kstream.Windowed[string], n int64) bool { return n >= 3 }).
		MapValues(func(n int64) string { return fmt.Sprintf("%d failed logins", n) }).
		To("alerts", kstream.WindowedSerde(serde.String(), w.Size()), serde.String())

	d, err := weirtest.New(b, weirtest.Config{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer d.Close()
	in := weirtest.Input(d, "logins", serde.String(), serde.String())
	for _, l := range []struct {
		user, result string
		at           time.Duration
	}{
		{"ann", "failed", 5 * time.Second},
		{"bob", "failed", 10 * time.Second},
		{"ann", "failed", 20 * time.Second},
		{"ann", "ok", 25 * time.Second},
		{"ann", "failed", 65 * time.Second},
		{"ann", "failed", 55 * time.Second}, // out of order, within grace
		{"bob", "failed", 70 * time.Second}, // stream time 1:10 closes [0:00, 1:00)
		{"bob", "failed", 30 * time.Second}, // late
		{"bob", "failed", 80 * time.Second},
		{"bob", "failed", 90 * time.Second},
		{"ann", "failed", 130 * time.Second}, // closes [1:00, 2:00)
	} {
		if err := in.Pipe(l.user, l.result, time.Unix(0, 0).Add(l.at)); err != nil {
			fmt.Println(err)
			return
		}
	}
	alerts, err := weirtest.Output(d, "alerts", kstream.WindowedSerde(serde.String(), w.Size()), serde.String()).ReadAll()
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, a := range alerts {
		fmt.Printf("%s %s-%s: %s\n", a.Key.Key, a.Key.Start.Format("15:04"), a.Key.End.Format("15:04"), a.Value)
	}
	// Output:
	// ann 00:00-00:01: 3 failed logins
	// bob 00:01-00:02: 3 failed logins
}

// Clicks per page in one-minute windows with no grace: the click stamped
// 0:50 arrives after stream time reached 1:05, too late for its window,
// so the count drops it and LateTo keeps it, as it came, in a topic of
// its own for a later correction.
func ExampleWindowedGrouped_LateTo() {
	w := kstream.Tumbling(time.Minute)
	b := kstream.NewBuilder()
	b.Stream("clicks", "clicks", serde.String(), serde.String()).
		GroupByKey().
		WindowedBy(w).
		LateTo("late-clicks", serde.String()).
		Count("clicks-per-minute").
		ToStream(kstream.WindowedKey).
		To("click-counts", kstream.WindowedSerde(serde.String(), w.Size()), serde.Int64())

	d, err := weirtest.New(b, weirtest.Config{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer d.Close()
	in := weirtest.Input(d, "clicks", serde.String(), serde.String())
	for _, c := range []struct {
		page, user string
		at         time.Duration
	}{
		{"/home", "ann", 10 * time.Second},
		{"/home", "bob", 65 * time.Second}, // closes [0:00, 1:00)
		{"/home", "cid", 50 * time.Second}, // late
	} {
		if err := in.Pipe(c.page, c.user, time.Unix(0, 0).Add(c.at)); err != nil {
			fmt.Println(err)
			return
		}
	}
	late, err := weirtest.Output(d, "late-clicks", serde.String(), serde.String()).ReadAll()
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, r := range late {
		fmt.Printf("late: %s by %s at %s\n", r.Key, r.Value, r.Timestamp.UTC().Format("15:04:05"))
	}
	// Output:
	// late: /home by cid at 00:00:50
}
