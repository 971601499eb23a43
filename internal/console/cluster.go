package console

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/weirstream/weir/internal/hostport"
)

// Cluster returns every instance of the group's host map with its
// figures: this instance's its own, the others' as they answer
// GET /weir/api/instance, asked in parallel, each within PeerTimeout. An
// instance that does not answer is listed with why. This instance is
// listed first, even when it advertises no address. A view is reused for
// a second, for every caller; details adds the events' error texts (the
// other instances' only as far as their authorizers gave them to this
// one).
func (c *Console) Cluster(ctx context.Context, details bool) *Cluster {
	cl := c.clusterView(ctx)
	out := *cl
	out.Members = make([]Member, len(cl.Members))
	for i, m := range cl.Members {
		out.Members[i] = m
		if m.Instance == nil {
			continue
		}
		in := *m.Instance
		in.Errors = slices.Clone(in.Errors)
		if !details {
			for j := range in.Errors {
				in.Errors[j].Error = ""
			}
		}
		out.Members[i].Instance = &in
	}
	return &out
}

// clusterView returns the last view when it is younger than clusterReuse,
// else a new one; its events carry their error texts.
func (c *Console) clusterView(ctx context.Context) *Cluster {
	c.clusterMu.Lock()
	defer c.clusterMu.Unlock()
	if c.cluster != nil && time.Since(time.UnixMilli(c.cluster.Time)) < clusterReuse {
		return c.cluster
	}
	// The view is shared: one caller going away must not cut the others'
	// answers short. Each request to an instance is bounded by PeerTimeout.
	ctx = context.WithoutCancel(ctx)
	self := c.Instance(true)
	hosts, gen := c.b.Hosts()
	cl := &Cluster{Self: self.Addr, Time: time.Now().UnixMilli(), Generation: gen}
	me := Member{Addr: self.Addr, Self: true, Status: "ok", Instance: self, Active: []string{}, Standby: []string{}}
	var others []Host
	for _, h := range hosts {
		if h.Addr == "" {
			continue
		}
		if h.Addr == self.Addr {
			me.Active, me.Standby = orNone(h.Active), orNone(h.Standby)
			continue
		}
		others = append(others, h)
	}
	slices.SortFunc(others, func(a, b Host) int { return strings.Compare(a.Addr, b.Addr) })
	cl.Members = append(cl.Members, me)
	members := make([]Member, len(others))
	sem := make(chan struct{}, peerConcurrency)
	var wg sync.WaitGroup
	for i, h := range others {
		members[i] = Member{Addr: h.Addr, Active: orNone(h.Active), Standby: orNone(h.Standby)}
		if i >= maxPeers {
			members[i].Status, members[i].Error = "error", fmt.Sprintf("not asked: the console asks at most %d other instances", maxPeers)
			continue
		}
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			members[i].Status, members[i].Instance, members[i].Error = c.ask(ctx, h.Addr)
		})
	}
	wg.Wait()
	cl.Members = append(cl.Members, members...)
	c.cluster = cl
	return cl
}

// orNone returns ids, or an empty list for nil.
func orNone(ids []string) []string {
	if ids == nil {
		return []string{}
	}
	return ids
}

// ask asks the instance at addr for its figures. addr comes from the
// group's assignment: it is checked to be a plain host:port, and the URL
// is built from its parts, so no member can make this instance send a
// request elsewhere than /weir/api/instance on some host; a redirect is
// not followed.
func (c *Console) ask(ctx context.Context, addr string) (status string, in *Instance, why string) {
	if err := hostport.Check(addr); err != nil {
		return "error", nil, fmt.Sprintf("its address is not host:port: %v", err)
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.PeerTimeout)
	defer cancel()
	u := url.URL{Scheme: c.cfg.PeerScheme, Host: addr, Path: InstancePath}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return "error", nil, err.Error()
	}
	req.Header.Set("Accept", "application/json")
	if c.cfg.PeerCredentials != nil {
		if err := c.cfg.PeerCredentials(req); err != nil {
			return "error", nil, fmt.Sprintf("adding credentials: %v", err)
		}
	}
	resp, err := c.client().Do(req)
	if err != nil {
		return "unreachable", nil, unreachable(err)
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusForbidden:
		return "refused", nil, "its authorizer refused this instance's request (HTTP 403)"
	case http.StatusNotFound:
		return "off", nil, "its console is off (HTTP 404)"
	default:
		return "error", nil, fmt.Sprintf("HTTP %d", resp.StatusCode)
	}
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxPeerAnswer+1))
	if err != nil {
		return "unreachable", nil, unreachable(err)
	}
	if len(raw) > maxPeerAnswer {
		return "error", nil, fmt.Sprintf("its answer is over %d bytes", maxPeerAnswer)
	}
	in = &Instance{}
	if err := json.Unmarshal(raw, in); err != nil {
		return "error", nil, fmt.Sprintf("not a console answer: %v", err)
	}
	return "ok", in, ""
}

// unreachable says why a request got no answer, briefly.
func unreachable(err error) string {
	if errors.Is(err, context.DeadlineExceeded) {
		return "no answer within the peer timeout"
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	return err.Error()
}

// client returns the client that asks the other instances: PeerClient
// following no redirect, or a plain one.
func (c *Console) client() *http.Client {
	cl := http.Client{Timeout: c.cfg.PeerTimeout}
	if c.cfg.PeerClient != nil {
		cl = *c.cfg.PeerClient
	}
	cl.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &cl
}
