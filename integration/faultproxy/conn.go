package faultproxy

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"
)

const (
	dialTimeout = 10 * time.Second
	// drainTimeout bounds how long the upstream side of a connection whose
	// client side is closed waits for the responses still due.
	drainTimeout = time.Minute
)

// conn is one proxied connection. Two goroutines serve it: run reads
// requests from the client, applies the rules and writes them upstream;
// readResponses reads responses from upstream and writes them to the
// client, matching each to the head of pending. Only run writes upstream
// and only readResponses writes to the client.
type conn struct {
	p          *Proxy
	client     net.Conn
	upstream   string        // the broker its route forwards to
	clientGone chan struct{} // closed when the client side is

	// clientID is the client id of the connection's last request;
	// identified says there was one. Both are guarded by p.mu.
	clientID   string
	identified bool

	mu           sync.Mutex
	up           net.Conn // nil while dialing
	upClosed     bool
	clientClosed bool
	pending      []due // the responses the upstream owes, in request order
	requestsDone bool  // run stopped reading requests: pending only shrinks
	// cutOnDrain defers a Cut rule's cut until the responses to the
	// requests before it were delivered, so that the cut hits the request
	// the rule fired on and not earlier ones in flight.
	cutOnDrain bool
}

// due is a response the upstream owes and what to do with it.
type due struct {
	corrID   int32
	hold     time.Duration // DelayResponse
	drop     bool          // DropResponse: discard, then cut after cutAfter
	cutAfter time.Duration
	swallow  bool // the second response of a Duplicate
}

func newConn(p *Proxy, client net.Conn, upstream string) *conn {
	return &conn{p: p, client: client, upstream: upstream, clientGone: make(chan struct{})}
}

func (c *conn) run() {
	defer c.p.wg.Done()
	defer c.p.forget(c)
	dialer := net.Dialer{Timeout: dialTimeout}
	up, err := dialer.DialContext(c.p.ctx, "tcp", c.upstream)
	if err != nil {
		if c.p.ctx.Err() == nil {
			c.cut(&Event{Action: Cut, Detail: "dial upstream: " + err.Error()})
		}
		c.closeClient()
		return
	}
	if !c.setUpstream(up) {
		return
	}
	responses := make(chan struct{})
	go func() {
		defer close(responses)
		c.readResponses()
	}()
	c.readRequests()
	<-responses
}

// setUpstream installs the dialed upstream connection unless the
// connection was closed while dialing.
func (c *conn) setUpstream(up net.Conn) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.upClosed || c.clientClosed || c.p.ctx.Err() != nil {
		up.Close()
		return false
	}
	c.up = up
	return true
}

func (c *conn) readRequests() {
	defer c.requestsEnded()
	r := bufio.NewReader(c.client)
	for {
		frame, err := readFrame(r)
		if err != nil {
			if fe := (*frameSizeError)(nil); errors.As(err, &fe) {
				c.cut(&Event{Action: Cut, Detail: "request " + fe.Error()})
			}
			return // the client closed, or was cut
		}
		h, err := parseRequest(frame[4:])
		if err != nil {
			c.cut(&Event{Action: Cut, Detail: err.Error()})
			return
		}
		v := c.p.decide(c, h)
		if v.refused != "" {
			c.cut(&Event{ClientID: h.clientID, API: h.api, CorrelationID: h.corrID, Action: Cut, Detail: v.refused})
			return
		}
		dues := []due{{corrID: h.corrID}}
		switch v.action {
		case Cut:
			c.mu.Lock()
			c.cutOnDrain = true
			c.mu.Unlock()
			return
		case DelayRequest:
			// Reading no further requests meanwhile keeps their order. The
			// wait ignores the client going away: the broker still gets the
			// request late, which is the point.
			if !c.sleep(v.delay, nil) {
				return
			}
		case DelayResponse:
			dues[0].hold = v.delay
		case DropResponse:
			dues[0].drop, dues[0].cutAfter = true, v.delay
		case Duplicate:
			dues = append(dues, due{corrID: h.corrID, swallow: true})
		}
		if !h.expectsResponse {
			dues = nil
		}
		if err := c.forward(frame, dues); err != nil {
			return
		}
		if v.action == DropResponse && !h.expectsResponse {
			c.cutLater(v.delay) // no response to drop: just cut
		}
	}
}

// forward registers the responses the request will get, then writes it
// upstream once per response owed (twice for Duplicate), or once if none.
func (c *conn) forward(frame []byte, dues []due) error {
	c.mu.Lock()
	c.pending = append(c.pending, dues...)
	c.mu.Unlock()
	for range max(len(dues), 1) {
		if _, err := c.up.Write(frame); err != nil {
			return err
		}
	}
	return nil
}

// requestsEnded closes the client side (for a Cut rule, once the responses
// due are delivered) and, once no response is due, the upstream side;
// until then readResponses drains it, for at most drainTimeout.
func (c *conn) requestsEnded() {
	c.mu.Lock()
	c.requestsDone = true
	idle := len(c.pending) == 0
	cut := c.cutOnDrain
	c.mu.Unlock()
	switch {
	case cut && idle:
		c.cut(nil) // decide logged the firing
	case !cut:
		c.closeClient()
	}
	if idle {
		c.closeUpstream()
	} else {
		_ = c.up.SetReadDeadline(time.Now().Add(drainTimeout))
	}
}

func (c *conn) readResponses() {
	defer c.closeUpstream()
	defer c.closeClient() // the broker closed: so does the client side
	r := bufio.NewReader(c.up)
	for {
		frame, err := readFrame(r)
		if err != nil {
			if fe := (*frameSizeError)(nil); errors.As(err, &fe) {
				c.cut(&Event{Action: Cut, Detail: "response " + fe.Error()})
			}
			return
		}
		d, last, ok := c.popPending()
		corrID := int32(-1)
		if len(frame) >= 8 {
			corrID = int32(binary.BigEndian.Uint32(frame[4:]))
		}
		if !ok || corrID != d.corrID {
			c.cut(&Event{Action: Cut, CorrelationID: corrID, Detail: fmt.Sprintf(
				"response with correlation id %d, expected %d (pending %t)", corrID, d.corrID, ok)})
			return
		}
		switch {
		case d.swallow:
		case d.drop:
			c.cutLater(d.cutAfter)
		case d.hold <= 0 || c.sleep(d.hold, c.clientGone):
			if _, err := c.client.Write(frame); err != nil {
				c.closeClient() // keep draining: held requests may follow
			}
		}
		if last {
			c.mu.Lock()
			cut := c.cutOnDrain
			c.mu.Unlock()
			if cut {
				c.cut(nil)
			}
			return
		}
	}
}

// popPending takes the head of pending; last says it was the final
// response the connection owes.
func (c *conn) popPending() (d due, last, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.pending) == 0 {
		return due{}, false, false
	}
	d, c.pending = c.pending[0], c.pending[1:]
	return d, c.requestsDone && len(c.pending) == 0, true
}

// sleep waits for d and reports whether it did, false when the proxy closes
// or stop (if not nil) is closed first.
func (c *conn) sleep(d time.Duration, stop <-chan struct{}) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-stop:
		return false
	case <-c.p.ctx.Done():
		return false
	}
}

// cutLater cuts the connection after d (0 = now) unless it closed first.
func (c *conn) cutLater(d time.Duration) {
	if d <= 0 {
		c.cut(nil)
		return
	}
	c.p.wg.Add(1) // run holds a count, so Close cannot have passed Wait
	go func() {
		defer c.p.wg.Done()
		if c.sleep(d, c.clientGone) {
			c.cut(nil)
		}
	}()
}

// cut closes the client side on the proxy's initiative, counting it and
// logging ev (if not nil) when it was still open. It holds p.mu while it
// closes, so a client that sees the close finds it in Stats and Log. (Lock
// order: p.mu before c.mu; nothing takes p.mu while holding c.mu.)
func (c *conn) cut(ev *Event) {
	c.p.mu.Lock()
	defer c.p.mu.Unlock()
	if !c.closeClient() {
		return
	}
	c.p.stats.Cut++
	if ev != nil {
		if ev.ClientID == "" {
			ev.ClientID = c.clientID
		}
		c.p.logLocked(*ev)
	}
}

// closeClient closes the client side and reports whether it was open.
func (c *conn) closeClient() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.clientClosed {
		return false
	}
	c.clientClosed = true
	close(c.clientGone)
	c.client.Close()
	return true
}

func (c *conn) closeUpstream() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.upClosed && c.up != nil {
		c.up.Close()
	}
	c.upClosed = true
}
