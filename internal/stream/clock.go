package stream

import (
	"sync"
	"time"
)

// threadClock splits a thread's wall time into busy (working: processing,
// committing, restoring bookkeeping) and idle (waiting for records), read
// at any time by the metrics. Flink's busy and idle time.
type threadClock struct {
	mu    sync.Mutex
	state int
	since time.Time
	spent [2]time.Duration // busy, idle
}

const (
	busyState = iota
	idleState
	stoppedState
)

func (c *threadClock) switchTo(state int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	if c.state < stoppedState && !c.since.IsZero() {
		c.spent[c.state] += now.Sub(c.since)
	}
	c.state, c.since = state, now
}

// read returns the busy and idle time so far, the current stretch
// included.
func (c *threadClock) read() (busy, idle time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	spent := c.spent
	if c.state < stoppedState && !c.since.IsZero() {
		spent[c.state] += time.Since(c.since)
	}
	return spent[busyState], spent[idleState]
}
