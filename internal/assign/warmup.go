package assign

import (
	"maps"
	"slices"
)

// Warmups configures [KeepCaughtUp]: how far behind a process may be and
// still take a task over at once, and how many warm-up copies one process
// may hold.
type Warmups struct {
	// AcceptableLag is the most a process's state of a task may be behind
	// the task's current owner, in records (offset sums), for the task to
	// move to it at once.
	AcceptableLag int64
	// PerProcess is the most warm-up tasks one process is given. <= 0
	// turns warm-ups off: every task moves where the balanced plan puts
	// it, restoring there in the foreground.
	PerProcess int
}

// Enabled reports whether w places warm-ups at all.
func (w Warmups) Enabled() bool { return w.PerProcess > 0 }

// KeepCaughtUp turns the balanced plan target (a [Plan] result for the
// same members) into the assignment to send and the warm-up tasks to
// place, in the spirit of Kafka Streams' KIP-441: a stateful task that
// the plan moves away from a live owner to a process whose state of it is
// more than w.AcceptableLag records behind the owner's (a process without
// state of it is behind by the owner's whole offset sum, as in Kafka
// Streams: a small store moves at once) stays with its owner, beyond balance, and the target member gets
// a warm-up copy of it instead, at most w.PerProcess per process (tasks
// in task order; a task over the bound stays and waits for a later
// round). A warm-up is a standby that exists to take the task over: once
// it is caught up, its instance asks for a rebalance (a probing
// rebalance), in which the plan, seeing the target's state within the
// acceptable lag, moves the task for good. So moving a task never stops
// it for a full restore.
//
// The owner of a task is the member that owns it now (Member.Owned,
// stale claims already dropped); of several claimants, the one whose
// process is most caught up, then the smallest id. A task without a live
// owner (its owner left or failed) is a failover: it goes where the plan
// puts it, as does a stateless task, a task whose owner holds no state of
// it, and a task moving between members of one process (they share their
// state).
//
// Keeping tasks unbalances the group; stateless tasks then move from the
// most loaded members to the least loaded until task counts are within
// one of each other or the most loaded member has no stateless task left:
// they cost no restore wherever they go.
//
// target is left as it is; the result is a new map with an entry for
// every member (nil when it gets no task), tasks sorted, and the
// warm-ups per member (members without any have no entry). With warm-ups
// off it returns target's content and no warm-ups.
func KeepCaughtUp(subs []Subtopology, members []Member, target map[string][]TaskID, w Warmups) (map[string][]TaskID, map[string][]TaskID) {
	out := make(map[string][]TaskID, len(target))
	for id, ts := range target {
		out[id] = slices.Clone(ts)
	}
	warm := map[string][]TaskID{}
	if !w.Enabled() || len(members) == 0 {
		return out, warm
	}
	stateful := statefulSubs(subs)
	ms := sortedMembers(members)
	index := make(map[string]int, len(ms))
	for i, m := range ms {
		index[m.ID] = i
	}
	state := processStates(ms)
	owner := liveOwners(ms, state)
	targetOf := map[TaskID]int{}
	for id, ts := range target {
		i, ok := index[id]
		if !ok {
			continue
		}
		for _, t := range ts {
			targetOf[t] = i
		}
	}
	warmCount := map[string]int{}
	for _, t := range slices.SortedFunc(maps.Keys(targetOf), TaskID.Compare) {
		m := targetOf[t]
		o, owned := owner[t]
		if !stateful[t.Subtopology] || !owned || o == m {
			continue
		}
		ownerKey, targetKey := processKey(ms[o]), processKey(ms[m])
		if ownerKey == targetKey {
			continue
		}
		ownerOff, ownerHas := state[ownerKey][t]
		if !ownerHas {
			continue // nothing to keep: the target restores nothing more
		}
		// A process without state of the task is behind by all of it:
		// the owner's offset sum bounds what a restore reads.
		if ownerOff-state[targetKey][t] <= w.AcceptableLag {
			continue // caught up: move at once
		}
		// Keep the task with its owner.
		out[ms[m].ID] = slices.DeleteFunc(out[ms[m].ID], func(x TaskID) bool { return x == t })
		out[ms[o].ID] = append(out[ms[o].ID], t)
		if warmCount[targetKey] < w.PerProcess {
			warmCount[targetKey]++
			warm[ms[m].ID] = append(warm[ms[m].ID], t)
		}
	}
	balanceStateless(ms, out, stateful)
	for id := range out {
		if len(out[id]) == 0 {
			out[id] = nil
			continue
		}
		slices.SortFunc(out[id], TaskID.Compare)
	}
	for id := range warm {
		slices.SortFunc(warm[id], TaskID.Compare)
	}
	return out, warm
}

// processStates merges the state each process's members report: per
// process key, each task's offset sum.
func processStates(ms []Member) map[string]map[TaskID]int64 {
	state := map[string]map[TaskID]int64{}
	for _, m := range ms {
		k := processKey(m)
		if state[k] == nil {
			state[k] = map[TaskID]int64{}
		}
		mergeState(state[k], m.State)
	}
	return state
}

// liveOwners returns the member (an index into ms) that owns each owned
// task: of two that claim one, the one whose process holds more of its
// state.
func liveOwners(ms []Member, state map[string]map[TaskID]int64) map[TaskID]int {
	owner := map[TaskID]int{}
	for i, m := range ms {
		for _, t := range m.Owned {
			o, ok := owner[t]
			if !ok {
				owner[t] = i
				continue
			}
			mine, hasMine := state[processKey(m)][t]
			theirs, hasTheirs := state[processKey(ms[o])][t]
			if hasMine && (!hasTheirs || mine > theirs) {
				owner[t] = i
			}
		}
	}
	return owner
}

// balanceStateless moves stateless tasks from the most loaded members of
// a to the least loaded, the highest task first, while their task counts
// differ by more than one. Ties go to the smaller member id.
func balanceStateless(ms []Member, a map[string][]TaskID, stateful map[int]bool) {
	for {
		hi, lo := -1, -1
		for i, m := range ms {
			n := len(a[m.ID])
			if lo < 0 || n < len(a[ms[lo].ID]) {
				lo = i
			}
			if !slices.ContainsFunc(a[m.ID], func(t TaskID) bool { return !stateful[t.Subtopology] }) {
				continue
			}
			if hi < 0 || n > len(a[ms[hi].ID]) {
				hi = i
			}
		}
		if hi < 0 || len(a[ms[hi].ID])-len(a[ms[lo].ID]) <= 1 {
			return
		}
		from := a[ms[hi].ID]
		slices.SortFunc(from, TaskID.Compare)
		k := len(from) - 1
		for stateful[from[k].Subtopology] {
			k--
		}
		t := from[k]
		a[ms[hi].ID] = slices.Delete(from, k, k+1)
		a[ms[lo].ID] = append(a[ms[lo].ID], t)
	}
}
