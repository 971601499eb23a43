package weir

import (
	"context"
	"log/slog"
	"net/http"
	"slices"
	"time"

	"github.com/IBM/sarama"

	"github.com/weirstream/weir/internal/assign"
	"github.com/weirstream/weir/internal/console"
	"github.com/weirstream/weir/internal/graph"
	"github.com/weirstream/weir/internal/metrics"
	"github.com/weirstream/weir/internal/stream"
	"github.com/weirstream/weir/internal/topics"
)

// ConsoleConfig configures the operator console: a web page, served by
// [App.Handler] at /weir/ on every instance, that shows the running
// application (its topology, instances and tasks, lag, commits and
// failures, state) and refreshes itself every few seconds, with the JSON
// API it reads under /weir/api/. Its HTML, CSS and JavaScript are
// embedded in weir: the page loads nothing from anywhere else and works
// offline. docs/console.md describes the pages and the API.
//
// The console is off by default. Every request to it passes
// Config.Authorizer with [ConsoleResource] (403 when refused, and always
// without an authorizer), as store queries do; the text of logged errors
// is shown only to a request also allowed [HealthDetails].
//
// One instance's console shows every instance of the group that
// advertises an address (Config.AdvertisedAddr): it asks each for its
// figures at GET /weir/api/instance on that address, where the
// application serves App.Handler (next to ktable.Handler), so every
// instance should turn the console on and serve App.Handler there.
type ConsoleConfig struct {
	// Enabled turns the console on. Default false: /weir/ answers 404.
	Enabled bool

	// SampleInterval is how often the console samples the instance's
	// figures (its rates, lag sparklines and restores' progress come from
	// the samples; rates span three intervals). Default 5 s; at least
	// 100 ms.
	SampleInterval time.Duration

	// HistorySamples is how many samples the console keeps, in a ring:
	// the history its sparklines show is HistorySamples ×
	// SampleInterval long. Default 120 (10 minutes at the default
	// interval); at most 10,000. A sample holds the lag of each input
	// partition the instance reads and a few counters per task and
	// thread, a few KiB.
	HistorySamples int

	// MaxErrors is how many of the warnings and errors the instance
	// logged the console keeps (newest first on its page): weir's own
	// lines, which carry coordinates and no record data, not those
	// processors log through processor.Context.Logger. Default 50; at
	// most 1,000. Each is kept with at most 16 attributes, cut at 256
	// bytes each.
	MaxErrors int

	// PeerTimeout bounds each request for another instance's figures;
	// an instance that has not answered by then is shown as unreachable.
	// Default 2 s.
	PeerTimeout time.Duration

	// PeerClient is the HTTP client that asks the other instances, for
	// a transport of your own (a client certificate for mutual TLS, a
	// proxy); redirects are not followed, whatever its CheckRedirect
	// says. Default: a plain client with PeerTimeout.
	PeerClient *http.Client

	// PeerHTTPS asks the other instances over HTTPS (PeerClient's
	// transport must trust their certificates) instead of plain HTTP.
	PeerHTTPS bool

	// PeerCredentials, when set, is called on every request to another
	// instance, to add what that instance's Config.Authorizer identifies
	// this one by (a bearer token, a signature); an error from it shows
	// that instance's figures as unavailable. It is what
	// ktable.View.WithCredentials is for store lookups.
	PeerCredentials func(*http.Request) error
}

// Console defaults and bounds.
const (
	defaultConsoleSampleInterval = 5 * time.Second
	defaultConsoleHistory        = 120
	defaultConsoleMaxErrors      = 50
	defaultConsolePeerTimeout    = 2 * time.Second
	minConsoleSampleInterval     = 100 * time.Millisecond
	maxConsoleHistory            = 10_000
	maxConsoleErrors             = 1_000
)

// ConsoleResource is the Resource of every request to the operator
// console (see [ConsoleConfig]): its page, its assets and its API,
// including the requests one instance's console sends another for its
// figures.
const ConsoleResource Resource = "console"

// validate checks the console's settings.
func (cc *ConsoleConfig) validate(bad complaint) {
	if cc.SampleInterval < 0 || cc.SampleInterval > 0 && cc.SampleInterval < minConsoleSampleInterval {
		bad("Console.SampleInterval", "%v is below %v", cc.SampleInterval, minConsoleSampleInterval)
	}
	if cc.HistorySamples < 0 || cc.HistorySamples > maxConsoleHistory {
		bad("Console.HistorySamples", "%d: want 0 (the default) to %d", cc.HistorySamples, maxConsoleHistory)
	}
	if cc.MaxErrors < 0 || cc.MaxErrors > maxConsoleErrors {
		bad("Console.MaxErrors", "%d: want 0 (the default) to %d", cc.MaxErrors, maxConsoleErrors)
	}
	if cc.PeerTimeout < 0 {
		bad("Console.PeerTimeout", "negative (%v)", cc.PeerTimeout)
	}
}

// withDefaults returns cc with every zero field set to its default.
func (cc ConsoleConfig) withDefaults() ConsoleConfig {
	orDefault(&cc.SampleInterval, defaultConsoleSampleInterval)
	orDefault(&cc.HistorySamples, defaultConsoleHistory)
	orDefault(&cc.MaxErrors, defaultConsoleMaxErrors)
	orDefault(&cc.PeerTimeout, defaultConsolePeerTimeout)
	return cc
}

// newConsole sets up the console of a, when it is on: its logger then
// also records its warnings and errors for the console's page.
func (a *App) newConsole() {
	cc := a.cfg.Console
	if !cc.Enabled {
		return
	}
	events := console.NewEvents(cc.MaxErrors)
	logger := a.cfg.Logger
	a.cfg.Logger = slog.New(events.Capture(logger.Handler()))
	if a.cfg.Stores.Badger.Logger == logger {
		a.cfg.Stores.Badger.Logger = a.cfg.Logger
	}
	scheme := "http"
	if cc.PeerHTTPS {
		scheme = "https"
	}
	a.console = console.New(consoleBackend{a: a, version: metrics.Version()}, console.Config{
		SampleInterval: cc.SampleInterval, HistorySamples: cc.HistorySamples, MaxErrors: cc.MaxErrors,
		PeerTimeout: cc.PeerTimeout, PeerClient: cc.PeerClient, PeerScheme: scheme, PeerCredentials: cc.PeerCredentials,
	}, events)
}

// serveConsole serves the console at /weir/: 404 while it is off.
func (a *App) serveConsole(w http.ResponseWriter, req *http.Request) {
	if a.console == nil {
		http.NotFound(w, req)
		return
	}
	a.console.ServeHTTP(w, req)
}

// startConsole runs the console's sampler until ctx ends; the cleanup
// added to undo stops it and waits for it, before what it reads (the
// admin client) is closed.
func (a *App) startConsole(ctx context.Context, undo *cleanups) {
	if a.console == nil {
		return
	}
	ctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		a.console.Run(ctx)
	}()
	undo.add(func() {
		stop()
		<-done
	})
}

// consoleBackend is the App as the console reads it.
type consoleBackend struct {
	a       *App
	version string // weir's module version, read once
}

func (b consoleBackend) Authorize(req *http.Request) error {
	return b.a.Authorize(req, ConsoleResource)
}

func (b consoleBackend) Details(req *http.Request) bool {
	return b.a.Authorize(req, HealthDetails) == nil
}

// Raw gathers what the instance knows of itself now.
func (b consoleBackend) Raw() console.Raw {
	a := b.a
	state, _ := a.State()
	a.mu.Lock()
	threads, st, admin, lay, hosts, sbs, dir := a.threads, a.local, a.admin, a.layout, a.hosts, a.standbys, a.dir
	a.mu.Unlock()
	raw := console.Raw{
		Time: time.Now(), Addr: a.cfg.AdvertisedAddr, ApplicationID: a.cfg.ApplicationID, State: state.String(),
		Version: b.version, Guarantee: a.cfg.Guarantee.String(), Figures: a.metrics.Read(),
	}
	if dir != nil {
		raw.ProcessID = dir.ProcessID
	}
	retention := a.retentions(admin, lay)
	for _, th := range threads {
		busy, idle, blocked := th.Time()
		raw.Threads = append(raw.Threads, console.RawThread{Thread: th.Index(), Busy: busy, Idle: idle, Backpressured: blocked})
		for _, t := range th.Tasks() {
			id, err := assign.ParseTaskID(t.ID)
			if err != nil {
				continue
			}
			rt := console.RawTask{ID: t.ID, Subtopology: id.Subtopology, Partition: id.Partition, Thread: t.Thread,
				Restoring: t.Restoring, StreamTime: t.StreamTime}
			for _, p := range t.Partitions {
				rt.Partitions = append(rt.Partitions, rawPartition(p, retention))
			}
			for _, r := range t.Restores {
				rt.Restores = append(rt.Restores, console.RawRestore(r))
			}
			raw.Tasks = append(raw.Tasks, rt)
		}
		for _, p := range th.Claimed() {
			raw.Claimed = append(raw.Claimed, rawPartition(p, retention))
		}
	}
	if sbs != nil {
		for _, k := range sbs.Kept() {
			raw.Standbys = append(raw.Standbys, console.RawStandby{ID: k.ID.String(), Subtopology: k.ID.Subtopology,
				Partition: k.ID.Partition, Warmup: k.Warmup, Lags: k.Lags})
		}
	}
	if st != nil {
		for _, cp := range st.Checkpoints() {
			raw.Checkpoints = append(raw.Checkpoints, console.RawCheckpoint{Store: cp.Store, Partition: cp.Partition, Offset: cp.Offset})
		}
		raw.StoreBytes = st.Sizes()
	}
	if hosts != nil {
		raw.Generation, raw.RebalancedAt = hosts.Since()
	}
	return raw
}

// rawPartition converts an input partition's status.
func rawPartition(p stream.PartitionStatus, retention map[string]time.Duration) console.RawPartition {
	return console.RawPartition{Topic: p.Topic, Partition: p.Partition, LogEnd: p.LogEnd, Position: p.Position,
		Committed: p.Committed, OldestUnread: p.OldestUnread, Retention: retention[p.Topic], QueuedRecords: p.QueuedRecords}
}

// Topology describes the topology as the console draws it.
func (b consoleBackend) Topology() console.Topology {
	a := b.a
	a.mu.Lock()
	lay := a.layout
	a.mu.Unlock()
	app := a.cfg.ApplicationID
	top := console.Topology{ApplicationID: app, Subtopologies: []console.Subtopology{}, Stores: []console.TopoStore{}}
	subs := a.graph.Subtopologies()
	if lay != nil {
		subs = lay.Subs
	}
	storeSub := map[string]int{}
	for i, s := range subs {
		cs := console.Subtopology{ID: s.ID}
		if lay != nil && i < len(lay.Partitions) {
			cs.Partitions = lay.Partitions[i]
		}
		for _, n := range s.Nodes {
			cn := console.Node{Name: n.Name, Kind: n.Kind.String(), Internal: n.Internal, Dynamic: n.Dynamic, Stores: slices.Clone(n.Stores)}
			if n.Kind != graph.KindProcessor && !n.Dynamic {
				cn.Topic = topics.TopicName(app, n)
			}
			for _, c := range n.Children {
				cn.Children = append(cn.Children, c.Name)
			}
			for _, st := range n.Stores {
				if a.graph.Global(st) == nil {
					storeSub[st] = s.ID
				}
			}
			cs.Nodes = append(cs.Nodes, cn)
		}
		top.Subtopologies = append(top.Subtopologies, cs)
	}
	users := map[string][]string{}
	for _, s := range a.graph.Stores {
		for _, u := range s.Users {
			users[s.Name] = append(users[s.Name], u.Name)
		}
	}
	for _, s := range a.graph.Globals {
		for _, u := range s.Users {
			users[s.Name] = append(users[s.Name], u.Name)
		}
	}
	for _, sd := range describe(&a.cfg, a.graph, lay).Stores {
		sub, ok := storeSub[sd.Name]
		if !ok || sd.Type == "global" {
			sub = -1
		}
		top.Stores = append(top.Stores, console.TopoStore{Name: sd.Name, Type: sd.Type, Changelog: sd.Changelog,
			Subtopology: sub, Partitions: sd.Partitions, Users: users[sd.Name]})
	}
	return top
}

// Hosts returns the group's host map.
func (b consoleBackend) Hosts() ([]console.Host, int32) {
	b.a.mu.Lock()
	hosts := b.a.hosts
	b.a.mu.Unlock()
	if hosts == nil {
		return nil, 0
	}
	hs, gen := hosts.Get()
	out := make([]console.Host, 0, len(hs))
	for _, h := range hs {
		ch := console.Host{Addr: h.Addr}
		for _, id := range h.Active {
			ch.Active = append(ch.Active, id.String())
		}
		for _, id := range h.Standby {
			ch.Standby = append(ch.Standby, id.String())
		}
		out = append(out, ch)
	}
	return out, gen
}

// LogEnds looks up the end offsets of tps through the App's admin
// client. The lookups run on a goroutine of their own, which ctx does not
// stop: sarama's requests cannot be cancelled, and are bounded by
// Net.RequestTimeout. LogEnds returns what was found when ctx ends.
func (b consoleBackend) LogEnds(ctx context.Context, tps []console.TopicPartition) map[console.TopicPartition]int64 {
	b.a.mu.Lock()
	kc := b.a.kclient
	b.a.mu.Unlock()
	if kc == nil {
		return nil
	}
	type end struct {
		tp  console.TopicPartition
		off int64
	}
	found := make(chan end, len(tps))
	go func() {
		defer close(found)
		for _, tp := range tps {
			if ctx.Err() != nil || kc.Closed() {
				return
			}
			if off, err := kc.GetOffset(tp.Topic, tp.Partition, sarama.OffsetNewest); err == nil {
				found <- end{tp, off}
			}
		}
	}()
	out := map[console.TopicPartition]int64{}
	for {
		select {
		case e, ok := <-found:
			if !ok {
				return out
			}
			out[e.tp] = e.off
		case <-ctx.Done():
			return out
		}
	}
}
