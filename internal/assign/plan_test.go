package assign

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
)

// scenario is one random input to Plan.
type scenario struct {
	subs       []Subtopology
	partitions map[string]int32
	members    []Member
}

func (s scenario) tasks() []TaskID {
	var ts []TaskID
	for _, sub := range s.subs {
		for p := range s.partitions[sub.Topics[0]] {
			ts = append(ts, TaskID{sub.ID, p})
		}
	}
	return ts
}

// randomTopology returns 1..3 sub-topologies of 1..3 topics each with
// 1..32 partitions.
func randomTopology(rng *rand.Rand) ([]Subtopology, map[string]int32) {
	parts := map[string]int32{}
	var subs []Subtopology
	for id := range 1 + rng.IntN(3) {
		n := int32(1 + rng.IntN(32))
		sub := Subtopology{ID: id * 2} // ids need not be dense
		for j := range 1 + rng.IntN(3) {
			topic := fmt.Sprintf("s%d-t%d", id, j)
			sub.Topics = append(sub.Topics, topic)
			parts[topic] = n
		}
		subs = append(subs, sub)
	}
	return subs, parts
}

// randomScenario returns 1..12 members spread over processes, with random
// ownership and state. With overlap, several members may claim one task,
// members claim tasks that do not exist and list a task twice; without,
// every task has at most one owner.
func randomScenario(rng *rand.Rand, overlap bool) scenario {
	s := scenario{}
	s.subs, s.partitions = randomTopology(rng)
	tasks := s.tasks()
	n := 1 + rng.IntN(12)
	procs := 1 + rng.IntN(n)
	procState := make([]map[TaskID]int64, procs)
	for p := range procState {
		procState[p] = map[TaskID]int64{}
		for _, t := range tasks {
			if rng.IntN(4) == 0 {
				procState[p][t] = rng.Int64N(1000)
			}
		}
	}
	for i := range n {
		p := rng.IntN(procs)
		m := Member{ID: fmt.Sprintf("member-%02d", i), ProcessID: fmt.Sprintf("proc-%d", p)}
		switch rng.IntN(6) {
		case 0:
			m.ProcessID = "" // unknown process: own state only
			m.State = procState[p]
		case 1: // this thread did not report the process's state
		default:
			m.State = procState[p]
		}
		s.members = append(s.members, m)
	}
	ownP := rng.Float64()
	for _, t := range tasks {
		if overlap {
			for i := range s.members {
				if rng.Float64() < ownP/float64(n) {
					s.members[i].Owned = append(s.members[i].Owned, t)
				}
			}
		} else if rng.Float64() < ownP {
			i := rng.IntN(n)
			s.members[i].Owned = append(s.members[i].Owned, t)
		}
	}
	if overlap {
		for i := range s.members {
			if rng.IntN(5) == 0 {
				s.members[i].Owned = append(s.members[i].Owned, TaskID{99, 0}, TaskID{0, 999})
			}
			if o := s.members[i].Owned; len(o) > 0 && rng.IntN(3) == 0 {
				s.members[i].Owned = append(o, o[rng.IntN(len(o))]) // listed twice
			}
		}
	}
	rng.Shuffle(len(s.members), func(i, j int) { s.members[i], s.members[j] = s.members[j], s.members[i] })
	return s
}

// checkPlan fails t unless res gives every task of s to exactly one member,
// lists every member and nobody else, and task counts differ by at most one.
func checkPlan(t *testing.T, s scenario, res map[string][]TaskID) {
	t.Helper()
	if len(res) != len(s.members) {
		t.Fatalf("plan has %d members, want %d", len(res), len(s.members))
	}
	seen := map[TaskID]string{}
	lo, hi := int(^uint(0)>>1), 0
	for _, m := range s.members {
		ts, ok := res[m.ID]
		if !ok {
			t.Fatalf("member %s missing from plan", m.ID)
		}
		lo, hi = min(lo, len(ts)), max(hi, len(ts))
		for _, task := range ts {
			if prev, dup := seen[task]; dup {
				t.Fatalf("task %v assigned to %s and %s", task, prev, m.ID)
			}
			seen[task] = m.ID
		}
		if !slices.IsSortedFunc(ts, TaskID.Compare) {
			t.Errorf("tasks of %s not sorted: %v", m.ID, ts)
		}
	}
	tasks := s.tasks()
	if len(seen) != len(tasks) {
		t.Fatalf("%d tasks assigned, want %d", len(seen), len(tasks))
	}
	for _, task := range tasks {
		if _, ok := seen[task]; !ok {
			t.Fatalf("task %v not assigned", task)
		}
	}
	if hi-lo > 1 {
		t.Fatalf("unbalanced: counts range from %d to %d", lo, hi)
	}
}

// maxKept is the largest number of tasks any balanced assignment can leave
// with their owners when no task has two owners: each member keeps at most
// its share q, and at most n%m members keep q+1.
func maxKept(s scenario) int {
	n, m := len(s.tasks()), len(s.members)
	q, r := n/m, n%m
	valid := map[TaskID]bool{}
	for _, t := range s.tasks() {
		valid[t] = true
	}
	kept, over := 0, 0
	for _, mem := range s.members {
		o := 0
		for _, t := range mem.Owned {
			if valid[t] {
				o++
			}
		}
		kept += min(o, q)
		if o > q {
			over++
		}
	}
	return kept + min(over, r)
}

// kept counts the tasks res leaves with a member that owned them.
func kept(s scenario, res map[string][]TaskID) int {
	k := 0
	for _, m := range s.members {
		for _, t := range res[m.ID] {
			if slices.Contains(m.Owned, t) {
				k++
			}
		}
	}
	return k
}

func TestPlanBalancedCompleteDeterministic(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 3000 {
		s := randomScenario(rng, i%2 == 0)
		res, err := Plan(s.subs, s.partitions, s.members)
		if err != nil {
			t.Fatalf("case %d: %v", i, err)
		}
		checkPlan(t, s, res)

		// The same input in another order gives the same plan.
		shuffled := slices.Clone(s.members)
		rng.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		for j := range shuffled {
			rng.Shuffle(len(shuffled[j].Owned), func(a, b int) {
				shuffled[j].Owned[a], shuffled[j].Owned[b] = shuffled[j].Owned[b], shuffled[j].Owned[a]
			})
		}
		again, err := Plan(s.subs, s.partitions, shuffled)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(res, again) {
			t.Fatalf("case %d: plan depends on input order:\n%v\n%v", i, res, again)
		}
	}
}

// TestPlanKeepsMostOwned checks rule 3 exactly: the plan keeps as many
// tasks with their owners as any balanced assignment could.
func TestPlanKeepsMostOwned(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range 3000 {
		s := randomScenario(rng, false)
		res, err := Plan(s.subs, s.partitions, s.members)
		if err != nil {
			t.Fatal(err)
		}
		checkPlan(t, s, res)
		if got, want := kept(s, res), maxKept(s); got != want {
			t.Fatalf("case %d: kept %d tasks with their owner, want %d\nmembers %+v\nplan %v", i, got, want, s.members, res)
		}
	}
}

// withOwned returns s's members owning what res gave them.
func withOwned(members []Member, res map[string][]TaskID) []Member {
	out := slices.Clone(members)
	for i := range out {
		out[i].Owned = slices.Clone(res[out[i].ID])
	}
	return out
}

func TestPlanStableMembership(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(5, 6))
	for i := range 1000 {
		s := randomScenario(rng, i%2 == 0)
		first, err := Plan(s.subs, s.partitions, s.members)
		if err != nil {
			t.Fatal(err)
		}
		second, err := Plan(s.subs, s.partitions, withOwned(s.members, first))
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(first, second) {
			t.Fatalf("case %d: unchanged membership moved tasks:\n%v\n%v", i, first, second)
		}
	}
}

// moved counts tasks whose member changed between before and after; tasks
// of members gone from after count as moved.
func moved(before, after map[string][]TaskID) int {
	owner := map[TaskID]string{}
	for m, ts := range after {
		for _, t := range ts {
			owner[t] = m
		}
	}
	n := 0
	for m, ts := range before {
		for _, t := range ts {
			if owner[t] != m {
				n++
			}
		}
	}
	return n
}

// TestPlanMembershipChange: starting from a balanced plan, a joining member
// moves exactly floor(tasks/(members+1)) tasks (the newcomer's share, the
// minimum), and a leaving member moves exactly the tasks it had.
func TestPlanMembershipChange(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(7, 8))
	for i := range 1000 {
		s := randomScenario(rng, false)
		before, err := Plan(s.subs, s.partitions, s.members)
		if err != nil {
			t.Fatal(err)
		}
		members := withOwned(s.members, before)
		n := len(s.tasks())

		joined := append(slices.Clone(members), Member{ID: fmt.Sprintf("new-%d", rng.IntN(100)), ProcessID: "new"})
		js := scenario{s.subs, s.partitions, joined}
		after, err := Plan(s.subs, s.partitions, joined)
		if err != nil {
			t.Fatal(err)
		}
		checkPlan(t, js, after)
		if got, want := moved(before, after), n/len(joined); got != want {
			t.Fatalf("case %d: join of member %d moved %d of %d tasks, want %d", i, len(joined), got, n, want)
		}

		if len(members) < 2 {
			continue
		}
		leaver := rng.IntN(len(members))
		left := slices.Delete(slices.Clone(members), leaver, leaver+1)
		after, err = Plan(s.subs, s.partitions, left)
		if err != nil {
			t.Fatal(err)
		}
		checkPlan(t, scenario{s.subs, s.partitions, left}, after)
		if got, want := moved(before, after), len(before[members[leaver].ID]); got != want {
			t.Fatalf("case %d: leave moved %d tasks, want %d (the leaver's)", i, got, want)
		}
	}
}

func tasks(ids ...string) []TaskID {
	out := make([]TaskID, 0, len(ids))
	for _, s := range ids {
		t, err := ParseTaskID(s)
		if err != nil {
			panic(err)
		}
		out = append(out, t)
	}
	return out
}

func state(kv ...any) map[TaskID]int64 {
	m := map[TaskID]int64{}
	for i := 0; i < len(kv); i += 2 {
		m[tasks(kv[i].(string))[0]] = int64(kv[i+1].(int))
	}
	return m
}

// TestPlanCases pins the rules on small inputs with one sub-topology "in".
func TestPlanCases(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		partitions int32
		members    []Member
		want       map[string][]TaskID
	}{
		{
			name:       "fresh assignment in task order",
			partitions: 5,
			members:    []Member{{ID: "b"}, {ID: "a"}},
			want:       map[string][]TaskID{"a": tasks("0_0", "0_2", "0_4"), "b": tasks("0_1", "0_3")},
		},
		{
			name:       "more members than tasks",
			partitions: 2,
			members:    []Member{{ID: "a"}, {ID: "b"}, {ID: "c"}},
			want:       map[string][]TaskID{"a": tasks("0_0"), "b": tasks("0_1"), "c": nil},
		},
		{
			// Regression for the classic trap: letting every member keep
			// ceil(7/3)=3 sticky tasks would leave c with 1.
			name:       "sticky members do not starve others",
			partitions: 7,
			members: []Member{
				{ID: "a", Owned: tasks("0_0", "0_1", "0_2")},
				{ID: "b", Owned: tasks("0_3", "0_4", "0_5")},
				{ID: "c", Owned: tasks("0_6")},
			},
			want: map[string][]TaskID{"a": tasks("0_0", "0_1", "0_2"), "b": tasks("0_3", "0_4"), "c": tasks("0_5", "0_6")},
		},
		{
			name:       "extra slot goes to the member owning most",
			partitions: 5,
			members: []Member{
				{ID: "a", Owned: tasks("0_0")},
				{ID: "b", Owned: tasks("0_1", "0_2", "0_3", "0_4")},
			},
			want: map[string][]TaskID{"a": tasks("0_0", "0_4"), "b": tasks("0_1", "0_2", "0_3")},
		},
		{
			name:       "owner beats a more caught-up process",
			partitions: 2,
			members: []Member{
				{ID: "a", ProcessID: "p1", Owned: tasks("0_1"), State: state("0_1", 1)},
				{ID: "b", ProcessID: "p2", State: state("0_1", 100)},
			},
			want: map[string][]TaskID{"a": tasks("0_1"), "b": tasks("0_0")},
		},
		{
			name:       "unowned task goes to the highest offset sum",
			partitions: 3,
			members: []Member{
				{ID: "a", ProcessID: "p1"},
				{ID: "b", ProcessID: "p2", State: state("0_0", 10)},
				{ID: "c", ProcessID: "p3", State: state("0_0", 20)},
			},
			want: map[string][]TaskID{"a": tasks("0_1"), "b": tasks("0_2"), "c": tasks("0_0")},
		},
		{
			// In task order 0_0 would take a's only slot and 0_1 would go
			// to b, which has no state for it.
			name:       "balance beats state; the task with fewer homes goes first",
			partitions: 2,
			members: []Member{
				{ID: "a", ProcessID: "p1", State: state("0_0", 7, "0_1", 5)},
				{ID: "b", ProcessID: "p2", State: state("0_0", 3)},
			},
			want: map[string][]TaskID{"a": tasks("0_1"), "b": tasks("0_0")},
		},
		{
			name:       "threads of one process share its state",
			partitions: 2,
			members: []Member{
				{ID: "a", ProcessID: "p2"},
				{ID: "b1", ProcessID: "p1", State: state("0_0", 5, "0_1", 5)},
				{ID: "b2", ProcessID: "p1"},
			},
			want: map[string][]TaskID{"a": nil, "b1": tasks("0_0"), "b2": tasks("0_1")},
		},
		{
			name:       "unknown processes do not share state",
			partitions: 2,
			members: []Member{
				{ID: "a"},
				{ID: "b1", State: state("0_0", 5, "0_1", 5)},
				{ID: "b2"},
			},
			want: map[string][]TaskID{"a": tasks("0_1"), "b1": tasks("0_0"), "b2": nil},
		},
		{
			name:       "shedding member gives up the task another process is ahead on",
			partitions: 2,
			members: []Member{
				{ID: "a", ProcessID: "p1", Owned: tasks("0_0", "0_1"), State: state("0_0", 5, "0_1", 5)},
				{ID: "b", ProcessID: "p2", State: state("0_0", 9)},
			},
			want: map[string][]TaskID{"a": tasks("0_1"), "b": tasks("0_0")},
		},
		{
			name:       "double claim: the owner with state keeps it",
			partitions: 2,
			members: []Member{
				{ID: "a", ProcessID: "p1", Owned: tasks("0_0")},
				{ID: "b", ProcessID: "p2", Owned: tasks("0_0"), State: state("0_0", 1)},
			},
			want: map[string][]TaskID{"a": tasks("0_1"), "b": tasks("0_0")},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			subs := []Subtopology{{ID: 0, Topics: []string{"in"}}}
			got, err := Plan(subs, map[string]int32{"in": tc.partitions}, tc.members)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Plan = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestPlanStatePreference: whenever a process holds state for an unowned
// task and balance lets it take one more, the task goes to the process
// with the highest offset sum; here every member can take exactly one task
// and every process holds state for exactly one, so each gets its own.
func TestPlanStatePreference(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(9, 10))
	for i := range 500 {
		subs, parts := randomTopology(rng)
		all := scenario{subs: subs, partitions: parts}.tasks()
		rng.Shuffle(len(all), func(i, j int) { all[i], all[j] = all[j], all[i] })
		var members []Member
		want := map[string][]TaskID{}
		for j, task := range all {
			id := fmt.Sprintf("m%03d", rng.IntN(1000)*1000+j)
			members = append(members, Member{ID: id, ProcessID: id, State: state(task.String(), 10)})
			want[id] = []TaskID{task}
			// A less caught-up process also holds it; it never wins.
			if j > 0 {
				members[j-1].State[task] = 9
			}
		}
		got, err := Plan(subs, parts, members)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("case %d: Plan = %v, want %v", i, got, want)
		}
	}
}

// TestPlanSpreadsSubtopologies: without ownership or state, each member
// gets the same number of tasks of every sub-topology when that divides.
func TestPlanSpreadsSubtopologies(t *testing.T) {
	t.Parallel()
	subs := []Subtopology{{ID: 0, Topics: []string{"a"}}, {ID: 1, Topics: []string{"b"}}, {ID: 2, Topics: []string{"c"}}}
	for _, m := range []int{1, 2, 3, 4, 6, 12} {
		var members []Member
		for i := range m {
			members = append(members, Member{ID: fmt.Sprint(i)})
		}
		got, err := Plan(subs, map[string]int32{"a": 12, "b": 12, "c": 12}, members)
		if err != nil {
			t.Fatal(err)
		}
		for id, ts := range got {
			per := map[int]int{}
			for _, t := range ts {
				per[t.Subtopology]++
			}
			for sub := range 3 {
				if per[sub] != 12/m {
					t.Errorf("%d members: member %s has %d tasks of subtopology %d, want %d", m, id, per[sub], sub, 12/m)
				}
			}
		}
	}
}

// TestPlanSpreadTieBreak: between equally loaded members, a task goes to
// the one with fewer tasks of its sub-topology, before member id order.
func TestPlanSpreadTieBreak(t *testing.T) {
	t.Parallel()
	subs := []Subtopology{{ID: 0, Topics: []string{"a"}}, {ID: 1, Topics: []string{"b"}}}
	got, err := Plan(subs, map[string]int32{"a": 2, "b": 2}, []Member{
		{ID: "x", Owned: tasks("0_0")},
		{ID: "y", Owned: tasks("1_0")},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]TaskID{"x": tasks("0_0", "1_1"), "y": tasks("0_1", "1_0")}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Plan = %v, want %v", got, want)
	}
}

func TestPlanEdgeCases(t *testing.T) {
	t.Parallel()
	subs := []Subtopology{{ID: 0, Topics: []string{"a"}}}
	got, err := Plan(subs, map[string]int32{"a": 3}, nil)
	if err != nil || len(got) != 0 {
		t.Errorf("no members: Plan = %v, %v; want empty", got, err)
	}
	got, err = Plan(subs, map[string]int32{"a": 0}, []Member{{ID: "x"}})
	if err != nil || !reflect.DeepEqual(got, map[string][]TaskID{"x": nil}) {
		t.Errorf("no tasks: Plan = %v, %v; want x with nothing", got, err)
	}
	if _, err := Plan(subs, map[string]int32{"a": 3}, []Member{{ID: "x"}, {ID: "x"}}); err == nil {
		t.Error("duplicate member ids: Plan succeeded")
	}
	// Plan leaves its input alone.
	members := []Member{{ID: "b", Owned: tasks("0_2", "0_0")}, {ID: "a"}}
	snapshot := slices.Clone(members)
	snapshot[0].Owned = slices.Clone(members[0].Owned)
	if _, err := Plan(subs, map[string]int32{"a": 3}, members); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(members, snapshot) {
		t.Errorf("Plan modified its input: %v, was %v", members, snapshot)
	}
}

// A replacement instance comes back after its tasks moved to the others:
// the members over their share give it back the tasks whose state it
// holds, not ones a full member holds standbys of, which it would have to
// restore in full.
func TestPlanGivesBackTasksToTheMemberWithTheirState(t *testing.T) {
	subs := []Subtopology{{ID: 0, Topics: []string{"in"}, Stateful: true}}
	parts := map[string]int32{"in": 6}
	st := func(kv ...int64) map[TaskID]int64 {
		m := map[TaskID]int64{}
		for i := 0; i < len(kv); i += 2 {
			m[TaskID{0, int32(kv[i])}] = kv[i+1]
		}
		return m
	}
	members := []Member{
		{ID: "a", ProcessID: "A", Owned: []TaskID{{0, 0}, {0, 1}, {0, 4}}, State: st(0, 100, 1, 100, 4, 100, 5, 100)},
		{ID: "b", ProcessID: "B", Owned: []TaskID{{0, 2}, {0, 3}, {0, 5}}, State: st(2, 100, 3, 100, 5, 100, 4, 100)},
		{ID: "c", ProcessID: "C", State: st(0, 90, 3, 90)}, // back, with its old tasks' state
	}
	plan, err := Plan(subs, parts, members)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := plan["c"], []TaskID{{0, 0}, {0, 3}}; !slices.Equal(got, want) {
		t.Errorf("the returning member got %v, want its own %v back (plan %v)", got, want, plan)
	}
}
