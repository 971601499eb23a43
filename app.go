package weir

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/IBM/sarama"

	"github.com/weirstream/weir/internal/client"
	"github.com/weirstream/weir/internal/console"
	"github.com/weirstream/weir/internal/graph"
	"github.com/weirstream/weir/internal/local"
	"github.com/weirstream/weir/internal/metrics"
	"github.com/weirstream/weir/internal/statedir"
	"github.com/weirstream/weir/internal/stream"
	"github.com/weirstream/weir/internal/topics"
	"github.com/weirstream/weir/processor"
	"github.com/weirstream/weir/schema"
)

// Topology is what an App runs: a *processor.Topology, or a
// *kstream.Builder, which compiles to one. Build returns the validated
// topology. A Build that returns a topology not made by
// processor.NewTopology is refused by New.
type Topology interface {
	Build() (*processor.Topology, error)
}

// graphOf builds t and returns the runtime's form of it.
func graphOf(t Topology) (*graph.Graph, error) {
	pt, err := t.Build()
	if err != nil {
		return nil, err
	}
	g, err := graph.Of(pt)
	if err != nil {
		return nil, fmt.Errorf("weir: topology: %w", err)
	}
	return g, nil
}

// App is a running instance of a stream processing application: it joins
// the application's consumer group with Config.Threads stream threads and
// processes the tasks the group assigns it.
//
// Lifecycle: New validates everything it can without a broker; Run
// connects, checks topics, runs until its context ends and then shuts down
// cleanly; Close stops a running App and waits for it. Run may be called
// once.
type App struct {
	cfg      Config
	graph    *graph.Graph
	schemas  []schemaUse    // the registry serdes' schemas, checked at start
	registry *schema.Client // nil without Config.Registry

	mu      sync.Mutex
	ran     bool
	closed  bool
	cancel  context.CancelFunc
	stopped chan struct{}
	threads []*stream.Thread

	life      lifecycle
	ready     chan struct{} // closed when the App first runs
	readyOnce sync.Once
	metrics   *metrics.Metrics
	retMu     sync.Mutex
	ret       map[string]time.Duration // input topic -> retention
	retRead   time.Time

	// Set by Run.
	dir           *statedir.Dir
	admin         sarama.ClusterAdmin
	restoreClient sarama.Client
	layout        *topics.Layout
	local         *local.State
	hosts         *stream.Hosts    // where the group's tasks run (AdvertisedAddr)
	standbys      *stream.Standbys // the instance's standby copies; nil without
	kclient       sarama.Client    // the admin's client, under mu

	console *console.Console // the operator console; nil while Config.Console is off
}

// New validates the topology and the configuration and returns an App
// ready to Run. Every problem is reported at once.
func New(t Topology, cfg Config) (*App, error) {
	var errs []error
	if t == nil {
		errs = append(errs, errors.New("weir: nil topology"))
	}
	var g *graph.Graph
	if t != nil {
		var err error
		if g, err = graphOf(t); err != nil {
			errs = append(errs, err)
		}
	}
	if err := cfg.Validate(); err != nil {
		errs = append(errs, err)
	}
	var uses []schemaUse
	if g != nil {
		uses = schemaUses(cfg.ApplicationID, g)
		if len(uses) > 0 && cfg.Registry == (schema.Config{}) {
			errs = append(errs, fmt.Errorf("weir: Config.Registry: required: %s has a schema registry serde (subject %s)", uses[0].where(), uses[0].subject))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	a := &App{cfg: cfg.withDefaults(), graph: g, schemas: uses, stopped: make(chan struct{}), ready: make(chan struct{})}
	a.newConsole()
	if cfg.Security.TLS != nil {
		tc, err := cfg.Security.TLS.Load()
		if err != nil {
			return nil, fmt.Errorf("weir: Config.Security.TLS: %w", err)
		}
		a.cfg.tls = tc
	}
	if cfg.Registry != (schema.Config{}) {
		reg, err := schema.New(cfg.Registry)
		if err != nil {
			return nil, fmt.Errorf("weir: Config.Registry: %w", err)
		}
		a.registry = reg
	}
	m, err := metrics.New(a.cfg.Metrics, a.cfg.ApplicationID, metrics.SourceFunc(a.snapshot))
	if err != nil {
		return nil, fmt.Errorf("weir: registering metrics: %w", err)
	}
	a.metrics = m
	build := metrics.Build{Version: metrics.Version(), Guarantee: a.cfg.Guarantee.String(), ProcessID: a.processID}
	if err := a.cfg.Metrics.Register(metrics.NewBuildInfo(a.cfg.ApplicationID, build)); err != nil {
		return nil, fmt.Errorf("weir: registering metrics: %w", err)
	}
	if cfg.Metrics == nil { // the App's own registry: see Config.Metrics
		if err := metrics.RegisterRuntime(a.cfg.Metrics); err != nil {
			return nil, fmt.Errorf("weir: registering metrics: %w", err)
		}
	}
	return a, nil
}

// Run runs the application until ctx is done or a thread fails. On the way
// out it commits what was processed, closes the tasks, leaves the group
// (unless static membership is on) and releases the state directory. It
// returns nil after a clean stop, otherwise the first error.
//
// Before anything else (the state directory, a broker, a topic) Run checks
// and registers the topology's registry schemas (see Config.Registry); a
// refused schema is a [*SchemaError] and leaves everything as it was.
func (a *App) Run(ctx context.Context) error {
	a.mu.Lock()
	if a.ran || a.closed {
		a.mu.Unlock()
		return ErrClosed
	}
	a.ran = true
	ctx, cancel := context.WithCancel(ctx)
	a.cancel = cancel
	a.mu.Unlock()
	a.life.set(StateStarting, nil)
	defer close(a.stopped)
	defer cancel()
	err := a.run(ctx, cancel)
	if err != nil {
		a.life.set(StateFailed, err)
	} else {
		a.life.set(StateStopped, nil)
	}
	return err
}

// Waits between attempts to reach the brokers at start (Net.StartupTimeout).
const (
	firstConnectWait = 200 * time.Millisecond
	maxConnectWait   = 10 * time.Second
)

// connect opens a client of the brokers, waiting for them as
// Net.StartupTimeout says. It returns nil and no error when ctx ended
// first.
func (a *App) connect(ctx context.Context, cfg *sarama.Config) (sarama.Client, error) {
	start, wait := time.Now(), firstConnectWait
	limit := a.cfg.Net.StartupTimeout
	for attempt := 1; ; attempt++ {
		kc, err := sarama.NewClient(a.cfg.Brokers, cfg)
		if err == nil {
			if attempt > 1 {
				a.cfg.Logger.Info("the brokers answer", "attempts", attempt, "waited", time.Since(start).Round(time.Millisecond))
			}
			return kc, nil
		}
		err = fmt.Errorf("weir: connecting to %v: %w", a.cfg.Brokers, diagnoseConnect(a.cfg.Brokers, cfg, a.cfg.Security.SASL, err))
		if errors.Is(err, ErrAuthentication) || errors.Is(err, ErrTLS) || limit < 0 || (limit > 0 && time.Since(start)+wait > limit) {
			return nil, err
		}
		a.cfg.Logger.Warn("no broker answers; waiting for one (Config.Net.StartupTimeout)",
			"brokers", a.cfg.Brokers, "attempt", attempt, "retry_in", wait, "error", err)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, nil
		case <-t.C:
		}
		wait = min(2*wait, maxConnectWait)
	}
}

// Ready returns a channel that is closed the first time the App runs:
// every thread has its assignment and every assigned task is restored and
// processing (State reports StateRunning). It stays open when Run fails or
// stops before that, so wait on it together with Done or a timeout:
//
//	select {
//	case <-app.Ready():
//	case <-app.Done():
//		return app.State()
//	}
func (a *App) Ready() <-chan struct{} { return a.ready }

// Done returns a channel that is closed when Run has returned.
func (a *App) Done() <-chan struct{} { return a.stopped }

// noteReady closes the ready channel once the App runs; threads call it
// whenever they publish a change of their tasks.
func (a *App) noteReady() {
	select {
	case <-a.ready:
		return
	default:
	}
	if s, _ := a.State(); s == StateRunning {
		a.readyOnce.Do(func() { close(a.ready) })
	}
}

// Close stops a running App, waits until Run has returned, and returns
// the error Run returned (the one State reports with StateFailed): nil
// when the App stopped cleanly, or never ran. It is safe to call more
// than once, and before or without Run.
func (a *App) Close() error {
	a.mu.Lock()
	a.closed = true
	ran, cancel := a.ran, a.cancel
	a.mu.Unlock()
	if !ran {
		return nil
	}
	cancel()
	<-a.stopped
	if s, cause := a.State(); s == StateFailed {
		return cause
	}
	return nil
}

// Leave stops the App as Close does (returning its error too), then
// removes its static members (Config.StaticMembership or StaticMemberID)
// from the consumer group (KIP-345's member removal), so that its tasks move to the other
// instances at once instead of after Consumer.SessionTimeout: how to stop
// an instance that is not coming back, as in a scale-down. Without static
// membership it is Close: a dynamic member leaves the group as it stops.
// ctx bounds the removal. A member the group no longer knows (it timed
// out already) is not an error.
func (a *App) Leave(ctx context.Context) error {
	a.mu.Lock()
	var ids []string
	for _, th := range a.threads {
		if id := th.InstanceID(); id != "" {
			ids = append(ids, id)
		}
	}
	a.mu.Unlock()
	// A failed Run still leaves its members in the group: remove them too.
	closeErr := a.Close()
	if len(ids) == 0 {
		return closeErr
	}
	cfg := client.Base(a.cfg.clientOptions(), a.cfg.ClientID+"-admin")
	done := make(chan error, 1)
	go func() {
		admin, err := sarama.NewClusterAdmin(a.cfg.Brokers, cfg)
		if err != nil {
			done <- fmt.Errorf("weir: leaving the group: %w", err)
			return
		}
		defer admin.Close()
		resp, err := admin.RemoveMemberFromConsumerGroup(a.cfg.ApplicationID, ids)
		if err == nil {
			for _, m := range resp.Members {
				if m.Err != sarama.ErrNoError && m.Err != sarama.ErrUnknownMemberId {
					id := m.MemberId
					if m.GroupInstanceId != nil {
						id = *m.GroupInstanceId
					}
					err = errors.Join(err, fmt.Errorf("member %s: %w", id, m.Err))
				}
			}
		}
		if err != nil {
			err = fmt.Errorf("weir: removing members %v from group %s: %w", ids, a.cfg.ApplicationID, err)
		}
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil {
			a.cfg.Logger.Info("left the group", "application", a.cfg.ApplicationID, "members", ids)
		}
		return errors.Join(closeErr, err)
	case <-ctx.Done():
		return errors.Join(closeErr, fmt.Errorf("weir: removing members %v from group %s: %w", ids, a.cfg.ApplicationID, ctx.Err()))
	}
}

// processID returns the instance's process id for weir_build_info: ""
// until Run has opened the state directory, which holds it.
func (a *App) processID() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.dir == nil {
		return ""
	}
	return a.dir.ProcessID
}

// Describe returns the application's topology descriptor (see
// [Descriptor]), the one Run writes to its topology topic. Before Run has
// looked at the cluster, partition counts are 0 (unknown). The topology's
// text form is processor.Topology.Describe (kstream.Builder.Describe).
func (a *App) Describe() *Descriptor {
	a.mu.Lock()
	lay := a.layout
	a.mu.Unlock()
	return describe(&a.cfg, a.graph, lay)
}

// committedOffset reads the group's committed offset of one partition;
// found is false when it has none.
func committedOffset(admin sarama.ClusterAdmin, group, topic string, partition int32) (int64, bool, error) {
	resp, err := admin.ListConsumerGroupOffsets(group, map[string][]int32{topic: {partition}})
	if err != nil {
		return 0, false, err
	}
	b := resp.GetBlock(topic, partition)
	if b == nil {
		return 0, false, nil
	}
	if b.Err != sarama.ErrNoError {
		return 0, false, b.Err
	}
	return b.Offset, b.Offset >= 0, nil
}
