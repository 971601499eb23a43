package kafka

import (
	"testing"
	"time"
)

// Eventually calls cond until it reports true, waiting interval between
// calls (50 ms when interval ≤ 0), and fails the test with cond's last
// message when timeout has passed without success. cond is always called at
// least once, and once more at or after the deadline, so a condition that
// becomes true just in time passes. cond runs on the caller's goroutine: it
// may call t.Fatal to give up early (for example on an error that waiting
// cannot fix). This is the only way tests wait: never a fixed sleep.
func Eventually(t testing.TB, timeout, interval time.Duration, cond func() (bool, string)) {
	t.Helper()
	if interval <= 0 {
		interval = pollInterval
	}
	deadline := time.Now().Add(timeout)
	// Since Go 1.23 Reset needs no draining; the first value is set below.
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		ok, msg := cond()
		if ok {
			return
		}
		left := time.Until(deadline)
		if left <= 0 {
			t.Fatalf("weirtest/kafka: condition not met within %v: %s", timeout, msg)
			return
		}
		timer.Reset(min(interval, left))
		<-timer.C
	}
}
