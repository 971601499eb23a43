package task

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"

	"github.com/weirstream/weir/internal/client"
	"github.com/weirstream/weir/internal/graph"
	"github.com/weirstream/weir/internal/statelog"
)

// RestoreListener observes restores of store partitions from their
// changelogs: weir.RestoreListener, which satisfies it.
type RestoreListener interface {
	// OnRestoreStart is called before a store partition is restored from
	// offset from up to end (exclusive). from is 0 and full is true when
	// the local state was missing or unusable.
	OnRestoreStart(store string, partition int32, from, end int64, full bool)
	// OnBatchRestored is called after each applied batch of records.
	OnBatchRestored(store string, partition int32, next int64, records int)
	// OnRestoreEnd is called when the partition has caught up.
	OnRestoreEnd(store string, partition int32, records int64, took time.Duration)
}

// taskStore is a task's partition of a state store.
type taskStore struct {
	spec  *graph.Store
	topic string // changelog topic
	// source: the changelog is the store's input topic (topic), which
	// the task consumes (Layout.SourceChangelog). Nothing is produced for
	// the store; its checkpoint is the task's position in that topic.
	source bool
	space  *statelog.Space
	buf    *statelog.Buffer
	users  map[string]bool
	// last is the newest changelog record sent for this partition by the
	// commit under way; after the flush its offset gives the checkpoint.
	last *sarama.ProducerMessage
	// ckpt and ckptAt are the partition's checkpoint as last written (-1
	// before the restore ends); staged is the checkpoint the commit under
	// way writes, -1 none.
	ckpt, staged   int64
	ckptAt, stagAt time.Time
	// remaining is the restore's records left, for metrics.
	remaining atomic.Int64
	// dropping is held for writing while a full restore empties the
	// store, and for reading by a standby read (Standby.Read): no read
	// spans the drop, and one that starts after it sees remaining set.
	dropping sync.RWMutex
}

// sourceLog is the log the store's checkpoints are offsets of, as
// statelog.Space.SetLog records it: its input topic, or "" for its own
// changelog topic.
func (st *taskStore) sourceLog() string {
	if st.source {
		return st.topic
	}
	return ""
}

// checkpointRefresh is how often an idle store partition's checkpoint is
// written again with the current time. Its state still holds everything
// its changelog has below the checkpoint (the task owns the partition and
// wrote nothing since), and a recent time keeps a restart from restoring
// it in full for a checkpoint older than delete.retention.ms (see
// statelog.CheckpointTooOld) only because the store was quiet.
const checkpointRefresh = time.Minute

// storeNames returns the names of the task's stores.
func (t *Task) storeNames() []string {
	names := make([]string, 0, len(t.stores))
	for name := range t.stores {
		names = append(names, name)
	}
	return names
}

// openStores creates the task's store partitions.
func (t *Task) openStores(sub *graph.Subtopology) {
	t.stores = map[string]*taskStore{}
	inSub := map[*graph.Node]bool{}
	for _, n := range sub.Nodes {
		inSub[n] = true
	}
	sh := t.sh
	for _, s := range sh.Graph.Stores {
		if len(s.Users) == 0 || !inSub[s.Users[0]] {
			continue
		}
		space := sh.DB.Space(s.Name, t.id.Partition)
		topic, source := sh.Layout.SourceChangelog[s.Name]
		if !source {
			topic = graph.ChangelogTopic(sh.ApplicationID, s.Name)
		}
		st := &taskStore{
			spec:   s,
			topic:  topic,
			source: source,
			space:  space,
			buf:    statelog.NewBuffer(space),
			ckpt:   -1, staged: -1,
			users: map[string]bool{},
		}
		for _, u := range s.Users {
			st.users[u.Name] = true
		}
		t.stores[s.Name] = st
	}
}

// Store implements graph.TaskEnv. The store's buffer comes wrapped in the
// null-key rule (see nullKeyBytes).
func (t *Task) Store(node, name string) (statelog.Bytes, error) {
	if b := t.sh.Globals[name]; b != nil {
		gs := t.sh.Graph.Global(name)
		if gs == nil || !slices.ContainsFunc(gs.Users, func(n *graph.Node) bool { return n.Name == node }) {
			return nil, fmt.Errorf("weir: processor %q is not connected to global store %q (Topology.ConnectStore)", node, name)
		}
		return readOnly{b, name}, nil
	}
	st := t.stores[name]
	if st == nil {
		return nil, fmt.Errorf("weir: task %s has no store %q", t.name, name)
	}
	if !st.users[node] {
		return nil, fmt.Errorf("weir: processor %q is not attached to store %q (Topology.AddStore)", node, name)
	}
	return &nullKeyBytes{Bytes: st.buf, t: t, store: name}, nil
}

// BufferedBytes is the size of the task's uncommitted state changes.
func (t *Task) BufferedBytes() int {
	n := 0
	for _, st := range t.stores {
		n += st.buf.Size()
	}
	return n
}

// storeIndex returns the local index a store of kind k keeps beside its
// changelogged entries (see statelog.Index), or nil when it keeps none.
// An index is written to Badger at commit but not to the changelog, and
// the restore rebuilds it from the primary records. A kind missing here
// would send its index to the changelog, as weir did before local
// indexes: twice the records, but nothing lost.
func storeIndex(k graph.StoreKind) statelog.Index {
	switch k {
	case graph.WindowStore:
		return statelog.WindowIndex()
	case graph.SessionStore:
		return statelog.SessionIndex()
	case graph.TTLStore:
		return statelog.TTLIndex()
	}
	return nil
}

// SendChangelog produces every buffered change to the store's changelog,
// one record per key, to the task's partition; the entries of the store's
// local index stay out of it (see storeIndex).
//
// A task that is not running yet (restoring) has nothing to send: its
// stores belong to its restore, on a goroutine of its own, until
// Restored reports it done. Stage and Applied leave it alone for the
// same reason.
func (t *Task) SendChangelog() error {
	if !t.running {
		return nil
	}
	for _, st := range t.stores {
		changes := st.buf.Changes()
		if len(changes) == 0 || st.source {
			continue
		}
		o := &client.Origin{Explicit: true, Task: t.name, Offset: -1, Store: st.spec.Name}
		last, err := statelog.Produce(changes, storeIndex(st.spec.Kind), st.topic, t.id.Partition, o, t.host.Send)
		if last != nil {
			st.last = last
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// Stage adds the task's committed changes and their checkpoints to c: the
// commit that contained them has succeeded. Applied must follow a flushed
// c.
func (t *Task) Stage(c *statelog.Commit, at time.Time) error {
	if !t.running {
		return nil // restoring: see SendChangelog
	}
	for _, st := range t.stores {
		if err := c.Stage(st.space, st.buf.Changes()); err != nil {
			return fmt.Errorf("weir: task %s: store %s: %w", t.name, st.spec.Name, err)
		}
		st.staged = -1
		switch {
		case st.source:
			// The commit committed the task's position in the topic
			// that is the store's changelog: everything below it is in
			// the store.
			if pos := t.position(st.topic); pos >= 0 && (pos != st.ckpt || at.Sub(st.ckptAt) >= checkpointRefresh) {
				st.staged = pos
			}
		case st.last != nil:
			st.staged = st.last.Offset + 1
		case st.ckpt >= 0 && at.Sub(st.ckptAt) >= checkpointRefresh:
			st.staged = st.ckpt
		}
		if st.staged >= 0 {
			c.Checkpoint(st.space, st.staged, at)
			st.stagAt = at
		}
	}
	return nil
}

// Applied tells the task its staged changes are in the database: its
// buffers start over and the new checkpoints are reported.
func (t *Task) Applied() {
	if !t.running {
		return
	}
	for _, st := range t.stores {
		st.buf.Clear()
		if st.staged >= 0 {
			st.ckpt, st.ckptAt = st.staged, st.stagAt
			t.sh.Local.Checkpointed(st.spec.Name, t.id.Partition, st.ckpt)
			st.staged = -1
		}
		st.last = nil
	}
}

// DiscardState drops uncommitted changes: the commit failed.
func (t *Task) DiscardState() {
	for _, st := range t.stores {
		st.buf.Clear()
		st.last, st.staged = nil, -1
	}
}

// readOnly is a global store as its readers see it: every task reads it,
// only the instance's global updater writes it.
type readOnly struct {
	statelog.Bytes
	name string
}

func (r readOnly) Put(key, value []byte) error {
	return fmt.Errorf("weir: global store %q is read-only: it follows its topic", r.name)
}

func (r readOnly) Delete(key []byte) error { return r.Put(key, nil) }

func (r readOnly) PutStamped(key, value []byte, _ int64) error { return r.Put(key, value) }

// position returns the next offset the task will consume of topic (its
// own partition of it), -1 before it has consumed any.
func (t *Task) position(topic string) int64 {
	for _, p := range t.parts {
		if p.tp.Topic == topic {
			return p.consumed
		}
	}
	return -1
}
