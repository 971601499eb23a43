package weirtest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"time"

	"github.com/IBM/sarama"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/weirstream/weir"
	"github.com/weirstream/weir/internal/graph"
	"github.com/weirstream/weir/internal/metrics"
	"github.com/weirstream/weir/internal/queue"
	"github.com/weirstream/weir/internal/statelog"
	"github.com/weirstream/weir/internal/task"
)

// Config configures a [Driver]. The zero value is usable.
type Config struct {
	// ApplicationID expands internal topic names
	// ("<application id>-<name>-repartition") and is what
	// processor.Context.ApplicationID returns. Default "weirtest".
	ApplicationID string
	// WallClock is the driver's wall-clock time at start, which
	// [Driver.AdvanceWallClock] moves. Default: the Unix epoch, so runs are
	// reproducible.
	WallClock time.Time
	// Logger receives the topology's logs. Default: discarded.
	Logger *slog.Logger
	// Metrics is where weir's metrics are registered, under
	// ApplicationID (for example weir_records_dropped_total). Default: a
	// registry of the Driver's own.
	Metrics prometheus.Registerer
	// DeserializationErrors, TimestampErrors, ProcessingErrors,
	// ProductionErrors and TopicErrors are the error policies, as in
	// weir.Config (default weir.Fail). A dead-letter record appears in
	// Output of its topic. The driver runs at least once: a record a
	// processor fails on keeps what it did before the error.
	// ProductionErrors applies to the records an output topic refuses by
	// its Topics limits, as the broker would.
	DeserializationErrors, TimestampErrors, ProcessingErrors, ProductionErrors weir.ErrorPolicy
	TopicErrors                                                                map[string]weir.ErrorPolicies
	// Topics gives output topics the limits the broker would hold them
	// to, by topic name; a topic not named has none.
	Topics map[string]TopicLimits
	// CacheMaxBytes turns the record caches on, as weir.Config's does,
	// bounded by it (bytes); 0, the default, turns them off. The driver
	// commits after every input record (and every AdvanceWallClock), so
	// the caches are flushed then: an input record whose processing
	// updates a key several times (a FlatMap before a Count) gives one
	// update of it, as Kafka Streams' TopologyTestDriver with caching on.
	CacheMaxBytes int64
}

// Driver runs a topology in memory. It is not safe for concurrent use.
type Driver struct {
	app      string
	log      *slog.Logger
	ctx      context.Context
	cancel   context.CancelFunc
	tasks    []*task.Task
	inputs   map[string]*input // real topic -> the task partition reading it
	internal map[string]bool   // real names of repartition topics
	pending  []*sarama.ConsumerMessage
	offsets  map[string]int64
	outputs  map[string][]*sarama.ConsumerMessage
	globals  map[string]statelog.Bytes // global store topic -> its bytes
	limits   map[string]TopicLimits    // Config.Topics
	refused  error                     // a record refused under ProductionErrors Fail
	sh       *task.Shared
	now      time.Time
	err      error // sticky: the first failure
	closed   bool
}

// input is a topic read by a task.
type input struct {
	task *task.Task
	q    *task.Queue
}

// New builds the topology (a *processor.Topology or a *kstream.Builder)
// and creates one task per sub-topology, every topic having one
// partition, with empty in-memory stores. It fails as weir.New would on
// a topology that does not validate.
func New(top weir.Topology, cfg Config) (*Driver, error) {
	if top == nil {
		return nil, errors.New("weirtest: nil topology")
	}
	pt, err := top.Build()
	if err != nil {
		return nil, err
	}
	g, err := graph.Of(pt)
	if err != nil {
		return nil, fmt.Errorf("weirtest: topology: %w", err)
	}
	if cfg.ApplicationID == "" {
		cfg.ApplicationID = "weirtest"
	}
	if cfg.WallClock.IsZero() {
		cfg.WallClock = time.Unix(0, 0).UTC()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Metrics == nil {
		cfg.Metrics = prometheus.NewRegistry()
	}
	m, err := metrics.New(cfg.Metrics, cfg.ApplicationID, noSource{})
	if err != nil {
		return nil, fmt.Errorf("weirtest: metrics: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	d := &Driver{
		app: cfg.ApplicationID, log: cfg.Logger, ctx: ctx, cancel: cancel, now: cfg.WallClock,
		inputs: map[string]*input{}, internal: map[string]bool{}, offsets: map[string]int64{}, outputs: map[string][]*sarama.ConsumerMessage{},
		globals: map[string]statelog.Bytes{}, limits: maps.Clone(cfg.Topics),
	}
	for _, r := range g.Repartitions {
		d.internal[graph.InternalTopic(d.app, r.Name)] = true
	}
	globals := map[string]statelog.Bytes{}
	for _, gs := range g.Globals {
		b := &statelog.Memory{}
		globals[gs.Name] = b
		d.globals[gs.Topic] = b
	}
	sh := &task.Shared{
		Config: task.Config{ApplicationID: d.app, Clock: func() time.Time { return d.now },
			DeserializationErrors: cfg.DeserializationErrors, TimestampErrors: cfg.TimestampErrors,
			ProcessingErrors: cfg.ProcessingErrors, ProductionErrors: cfg.ProductionErrors,
			TopicErrors: maps.Clone(cfg.TopicErrors)},
		Graph:   g,
		Metrics: m,
		Globals: globals,
	}
	if cfg.CacheMaxBytes > 0 {
		sh.Cache = graph.NewCacheBudget(cfg.CacheMaxBytes)
	}
	d.sh = sh
	for _, sub := range g.Subtopologies() {
		tk, err := task.NewInMemory(ctx, sh, host{d}, d.log, sub, 0)
		if err != nil {
			_ = d.Close()
			return nil, err
		}
		d.tasks = append(d.tasks, tk)
		for _, p := range tk.Inputs() {
			// One record at a time is queued: the driver processes each
			// before it queues the next.
			q := queue.New(queue.Limits{Items: 1, Bytes: 1}, task.RecordSize, nil)
			tk.Attach(p.TP(), q, func() int64 { return d.offsets[p.TP().Topic] }, 0, "")
			d.inputs[p.TP().Topic] = &input{task: tk, q: q}
		}
	}
	return d, nil
}

// host is the tasks' way out: records to repartition topics are queued
// for the task that reads them, the rest kept for Output.
type host struct{ d *Driver }

func (h host) Send(m *sarama.ProducerMessage) error {
	if refused, err := h.d.refuse(m); refused || err != nil {
		return err
	}
	c := &sarama.ConsumerMessage{Topic: m.Topic, Timestamp: m.Timestamp}
	var err error
	if m.Key != nil {
		if c.Key, err = m.Key.Encode(); err != nil {
			return err
		}
	}
	if m.Value != nil {
		if c.Value, err = m.Value.Encode(); err != nil {
			return err
		}
	}
	for _, hd := range m.Headers {
		c.Headers = append(c.Headers, &sarama.RecordHeader{Key: hd.Key, Value: hd.Value})
	}
	if h.d.internal[m.Topic] {
		h.d.pending = append(h.d.pending, c)
		return nil
	}
	c.Offset = int64(len(h.d.outputs[m.Topic]))
	h.d.outputs[m.Topic] = append(h.d.outputs[m.Topic], c)
	return nil
}

func (host) Keep(int) bool                            { return false }
func (host) ReplayFailure(string, int32, int64) error { return nil }
func (host) Wake()                                    {}
func (host) PartitionCount(string) (int32, error)     { return 1, nil }

// noSource is a metrics.Source with nothing to report.
type noSource struct{}

func (noSource) Snapshot() metrics.Snapshot { return metrics.Snapshot{} }

// usable returns the error that stops the driver, if any.
func (d *Driver) usable() error {
	if d.closed {
		return errors.New("weirtest: driver closed")
	}
	return d.err
}

// pipe processes m, read from its topic, and then every record it sends
// to a repartition topic, breadth first, each as its own input record.
// Every record is committed (its state changes flushed) before the next.
func (d *Driver) pipe(m *sarama.ConsumerMessage) error {
	if err := d.usable(); err != nil {
		return err
	}
	if b := d.globals[m.Topic]; b != nil {
		// A global store's topic: the record goes into the store as it
		// is, at once, as an application's global updater writes it; one
		// with a null key is skipped, as there.
		if m.Key == nil {
			d.log.Warn("weir: global store skips records with a null key", "topic", m.Topic, "offset", m.Offset)
			return nil
		}
		if m.Value == nil {
			return b.Delete(m.Key)
		}
		return b.Put(m.Key, m.Value)
	}
	if d.inputs[m.Topic] == nil || d.internal[m.Topic] {
		return fmt.Errorf("weirtest: no source reads topic %q", m.Topic)
	}
	d.pending = append(d.pending, m)
	return d.drain()
}

func (d *Driver) drain() error {
	for len(d.pending) > 0 {
		m := d.pending[0]
		d.pending = slices.Delete(d.pending, 0, 1)
		in := d.inputs[m.Topic]
		if in == nil {
			continue // a repartition topic no source reads cannot happen in a validated topology
		}
		if n, _ := in.q.Len(); n > 0 {
			// Push would wait for ever: each record is processed before
			// the next is queued, and a failure stops the driver.
			return d.fail(fmt.Errorf("weirtest: internal error: %s has an unprocessed record", m.Topic))
		}
		m.Offset = d.offsets[m.Topic]
		d.offsets[m.Topic]++
		if err := in.q.Push(d.ctx, m); err != nil {
			return d.fail(err)
		}
		p, _, err := in.task.Next(d.now)
		if err != nil {
			return d.fail(err)
		}
		if p == nil {
			continue
		}
		if err := in.task.Process(p); err != nil {
			return d.fail(err)
		}
		if err := d.commit(in.task); err != nil {
			return d.fail(err)
		}
	}
	return nil
}

// commit commits a task as an application's thread does: what its record
// caches hold is forwarded (its records to repartition topics are then
// processed by drain), then its state changes are flushed.
func (d *Driver) commit(tk *task.Task) error {
	if d.refused == nil {
		if err := tk.Flush(); err != nil {
			return err
		}
	}
	if d.refused != nil {
		return d.refused // the record is not committed
	}
	return tk.FlushInMemory()
}

// fail makes err the driver's sticky error: a failed record is not
// committed, and the driver, like an application, stops.
func (d *Driver) fail(err error) error {
	d.err = publicError(err)
	d.pending = nil
	return d.err
}

// publicError gives the runtime's record and topology errors the public
// types weir.App.Run returns, so a test can errors.As them as a service
// does. The runtime's types have the public ones' fields.
func publicError(err error) error {
	var te *task.TopologyError
	if errors.As(err, &te) {
		return (*weir.TopologyError)(te)
	}
	var re *task.RecordError
	if errors.As(err, &re) {
		return (*weir.RecordError)(re)
	}
	return err
}

// AdvanceWallClock moves the driver's wall clock forward by by and runs
// the wall-clock punctuators then due, once each, as a stream thread does
// between records; what they send to repartition topics is processed
// before it returns. Stream time moves only with records.
func (d *Driver) AdvanceWallClock(by time.Duration) error {
	if err := d.usable(); err != nil {
		return err
	}
	if by < 0 {
		return fmt.Errorf("weirtest: AdvanceWallClock(%v): the clock does not go back", by)
	}
	d.now = d.now.Add(by)
	for _, tk := range d.tasks {
		if err := tk.Punctuate(graph.WallClockTime, d.now); err != nil {
			return d.fail(err)
		}
		if err := d.commit(tk); err != nil {
			return d.fail(err)
		}
		if err := d.drain(); err != nil {
			return err
		}
	}
	return nil
}

// WallClock returns the driver's wall-clock time.
func (d *Driver) WallClock() time.Time { return d.now }

// Close closes the tasks (their processors' Close runs). It is safe to
// call twice.
func (d *Driver) Close() error {
	if d.closed {
		return nil
	}
	d.closed = true
	var errs []error
	for _, tk := range d.tasks {
		if err := tk.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	d.cancel()
	return errors.Join(errs...)
}
