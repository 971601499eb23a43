package weir

import (
	"errors"
	"fmt"
	"iter"
	"slices"
	"time"

	"github.com/IBM/sarama"

	"github.com/weirstream/weir/internal/assign"
	"github.com/weirstream/weir/internal/firsterror"
	"github.com/weirstream/weir/internal/graph"
	"github.com/weirstream/weir/internal/local"
	"github.com/weirstream/weir/internal/statelog"
	"github.com/weirstream/weir/internal/stream"
	"github.com/weirstream/weir/internal/topics"
)

// StoreUnavailableReason says why a store partition cannot be read: the
// Reason of a [StoreUnavailableError]. Its text is the one the error and
// ktable's HTTP answers carry.
type StoreUnavailableReason string

// The reasons a store partition cannot be read.
const (
	// StoreNotRunning: the App is not running (before Run, or after it
	// returned), so it has no state to read.
	StoreNotRunning StoreUnavailableReason = "not running"
	// StoreNotHere: the partition's task does not run on this instance
	// now (it runs on another, or is moving).
	StoreNotHere = "not on this instance"
	// StoreRestoring: the partition's task runs here but its stores are
	// being restored; what they hold is not yet the committed state.
	StoreRestoring = "restoring"
	// StoreMoving: as of the group's latest assignment no instance runs
	// the partition's task (it is being handed over), or the one that
	// does advertises no address (Config.AdvertisedAddr).
	StoreMoving = "moving"
	// StoreUnreachable: the instance running the partition's task did not
	// answer (ktable.View.Lookup); Instance names it.
	StoreUnreachable = "instance unreachable"
	// StoreStandbyBehind: a reader with standby reads
	// (StoreReader.WithStandbyReads) found this instance's standby copy of
	// the partition further behind than it allows.
	StoreStandbyBehind = "standby too far behind"
)

// StoreUnavailableError reports a read of a store partition that cannot
// be answered now. It names the task that owns the partition, so that a
// caller can retry later or ask the instance running it. Every reason is
// transient while the application runs: a task restores, moves, or its
// instance restarts; retrying after a moment is the right response.
type StoreUnavailableError struct {
	Store     string
	Partition int32
	Task      string // "<sub-topology>_<partition>"; "" when the App is not running
	// Reason is StoreNotRunning, StoreNotHere, StoreRestoring, StoreMoving,
	// StoreUnreachable or StoreStandbyBehind.
	Reason StoreUnavailableReason
	// Instance is the advertised address of the instance that answered
	// (or did not) when the read was forwarded; "" for a local read.
	Instance string
	// Err is the cause of StoreUnreachable; nil otherwise.
	Err error
}

// Error implements error.
func (e *StoreUnavailableError) Error() string {
	msg := fmt.Sprintf("weir: store %s: %s", e.Store, e.Reason)
	if e.Task != "" {
		msg = fmt.Sprintf("weir: store %s, partition %d (task %s): %s", e.Store, e.Partition, e.Task, e.Reason)
	}
	if e.Instance != "" {
		msg += " (instance " + e.Instance + ")"
	}
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Unwrap returns Err.
func (e *StoreUnavailableError) Unwrap() error { return e.Err }

// KeyOwner is where a store partition lives, as of the newest group
// assignment this instance received (see StoreReader.Owner).
type KeyOwner struct {
	Store     string
	Partition int32
	Task      string // "<sub-topology>_<partition>"
	// Active is the advertised address of the instance running the task;
	// "" when none does as of the assignment (the task is being handed
	// over) or when it advertises no address.
	Active string
	// Standbys are the addresses of the instances holding standby copies
	// of the task's stores (Config.StandbyReplicas), sorted.
	Standbys []string
	// Local reports that this instance runs the task now (its assignment
	// may be newer than the hosts': a thread's own tasks are the truth).
	Local bool
	// StandbyLag is how many records this instance's standby copy of the
	// partition is behind its changelog (weir_standby_lag_records, what a
	// standby read would miss), -1 when this instance holds no such copy,
	// and math.MaxInt64 when how far behind it is is not known: its last
	// update failed, or none ended in the last 30 s.
	// The lags of other instances' standbys are theirs to tell: a lookup
	// with a lag bound asks them (ktable.View.WithStandbyReads).
	StandbyLag int64
	// Generation is the group generation of the assignment the addresses
	// come from; 0 before the first.
	Generation int32
}

// StoreReader reads the committed state of one of an App's key-value
// stores, as bytes, from outside the topology: what the last commit of
// each of its tasks wrote, never what a task has changed since (the
// uncommitted state of exactly once may still be undone). It reads the
// partitions whose tasks run on this instance and are not restoring, and
// fails with a *StoreUnavailableError for the others. Package ktable
// gives typed views on top of it.
//
// A StoreReader is safe for concurrent use and stays valid across runs
// of its App; reads fail while the App is not running.
type StoreReader struct {
	a         *App
	name      string
	kind      graph.StoreKind
	retention time.Duration // of a window store
	// keys is Kafka's murmur2 partitioner. Making one seeds a random
	// source (for null keys, which it is never given), which costs more
	// than the hash: PartitionOf shares one, which for non-nil keys keeps
	// no state.
	keys sarama.Partitioner
	// maxLag is the most records a standby copy read instead of the task
	// may be behind; -1: no standby reads.
	maxLag int64
	// errs holds the first error of the iterations since Err last ran;
	// each copy (WithStandbyReads) has its own.
	errs *firsterror.Keeper
}

// StoreReader returns a reader of the store name: a key-value store (as
// processor.KeyValue and the DSL's tables and aggregations declare), read
// with Get and Scan, or a window store (processor.Window, the DSL's
// windowed aggregations), read with FetchWindows. It fails if the
// topology has no such store.
func (a *App) StoreReader(name string) (*StoreReader, error) {
	i := slices.IndexFunc(a.graph.Stores, func(s *graph.Store) bool { return s.Name == name })
	if i < 0 {
		return nil, fmt.Errorf("weir: no store %q in the topology", name)
	}
	st := a.graph.Stores[i]
	if st.Kind != graph.KeyValueStore && st.Kind != graph.WindowStore {
		return nil, fmt.Errorf("weir: store %q is a %s store; a StoreReader reads key-value and window stores", name, st.Kind)
	}
	return &StoreReader{a: a, name: name, kind: st.Kind, retention: st.Retention, keys: sarama.NewMurmur2Partitioner(""), maxLag: -1, errs: &firsterror.Keeper{}}, nil
}

// WithStandbyReads returns a reader of the same store that also answers
// for partitions whose task does not run here from this instance's
// standby copy of them (Config.StandbyReplicas, or a warm-up), when that
// copy is at most maxLag records behind its changelog (as of its last
// look at the log end, every 250 ms while caught up, or what is left of
// an update under way; weir_standby_lag_records). Such an answer is
// committed state, but older than the task's: up to maxLag changelog
// records are missing from it. A copy further behind is a
// *StoreUnavailableError with Reason StoreStandbyBehind; a copy copying
// its store in full counts as behind by the whole changelog. maxLag < 0
// turns standby reads off (the default).
func (r *StoreReader) WithStandbyReads(maxLag int64) *StoreReader {
	c := *r
	c.maxLag = max(maxLag, -1)
	c.errs = &firsterror.Keeper{}
	return &c
}

// Err returns the first error the iterations of r (Scan, FetchWindows)
// met since it was last called, and clears it: a partition that cannot be
// read is a *StoreUnavailableError. It covers every goroutine using r;
// give each goroutine its own copy (WithStandbyReads) to tell their
// errors apart.
func (r *StoreReader) Err() error { return r.errs.Take() }

// MaxStandbyLag returns the reader's bound on standby reads; -1 when it
// reads no standbys (see WithStandbyReads).
func (r *StoreReader) MaxStandbyLag() int64 { return r.maxLag }

// Name returns the store's name.
func (r *StoreReader) Name() string { return r.name }

// Advertised returns the App's Config.AdvertisedAddr: where it serves
// queries of its stores, "" when it serves none.
func (r *StoreReader) Advertised() string { return r.a.cfg.AdvertisedAddr }

// Windowed reports whether the store is a window store (read with
// FetchWindows) rather than a key-value store (Get and Scan).
func (r *StoreReader) Windowed() bool { return r.kind == graph.WindowStore }

// placement returns the sub-topology of the store and its partition count,
// while the App runs.
func (r *StoreReader) placement() (sub int, partitions int32, lay *topics.Layout, st *local.State, err error) {
	r.a.mu.Lock()
	lay, st = r.a.layout, r.a.local
	r.a.mu.Unlock()
	state, _ := r.a.State()
	if lay == nil || st == nil || state == StateStopping || state == StateStopped || state == StateFailed {
		return 0, 0, nil, nil, &StoreUnavailableError{Store: r.name, Partition: -1, Reason: StoreNotRunning}
	}
	for i, s := range lay.Subs {
		for _, n := range s.Nodes {
			if !slices.Contains(n.Stores, r.name) {
				continue
			}
			for _, src := range s.Sources() {
				if c, ok := lay.Counts[topics.TopicName(r.a.cfg.ApplicationID, src)]; ok {
					return i, c, lay, st, nil
				}
			}
		}
	}
	return 0, 0, nil, nil, fmt.Errorf("weir: store %s: its sub-topology has no input", r.name)
}

// Partitions returns the number of partitions of the store: one per task
// of its sub-topology, as many as its input topics have.
func (r *StoreReader) Partitions() (int32, error) {
	_, n, _, _, err := r.placement()
	return n, err
}

// PartitionOf returns the partition that holds key (serialized as the
// store's key serde writes it): murmur2 of the bytes, as Kafka's Java
// producers and weir's sinks and repartition topics partition records.
// It is right for the stores of the DSL's aggregations, whose keys come
// through a repartition topic, and for tables read from topics written
// by such producers; a topic written with another partitioner puts keys
// elsewhere.
func (r *StoreReader) PartitionOf(key []byte) (int32, error) {
	_, n, _, _, err := r.placement()
	if err != nil {
		return 0, err
	}
	return r.keys.Partition(&sarama.ProducerMessage{Key: sarama.ByteEncoder(key)}, n)
}

// Owner returns where the partition holding key (serialized) lives: the
// instance running its task and those holding its standbys, by their
// advertised addresses (Config.AdvertisedAddr), as of the newest group
// assignment this instance received. It fails with a
// *StoreUnavailableError while the App is not running.
func (r *StoreReader) Owner(key []byte) (KeyOwner, error) {
	sub, n, _, _, err := r.placement()
	if err != nil {
		return KeyOwner{}, err
	}
	p, err := r.keys.Partition(&sarama.ProducerMessage{Key: sarama.ByteEncoder(key)}, n)
	if err != nil {
		return KeyOwner{}, err
	}
	return r.owner(sub, p), nil
}

// PartitionOwner returns where partition p of the store lives, as Owner
// does for a key's partition. p must be below Partitions.
func (r *StoreReader) PartitionOwner(p int32) (KeyOwner, error) {
	sub, n, _, _, err := r.placement()
	if err != nil {
		return KeyOwner{}, err
	}
	if p < 0 || p >= n {
		return KeyOwner{}, fmt.Errorf("weir: store %s has partitions 0 to %d, not %d", r.name, n-1, p)
	}
	return r.owner(sub, p), nil
}

// owner returns where partition p of the store, in sub-topology sub,
// lives.
func (r *StoreReader) owner(sub int, p int32) KeyOwner {
	id := assign.TaskID{Subtopology: sub, Partition: p}
	o := KeyOwner{Store: r.name, Partition: p, Task: id.String(), StandbyLag: -1}
	o.Local = slices.ContainsFunc(r.a.Tasks(), func(t TaskInfo) bool { return t.ID == o.Task })
	r.a.mu.Lock()
	hosts, sbs := r.a.hosts, r.a.standbys
	r.a.mu.Unlock()
	if sbs != nil {
		if lag, ok := sbs.StoreLag(id, r.name); ok {
			o.StandbyLag = lag
		}
	}
	if hosts == nil {
		return o
	}
	hs, gen := hosts.Get()
	o.Generation = gen
	for _, h := range hs {
		if slices.Contains(h.Active, id) {
			o.Active = h.Addr
		}
		if slices.Contains(h.Standby, id) {
			o.Standbys = append(o.Standbys, h.Addr)
		}
	}
	if o.Local && r.a.cfg.AdvertisedAddr != "" {
		o.Active = r.a.cfg.AdvertisedAddr
	}
	return o
}

// read runs fn on the committed bytes of partition p, after checking that
// its task runs here and is not restoring.
func (r *StoreReader) read(p int32, fn func(b *statelog.Space) error) error {
	sub, n, _, st, err := r.placement()
	if err != nil {
		return err
	}
	if p < 0 || p >= n {
		return fmt.Errorf("weir: store %s has partitions 0 to %d, not %d", r.name, n-1, p)
	}
	id := fmt.Sprintf("%d_%d", sub, p)
	tasks := r.a.Tasks()
	i := slices.IndexFunc(tasks, func(t TaskInfo) bool { return t.ID == id })
	view := func() error { return st.View(func(db *statelog.DB) error { return fn(db.Space(r.name, p)) }) }
	switch {
	case i < 0 && r.maxLag >= 0:
		r.a.mu.Lock()
		sbs := r.a.standbys
		r.a.mu.Unlock()
		err := stream.ErrNoStandby
		if sbs != nil {
			err = sbs.Read(assign.TaskID{Subtopology: sub, Partition: p}, r.name, r.maxLag, view)
		}
		var behind *stream.StandbyBehindError
		switch {
		case errors.Is(err, stream.ErrNoStandby):
			return &StoreUnavailableError{Store: r.name, Partition: p, Task: id, Reason: StoreNotHere}
		case errors.As(err, &behind):
			return &StoreUnavailableError{Store: r.name, Partition: p, Task: id, Reason: StoreStandbyBehind, Err: err}
		case errors.Is(err, local.ErrClosed):
			return &StoreUnavailableError{Store: r.name, Partition: p, Task: id, Reason: StoreNotRunning}
		}
		return err
	case i < 0:
		return &StoreUnavailableError{Store: r.name, Partition: p, Task: id, Reason: StoreNotHere}
	case tasks[i].Restoring:
		return &StoreUnavailableError{Store: r.name, Partition: p, Task: id, Reason: StoreRestoring}
	}
	err = view()
	if errors.Is(err, local.ErrClosed) {
		return &StoreUnavailableError{Store: r.name, Partition: p, Task: id, Reason: StoreNotRunning}
	}
	return err
}

// Get returns the committed value of key (serialized), and whether the
// store holds it. A partition that cannot be read is a
// *StoreUnavailableError.
func (r *StoreReader) Get(key []byte) (value []byte, found bool, err error) {
	if err := r.want(graph.KeyValueStore); err != nil {
		return nil, false, err
	}
	p, err := r.PartitionOf(key)
	if err != nil {
		return nil, false, err
	}
	err = r.read(p, func(s *statelog.Space) error {
		v, err := s.Get(key)
		value, found = v, v != nil
		return err
	})
	return value, found, err
}

// Scan returns the committed entries of partition p whose keys lie in
// [lo, hi) (a nil bound is open), in key order. The loop runs inside the
// partition's read: its body must not call the reader, and the slices it
// gets are valid only until the next iteration. An error ends the
// iteration; Err reports it.
func (r *StoreReader) Scan(p int32, lo, hi []byte) iter.Seq2[[]byte, []byte] {
	return func(yield func(key, value []byte) bool) {
		if err := r.want(graph.KeyValueStore); err != nil {
			r.errs.Set(err)
			return
		}
		r.errs.Set(r.read(p, func(s *statelog.Space) error {
			for k, v := range s.Range(lo, hi) {
				if !yield(k, v) {
					break
				}
			}
			return s.Err()
		}))
	}
}

// want fails unless the store is of kind k.
func (r *StoreReader) want(k graph.StoreKind) error {
	if r.kind != k {
		return fmt.Errorf("weir: store %s is a %s store, not a %s store", r.name, r.kind, k)
	}
	return nil
}

// FetchWindows returns the start and committed value of each of key's
// windows (key serialized) that start in [from, to], both ends included,
// in ascending order of start; a window store only. Windows the store
// keeps past their retention, until its task deletes them, may show. The
// loop runs inside the partition's read, as Scan's does. An error ends
// the iteration; Err reports it.
func (r *StoreReader) FetchWindows(key []byte, from, to time.Time) iter.Seq2[time.Time, []byte] {
	return func(yield func(start time.Time, value []byte) bool) {
		r.errs.Set(r.fetchWindows(key, from, to, yield))
	}
}

func (r *StoreReader) fetchWindows(key []byte, from, to time.Time, yield func(time.Time, []byte) bool) error {
	if err := r.want(graph.WindowStore); err != nil {
		return err
	}
	p, err := r.PartitionOf(key)
	if err != nil {
		return err
	}
	return r.read(p, func(s *statelog.Space) error {
		// The window size only makes the ends of windows, which this
		// read does not return.
		w, err := statelog.NewWindowBytes(s, max(r.retention, time.Millisecond), time.Millisecond)
		if err != nil {
			return err
		}
		for start, v := range w.FetchRange(key, from, to) {
			if !yield(start, v) {
				break
			}
		}
		return w.Err()
	})
}
