package task

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/IBM/sarama"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/weirstream/weir/internal/assign"
	"github.com/weirstream/weir/internal/client"
	"github.com/weirstream/weir/internal/graph"
	"github.com/weirstream/weir/internal/topics"
)

// Task is one sub-topology on one partition. All its methods run on its
// thread's goroutine.
type Task struct {
	id     assign.TaskID
	name   string
	sh     *Shared
	host   Host
	idx    int    // the thread's index
	thread string // the thread's index, as a metric label
	ctx    context.Context
	stop   context.CancelFunc
	log    *slog.Logger
	parts  []*Input
	byTP   map[TP]*Input
	insts  []graph.Instance // in graph order: parents before children

	stores map[string]*taskStore
	// running is false while the stores restore; the loop processes only
	// running tasks. restoreDone is closed when the restore goroutine ends.
	running     bool
	initialized bool
	restoreDone chan struct{}
	restoreErr  error

	streamTime time.Time
	// committedTime is the stream time at the last commit, where a rewind
	// takes the task back to.
	committedTime time.Time
	// resumedTime is the stream time committed before this task started
	// (the largest of its partitions'), zero on a first start.
	resumedTime time.Time
	// version is the last table-output version the task gave (see
	// NextVersion), committedVersion the one committed last.
	version, committedVersion uint64
	meta                      graph.Metadata
	inRecord                  bool
	// replaying: the record being processed replays one the application
	// processed before a reset (Input.replayEnd), and what the task
	// writes for it carries graph.ReplayHeader.
	replaying bool
	punctNode string // the node whose punctuator runs
	// nulls drops the empty-key writes of a record whose Kafka key is
	// null (see nullkey.go).
	nulls nullKeys
	// cur is the origin of the records produced now (see origin), reset
	// for every input record and punctuation.
	cur, curExplicit *client.Origin
	curIn            *sarama.ConsumerMessage // the input record being processed
	punct            []*schedule
	idleSince        time.Time // when the task first waited for an empty partition
	fetchWaitSince   time.Time // when the task first waited for a partition's first records (firstFetchWait)

	// Metrics of the task, resolved once.
	processed, bytes, punctuations prometheus.Counter
	deadLettered, dropped          prometheus.Counter
	late                           prometheus.Counter // see CountLate
	latency                        prometheus.Observer
	// outputs are the topics the task's sinks write, each with its
	// counter, resolved at its first record (see output).
	outputs map[outputKey]*output
	// lastOutput is the output of the last record sent.
	lastOutput *output
	// sendFailed reports that the host refused a record of the input
	// record being processed: that failure is the thread's to settle,
	// not a node's (see nodeFailed).
	sendFailed bool
}

// newTask creates the task shell (its context, logger and metrics) and its
// node instances.
func newTask(ctx context.Context, sh *Shared, host Host, thread int, log *slog.Logger, id assign.TaskID, sub *graph.Subtopology) (*Task, error) {
	ctx, cancel := context.WithCancel(ctx)
	t := &Task{
		id:     id,
		name:   id.String(),
		sh:     sh,
		host:   host,
		idx:    thread,
		thread: strconv.Itoa(thread),
		ctx:    ctx,
		stop:   cancel,
		byTP:   map[TP]*Input{},
	}
	t.log = log.With("task", t.name)
	m := sh.Metrics
	t.processed = m.RecordsProcessed.WithLabelValues(t.thread, t.name)
	t.bytes = m.BytesProcessed.WithLabelValues(t.thread, t.name)
	t.punctuations = m.Punctuations.WithLabelValues(t.thread, t.name)
	t.deadLettered = m.DeadLettered.WithLabelValues(t.thread, t.name)
	t.dropped = m.RecordsDropped.WithLabelValues(t.thread, t.name, "null_key")
	t.latency = m.EndToEndLatency.WithLabelValues(t.name)
	if err := t.build(sub); err != nil {
		cancel()
		return nil, err
	}
	return t, nil
}

// New creates a task's node instances, children first; Init runs, parents
// first, once its stores are restored (at once when it has none: see
// Restored). ctx is the thread's; thread is its index.
func New(ctx context.Context, sh *Shared, host Host, thread int, log *slog.Logger, id assign.TaskID) (*Task, error) {
	sub := sh.Layout.Subs[id.Subtopology]
	t, err := newTask(ctx, sh, host, thread, log, id, sub)
	if err != nil {
		return nil, err
	}
	cancel := t.stop
	sh.Local.Acquire(id, thread)
	t.openStores(sub)
	if len(t.stores) == 0 {
		if err := t.init(); err != nil {
			cancel()
			sh.Local.Release(id, thread, nil)
			return nil, err
		}
		return t, nil
	}
	t.restoreDone = make(chan struct{})
	go func() {
		defer close(t.restoreDone)
		t.restoreErr = t.restore(t.ctx)
		host.Wake()
	}()
	return t, nil
}

// build creates the task's node instances, children first, and its
// partitions on the first call; a later call (a rewind) replaces the
// instances and the partitions' sources.
func (t *Task) build(sub *graph.Subtopology) error {
	made := map[*graph.Node]graph.Instance{}
	var create func(n *graph.Node) (graph.Instance, error)
	create = func(n *graph.Node) (graph.Instance, error) {
		if inst, ok := made[n]; ok {
			return inst, nil
		}
		children := make([]graph.Instance, len(n.Children))
		for i, c := range n.Children {
			inst, err := create(c)
			if err != nil {
				return nil, err
			}
			children[i] = inst
		}
		inst, err := n.New(t, children)
		if err != nil {
			return nil, fmt.Errorf("weir: task %s: creating node %s: %w", t.name, n.Name, err)
		}
		made[n] = inst
		return inst, nil
	}
	insts := make([]graph.Instance, 0, len(sub.Nodes))
	for _, n := range sub.Nodes {
		inst, err := create(n)
		if err != nil {
			return err
		}
		insts = append(insts, inst)
		if n.Kind != graph.KindSource {
			continue
		}
		src, ok := inst.(graph.SourceInstance)
		if !ok {
			return fmt.Errorf("weir: internal error: source %s has no source instance", n.Name)
		}
		key := TP{topics.TopicName(t.sh.ApplicationID, n), t.id.Partition}
		if p := t.byTP[key]; p != nil {
			p.src = src
			continue
		}
		p := &Input{tp: key, src: src, node: n.Name, consumed: -1, committed: -1, internal: n.Internal}
		t.parts = append(t.parts, p)
		t.byTP[p.tp] = p
	}
	t.insts = insts
	return nil
}

// Rewind takes a running task back to its last commit: its uncommitted
// state changes are discarded, its node instances closed and created anew
// (so processors drop whatever they held in memory, and punctuators are
// scheduled again by Init), and the records processed since the commit are
// queued to be processed again, in their order, before anything fetched
// after them. The stores' committed state is in Badger already: nothing is
// restored.
func (t *Task) Rewind() error {
	t.DiscardState()
	var errs []error
	for _, inst := range t.insts {
		if err := inst.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		t.log.Warn("closing processors for a rewind", "error", err)
	}
	t.initialized, t.running = false, false
	t.punct, t.cur, t.inRecord, t.idleSince, t.fetchWaitSince = nil, nil, false, time.Time{}, time.Time{}
	t.streamTime = t.committedTime
	// The processors created anew start at the committed stream time, as
	// after a restart (see internal/streamtime).
	t.resumedTime = t.committedTime
	for _, p := range t.parts {
		p.redo = append(p.done, p.redo...)
		p.done, p.head = nil, nil
		p.consumed = p.committed
	}
	if err := t.build(t.sh.Layout.Subs[t.id.Subtopology]); err != nil {
		return err
	}
	return t.init()
}

// init runs Init on every node, parents first; the task then processes.
func (t *Task) init() error {
	for i, inst := range t.insts {
		if err := inst.Init(); err != nil {
			for _, done := range t.insts[:i] {
				_ = done.Close()
			}
			if te := t.topologyError(err); te != nil {
				return te
			}
			return fmt.Errorf("weir: task %s: init: %w", t.name, err)
		}
	}
	t.initialized, t.running = true, true
	return nil
}

// Restored reports whether a restoring task has finished its restore, and
// then runs Init. A failed restore is the error.
func (t *Task) Restored() (bool, error) {
	if t.running {
		return true, nil
	}
	select {
	case <-t.restoreDone:
	default:
		return false, nil
	}
	if t.restoreErr != nil {
		return false, t.restoreErr
	}
	return true, t.init()
}

// Close stops a restore in progress, runs Close on every node and cancels
// the task's context.
func (t *Task) Close() error {
	t.stop()
	if t.restoreDone != nil {
		<-t.restoreDone
	}
	if t.sh.Local != nil { // nil for a task made by NewInMemory
		defer t.sh.Local.Release(t.id, t.idx, t.storeNames())
	}
	var errs []error
	if t.initialized {
		for _, inst := range t.insts {
			if err := inst.Close(); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("weir: task %s: close: %w", t.name, err)
	}
	return nil
}

// ID returns the task's id.
func (t *Task) ID() assign.TaskID { return t.id }

// Name returns the task's id as "<sub-topology>_<partition>".
func (t *Task) Name() string { return t.name }

// Running reports whether the task processes: its stores are restored and
// its nodes initialised.
func (t *Task) Running() bool { return t.running }

// Initialized reports whether the task's nodes ran Init: it may have
// processed records.
func (t *Task) Initialized() bool { return t.initialized }

// Inputs returns the task's input partitions.
func (t *Task) Inputs() []*Input { return t.parts }
