package weir

import (
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/IBM/sarama"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/weirstream/weir/internal/console"
	"github.com/weirstream/weir/internal/metrics"
	"github.com/weirstream/weir/internal/task"
	"github.com/weirstream/weir/internal/topics"
)

// State is the lifecycle state of an App.
type State int

const (
	// StateCreated: New returned, Run not called.
	StateCreated State = iota
	// StateStarting: Run checks topics and joins the group.
	StateStarting
	// StateRestoring: some assigned task is restoring its stores.
	StateRestoring
	// StateRunning: every assigned task is restored and processing.
	StateRunning
	// StateRebalancing: a thread waits for the group to assign it tasks.
	StateRebalancing
	// StateStopping: Run's context ended; the App commits and leaves.
	StateStopping
	// StateStopped: Run returned without error.
	StateStopped
	// StateFailed: Run returned an error; App.State gives it.
	StateFailed
	// StateDegraded: running, but a thread's last transactions aborted
	// and none has committed since. /readyz fails while it lasts; past
	// Config.MaxConsecutiveAborts the thread fails and so does the App.
	StateDegraded
)

// String returns the state's name, as /healthz and weir_app_state show it.
func (s State) String() string {
	switch s {
	case StateCreated:
		return "created"
	case StateStarting:
		return "starting"
	case StateRestoring:
		return "restoring"
	case StateRunning:
		return "running"
	case StateRebalancing:
		return "rebalancing"
	case StateStopping:
		return "stopping"
	case StateStopped:
		return "stopped"
	case StateFailed:
		return "failed"
	case StateDegraded:
		return "degraded"
	}
	return fmt.Sprintf("State(%d)", int(s))
}

// lifecycle is the part of the App's state that Run sets.
type lifecycle struct {
	mu    sync.Mutex
	state State // created, starting, stopping, stopped or failed
	cause error
}

func (l *lifecycle) set(s State, cause error) {
	l.mu.Lock()
	l.state, l.cause = s, cause
	l.mu.Unlock()
}

// State returns the App's state, and the error that stopped it when the
// state is StateFailed. While Run runs, the state is derived from the
// threads, first match wins: degraded while a thread's transactions abort
// without one committing, restoring while any task restores, rebalancing
// while a thread has no assignment, has not yet taken up every task of it,
// or waits for tasks that a cooperative hand-over withholds until the
// follow-up rebalance (a new instance's first assignment usually has none:
// ready then would let a rollout move on before it runs anything), else
// running. Warm-up tasks do not count: an instance warming up state for
// tasks that stay with their owners meanwhile is running. Safe for
// concurrent use.
func (a *App) State() (State, error) {
	a.life.mu.Lock()
	s, cause := a.life.state, a.life.cause
	a.life.mu.Unlock()
	if s != StateStarting {
		return s, cause
	}
	a.mu.Lock()
	threads := a.threads
	a.mu.Unlock()
	if len(threads) == 0 {
		return StateStarting, nil
	}
	var rebalancing, restoring, degraded bool
	for _, th := range threads {
		rebalancing = rebalancing || !th.Assigned()
		degraded = degraded || th.Aborting()
		for _, t := range th.Tasks() {
			restoring = restoring || t.Restoring
		}
	}
	state := StateRunning
	switch {
	case degraded:
		state = StateDegraded
	case restoring:
		state = StateRestoring
	case rebalancing:
		state = StateRebalancing
	}
	return state, nil
}

// Handler serves the App's health and metrics over HTTP, and its
// operator console:
//
//   - /metrics: Prometheus metrics, when Config.Metrics is also a
//     prometheus.Gatherer (the default registry is);
//   - /healthz: 200 while the App has not failed or stopped, else 503;
//   - /readyz: 200 when every assigned task is restored and processing
//     (StateRunning), else 503;
//   - /weir/: the operator console and its JSON API under /weir/api/,
//     when Config.Console.Enabled is set (404 otherwise), for requests
//     Config.Authorizer allows ConsoleResource (403 otherwise); see
//     [ConsoleConfig] and docs/console.md.
//
// The body of /healthz and /readyz is the state's name and, when
// Config.Authorizer allows the request HealthDetails, the cause of a
// failure, which may name broker addresses, the SASL user or quote a
// processor's error.
//
// Mount it at the root of the server listening at Config.AdvertisedAddr,
// next to ktable.Handler (whose longer pattern, ktable.HandlerPath, takes
// its requests): the other instances' consoles ask for this one's figures
// there.
func (a *App) Handler() http.Handler {
	mux := http.NewServeMux()
	if g, ok := a.cfg.Metrics.(prometheus.Gatherer); ok {
		mux.Handle("/metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{}))
	}
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, req *http.Request) {
		s, cause := a.State()
		a.writeState(w, req, s, cause, s != StateFailed && s != StateStopped)
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, req *http.Request) {
		s, cause := a.State()
		a.writeState(w, req, s, cause, s == StateRunning)
	})
	mux.HandleFunc(console.Path, a.serveConsole)
	return mux
}

func (a *App) writeState(w http.ResponseWriter, req *http.Request, s State, cause error, ok bool) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if !ok {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	fmt.Fprintln(w, s)
	if cause != nil && a.Authorize(req, HealthDetails) == nil {
		fmt.Fprintln(w, cause)
	}
}

// snapshot is the App's metrics.Source: the state the scrape-time gauges
// are computed from.
func (a *App) snapshot() metrics.Snapshot {
	s, _ := a.State()
	snap := metrics.Snapshot{State: s.String()}
	a.mu.Lock()
	threads, local, admin, lay := a.threads, a.local, a.admin, a.layout
	a.mu.Unlock()
	retention := a.retentions(admin, lay)
	for _, th := range threads {
		busy, idle, blocked := th.Time()
		snap.Threads = append(snap.Threads, metrics.Thread{Thread: th.Index(), Busy: busy, Idle: idle, Backpressured: blocked})
		seen := map[task.TP]bool{}
		for _, t := range th.Tasks() {
			state := "running"
			if t.Restoring {
				state = "restoring"
			}
			snap.Tasks = append(snap.Tasks, metrics.Task{Thread: t.Thread, ID: t.ID, State: state, StreamTime: t.StreamTime})
			for _, p := range t.Partitions {
				seen[task.TP{Topic: p.Topic, Partition: p.Partition}] = true
				snap.Partitions = append(snap.Partitions, metrics.Partition{
					Topic: p.Topic, Partition: p.Partition, LogEnd: p.LogEnd, Position: p.Position,
					Committed: p.Committed, OldestUnread: p.OldestUnread, Retention: retention[p.Topic],
				})
			}
			for _, r := range t.Restores {
				snap.Restores = append(snap.Restores, metrics.Restore{Store: r.Store, Partition: r.Partition, Remaining: r.Remaining})
			}
		}
		// Partitions claimed whose task has not published yet.
		for _, p := range th.Claimed() {
			if seen[task.TP{Topic: p.Topic, Partition: p.Partition}] {
				continue
			}
			snap.Partitions = append(snap.Partitions, metrics.Partition{
				Topic: p.Topic, Partition: p.Partition, LogEnd: p.LogEnd, Position: p.Position,
				Committed: p.Committed, OldestUnread: p.OldestUnread, Retention: retention[p.Topic],
			})
		}
	}
	if local != nil {
		for store, size := range local.Sizes() {
			snap.Stores = append(snap.Stores, metrics.Store{Store: store, Bytes: size})
		}
	}
	return snap
}

// retentionRefresh is how often the input topics' retention.ms is read.
const retentionRefresh = 5 * time.Minute

// retentions returns the input topics' retention, read through the admin
// client at most every retentionRefresh.
func (a *App) retentions(admin sarama.ClusterAdmin, lay *topics.Layout) map[string]time.Duration {
	a.retMu.Lock()
	defer a.retMu.Unlock()
	if admin == nil || lay == nil || time.Since(a.retRead) < retentionRefresh && a.ret != nil {
		return a.ret
	}
	a.retRead = time.Now()
	ret := map[string]time.Duration{}
	for _, topic := range lay.AllTopics() {
		entries, err := admin.DescribeConfig(topics.ConfigResource(topic))
		if err != nil {
			continue
		}
		for _, e := range entries {
			if e.Name == "retention.ms" {
				var ms int64
				if _, err := fmt.Sscan(e.Value, &ms); err == nil && ms > 0 {
					ret[topic] = time.Duration(ms) * time.Millisecond
				}
			}
		}
	}
	a.ret = ret
	return ret
}
