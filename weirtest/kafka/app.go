package kafka

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/weirstream/weir"
)

// runningTimeout bounds WaitRunning.
const runningTimeout = 60 * time.Second

// WaitRunning waits, for at most 60 s, until app runs every task of its
// assignment (its State is StateRunning: joined, restored, processing) and
// fails the test otherwise, or at once when app stops.
func WaitRunning(t testing.TB, app *weir.App) {
	t.Helper()
	Eventually(t, runningTimeout, pollInterval, func() (bool, string) {
		select {
		case <-app.Done():
			st, err := app.State()
			t.Fatalf("weirtest/kafka: the App stopped before it was running (%s: %v)", st, err)
		default:
		}
		st, err := app.State()
		if st == weir.StateFailed {
			t.Fatalf("weirtest/kafka: the App failed: %v", err)
		}
		return st == weir.StateRunning, "the App is " + st.String()
	})
}

// Run runs app in the background until the test ends, then stops it and
// fails the test if Run returned an error other than the stop's own. It
// returns once app is running (see [WaitRunning]).
func Run(t testing.TB, app *weir.App) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	go func() { stopped <- app.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-stopped; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("weirtest/kafka: the App's Run: %v", err)
		}
	})
	WaitRunning(t, app)
}
