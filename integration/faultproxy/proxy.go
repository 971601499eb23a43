package faultproxy

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"strings"
	"sync"
	"time"
)

// maxEvents bounds Proxy.Log.
const maxEvents = 10_000

// Proxy forwards TCP connections to one upstream broker, or each of its
// listeners to one broker of a cluster ([StartRoutes]), and injects the
// faults of its rules into all of them alike. All its methods are safe
// for concurrent use, with each other and with the traffic.
type Proxy struct {
	routes []route
	// ctx ends when Close is called; every wait of the proxy watches it.
	ctx       context.Context
	cancel    context.CancelFunc
	closeOnce sync.Once
	wg        sync.WaitGroup // the accept loop, connections, delayed cuts

	mu         sync.Mutex
	rules      []*rule
	lastID     RuleID
	conns      map[*conn]struct{}
	partitions []partition
	stats      Stats
	events     []Event // a ring of at most maxEvents, oldest at eventsHead once full
	eventsHead int
}

// partition refuses connections whose client id starts with prefix until
// the time until.
type partition struct {
	prefix string
	until  time.Time
}

// Stats counts what a Proxy saw and did since it started.
type Stats struct {
	// Requests counts the requests read, per type, whether forwarded or not.
	Requests map[APIKey]int
	// Fired counts rule firings per action.
	Fired map[Action]int
	// Accepted counts the client connections accepted.
	Accepted int
	// Cut counts the client connections the proxy closed on its own: by a
	// rule (Cut, DropResponse), a partition, CutAll, an oversized or
	// malformed frame, or a failed dial upstream. Connections closed by
	// their client or the broker, or by Close, are not counted.
	Cut int
}

// Event is one fault the proxy injected.
type Event struct {
	Time          time.Time
	ClientID      string
	API           APIKey // the request's type; 0 (Produce) when no request was involved
	CorrelationID int32
	Action        Action
	// Rule is the rule that fired, or 0 when the proxy cut the connection
	// on its own (Action is then Cut and Detail says why).
	Rule   RuleID
	Detail string
}

// String formats the event for a test log.
func (e Event) String() string {
	s := fmt.Sprintf("%s %s client=%q", e.Time.Format("15:04:05.000"), e.Action, e.ClientID)
	if e.Rule != 0 || e.CorrelationID != 0 {
		s += fmt.Sprintf(" %s corr=%d", e.API, e.CorrelationID)
	}
	if e.Rule != 0 {
		s += fmt.Sprintf(" rule=%d", e.Rule)
	}
	if e.Detail != "" {
		s += " (" + e.Detail + ")"
	}
	return s
}

// route is one listener of the proxy and the broker it forwards to.
type route struct {
	ln       net.Listener
	upstream string
}

// Route is a listener of a proxy in front of a cluster: Listen, a
// host:port that one broker of the cluster advertises, forwards to
// Upstream, that broker's listener.
type Route struct {
	Listen, Upstream string
}

// Start listens on listen, a host:port such as "127.0.0.1:19096" (port 0
// picks a free one, see Addr), and forwards each accepted connection to a
// new connection to upstream. The proxy runs until Close.
func Start(listen, upstream string) (*Proxy, error) {
	return StartRoutes(Route{Listen: listen, Upstream: upstream})
}

// StartRoutes is Start for a cluster: one listener per route, each
// forwarding to its broker, every rule, partition and count shared. Each
// broker must advertise its route's Listen address, so that clients
// reach every broker through the proxy.
func StartRoutes(routes ...Route) (*Proxy, error) {
	if len(routes) == 0 {
		return nil, errors.New("faultproxy: no route")
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Proxy{
		ctx:    ctx,
		cancel: cancel,
		conns:  make(map[*conn]struct{}),
		stats:  Stats{Requests: make(map[APIKey]int), Fired: make(map[Action]int)},
	}
	for _, r := range routes {
		ln, err := net.Listen("tcp", r.Listen)
		if err != nil {
			for _, open := range p.routes {
				open.ln.Close()
			}
			cancel()
			return nil, fmt.Errorf("faultproxy: %w", err)
		}
		p.routes = append(p.routes, route{ln: ln, upstream: r.Upstream})
	}
	for _, r := range p.routes {
		p.wg.Add(1)
		go p.accept(r)
	}
	return p, nil
}

// Addr returns the address the proxy (its first route) listens on, its
// port resolved.
func (p *Proxy) Addr() string { return p.routes[0].ln.Addr().String() }

// Addrs returns the addresses of every route, in the order given.
func (p *Proxy) Addrs() []string {
	out := make([]string, len(p.routes))
	for i, r := range p.routes {
		out[i] = r.ln.Addr().String()
	}
	return out
}

// Close stops listening, closes every connection on both sides (held
// requests are not delivered) and returns once every goroutine of the
// proxy ended. Calling it again does nothing and returns nil.
func (p *Proxy) Close() error {
	var err error
	p.closeOnce.Do(func() {
		p.cancel()
		for _, r := range p.routes {
			if lerr := r.ln.Close(); lerr != nil && err == nil {
				err = fmt.Errorf("faultproxy: %w", lerr)
			}
		}
		p.mu.Lock()
		conns := maps.Clone(p.conns)
		p.mu.Unlock()
		for c := range conns {
			c.closeClient()
			c.closeUpstream()
		}
		p.wg.Wait()
	})
	return err
}

func (p *Proxy) accept(r route) {
	defer p.wg.Done()
	for {
		nc, err := r.ln.Accept()
		if err != nil {
			if p.ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return
			}
			// A transient error such as EMFILE: back off, as net/http does.
			select {
			case <-time.After(10 * time.Millisecond):
				continue
			case <-p.ctx.Done():
				return
			}
		}
		c := newConn(p, nc, r.upstream)
		p.mu.Lock()
		p.stats.Accepted++
		closing := p.ctx.Err() != nil
		refused := p.partitionLocked("")
		switch {
		case closing:
		case refused != nil:
			p.stats.Cut++
			p.logLocked(Event{Action: Cut, Detail: "partition of every connection, at accept"})
		default:
			p.conns[c] = struct{}{}
		}
		p.mu.Unlock()
		if closing || refused != nil {
			nc.Close()
			continue
		}
		p.wg.Add(1)
		go c.run()
	}
}

// Add installs a rule after the existing ones and returns its id. Its
// counters start at zero.
func (p *Proxy) Add(r Rule) RuleID {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.lastID++
	p.rules = append(p.rules, newRule(r, p.lastID))
	return p.lastID
}

// Remove uninstalls the rule id; an unknown id is ignored. A request the
// rule already fired on keeps its fault (a held request is still delivered
// late).
func (p *Proxy) Remove(id RuleID) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, r := range p.rules {
		if r.id == id {
			p.rules = append(p.rules[:i:i], p.rules[i+1:]...)
			return
		}
	}
}

// Clear uninstalls every rule.
func (p *Proxy) Clear() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.rules = nil
}

// Partition simulates a network partition of the clients whose client id
// starts with clientPrefix ("" = every client) for d: it cuts every live
// connection whose last request had such a client id ("" = every
// connection), and until d has passed it closes any connection as soon as
// it sends a request with such a client id, before forwarding it; with
// prefix "" new connections are closed at accept. The partition heals by
// itself after d (d <= 0 only cuts). Partitions add up; Heal ends them all.
func (p *Proxy) Partition(clientPrefix string, d time.Duration) {
	p.mu.Lock()
	if d > 0 {
		p.partitions = append(p.partitions, partition{prefix: clientPrefix, until: time.Now().Add(d)})
	}
	p.mu.Unlock()
	p.cutMatching(clientPrefix, fmt.Sprintf("partition of %q for %v", clientPrefix, d))
}

// Heal ends every partition now. Connections already cut stay closed.
func (p *Proxy) Heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.partitions = nil
}

// CutAll closes every live connection whose last request had a client id
// starting with clientPrefix; "" closes every connection, including those
// that have not sent a request yet. New connections are not affected.
func (p *Proxy) CutAll(clientPrefix string) {
	p.cutMatching(clientPrefix, fmt.Sprintf("CutAll(%q)", clientPrefix))
}

func (p *Proxy) cutMatching(prefix, detail string) {
	type victim struct {
		c        *conn
		clientID string
	}
	var victims []victim
	p.mu.Lock()
	for c := range p.conns {
		if prefix == "" || c.identified && strings.HasPrefix(c.clientID, prefix) {
			victims = append(victims, victim{c, c.clientID})
		}
	}
	p.mu.Unlock()
	for _, v := range victims {
		v.c.cut(&Event{ClientID: v.clientID, Action: Cut, Detail: detail})
	}
}

// Stats returns a copy of the proxy's counters.
func (p *Proxy) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.stats
	s.Requests = maps.Clone(s.Requests)
	s.Fired = maps.Clone(s.Fired)
	return s
}

// Log returns a copy of the last 10,000 events, oldest first.
func (p *Proxy) Log() []Event {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]Event, 0, len(p.events))
	out = append(out, p.events[p.eventsHead:]...)
	return append(out, p.events[:p.eventsHead]...)
}

func (p *Proxy) logLocked(e Event) {
	if e.Time.IsZero() {
		e.Time = time.Now()
	}
	if len(p.events) < maxEvents {
		p.events = append(p.events, e)
		return
	}
	p.events[p.eventsHead] = e
	p.eventsHead = (p.eventsHead + 1) % maxEvents
}

// partitionLocked returns the live partition refusing clientID, if any,
// forgetting partitions that have healed.
func (p *Proxy) partitionLocked(clientID string) *partition {
	now := time.Now()
	p.partitions = slices.DeleteFunc(p.partitions, func(pt partition) bool { return !now.Before(pt.until) })
	for i := range p.partitions {
		if strings.HasPrefix(clientID, p.partitions[i].prefix) {
			return &p.partitions[i]
		}
	}
	return nil
}

// verdict is what the proxy does with one request.
type verdict struct {
	action Action // 0 = forward as is
	delay  time.Duration
	// refused names the partition that closes the connection instead.
	refused string
}

// decide records a request of c and applies partitions and rules to it.
func (p *Proxy) decide(c *conn, h header) verdict {
	p.mu.Lock()
	defer p.mu.Unlock()
	c.clientID, c.identified = h.clientID, true
	p.stats.Requests[h.api]++
	if pt := p.partitionLocked(h.clientID); pt != nil {
		return verdict{refused: fmt.Sprintf("partition of %q", pt.prefix)}
	}
	for _, r := range p.rules {
		if !r.matches(h) || !r.fire() {
			continue
		}
		p.stats.Fired[r.Action]++
		p.logLocked(Event{ClientID: h.clientID, API: h.api, CorrelationID: h.corrID, Action: r.Action, Rule: r.id})
		return verdict{action: r.Action, delay: r.Delay}
	}
	return verdict{}
}

func (p *Proxy) forget(c *conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.conns, c)
}
