package task

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/weirstream/weir/internal/assign"
	"github.com/weirstream/weir/internal/graph"
	"github.com/weirstream/weir/internal/statelog"
)

// Tasks without a broker or Badger, for package weirtest: the same task,
// node and store code as the runtime, with stores in memory.

// NewInMemory returns a running task of sub-topology sub on partition:
// its stores are statelog.Memory under the usual write buffer and start
// empty, so there is nothing to restore and Init has run. sh needs
// Config, Graph and Metrics; Layout, DB, Local and the restore fields are
// not used. Feed an input partition by attaching a queue to it (Attach),
// then call Next and Process; FlushInMemory stands for a commit.
func NewInMemory(ctx context.Context, sh *Shared, host Host, log *slog.Logger, sub *graph.Subtopology, partition int32) (*Task, error) {
	id := assign.TaskID{Subtopology: sub.ID, Partition: partition}
	t, err := newTask(ctx, sh, host, 0, log, id, sub)
	if err != nil {
		return nil, err
	}
	t.stores = map[string]*taskStore{}
	inSub := map[*graph.Node]bool{}
	for _, n := range sub.Nodes {
		inSub[n] = true
	}
	for _, s := range sh.Graph.Stores {
		if len(s.Users) == 0 || !inSub[s.Users[0]] {
			continue
		}
		st := &taskStore{spec: s, buf: statelog.NewBuffer(&statelog.Memory{}), users: map[string]bool{}, ckpt: -1, staged: -1}
		for _, u := range s.Users {
			st.users[u.Name] = true
		}
		t.stores[s.Name] = st
	}
	if err := t.init(); err != nil {
		t.stop()
		return nil, err
	}
	return t, nil
}

// FlushInMemory commits the state changes of a task made by NewInMemory:
// its stores' buffers are written to their memory. No changelog record
// is produced.
func (t *Task) FlushInMemory() error {
	for _, st := range t.stores {
		if err := st.buf.Flush(); err != nil {
			return fmt.Errorf("weir: task %s: store %s: %w", t.name, st.spec.Name, err)
		}
	}
	return nil
}

// StoreBytes returns the task's partition of store name, read through
// its write buffer, or false when the task has no such store. It is for
// reading (weirtest's store views): a write through it skips the
// null-key rule.
func (t *Task) StoreBytes(name string) (statelog.Bytes, bool) {
	st := t.stores[name]
	if st == nil {
		return nil, false
	}
	return st.buf, true
}

// now is the task's wall clock: Config.Clock, else the system clock.
func (t *Task) now() time.Time {
	if t.sh.Clock != nil {
		return t.sh.Clock()
	}
	return time.Now()
}
