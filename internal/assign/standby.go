package assign

import (
	"slices"
)

// PlanStandbys places standby copies of the tasks of the stateful
// sub-topologies (Subtopology.Stateful), given the active assignment
// active (a [Plan] result for the same members). A standby keeps a copy
// of its task's state current on another process, so that the task can
// fail over there without a full restore.
//
// The rules, in priority order:
//
//  1. a standby never goes to the process running its task, and a process
//     holds at most one copy of a task; so a task gets min(replicas,
//     processes-1) standbys;
//  2. the process with the fewest standbys of tasks active on the same
//     process as this one: the standbys of one process's tasks spread
//     over the others, so that when it fails its tasks can fail over to
//     their standbys without unbalancing the group (the active plan keeps
//     task counts within one of each other, so a survivor has room for
//     about one share of the failed process's tasks). This comes before
//     state: a standby placed where it has no state yet costs a copy in
//     the background, two standbys of one process's tasks on one process
//     cost a full restore in the foreground when that process fails;
//  3. then a process that holds the task's state already, highest offset
//     sum first (it has the least to catch up);
//  4. then the process with the fewest standbys so far, then the fewest
//     active tasks;
//  5. within the process, its member with the fewest standbys, then the
//     fewest active tasks.
//
// Processes are compared by their smallest member id and members by id as
// a last tie-break, so the result depends only on the input's content.
// Members without standbys have no entry; standbys are sorted. With
// replicas <= 0 or one process the result is empty. PlanStandbys does not
// modify its arguments.
func PlanStandbys(subs []Subtopology, partitions map[string]int32, members []Member, active map[string][]TaskID, replicas int) (map[string][]TaskID, error) {
	out := map[string][]TaskID{}
	if replicas <= 0 || len(members) == 0 {
		return out, nil
	}
	tasks, err := subtopologyTasks(subs, partitions)
	if err != nil {
		return nil, err
	}
	stateful := statefulSubs(subs)
	ms := sortedMembers(members)
	procs := standbyProcesses(ms)
	if len(procs) < 2 {
		return out, nil
	}
	memberStandbys := make([]int, len(ms))
	memberActives := make([]int, len(ms))
	activeOn := map[TaskID]*standbyProcess{}
	for _, p := range procs {
		for _, i := range p.members {
			for _, t := range active[ms[i].ID] {
				p.runs[t] = true
				p.actives++
				memberActives[i]++
				activeOn[t] = p
			}
		}
	}
	for _, t := range tasks {
		if !stateful[t.Subtopology] {
			continue
		}
		for range replicas {
			best := bestStandbyProcess(procs, t, activeOn[t])
			if best == nil {
				break // every process runs a copy already
			}
			m := best.members[0]
			for _, i := range best.members[1:] {
				if memberStandbys[i] < memberStandbys[m] || memberStandbys[i] == memberStandbys[m] && memberActives[i] < memberActives[m] {
					m = i
				}
			}
			best.runs[t] = true
			best.standbys++
			best.from[activeOn[t]]++
			memberStandbys[m]++
			out[ms[m].ID] = append(out[ms[m].ID], t)
		}
	}
	for id := range out {
		slices.SortFunc(out[id], TaskID.Compare)
	}
	return out, nil
}

// standbyProcess is a process as PlanStandbys places standbys on it.
type standbyProcess struct {
	members  []int // indices into the sorted members
	state    map[TaskID]int64
	standbys int
	actives  int
	runs     map[TaskID]bool // active or standby here
	// from counts the standbys here by the process running their task
	// (rule 3).
	from map[*standbyProcess]int
}

// standbyProcesses groups the sorted members into processes, in the
// order of their first (smallest) member id; a member without a process
// id is one alone.
func standbyProcesses(ms []Member) []*standbyProcess {
	var procs []*standbyProcess
	byID := map[string]*standbyProcess{}
	for i, m := range ms {
		key := processKey(m)
		p := byID[key]
		if p == nil {
			p = &standbyProcess{state: map[TaskID]int64{}, runs: map[TaskID]bool{}, from: map[*standbyProcess]int{}}
			byID[key] = p
			procs = append(procs, p)
		}
		p.members = append(p.members, i)
		mergeState(p.state, m.State)
	}
	return procs
}

// bestStandbyProcess returns the process that should hold the next
// standby of t (betterStandbyProcess's rules), nil when every process
// runs a copy of it already. activeOn runs t.
func bestStandbyProcess(procs []*standbyProcess, t TaskID, activeOn *standbyProcess) *standbyProcess {
	var best *standbyProcess
	for _, p := range procs {
		if p.runs[t] {
			continue
		}
		if best == nil || betterStandbyProcess(t,
			candidate{p.state, p.from[activeOn], p.standbys, p.actives},
			candidate{best.state, best.from[activeOn], best.standbys, best.actives}) {
			best = p
		}
	}
	return best
}

// candidate is what PlanStandbys compares processes by, for one task.
type candidate struct {
	state map[TaskID]int64
	// sameActive counts the process's standbys of tasks active on the
	// process running this task.
	sameActive, standbys, actives int
}

// betterStandbyProcess reports whether process c is a better home for a
// standby of t than best (PlanStandbys' rules 2 to 4); ties keep best.
func betterStandbyProcess(t TaskID, c, best candidate) bool {
	if c.sameActive != best.sameActive {
		return c.sameActive < best.sameActive
	}
	off, has := c.state[t]
	bestOff, bestHas := best.state[t]
	if has != bestHas {
		return has
	}
	if has && off != bestOff {
		return off > bestOff
	}
	if c.standbys != best.standbys {
		return c.standbys < best.standbys
	}
	return c.actives < best.actives
}
