package weir

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/IBM/sarama"

	"github.com/weirstream/weir/internal/assign"
	"github.com/weirstream/weir/internal/client"
	"github.com/weirstream/weir/internal/global"
	"github.com/weirstream/weir/internal/graph"
	"github.com/weirstream/weir/internal/local"
	"github.com/weirstream/weir/internal/metrics"
	"github.com/weirstream/weir/internal/statedir"
	"github.com/weirstream/weir/internal/statelog"
	"github.com/weirstream/weir/internal/stream"
	"github.com/weirstream/weir/internal/task"
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

// run is Run once the App is marked as running.
func (a *App) run(ctx context.Context, cancel context.CancelFunc) error {
	go func() {
		<-ctx.Done()
		a.life.mu.Lock()
		if a.life.state == StateStarting {
			a.life.state = StateStopping
		}
		a.life.mu.Unlock()
	}()

	// The schemas first: a refused schema must leave everything as it was,
	// in Kafka and on disk, and the registry needs neither. They are
	// registered once the topology check has passed too.
	if len(a.schemas) > 0 {
		if err := checkSchemas(ctx, a.registry, a.schemas); err != nil {
			return err
		}
	}

	dir, err := statedir.Open(a.cfg.StateDir, a.cfg.ApplicationID)
	if err != nil {
		return err
	}
	a.mu.Lock() // processID reads it from scrapes
	a.dir = dir
	a.mu.Unlock()
	defer dir.Close()

	db, err := statelog.Open(filepath.Join(dir.Path, "state"), a.cfg.Stores.Badger)
	if errors.Is(err, ErrStateEncryptionKey) {
		return fmt.Errorf("weir: local state in %s: set Stores.EncryptionKey to the key it was written with, or delete the directory to restore the stores from their changelogs: %w", dir.Path, err)
	}
	if err != nil {
		return err
	}
	defer func() {
		if err := db.Close(); err != nil {
			a.cfg.Logger.Error("closing state", "error", err)
		}
	}()

	adminCfg := client.Base(a.cfg.clientOptions(), a.cfg.ClientID+"-admin")
	kc, err := a.connect(ctx, adminCfg)
	if err != nil || kc == nil {
		return err
	}
	admin, err := sarama.NewClusterAdminFromClient(kc)
	if err != nil {
		kc.Close()
		return fmt.Errorf("weir: admin client: %w", err)
	}
	a.mu.Lock() // Snapshot reads it from scrapes
	a.admin = admin
	a.mu.Unlock()
	defer admin.Close() // closes client too

	old, err := a.checkUpgrade(kc, admin, db, dir.Path)
	if err != nil {
		return err
	}
	tc := a.cfg.taskConfig()
	if old != nil {
		tc.ResetEpoch = old.ResetEpoch // what table updates carry (processor.EpochHeader)
	}
	lay, err := topics.Prepare(kc, admin, &topics.Options{ApplicationID: a.cfg.ApplicationID, ReplicationFactor: a.cfg.Topics.ReplicationFactor,
		DeadLetter: a.cfg.deadLetterTopics(), Logger: a.cfg.Logger,
		RawRestore: func(topic string) bool { return tc.PoliciesFor(topic).Deserialization.Fails() }}, a.graph)
	if err != nil {
		return publicError(err)
	}
	if err := a.recordUpgrade(admin, adminCfg, db, old, lay); err != nil {
		return err
	}
	if len(a.schemas) > 0 {
		if err := registerSchemas(ctx, a.registry, a.schemas); err != nil {
			return err
		}
		a.cfg.Logger.Info("schemas registered", "application", a.cfg.ApplicationID, "schemas", len(a.schemas))
	}
	a.mu.Lock()
	a.layout = lay
	a.mu.Unlock()
	storeSub := map[string]int{}
	for i, s := range a.layout.Subs {
		for _, n := range s.Nodes {
			for _, st := range n.Stores {
				storeSub[st] = i
			}
		}
	}
	var globalNames []string
	globals := map[string]statelog.Bytes{}
	for _, gs := range a.graph.Globals {
		globalNames = append(globalNames, gs.Name)
		globals[gs.Name] = global.Space(db, gs.Name)
	}
	local, err := local.New(db, a.cfg.Logger, a.cfg.Stores.CleanupDelay, storeSub, globalNames...)
	if err != nil {
		return err
	}
	a.mu.Lock()
	a.local = local
	a.mu.Unlock()
	// The cleaner stops as soon as the App starts to stop: tasks closed by
	// the shutdown are not moving away, and their state must stay.
	var cleaner sync.WaitGroup
	cleanCtx, stopCleaner := context.WithCancel(ctx)
	cleaner.Go(func() { a.local.Run(cleanCtx) })
	defer func() {
		stopCleaner()
		cleaner.Wait()
		local.Close() // before the database closes (deferred above)
	}()
	rc := client.Base(a.cfg.clientOptions(), a.cfg.ClientID+"-restore")
	rc.Consumer.IsolationLevel = sarama.ReadCommitted
	if a.restoreClient, err = sarama.NewClient(a.cfg.Brokers, rc); err != nil {
		return fmt.Errorf("weir: restore client: %w", err)
	}
	defer a.restoreClient.Close()
	a.cfg.Logger.Info("starting", "application", a.cfg.ApplicationID, "threads", a.cfg.Threads,
		"guarantee", a.cfg.Guarantee.String(), "process", a.dir.ProcessID)

	// The global stores are whole before any task starts, and stay
	// current while the threads run; their updater failing stops the
	// instance as a thread failing does.
	var updater sync.WaitGroup
	globalErr := make(chan error, 1)
	if len(a.graph.Globals) > 0 {
		u := global.New(db, a.restoreClient, a.cfg.Logger, a.graph.Globals, lay.DeleteRetention)
		if err := u.Restore(ctx); err != nil {
			return err
		}
		updater.Go(func() {
			if err := u.Run(ctx); err != nil {
				globalErr <- err
				cancel()
			}
		})
	}
	defer func() {
		cancel() // run is ending: so is the updater
		updater.Wait()
	}()

	in := &stream.Instance{
		Config: a.cfg.streamConfig(),
		Shared: &task.Shared{
			Config:        tc,
			Graph:         a.graph,
			Layout:        lay,
			Metrics:       a.metrics,
			DB:            db,
			Local:         local,
			RestoreClient: a.restoreClient,
			RestoreSlots:  make(chan struct{}, a.cfg.Stores.MaxConcurrentRestores),
			Cache:         a.cfg.cacheBudget(),
			Globals:       globals,
			CommittedOffset: func(topic string, partition int32) (int64, bool, error) {
				return committedOffset(admin, a.cfg.ApplicationID, topic, partition)
			},
		},
		ProcessID: dir.ProcessID,
		Admin:     admin,
		AdminMeta: kc,
		OnPublish: a.noteReady,
		Hosts:     &stream.Hosts{},
		Members:   dir,
	}
	a.mu.Lock()
	a.hosts = in.Hosts
	a.mu.Unlock()
	stateful := slices.ContainsFunc(lay.AssignSubtopologies(a.graph.Stores), func(s assign.Subtopology) bool { return s.Stateful })
	if a.cfg.StandbyReplicas > 0 || in.Warmups.Enabled() && stateful {
		// The runner stops before the local state and the database close
		// (deferred above), and after the threads: a thread's task
		// restoring meanwhile may still ask it to yield.
		prober := &stream.Prober{Client: in.Client, Admin: admin, Group: a.cfg.ApplicationID, ProcessID: dir.ProcessID}
		in.Standbys = stream.NewStandbys(in.Shared, a.cfg.Logger, stream.WarmupProbes{
			AcceptableLag: a.cfg.AcceptableRecoveryLag, Interval: a.cfg.ProbingRebalanceInterval, Probe: prober.Probe})
		a.mu.Lock()
		a.standbys = in.Standbys
		a.mu.Unlock()
		in.Shared.YieldStandby = in.Standbys.Yield
		var runner sync.WaitGroup
		standbyCtx, stopStandbys := context.WithCancel(ctx)
		runner.Go(func() { in.Standbys.Run(standbyCtx) })
		defer func() {
			stopStandbys()
			runner.Wait()
		}()
	}
	threads := make([]*stream.Thread, 0, a.cfg.Threads)
	for i := range a.cfg.Threads {
		th, err := stream.New(in, i, ctx)
		if err != nil {
			for _, t := range threads {
				t.Abandon()
			}
			return err
		}
		threads = append(threads, th)
	}
	a.mu.Lock()
	a.threads = threads
	a.mu.Unlock()
	errc := make(chan error, len(threads))
	for _, th := range threads {
		go func() { errc <- publicError(th.Run()) }()
	}
	var first error
	for range threads {
		if err := <-errc; err != nil && first == nil {
			first = err
			cancel() // one failed thread stops the instance
		}
	}
	select {
	case err := <-globalErr:
		if first == nil {
			first = err
		}
	default:
	}
	a.cfg.Logger.Info("stopped", "application", a.cfg.ApplicationID, "error", first)
	return first
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
