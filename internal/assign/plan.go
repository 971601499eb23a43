package assign

import (
	"cmp"
	"fmt"
	"slices"
)

// Member is one group member's input to [Plan]. A member is one stream
// thread; several members may share a process (instance).
type Member struct {
	// ID is the group member id. IDs are unique within one Plan call.
	ID string
	// ProcessID identifies the member's process; "" means unknown, and the
	// member is then treated as a process of its own. Members with the same
	// ProcessID share their State: a task's offset sum for the process is
	// the largest any of its members reports.
	ProcessID string
	// Addr is the process's advertised address (UserData.Addr), "" for
	// none. Plan does not use it; the strategy hands it on (Assignment).
	Addr string
	// Owned are the tasks the member owns now. A task counts as owned if the
	// member owns any partition of it. Unknown tasks are ignored. A task
	// claimed by several members is kept by one of them (the one whose
	// process has the highest offset sum for it, then the smallest ID).
	Owned []TaskID
	// State maps the tasks whose local state the member's process holds to
	// the task's offset sum: the sum over the task's changelog partitions of
	// the checkpointed offsets, so higher means more caught up. Presence
	// means "holds state", whatever the value.
	State map[TaskID]int64
}

// Plan assigns every task of subs to members. partitions maps each source
// topic to its partition count; every topic of every sub-topology must be
// present, and the topics of one sub-topology must agree (otherwise Plan
// returns a [*PartitionCountError], joined with any other problem).
//
// The rules, in priority order:
//
//  1. every task goes to exactly one member (if there are members);
//  2. balance: task counts differ by at most one between members;
//  3. stickiness: a task stays with its current owner whenever 2 allows;
//  4. otherwise a member whose process holds the task's state, highest
//     offset sum first, whenever 2 allows;
//  5. otherwise the least-loaded member, spreading the tasks of one
//     sub-topology over members as a tie-break.
//
// The result has an entry for every member (nil when it gets no task) with
// its tasks sorted. It depends only on the input's content, never on the
// order of members or of map iteration. With no members the result is
// empty. Plan does not modify its arguments and is safe for concurrent use.
func Plan(subs []Subtopology, partitions map[string]int32, members []Member) (map[string][]TaskID, error) {
	tasks, err := subtopologyTasks(subs, partitions)
	if err != nil {
		return nil, err
	}
	ms := slices.Clone(members)
	slices.SortFunc(ms, func(a, b Member) int { return cmp.Compare(a.ID, b.ID) })
	for i := 1; i < len(ms); i++ {
		if ms[i].ID == ms[i-1].ID {
			return nil, fmt.Errorf("weir: member id %q appears twice", ms[i].ID)
		}
	}
	out := make(map[string][]TaskID, len(ms))
	if len(ms) == 0 {
		return out, nil
	}
	p := newPlanner(tasks, ms)
	p.keepOwned()
	p.placeByState()
	if err := p.placeRest(); err != nil {
		return nil, err
	}
	for i, m := range ms {
		slices.SortFunc(p.assigned[i], TaskID.Compare)
		out[m.ID] = p.assigned[i]
	}
	return out, nil
}

// planner holds one Plan computation. Members are referred to by their
// index in the ID-sorted slice and tasks by their index in the sorted task
// slice, so that every loop is deterministic.
type planner struct {
	tasks   []TaskID
	taskIdx map[TaskID]int
	members []Member

	// state[m] is the offset sum map of member m's process (shared between
	// the members of one process).
	state []map[TaskID]int64
	// proc[m] numbers member m's process.
	proc []int

	owner    []int // task -> member, -1 while unassigned
	assigned [][]TaskID
	subLoad  []map[int]int // member -> sub-topology -> tasks assigned

	// Balance: every member gets quota tasks, extra of them quota+1.
	quota, extra, extraUsed int
}

func newPlanner(tasks []TaskID, ms []Member) *planner {
	p := &planner{
		tasks:    tasks,
		taskIdx:  make(map[TaskID]int, len(tasks)),
		members:  ms,
		state:    make([]map[TaskID]int64, len(ms)),
		proc:     make([]int, len(ms)),
		owner:    make([]int, len(tasks)),
		assigned: make([][]TaskID, len(ms)),
		subLoad:  make([]map[int]int, len(ms)),
		quota:    len(tasks) / len(ms),
		extra:    len(tasks) % len(ms),
	}
	for i, t := range tasks {
		p.taskIdx[t] = i
		p.owner[i] = -1
	}
	// Merge the state of each process's members.
	procOf := make(map[string]int)
	var procState []map[TaskID]int64
	for i, m := range ms {
		pi, ok := procOf[m.ProcessID]
		if !ok || m.ProcessID == "" {
			pi = len(procState)
			procState = append(procState, make(map[TaskID]int64))
			if m.ProcessID != "" {
				procOf[m.ProcessID] = pi
			}
		}
		p.proc[i] = pi
		for t, off := range m.State {
			if _, known := p.taskIdx[t]; !known {
				continue
			}
			if cur, ok := procState[pi][t]; !ok || off > cur {
				procState[pi][t] = off
			}
		}
		p.subLoad[i] = make(map[int]int)
	}
	for i := range ms {
		p.state[i] = procState[p.proc[i]]
	}
	return p
}

func (p *planner) load(m int) int { return len(p.assigned[m]) }

// canTake reports whether member m may get one more task without breaking
// balance: up to quota always, quota+1 while fewer than extra members have
// it. Since quota*members+extra equals the task count, every member ends
// with quota or quota+1 tasks once all tasks are placed this way.
func (p *planner) canTake(m int) bool {
	l := p.load(m)
	return l < p.quota || (l == p.quota && p.extraUsed < p.extra)
}

func (p *planner) give(t, m int) {
	if p.load(m) == p.quota {
		p.extraUsed++
	}
	p.owner[t] = m
	p.assigned[m] = append(p.assigned[m], p.tasks[t])
	p.subLoad[m][p.tasks[t].Subtopology]++
}

// keepOwned applies stickiness. Every member keeps up to quota of the tasks
// it owns; the extra slots go to members owning more than quota, most
// owned first. This keeps the largest possible number of tasks in place
// (no balanced assignment keeps more than min(owned, quota) per member plus
// one for each of at most extra members), and it never lets sticky tasks
// fill quota+1 on more than extra members, which would starve others.
//
// It also makes cooperative rebalancing converge in two rounds: a member
// that gives up tasks ends this round with exactly its target count, so in
// the follow-up round, where the withheld tasks are unowned, it is full and
// cannot take back what it just revoked.
func (p *planner) keepOwned() {
	claims := make([][]int, len(p.tasks)) // task -> claiming members, in order
	for m, mem := range p.members {
		for _, t := range mem.Owned {
			ti, ok := p.taskIdx[t]
			if !ok {
				continue
			}
			claims[ti] = append(claims[ti], m)
		}
	}
	owned := make([][]int, len(p.members))
	for ti, c := range claims {
		if len(c) == 0 {
			continue
		}
		best := c[0]
		for _, m := range c[1:] {
			if p.stateCmp(ti, m, best) > 0 {
				best = m
			}
		}
		owned[best] = append(owned[best], ti)
	}
	var over []int
	receiver := func(o int) bool { return len(owned[o]) < p.quota }
	for m, ts := range owned {
		if len(ts) == 0 {
			continue
		}
		keys := make(map[int]int, len(ts))
		for _, ti := range ts {
			keys[ti] = p.shedRank(ti, m, receiver)
		}
		// Shed first the tasks a member that will take tasks has the
		// state of; keep those it would restore in full.
		slices.SortFunc(ts, func(a, b int) int {
			if c := cmp.Compare(keys[a], keys[b]); c != 0 {
				return c
			}
			return cmp.Compare(a, b)
		})
		for _, ti := range ts[:min(len(ts), p.quota)] {
			p.give(ti, m)
		}
		if len(ts) > p.quota {
			over = append(over, m)
		}
	}
	slices.SortStableFunc(over, func(a, b int) int { return cmp.Compare(len(owned[b]), len(owned[a])) })
	for _, m := range over[:min(len(over), p.extra)] {
		p.give(owned[m][p.quota], m)
	}
}

// stateCmp compares how well members a and b are placed for task ti by
// their processes' state: -1, 0 or +1. No state is worse than any offset.
func (p *planner) stateCmp(ti, a, b int) int {
	t := p.tasks[ti]
	oa, ha := p.state[a][t]
	ob, hb := p.state[b][t]
	switch {
	case ha != hb:
		if ha {
			return 1
		}
		return -1
	case !ha:
		return 0
	}
	return cmp.Compare(oa, ob)
}

// shedRank ranks a task owned by member m for shedding, lowest kept first,
// by what moving it would cost the members that will take tasks
// (receiver reports those, the members owning fewer than the quota): 0
// when no receiver's process holds its state (it would restore in full
// there), 1 when one holds it less caught up than m's process, 2 when one
// holds it at least as caught up (moving it costs the least restoring).
// Processes without room do not count: a task shed goes to a receiver, so
// a standby or an old copy on a full member would not save its restore.
func (p *planner) shedRank(ti, m int, receiver func(int) bool) int {
	t := p.tasks[ti]
	mine, hasMine := p.state[m][t]
	rank := 0
	for o := range p.members {
		if p.proc[o] == p.proc[m] || !receiver(o) {
			continue
		}
		off, ok := p.state[o][t]
		if !ok {
			continue
		}
		if !hasMine || off >= mine {
			return 2
		}
		rank = 1
	}
	return rank
}

// placeByState gives unassigned tasks to members whose process holds their
// state. Tasks whose state lives in fewer processes go first, since they
// have fewer good homes; for each task the most caught-up process wins,
// then the least-loaded member, then the one with fewest tasks of the same
// sub-topology, then the smallest ID.
func (p *planner) placeByState() {
	type cand struct {
		task    int
		members []int
		procs   int
	}
	var cands []cand
	for ti, t := range p.tasks {
		if p.owner[ti] >= 0 {
			continue
		}
		c := cand{task: ti}
		seen := make(map[int]bool)
		for m := range p.members {
			if _, ok := p.state[m][t]; ok {
				c.members = append(c.members, m)
				if !seen[p.proc[m]] {
					seen[p.proc[m]] = true
					c.procs++
				}
			}
		}
		if len(c.members) > 0 {
			cands = append(cands, c)
		}
	}
	slices.SortStableFunc(cands, func(a, b cand) int { return cmp.Compare(a.procs, b.procs) })
	for _, c := range cands {
		best := -1
		for _, m := range c.members {
			if !p.canTake(m) {
				continue
			}
			if best < 0 {
				best = m
				continue
			}
			if s := p.stateCmp(c.task, m, best); s > 0 || (s == 0 && p.lighter(c.task, m, best)) {
				best = m
			}
		}
		if best >= 0 {
			p.give(c.task, best)
		}
	}
}

// lighter reports whether member a is a better home than b for task ti by
// load alone: fewer tasks, then fewer tasks of ti's sub-topology. Equal
// members compare false, so the earlier (smaller ID) candidate wins.
func (p *planner) lighter(ti, a, b int) bool {
	if c := cmp.Compare(p.load(a), p.load(b)); c != 0 {
		return c < 0
	}
	sub := p.tasks[ti].Subtopology
	return p.subLoad[a][sub] < p.subLoad[b][sub]
}

// placeRest gives every remaining task, in task order, to the least-loaded
// member that can take it.
func (p *planner) placeRest() error {
	for ti := range p.tasks {
		if p.owner[ti] >= 0 {
			continue
		}
		best := -1
		for m := range p.members {
			if p.canTake(m) && (best < 0 || p.lighter(ti, m, best)) {
				best = m
			}
		}
		if best < 0 {
			// Unreachable: capacity always equals the number of tasks.
			return fmt.Errorf("weir: internal error: no member can take task %s", p.tasks[ti])
		}
		p.give(ti, best)
	}
	return nil
}
