package assign

import (
	"fmt"
	"maps"
	"reflect"
	"slices"
	"testing"

	"github.com/IBM/sarama"
)

// warmSubs is a stateless sub-topology of six tasks and a stateful one of
// six.
var (
	warmSubs = []Subtopology{
		{ID: 0, Topics: []string{"in"}, Stateful: false},
		{ID: 1, Topics: []string{"rep"}, Stateful: true},
	}
	warmCounts = map[string]int32{"in": 6, "rep": 6}
)

func allWarmTasks() []TaskID {
	ts, _ := subtopologyTasks(warmSubs, warmCounts)
	return ts
}

// stateOf returns a state map of the stateful tasks at offset sum off.
func stateOf(off int64, parts ...int32) map[TaskID]int64 {
	m := map[TaskID]int64{}
	for _, p := range parts {
		m[TaskID{1, p}] = off
	}
	return m
}

// placed checks that every task is assigned exactly once and returns
// each task's member.
func placed(t *testing.T, a map[string][]TaskID) map[TaskID]string {
	t.Helper()
	at := map[TaskID]string{}
	for id, ts := range a {
		for _, x := range ts {
			if other, dup := at[x]; dup {
				t.Fatalf("task %s assigned to %s and %s", x, other, id)
			}
			at[x] = id
		}
	}
	for _, x := range allWarmTasks() {
		if _, ok := at[x]; !ok {
			t.Fatalf("task %s assigned to nobody: %v", x, a)
		}
	}
	return at
}

func TestKeepCaughtUpScaleOut(t *testing.T) {
	w := Warmups{AcceptableLag: 10_000, PerProcess: 2}
	members := []Member{
		{ID: "a", ProcessID: "A", Owned: allWarmTasks(), State: stateOf(100_000, 0, 1, 2, 3, 4, 5)},
		{ID: "b", ProcessID: "B"},
		{ID: "c", ProcessID: "C"},
	}
	target, err := Plan(warmSubs, warmCounts, members)
	if err != nil {
		t.Fatal(err)
	}
	active, warm := KeepCaughtUp(warmSubs, members, target, w)
	at := placed(t, active)
	for _, x := range allWarmTasks() {
		if x.Subtopology == 1 && at[x] != "a" {
			t.Errorf("stateful task %s went to %s, which holds none of its state; want it kept on a", x, at[x])
		}
		if x.Subtopology == 0 && at[x] == "a" {
			t.Errorf("stateless task %s stayed on a, which keeps the six stateful tasks", x)
		}
	}
	if len(active["b"]) != 3 || len(active["c"]) != 3 {
		t.Errorf("b runs %v and c %v, want three stateless tasks each", active["b"], active["c"])
	}
	for _, id := range []string{"b", "c"} {
		if len(warm[id]) != 2 {
			t.Errorf("member %s has warm-ups %v, want 2 (the bound)", id, warm[id])
		}
		for _, x := range warm[id] {
			if placed(t, target)[x] != id {
				t.Errorf("warm-up %s on %s, but the balanced plan puts it on %s", x, id, placed(t, target)[x])
			}
		}
	}
	if len(warm["a"]) != 0 {
		t.Errorf("the owner got warm-ups %v", warm["a"])
	}
}

func TestKeepCaughtUpMovesCaughtUpAtOnce(t *testing.T) {
	w := Warmups{AcceptableLag: 10_000, PerProcess: 2}
	bState := stateOf(90_000, 0, 1, 2, 3, 4, 5) // 10,000 behind: acceptable
	members := []Member{
		{ID: "a", ProcessID: "A", Owned: allWarmTasks(), State: stateOf(100_000, 0, 1, 2, 3, 4, 5)},
		{ID: "b", ProcessID: "B", State: bState},
	}
	target, err := Plan(warmSubs, warmCounts, members)
	if err != nil {
		t.Fatal(err)
	}
	active, warm := KeepCaughtUp(warmSubs, members, target, w)
	if !reflect.DeepEqual(active, target) || len(warm) != 0 {
		t.Errorf("caught-up target: got %v with warm-ups %v, want the balanced plan %v", active, warm, target)
	}
	// Without state, a store within the acceptable lag moves at once too.
	members[0].State = stateOf(10_000, 0, 1, 2, 3, 4, 5)
	members[1].State = nil
	if active, warm := KeepCaughtUp(warmSubs, members, target, w); !reflect.DeepEqual(active, target) || len(warm) != 0 {
		t.Errorf("a small store: got %v with warm-ups %v, want the balanced plan %v", active, warm, target)
	}
	members[0].State = stateOf(100_000, 0, 1, 2, 3, 4, 5)
	// One record more behind: no longer acceptable.
	members[1].State = stateOf(89_999, 0, 1, 2, 3, 4, 5)
	active, warm = KeepCaughtUp(warmSubs, members, target, w)
	// The plan moved the stateful tasks, which stay; b gets every
	// stateless task instead, so that both run six.
	if !reflect.DeepEqual(active["b"], []TaskID{{0, 0}, {0, 1}, {0, 2}, {0, 3}, {0, 4}, {0, 5}}) {
		t.Errorf("b got %v, want the six stateless tasks", active["b"])
	}
	if len(warm["b"]) != 2 {
		t.Errorf("b's warm-ups = %v, want 2", warm["b"])
	}
}

// A task whose owner is gone fails over where the plan puts it: keeping
// it anywhere would not keep it running.
func TestKeepCaughtUpFailoverAndSameProcess(t *testing.T) {
	w := Warmups{AcceptableLag: 10, PerProcess: 6}
	members := []Member{
		{ID: "a1", ProcessID: "A", Owned: []TaskID{{1, 0}, {1, 1}, {1, 2}}, State: stateOf(1000, 0, 1, 2, 3)},
		{ID: "a2", ProcessID: "A"},
		{ID: "b", ProcessID: "B", Owned: []TaskID{{1, 3}}},
		{ID: "c", ProcessID: "C"},
	}
	subs := []Subtopology{{ID: 1, Topics: []string{"rep"}, Stateful: true}}
	target := map[string][]TaskID{
		"a1": {{1, 0}}, "a2": {{1, 1}}, // 1_1 moves within process A
		"b": {{1, 3}, {1, 4}}, // 1_4 has no owner
		"c": {{1, 2}, {1, 5}}, // 1_2 moves to C, which holds none of it
	}
	active, warm := KeepCaughtUp(subs, members, target, w)
	want := map[string][]TaskID{
		"a1": {{1, 0}, {1, 2}}, "a2": {{1, 1}},
		"b": {{1, 3}, {1, 4}},
		"c": {{1, 5}},
	}
	if !reflect.DeepEqual(active, want) {
		t.Errorf("active = %v, want %v", active, want)
	}
	if !reflect.DeepEqual(warm, map[string][]TaskID{"c": {{1, 2}}}) {
		t.Errorf("warm-ups = %v, want c: 1_2", warm)
	}
	if a, wm := KeepCaughtUp(subs, members, target, Warmups{}); !reflect.DeepEqual(a, target) || len(wm) != 0 {
		t.Errorf("warm-ups off: %v, %v; want the target unchanged", a, wm)
	}
}

// A group scaling out from one instance to three converges to the
// balanced plan in rounds, and no stateful task ever moves from a live
// owner to a process more than the acceptable lag behind it.
func TestKeepCaughtUpConverges(t *testing.T) {
	for _, perProcess := range []int{1, 2, 6} {
		t.Run(fmt.Sprint("per_process_", perProcess), func(t *testing.T) {
			w := Warmups{AcceptableLag: 100, PerProcess: perProcess}
			const end = 50_000
			members := []Member{
				{ID: "a", ProcessID: "A", Owned: allWarmTasks(), State: stateOf(end, 0, 1, 2, 3, 4, 5)},
				{ID: "b", ProcessID: "B", State: map[TaskID]int64{}},
				{ID: "c", ProcessID: "C", State: map[TaskID]int64{}},
			}
			byID := func(id string) *Member {
				for i := range members {
					if members[i].ID == id {
						return &members[i]
					}
				}
				return nil
			}
			for round := 1; ; round++ {
				if round > 10 {
					t.Fatal("not balanced after 10 rounds")
				}
				target, err := Plan(warmSubs, warmCounts, members)
				if err != nil {
					t.Fatal(err)
				}
				active, warm := KeepCaughtUp(warmSubs, members, target, w)
				at := placed(t, active)
				for _, m := range members {
					for _, x := range m.Owned {
						if x.Subtopology != 1 || at[x] == m.ID {
							continue
						}
						if off, ok := byID(at[x]).State[x]; !ok || end-off > w.AcceptableLag {
							t.Errorf("round %d: %s moved from %s to %s, which is not caught up", round, x, m.ID, at[x])
						}
					}
				}
				if len(warm) == 0 {
					loads := []int{len(active["a"]), len(active["b"]), len(active["c"])}
					if slices.Max(loads)-slices.Min(loads) > 1 {
						t.Fatalf("round %d: no warm-ups left but unbalanced: %v", round, active)
					}
					if maxRounds := 1 + (4+2*perProcess-1)/(2*perProcess); round > maxRounds {
						t.Errorf("balanced after %d rounds, want at most %d", round, maxRounds)
					}
					return
				}
				// The round runs: warm-ups catch up, everyone owns what it
				// was given, owners hold the state of their tasks.
				for id, ts := range warm {
					for _, x := range ts {
						byID(id).State[x] = end
					}
				}
				for i := range members {
					members[i].Owned = slices.Clone(active[members[i].ID])
					for _, x := range members[i].Owned {
						if x.Subtopology == 1 {
							members[i].State[x] = end
						}
					}
				}
			}
		})
	}
}

// A probe joins the group only to make it rebalance: the leader gives it
// nothing and plans as if it were not there. Warm-ups reach their member
// in the assignment.
func TestStrategyProbesAndWarmups(t *testing.T) {
	s := NewStrategy(warmSubs, nil, nil).WithWarmups(Warmups{AcceptableLag: 10, PerProcess: 2})
	owned := map[string][]int32{"rep": {0, 1, 2, 3, 4, 5}}
	members := map[string]sarama.ConsumerGroupMemberMetadata{
		"a": metadata(t, subscription{UserData: UserData{ProcessID: "A", State: stateOf(500, 0, 1, 2, 3, 4, 5)}, Generation: 4}, owned, 4),
		"b": metadata(t, subscription{UserData: UserData{ProcessID: "B"}, Generation: -1}, nil, -1),
		"c": metadata(t, subscription{UserData: UserData{ProcessID: "C"}, Generation: -1}, nil, -1),
	}
	topics := partitionsOf(warmCounts)
	plan, err := s.Plan(maps.Clone(members), topics)
	if err != nil {
		t.Fatal(err)
	}
	members["probe"] = sarama.ConsumerGroupMemberMetadata{Version: 2, UserData: ProbeUserData()}
	withProbe, err := s.Plan(members, topics)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := withProbe["probe"]; ok {
		t.Errorf("the probe got %v", withProbe["probe"])
	}
	if !reflect.DeepEqual(plan, withProbe) {
		t.Errorf("a probe changed the plan: %v, without it %v", withProbe, plan)
	}
	// The balanced plan moves two of a's stateful tasks; they stay, and
	// b and c get the stateless tasks and one warm-up each.
	if got := plan["a"]["rep"]; len(got) != 6 {
		t.Errorf("a runs rep partitions %v, want all 6 (nobody else holds their state)", got)
	}
	for _, id := range []string{"b", "c"} {
		if got := plan[id]; len(got["in"]) != 3 || len(got["rep"]) != 0 {
			t.Errorf("%s runs %v, want 3 in partitions", id, got)
		}
		b, err := s.AssignmentData(id, plan[id], 5)
		if err != nil {
			t.Fatal(err)
		}
		a, err := decodeAssignment(b)
		if err != nil {
			t.Fatal(err)
		}
		if len(a.Warmups) != 1 || a.Warmups[0].Subtopology != 1 {
			t.Errorf("%s's warm-ups = %v, want one rep task", id, a.Warmups)
		}
	}
}
