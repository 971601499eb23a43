package weir

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/IBM/sarama"

	"github.com/weirstream/weir/internal/assign"
	"github.com/weirstream/weir/internal/client"
	"github.com/weirstream/weir/internal/global"
	"github.com/weirstream/weir/internal/local"
	"github.com/weirstream/weir/internal/statedir"
	"github.com/weirstream/weir/internal/statelog"
	"github.com/weirstream/weir/internal/stream"
	"github.com/weirstream/weir/internal/task"
	"github.com/weirstream/weir/internal/topics"
)

// cleanups are what a start has opened, closed in reverse order when run
// ends, as deferred calls would be. run has a pointer receiver so that
// `defer undo.run()`, deferred before anything is added, runs what is
// added after it.
type cleanups []func()

func (c *cleanups) add(f func()) { *c = append(*c, f) }

func (c *cleanups) run() {
	for i := len(*c) - 1; i >= 0; i-- {
		(*c)[i]()
	}
}

// run is Run once the App is marked as running. Its steps, in order: the
// schemas are checked, the state directory and database opened, the
// cluster reached, the topology checked against the last one, the topics
// prepared and the schemas registered, the local state and the global
// stores made ready, then the threads run until one fails or ctx ends.
// What a step opens, a cleanup closes when run returns.
func (a *App) run(ctx context.Context, cancel context.CancelFunc) error {
	go a.markStopping(ctx)
	var undo cleanups
	defer undo.run()
	took := startPhases{last: time.Now()}

	// The schemas first: a refused schema must leave everything as it was,
	// in Kafka and on disk, and the registry needs neither. They are
	// registered once the topology check has passed too.
	if len(a.schemas) > 0 {
		if err := checkSchemas(ctx, a.registry, a.schemas); err != nil {
			return err
		}
	}
	took.Schemas = took.lap()
	dir, db, err := a.openState(&undo)
	if err != nil {
		return err
	}
	took.State = took.lap()
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
	a.mu.Lock() // snapshot reads it from scrapes
	a.admin, a.kclient = admin, kc
	a.mu.Unlock()
	undo.add(func() { admin.Close() }) // closes kc too
	a.startConsole(ctx, &undo)
	took.Connect = took.lap()

	tc, lay, err := a.prepare(ctx, kc, admin, adminCfg, db, dir, &took)
	if err != nil {
		return err
	}
	globals, err := a.openLocal(ctx, db, lay, &undo)
	if err != nil {
		return err
	}
	rc := client.Base(a.cfg.clientOptions(), a.cfg.ClientID+"-restore")
	rc.Consumer.IsolationLevel = sarama.ReadCommitted
	if a.restoreClient, err = sarama.NewClient(a.cfg.Brokers, rc); err != nil {
		return fmt.Errorf("weir: restore client: %w", err)
	}
	undo.add(func() { a.restoreClient.Close() })
	took.Local = took.lap()
	globalErr, err := a.startGlobals(ctx, cancel, db, lay, &undo)
	if err != nil {
		return err
	}
	took.Globals = took.lap()
	a.cfg.Logger.Info("starting", "application", a.cfg.ApplicationID, "threads", a.cfg.Threads,
		"guarantee", a.cfg.Guarantee.String(), "process", a.dir.ProcessID, "took", took)
	in := a.instance(tc, lay, db, globals, kc, admin, dir)
	a.startStandbys(ctx, in, lay, admin, dir, &undo)
	return a.runThreads(ctx, cancel, in, globalErr)
}

// startPhases is how long each step of a start took, logged with
// "starting" (the group join that follows is the threads'): where a slow
// start spends its time.
type startPhases struct {
	Schemas, State, Connect, Upgrade, Topics, Descriptor, Local, Globals time.Duration
	last                                                                 time.Time // the end of the last phase timed
}

// lap returns the time since the last phase ended, rounded to the
// millisecond, and starts the next.
func (p *startPhases) lap() time.Duration {
	now := time.Now()
	d := now.Sub(p.last).Round(time.Millisecond)
	p.last = now
	return d
}

// LogValue makes the phases one group of the log line.
func (p startPhases) LogValue() slog.Value {
	return slog.GroupValue(slog.Duration("schemas", p.Schemas), slog.Duration("state", p.State),
		slog.Duration("connect", p.Connect), slog.Duration("upgrade_check", p.Upgrade), slog.Duration("topics", p.Topics),
		slog.Duration("descriptor", p.Descriptor), slog.Duration("local", p.Local), slog.Duration("globals", p.Globals))
}

// markStopping makes a start that ctx ends say stopping, not starting.
func (a *App) markStopping(ctx context.Context) {
	<-ctx.Done()
	a.life.mu.Lock()
	if a.life.state == StateStarting {
		a.life.state = StateStopping
	}
	a.life.mu.Unlock()
}

// openState locks the application's state directory and opens its
// database.
func (a *App) openState(undo *cleanups) (*statedir.Dir, *statelog.DB, error) {
	dir, err := statedir.Open(a.cfg.StateDir, a.cfg.ApplicationID)
	if err != nil {
		return nil, nil, err
	}
	a.mu.Lock() // processID reads it from scrapes
	a.dir = dir
	a.mu.Unlock()
	undo.add(func() { dir.Close() })

	db, err := statelog.Open(filepath.Join(dir.Path, "state"), a.cfg.Stores.Badger)
	if errors.Is(err, ErrStateEncryptionKey) {
		return nil, nil, fmt.Errorf("weir: local state in %s: set Stores.EncryptionKey to the key it was written with, or delete the directory to restore the stores from their changelogs: %w", dir.Path, err)
	}
	if err != nil {
		return nil, nil, err
	}
	undo.add(func() {
		if err := db.Close(); err != nil {
			a.cfg.Logger.Error("closing state", "error", err)
		}
	})
	return dir, db, nil
}

// prepare checks the topology against the one the application last ran
// with, prepares its topics, records the new descriptor and registers
// the schemas; it returns the tasks' configuration and the topics'
// layout.
func (a *App) prepare(ctx context.Context, kc sarama.Client, admin sarama.ClusterAdmin, adminCfg *sarama.Config, db *statelog.DB, dir *statedir.Dir, took *startPhases) (task.Config, *topics.Layout, error) {
	old, err := a.checkUpgrade(kc, admin, db, dir.Path)
	if err != nil {
		return task.Config{}, nil, err
	}
	took.Upgrade = took.lap()
	tc := a.cfg.taskConfig()
	if old != nil {
		tc.ResetEpoch = old.ResetEpoch // what table updates carry (processor.EpochHeader)
	}
	lay, err := topics.Prepare(kc, admin, &topics.Options{ApplicationID: a.cfg.ApplicationID, ReplicationFactor: a.cfg.Topics.ReplicationFactor,
		DeadLetter: a.cfg.deadLetterTopics(), Logger: a.cfg.Logger,
		RawRestore: func(topic string) bool { return tc.PoliciesFor(topic).Deserialization.Fails() }}, a.graph)
	if err != nil {
		return task.Config{}, nil, publicError(err)
	}
	took.Topics = took.lap()
	if err := a.recordUpgrade(admin, adminCfg, db, old, lay); err != nil {
		return task.Config{}, nil, err
	}
	took.Descriptor = took.lap()
	if len(a.schemas) > 0 {
		if err := registerSchemas(ctx, a.registry, a.schemas); err != nil {
			return task.Config{}, nil, err
		}
		a.cfg.Logger.Info("schemas registered", "application", a.cfg.ApplicationID, "schemas", len(a.schemas))
	}
	a.mu.Lock()
	a.layout = lay
	a.mu.Unlock()
	return tc, lay, nil
}

// openLocal opens the instance's local state (which store partitions it
// holds, and their cleanup) and starts its cleaner; it returns the
// global stores' bytes.
func (a *App) openLocal(ctx context.Context, db *statelog.DB, lay *topics.Layout, undo *cleanups) (map[string]statelog.Bytes, error) {
	storeSub := map[string]int{}
	for i, s := range lay.Subs {
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
	st, err := local.New(db, a.cfg.Logger, a.cfg.Stores.CleanupDelay, storeSub, globalNames...)
	if err != nil {
		return nil, err
	}
	a.mu.Lock()
	a.local = st
	a.mu.Unlock()
	// The cleaner stops as soon as the App starts to stop: tasks closed by
	// the shutdown are not moving away, and their state must stay.
	var cleaner sync.WaitGroup
	cleanCtx, stopCleaner := context.WithCancel(ctx)
	cleaner.Go(func() { st.Run(cleanCtx) })
	undo.add(func() {
		stopCleaner()
		cleaner.Wait()
		st.Close() // before the database closes
	})
	return globals, nil
}

// startGlobals restores the global stores whole before any task starts,
// then keeps them current while the threads run; the updater failing
// stops the instance as a thread failing does, its error on the channel.
func (a *App) startGlobals(ctx context.Context, cancel context.CancelFunc, db *statelog.DB, lay *topics.Layout, undo *cleanups) (<-chan error, error) {
	var updater sync.WaitGroup
	globalErr := make(chan error, 1)
	undo.add(func() {
		cancel() // run is ending: so is the updater
		updater.Wait()
	})
	if len(a.graph.Globals) == 0 {
		return globalErr, nil
	}
	u := global.New(db, a.restoreClient, a.cfg.Logger, a.graph.Globals, lay.DeleteRetention)
	if err := u.Restore(ctx); err != nil {
		return nil, err
	}
	updater.Go(func() {
		if err := u.Run(ctx); err != nil {
			globalErr <- err
			cancel()
		}
	})
	return globalErr, nil
}

// instance gathers what the threads share.
func (a *App) instance(tc task.Config, lay *topics.Layout, db *statelog.DB, globals map[string]statelog.Bytes, kc sarama.Client, admin sarama.ClusterAdmin, dir *statedir.Dir) *stream.Instance {
	in := &stream.Instance{
		Config: a.cfg.streamConfig(),
		Shared: &task.Shared{
			Config:        tc,
			Graph:         a.graph,
			Layout:        lay,
			Metrics:       a.metrics,
			DB:            db,
			Local:         a.local,
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
	return in
}

// startStandbys starts the runner of the instance's standby copies and
// warm-ups, when it keeps any. It stops before the local state and the
// database close, and after the threads: a thread's task restoring
// meanwhile may still ask it to yield.
func (a *App) startStandbys(ctx context.Context, in *stream.Instance, lay *topics.Layout, admin sarama.ClusterAdmin, dir *statedir.Dir, undo *cleanups) {
	stateful := slices.ContainsFunc(lay.AssignSubtopologies(a.graph.Stores), func(s assign.Subtopology) bool { return s.Stateful })
	if a.cfg.StandbyReplicas == 0 && !(in.Warmups.Enabled() && stateful) {
		return
	}
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
	undo.add(func() {
		stopStandbys()
		runner.Wait()
	})
}

// runThreads runs the stream threads until each has returned: the first
// to fail stops the others. It returns the first failure, or the global
// updater's.
func (a *App) runThreads(ctx context.Context, cancel context.CancelFunc, in *stream.Instance, globalErr <-chan error) error {
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
