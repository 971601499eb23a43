package faultproxy

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/weirstream/weir/weirtest/kafka"
)

// This file holds the unit tests' harness: a fake upstream that speaks only
// Kafka's framing and a raw client. The fake parses headers itself rather
// than with the package's parser, so a parser bug cannot hide in both.

// seen is a request the fake upstream read.
type seen struct {
	api      APIKey
	corrID   int32
	clientID string
	at       time.Time
}

// fakeUpstream answers every request with a frame holding its correlation
// id and an echo of the whole request payload, except a Produce v3 with
// acks=0, which it does not answer.
type fakeUpstream struct {
	ln net.Listener
	wg sync.WaitGroup

	mu     sync.Mutex
	reqs   []seen
	conns  []net.Conn
	opened int
	ended  int
}

func startFake(t *testing.T) *fakeUpstream {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeUpstream{ln: ln}
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			f.mu.Lock()
			f.conns = append(f.conns, nc)
			f.opened++
			f.mu.Unlock()
			f.wg.Add(1)
			go f.serve(nc)
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		f.mu.Lock()
		for _, nc := range f.conns {
			nc.Close()
		}
		f.mu.Unlock()
		f.wg.Wait()
	})
	return f
}

func (f *fakeUpstream) serve(nc net.Conn) {
	defer f.wg.Done()
	defer func() {
		f.mu.Lock()
		f.ended++
		f.mu.Unlock()
	}()
	r := bufio.NewReader(nc)
	for {
		var size [4]byte
		if _, err := io.ReadFull(r, size[:]); err != nil {
			return
		}
		p := make([]byte, binary.BigEndian.Uint32(size[:]))
		if _, err := io.ReadFull(r, p); err != nil {
			return
		}
		api := APIKey(binary.BigEndian.Uint16(p))
		version := int16(binary.BigEndian.Uint16(p[2:]))
		corrID := int32(binary.BigEndian.Uint32(p[4:]))
		n := int(binary.BigEndian.Uint16(p[8:]))
		clientID := string(p[10 : 10+n])
		f.mu.Lock()
		f.reqs = append(f.reqs, seen{api, corrID, clientID, time.Now()})
		f.mu.Unlock()
		body := p[10+n:]
		if api == Produce && version == 3 && len(body) >= 4 && binary.BigEndian.Uint16(body[2:]) == 0 {
			continue // acks=0
		}
		resp := binary.BigEndian.AppendUint32(nil, uint32(4+len(p)))
		resp = binary.BigEndian.AppendUint32(resp, uint32(corrID))
		if _, err := nc.Write(append(resp, p...)); err != nil {
			return
		}
	}
}

func (f *fakeUpstream) addr() string { return f.ln.Addr().String() }

// requests returns a copy of what the fake read so far.
func (f *fakeUpstream) requests() []seen {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]seen(nil), f.reqs...)
}

// find returns the requests of clientID with corrID.
func (f *fakeUpstream) find(clientID string, corrID int32) []seen {
	var out []seen
	for _, s := range f.requests() {
		if s.clientID == clientID && s.corrID == corrID {
			out = append(out, s)
		}
	}
	return out
}

// allEnded reports whether every connection the fake accepted was closed
// by the proxy.
func (f *fakeUpstream) allEnded() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.opened > 0 && f.ended == f.opened
}

// setup starts a fake upstream and a proxy in front of it.
func setup(t *testing.T) (*fakeUpstream, *Proxy) {
	t.Helper()
	f := startFake(t)
	p, err := Start("127.0.0.1:0", f.addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, e := range p.Log() {
				t.Log(e)
			}
		}
		p.Close()
	})
	return f, p
}

// frame builds a request frame with a v1 header.
func frame(api APIKey, version int16, corrID int32, clientID string, body []byte) []byte {
	b := binary.BigEndian.AppendUint32(nil, 0)
	b = binary.BigEndian.AppendUint16(b, uint16(api))
	b = binary.BigEndian.AppendUint16(b, uint16(version))
	b = binary.BigEndian.AppendUint32(b, uint32(corrID))
	b = binary.BigEndian.AppendUint16(b, uint16(len(clientID)))
	b = append(b, clientID...)
	b = append(b, body...)
	binary.BigEndian.PutUint32(b, uint32(len(b)-4))
	return b
}

// client is a raw Kafka-framed connection to the proxy.
type client struct {
	t  *testing.T
	id string
	nc net.Conn
	r  *bufio.Reader

	mu   sync.Mutex
	sent map[int32][]byte // request payloads by correlation id, for the echo
}

func dial(t *testing.T, addr, clientID string) *client {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	return &client{t: t, id: clientID, nc: nc, r: bufio.NewReader(nc), sent: make(map[int32][]byte)}
}

// send writes a request of type api with an empty body.
func (c *client) send(api APIKey, corrID int32) error {
	return c.sendFrame(frame(api, 0, corrID, c.id, nil))
}

func (c *client) sendFrame(f []byte) error {
	c.mu.Lock()
	c.sent[int32(binary.BigEndian.Uint32(f[8:]))] = f[4:]
	c.mu.Unlock()
	_, err := c.nc.Write(f)
	return err
}

// recv reads one response: its correlation id and echoed request payload.
func (c *client) recv() (int32, []byte, error) {
	c.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	var size [4]byte
	if _, err := io.ReadFull(c.r, size[:]); err != nil {
		return 0, nil, err
	}
	p := make([]byte, binary.BigEndian.Uint32(size[:]))
	if _, err := io.ReadFull(c.r, p); err != nil {
		return 0, nil, err
	}
	return int32(binary.BigEndian.Uint32(p)), p[4:], nil
}

// expect reads the next response and fails unless it answers corrID with
// the echo of its request.
func (c *client) expect(corrID int32) {
	c.t.Helper()
	got, echo, err := c.recv()
	if err != nil {
		c.t.Fatalf("client %q: waiting for the response to %d: %v", c.id, corrID, err)
	}
	c.mu.Lock()
	want := c.sent[corrID]
	c.mu.Unlock()
	if got != corrID || !bytes.Equal(echo, want) {
		c.t.Fatalf("client %q: got response %d (echo %q), want %d (echo %q)", c.id, got, echo, corrID, want)
	}
}

// expectClosed fails unless the proxy closes the connection without
// sending another response.
func (c *client) expectClosed() {
	c.t.Helper()
	corrID, _, err := c.recv()
	switch {
	case err == nil:
		c.t.Fatalf("client %q: got response %d, want the connection closed", c.id, corrID)
	case errors.Is(err, os.ErrDeadlineExceeded):
		c.t.Fatalf("client %q: connection still open after 10s", c.id)
	}
}

// eventually polls cond every few milliseconds for up to 10s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	kafka.Eventually(t, 10*time.Second, 2*time.Millisecond, func() (bool, string) { return cond(), "waiting for " + what })
}
