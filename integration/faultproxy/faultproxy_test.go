package faultproxy

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"maps"
	"math/rand/v2"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestPassThroughPipelined sends many pipelined requests on several
// connections while rules that never fire are added and removed: every
// response must come back in order with its own echo, and the upstream must
// see each connection's requests in order.
func TestPassThroughPipelined(t *testing.T) {
	t.Parallel()
	f, p := setup(t)
	const conns, perConn = 4, 500
	apis := []APIKey{Produce, Fetch, Metadata, Heartbeat, EndTxn}

	stop := make(chan struct{})
	var churn sync.WaitGroup
	churn.Add(1)
	go func() { // rules come and go concurrently with the traffic
		defer churn.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			id := p.Add(Rule{ClientID: "nobody", Action: Cut})
			p.Remove(id)
		}
	}()

	var wg sync.WaitGroup
	for i := range conns {
		c := dial(t, p.Addr(), fmt.Sprintf("pipe-%d", i))
		wg.Add(2)
		go func() {
			defer wg.Done()
			for n := range perConn {
				body := bytes.Repeat([]byte{byte(n)}, n%300)
				if err := c.sendFrame(frame(apis[n%len(apis)], 1, int32(n), c.id, body)); err != nil {
					t.Errorf("send: %v", err)
					return
				}
			}
		}()
		go func() {
			defer wg.Done()
			for n := range perConn {
				got, echo, err := c.recv()
				if err != nil {
					t.Errorf("client %s: response %d: %v", c.id, n, err)
					return
				}
				c.mu.Lock()
				want := c.sent[int32(n)]
				c.mu.Unlock()
				if got != int32(n) || !bytes.Equal(echo, want) {
					t.Errorf("client %s: response %d has correlation id %d", c.id, n, got)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	churn.Wait()

	next := map[string]int32{}
	for _, s := range f.requests() {
		if s.corrID != next[s.clientID] {
			t.Fatalf("upstream saw %s's request %d, want %d", s.clientID, s.corrID, next[s.clientID])
		}
		next[s.clientID]++
	}
	st := p.Stats()
	total := 0
	for _, n := range st.Requests {
		total += n
	}
	if total != conns*perConn || st.Requests[Produce] != conns*perConn/len(apis) || st.Accepted != conns || st.Cut != 0 {
		t.Fatalf("stats %+v, want %d requests (%d Produce), %d accepted, 0 cut", st, conns*perConn, conns*perConn/len(apis), conns)
	}
}

// TestDelayRequest holds EndTxn: it reaches the upstream late, a later
// request stays behind it, and a held request is still delivered after its
// client closed the connection or the proxy cut it, whose upstream side
// then closes.
func TestDelayRequest(t *testing.T) {
	t.Parallel()
	f, p := setup(t)
	const delay = 200 * time.Millisecond
	p.Add(Rule{APIs: []APIKey{EndTxn}, Action: DelayRequest, Delay: delay})
	c := dial(t, p.Addr(), "txn-1")

	start := time.Now()
	c.send(EndTxn, 1)
	c.send(Heartbeat, 2)
	c.expect(1)
	if d := time.Since(start); d < delay {
		t.Fatalf("EndTxn answered after %v, want at least %v", d, delay)
	}
	c.expect(2)
	reqs := f.requests()
	if len(reqs) != 2 || reqs[0].api != EndTxn || reqs[1].api != Heartbeat {
		t.Fatalf("upstream saw %+v, want EndTxn then Heartbeat", reqs)
	}
	if d := reqs[0].at.Sub(start); d < delay {
		t.Fatalf("upstream got EndTxn after %v, want at least %v", d, delay)
	}

	c.send(EndTxn, 3)
	c.nc.Close()
	closed := time.Now()
	eventually(t, "the held EndTxn at the upstream", func() bool { return len(f.find("txn-1", 3)) == 1 })
	if at := f.find("txn-1", 3)[0].at; at.Before(closed) {
		t.Fatalf("upstream got the held EndTxn %v before the client closed", closed.Sub(at))
	}
	eventually(t, "the upstream connection closed", f.allEnded)

	// The same when the proxy cuts the connection during the hold.
	c = dial(t, p.Addr(), "txn-2")
	c.send(EndTxn, 4)
	eventually(t, "the EndTxn held", func() bool { return p.Stats().Requests[EndTxn] == 3 })
	p.CutAll("txn-2")
	cut := time.Now()
	c.expectClosed()
	eventually(t, "the held EndTxn at the upstream after the cut", func() bool { return len(f.find("txn-2", 4)) == 1 })
	if at := f.find("txn-2", 4)[0].at; at.Before(cut) {
		t.Fatalf("upstream got the held EndTxn %v before the cut", cut.Sub(at))
	}
	eventually(t, "the upstream connection closed", f.allEnded)
}

// TestDelayResponse holds Fetch's response and the later ones behind it,
// while the requests reach the upstream at once.
func TestDelayResponse(t *testing.T) {
	t.Parallel()
	f, p := setup(t)
	const delay = 200 * time.Millisecond
	p.Add(Rule{APIs: []APIKey{Fetch}, Action: DelayResponse, Delay: delay})
	c := dial(t, p.Addr(), "consumer")

	start := time.Now()
	c.send(Fetch, 1)
	c.send(Metadata, 2)
	eventually(t, "both requests at the upstream", func() bool { return len(f.requests()) == 2 })
	c.expect(1)
	if d := time.Since(start); d < delay {
		t.Fatalf("Fetch answered after %v, want at least %v", d, delay)
	}
	c.expect(2)
	if d := f.requests()[1].at.Sub(start); d >= delay {
		t.Fatalf("Metadata reached the upstream after %v, want it forwarded at once", d)
	}
}

// TestDropResponse forwards EndTxn, discards its response and cuts the
// connection on both sides, at once or after Rule.Delay.
func TestDropResponse(t *testing.T) {
	t.Parallel()
	t.Run("at once", func(t *testing.T) {
		t.Parallel()
		f, p := setup(t)
		p.Add(Rule{APIs: []APIKey{EndTxn}, Action: DropResponse})
		c := dial(t, p.Addr(), "txn")
		c.send(Heartbeat, 1)
		c.send(EndTxn, 2)
		c.expect(1)
		c.expectClosed()
		if len(f.find("txn", 2)) != 1 {
			t.Fatalf("upstream saw %+v, want the EndTxn", f.requests())
		}
		eventually(t, "the upstream connection closed", f.allEnded)
		if st := p.Stats(); st.Cut != 1 || st.Fired[DropResponse] != 1 {
			t.Fatalf("stats %+v, want 1 cut and 1 DropResponse", st)
		}
	})
	t.Run("after delay", func(t *testing.T) {
		t.Parallel()
		f, p := setup(t)
		const delay = 200 * time.Millisecond
		p.Add(Rule{APIs: []APIKey{EndTxn}, Action: DropResponse, Delay: delay})
		c := dial(t, p.Addr(), "txn")
		start := time.Now()
		c.send(EndTxn, 1)
		c.send(Heartbeat, 2)
		c.expect(2) // the connection still works meanwhile
		c.expectClosed()
		if d := time.Since(start); d < delay {
			t.Fatalf("cut after %v, want at least %v", d, delay)
		}
		if len(f.find("txn", 1)) != 1 {
			t.Fatalf("upstream saw %+v, want the EndTxn", f.requests())
		}
		eventually(t, "the upstream connection closed", f.allEnded)
	})
}

// TestDuplicate sends Produce twice upstream and answers the client once.
func TestDuplicate(t *testing.T) {
	t.Parallel()
	f, p := setup(t)
	p.Add(Rule{APIs: []APIKey{Produce}, Action: Duplicate})
	c := dial(t, p.Addr(), "producer")
	c.send(Produce, 7)
	c.send(Heartbeat, 8)
	c.expect(7)
	c.expect(8) // not a second 7
	if n := len(f.find("producer", 7)); n != 2 {
		t.Fatalf("upstream saw the Produce %d times, want 2", n)
	}
	if st := p.Stats(); st.Fired[Duplicate] != 1 || st.Requests[Produce] != 1 {
		t.Fatalf("stats %+v, want 1 Duplicate of 1 Produce", st)
	}
}

// TestCut closes the connection instead of forwarding Metadata.
func TestCut(t *testing.T) {
	t.Parallel()
	f, p := setup(t)
	p.Add(Rule{APIs: []APIKey{Metadata}, Action: Cut})
	c := dial(t, p.Addr(), "admin")
	c.send(Heartbeat, 1)
	c.send(Metadata, 2)
	c.expect(1)
	c.expectClosed()
	eventually(t, "the upstream connection closed", f.allEnded)
	if reqs := f.requests(); len(reqs) != 1 || reqs[0].api != Heartbeat {
		t.Fatalf("upstream saw %+v, want only the Heartbeat", reqs)
	}
	if st := p.Stats(); st.Cut != 1 || st.Fired[Cut] != 1 {
		t.Fatalf("stats %+v, want 1 cut", st)
	}
}

// TestPartition cuts and refuses the connections of one client id prefix
// for a while, leaves the others alone, and heals by itself.
func TestPartition(t *testing.T) {
	t.Parallel()
	f, p := setup(t)
	app, other := dial(t, p.Addr(), "app-1"), dial(t, p.Addr(), "other")
	app.send(Heartbeat, 1)
	other.send(Heartbeat, 1)
	app.expect(1)
	other.expect(1)

	const d = 500 * time.Millisecond
	p.Partition("app-", d)
	app.expectClosed()
	refused := dial(t, p.Addr(), "app-2")
	refused.send(Heartbeat, 1)
	refused.expectClosed()
	other.send(Heartbeat, 2) // the same connection, untouched
	other.expect(2)
	fresh := dial(t, p.Addr(), "other-2")
	fresh.send(Heartbeat, 1)
	fresh.expect(1)
	if len(f.find("app-2", 1)) != 0 {
		t.Fatal("the refused connection's request reached the upstream")
	}
	if st := p.Stats(); st.Cut != 2 {
		t.Fatalf("stats %+v, want the 2 app connections cut", st)
	}

	// Healing: a new connection of the prefix eventually gets through.
	for i := int32(1); ; i++ {
		c := dial(t, p.Addr(), "app-3")
		c.send(Heartbeat, i)
		if got, _, err := c.recv(); err == nil && got == i {
			break
		}
		if i > 1000 {
			t.Fatal("the partition did not heal")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestPartitionAll cuts every connection, including one that sent nothing,
// closes new ones at accept, and ends with Heal.
func TestPartitionAll(t *testing.T) {
	t.Parallel()
	_, p := setup(t)
	quiet := dial(t, p.Addr(), "quiet")
	eventually(t, "the connection accepted", func() bool { return p.Stats().Accepted == 1 })
	p.Partition("", time.Hour)
	quiet.expectClosed()
	dial(t, p.Addr(), "new").expectClosed() // without sending anything
	p.Heal()
	c := dial(t, p.Addr(), "new")
	c.send(Heartbeat, 1)
	c.expect(1)
}

// TestCutAll closes the matching live connections only and refuses nothing.
func TestCutAll(t *testing.T) {
	t.Parallel()
	_, p := setup(t)
	a, b := dial(t, p.Addr(), "a-1"), dial(t, p.Addr(), "b-1")
	a.send(Heartbeat, 1)
	b.send(Heartbeat, 1)
	a.expect(1)
	b.expect(1)
	p.CutAll("a")
	a.expectClosed()
	b.send(Heartbeat, 2)
	b.expect(2)
	again := dial(t, p.Addr(), "a-1")
	again.send(Heartbeat, 1)
	again.expect(1)
	p.CutAll("")
	again.expectClosed()
	b.expectClosed()
}

// TestFiring pins which matching requests fire a rule for each way of
// saying when, including that a seed makes Probability reproducible.
func TestFiring(t *testing.T) {
	t.Parallel()
	const n = 30
	seq := func(from, step int) (out []int32) {
		for i := from; i <= n; i += step {
			out = append(out, int32(i))
		}
		return out
	}
	var drawn []int32 // what Probability 0.3 with seed 7 must give
	rng := rand.New(rand.NewPCG(7, 0))
	for i := 1; i <= n; i++ {
		if rng.Float64() < 0.3 {
			drawn = append(drawn, int32(i))
		}
	}
	if len(drawn) == 0 || len(drawn) == n {
		t.Fatalf("a seed that draws %v tests nothing", drawn)
	}
	for _, tc := range []struct {
		name string
		rule Rule
		want []int32
	}{
		{"always", Rule{}, seq(1, 1)},
		{"once", Rule{Once: true}, []int32{1}},
		{"once after skip", Rule{Once: true, Skip: 3}, []int32{4}},
		{"every 3", Rule{Every: 3}, seq(3, 3)},
		{"every 3 after skip 2", Rule{Every: 3, Skip: 2}, seq(5, 3)},
		{"skip", Rule{Skip: 28}, []int32{29, 30}},
		{"probability", Rule{Probability: 0.3, Seed: 7}, drawn},
		{"other client", Rule{ClientID: "nobody"}, nil},
		{"other api", Rule{APIs: []APIKey{Fetch}}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, p := setup(t)
			tc.rule.Action = DelayResponse // with no delay: fires, changes nothing
			if tc.rule.APIs == nil {
				tc.rule.APIs = []APIKey{Heartbeat}
			}
			p.Add(tc.rule)
			c := dial(t, p.Addr(), "member")
			for i := int32(1); i <= n; i++ {
				c.send(Heartbeat, i)
				c.send(Metadata, -i) // never matches
			}
			for i := int32(1); i <= n; i++ {
				c.expect(i)
				c.expect(-i)
			}
			var got []int32
			for _, e := range p.Log() {
				got = append(got, e.CorrelationID)
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("fired on %v, want %v", got, tc.want)
			}
			if st := p.Stats(); st.Fired[DelayResponse] != len(tc.want) {
				t.Fatalf("stats %+v, want %d firings", st, len(tc.want))
			}
		})
	}
}

// TestRuleOrder checks that the first rule that matches and fires acts, and
// that Remove and Clear uninstall rules.
func TestRuleOrder(t *testing.T) {
	t.Parallel()
	_, p := setup(t)
	every2 := p.Add(Rule{APIs: []APIKey{Heartbeat}, Every: 2, Action: DelayResponse})
	all := p.Add(Rule{Action: DelayResponse})
	c := dial(t, p.Addr(), "member")
	roundTrip := func(from, to int32) {
		for i := from; i <= to; i++ {
			c.send(Heartbeat, i)
			c.expect(i)
		}
	}
	roundTrip(1, 4)
	p.Remove(every2)
	p.Remove(every2 + 100) // unknown: ignored
	roundTrip(5, 6)
	p.Clear()
	roundTrip(7, 8)
	var got []string
	for _, e := range p.Log() {
		got = append(got, fmt.Sprintf("%d:%d", e.CorrelationID, e.Rule))
	}
	want := []string{
		fmt.Sprintf("1:%d", all), fmt.Sprintf("2:%d", every2), fmt.Sprintf("3:%d", all), fmt.Sprintf("4:%d", every2),
		fmt.Sprintf("5:%d", all), fmt.Sprintf("6:%d", all),
	}
	if !slices.Equal(got, want) {
		t.Fatalf("fired %v, want %v (correlation id:rule)", got, want)
	}
}

// TestStatsAndLog checks the counters and the fields of logged events, and
// that the log keeps only the last 10,000 events.
func TestStatsAndLog(t *testing.T) {
	t.Parallel()
	_, p := setup(t)
	cut := p.Add(Rule{APIs: []APIKey{EndTxn}, ClientID: "txn-", Action: Cut})
	c := dial(t, p.Addr(), "txn-9")
	before := time.Now()
	c.send(Metadata, 1)
	c.send(Heartbeat, 2)
	c.send(Heartbeat, 3)
	c.send(EndTxn, 4)
	for i := int32(1); i <= 3; i++ {
		c.expect(i)
	}
	c.expectClosed()
	st := p.Stats()
	if want := map[APIKey]int{Metadata: 1, Heartbeat: 2, EndTxn: 1}; !maps.Equal(st.Requests, want) {
		t.Fatalf("requests %v, want %v", st.Requests, want)
	}
	if st.Accepted != 1 || st.Cut != 1 || !maps.Equal(st.Fired, map[Action]int{Cut: 1}) {
		t.Fatalf("stats %+v, want 1 accepted, 1 cut, fired Cut once", st)
	}
	log := p.Log()
	if len(log) != 1 {
		t.Fatalf("log %v, want one event", log)
	}
	e := log[0]
	if e.ClientID != "txn-9" || e.API != EndTxn || e.CorrelationID != 4 || e.Action != Cut || e.Rule != cut || e.Time.Before(before) {
		t.Fatalf("event %+v, want txn-9's EndTxn 4 cut by rule %d", e, cut)
	}
	if s := e.String(); !strings.Contains(s, "Cut") || !strings.Contains(s, "EndTxn corr=4") {
		t.Fatalf("event prints as %q", s)
	}

	p.mu.Lock()
	for i := range maxEvents + 5 {
		p.logLocked(Event{CorrelationID: int32(i)})
	}
	p.mu.Unlock()
	log = p.Log()
	if len(log) != maxEvents || log[0].CorrelationID != 5 || log[len(log)-1].CorrelationID != maxEvents+4 {
		t.Fatalf("log of %d events from %d to %d, want %d from 5 to %d",
			len(log), log[0].CorrelationID, log[len(log)-1].CorrelationID, maxEvents, maxEvents+4)
	}
}

// TestProduceAcksZero: a Produce with acks=0 gets no response, so the proxy
// must not wait for one, or it would take the next response for it.
func TestProduceAcksZero(t *testing.T) {
	t.Parallel()
	_, p := setup(t)
	c := dial(t, p.Addr(), "fire-and-forget")
	acks0 := binary.BigEndian.AppendUint16(binary.BigEndian.AppendUint16(nil, 0xffff), 0)
	c.sendFrame(frame(Produce, 3, 1, c.id, acks0))
	c.send(Heartbeat, 2)
	c.expect(2)
	if st := p.Stats(); st.Cut != 0 {
		t.Fatalf("stats %+v, want no cut", st)
	}
}

func TestParseProduceAcks(t *testing.T) {
	t.Parallel()
	i16 := func(v int16) []byte { return binary.BigEndian.AppendUint16(nil, uint16(v)) }
	cat := func(parts ...[]byte) []byte { return slices.Concat(parts...) }
	tagged := []byte{1, 5, 2, 0xaa, 0xbb} // one tagged field: tag 5, 2 bytes
	for _, tc := range []struct {
		name    string
		version int16
		rest    []byte // what follows the client id
		acks    int16
		ok      bool
	}{
		{"v2", 2, cat(i16(0), []byte{9, 9}), 0, true},
		{"v3 null transactional id", 3, cat(i16(-1), i16(0)), 0, true},
		{"v3 transactional id", 3, cat(i16(2), []byte("tx"), i16(-1)), -1, true},
		{"v9 null transactional id", 9, cat([]byte{0, 0}, i16(0)), 0, true},
		{"v9 tagged fields, transactional id", 9, cat(tagged, []byte{3}, []byte("tx"), i16(1)), 1, true},
		{"v3 truncated", 3, cat(i16(5), []byte("tx")), 0, false},
		{"v9 truncated tagged field", 9, []byte{1, 5, 9, 0}, 0, false},
		{"v2 empty", 2, nil, 0, false},
	} {
		acks, ok := produceAcks(tc.version, tc.rest)
		if acks != tc.acks || ok != tc.ok {
			t.Errorf("%s: acks %d ok %t, want %d %t", tc.name, acks, ok, tc.acks, tc.ok)
		}
	}
	h, err := parseRequest(frame(Produce, 3, 42, "p", cat(i16(-1), i16(0)))[4:])
	if err != nil || h.expectsResponse || h.corrID != 42 || h.clientID != "p" || h.api != Produce || h.version != 3 {
		t.Fatalf("parsed %+v, %v", h, err)
	}
	if _, err := parseRequest([]byte{0, 1, 0, 0, 0, 0, 0, 1, 0, 9, 'x'}); err == nil {
		t.Fatal("a client id longer than the frame parsed")
	}
}

func TestParseEndTxn(t *testing.T) {
	t.Parallel()
	i16 := func(v int16) []byte { return binary.BigEndian.AppendUint16(nil, uint16(v)) }
	cat := func(parts ...[]byte) []byte { return slices.Concat(parts...) }
	idEpoch := cat(binary.BigEndian.AppendUint64(nil, 7), i16(2))
	tagged := []byte{1, 5, 2, 0xaa, 0xbb} // one tagged field: tag 5, 2 bytes
	for _, tc := range []struct {
		name      string
		version   int16
		rest      []byte // what follows the client id
		committed bool
		ok        bool
	}{
		{"v0 commit", 0, cat(i16(2), []byte("tx"), idEpoch, []byte{1}), true, true},
		{"v2 abort", 2, cat(i16(2), []byte("tx"), idEpoch, []byte{0}), false, true},
		{"v3 commit", 3, cat([]byte{0}, []byte{3}, []byte("tx"), idEpoch, []byte{1, 0}), true, true},
		{"v3 tagged fields, abort", 3, cat(tagged, []byte{3}, []byte("tx"), idEpoch, []byte{0, 0}), false, true},
		{"v0 truncated", 0, cat(i16(2), []byte("tx"), idEpoch), false, false},
		{"v3 id longer than the frame", 3, cat([]byte{0}, []byte{40}, []byte("tx")), false, false},
	} {
		committed, ok := endTxnCommitted(tc.version, tc.rest)
		if committed != tc.committed || ok != tc.ok {
			t.Errorf("%s: committed %t ok %t, want %t %t", tc.name, committed, ok, tc.committed, tc.ok)
		}
	}
}

// TestTxnEndRule fires a rule narrowed to aborts on the aborting EndTxn
// requests only, and leaves other request types to the rule's other
// conditions.
func TestTxnEndRule(t *testing.T) {
	t.Parallel()
	_, p := setup(t)
	body := func(commit bool) []byte {
		b := binary.BigEndian.AppendUint16(nil, 2)
		b = append(b, "tx"...)
		b = binary.BigEndian.AppendUint64(b, 7)
		b = binary.BigEndian.AppendUint16(b, 0)
		if commit {
			return append(b, 1)
		}
		return append(b, 0)
	}
	p.Add(Rule{APIs: []APIKey{EndTxn, Heartbeat}, TxnEnd: AbortTxnEnd, Action: DelayResponse})
	c := dial(t, p.Addr(), "txn")
	for i := int32(1); i <= 6; i++ {
		c.sendFrame(frame(EndTxn, 1, i, c.id, body(i%2 == 0)))
	}
	c.sendFrame(frame(EndTxn, 1, 7, c.id, []byte{0, 2})) // does not parse
	c.send(Heartbeat, 8)
	for i := int32(1); i <= 8; i++ {
		c.expect(i)
	}
	var got []int32
	for _, e := range p.Log() {
		got = append(got, e.CorrelationID)
	}
	if want := []int32{1, 3, 5, 8}; !slices.Equal(got, want) {
		t.Fatalf("fired on %v, want the aborts %v and the heartbeat", got, want)
	}
}

// TestOversizedFrame cuts a connection announcing a frame above
// MaxFrameBytes, with the reason in the log.
func TestOversizedFrame(t *testing.T) {
	t.Parallel()
	f, p := setup(t)
	c := dial(t, p.Addr(), "")
	c.nc.Write(binary.BigEndian.AppendUint32(nil, MaxFrameBytes+1))
	c.expectClosed()
	if log := p.Log(); len(log) != 1 || log[0].Action != Cut || !strings.Contains(log[0].Detail, "frame of") {
		t.Fatalf("log %v, want the oversized frame", log)
	}
	if len(f.requests()) != 0 {
		t.Fatal("upstream saw a request")
	}
}

// TestClose ends a proxy holding a request for an hour: Close returns
// promptly (its goroutines ended), the request is never delivered, and a
// second Close is harmless.
func TestClose(t *testing.T) {
	t.Parallel()
	f, p := setup(t)
	p.Add(Rule{APIs: []APIKey{EndTxn}, Action: DelayRequest, Delay: time.Hour})
	c := dial(t, p.Addr(), "txn")
	c.send(EndTxn, 1)
	eventually(t, "the EndTxn held", func() bool { return p.Stats().Requests[EndTxn] == 1 })
	closed := make(chan error)
	go func() { closed <- p.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return")
	}
	c.expectClosed()
	if err := p.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := net.Dial("tcp", p.Addr()); err == nil {
		t.Fatal("still listening after Close")
	}
	if len(f.requests()) != 0 {
		t.Fatal("the held request was delivered after Close")
	}
}

// TestRoutes: a proxy in front of a cluster forwards each listener to its
// own broker, and a rule added once acts on every route.
func TestRoutes(t *testing.T) {
	t.Parallel()
	f1, f2 := startFake(t), startFake(t)
	p, err := StartRoutes(Route{Listen: "127.0.0.1:0", Upstream: f1.addr()}, Route{Listen: "127.0.0.1:0", Upstream: f2.addr()})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	addrs := p.Addrs()
	if len(addrs) != 2 || addrs[0] != p.Addr() || addrs[0] == addrs[1] {
		t.Fatalf("Addrs = %v, want two listeners, the first Addr", addrs)
	}
	p.Add(Rule{APIs: []APIKey{Metadata}, Action: Cut})
	for i, f := range []*fakeUpstream{f1, f2} {
		c := dial(t, addrs[i], "admin")
		c.send(Heartbeat, 1)
		c.send(Metadata, 2)
		c.expect(1)
		c.expectClosed()
		if reqs := f.requests(); len(reqs) != 1 || reqs[0].api != Heartbeat {
			t.Fatalf("route %d: its broker saw %+v, want only the Heartbeat", i, reqs)
		}
	}
	if st := p.Stats(); st.Fired[Cut] != 2 || st.Accepted != 2 {
		t.Fatalf("stats %+v, want 2 connections accepted and cut by the one rule", st)
	}
}
