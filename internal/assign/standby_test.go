package assign

import (
	"fmt"
	"maps"
	"reflect"
	"slices"
	"testing"

	"github.com/IBM/sarama"

	"github.com/weirstream/weir/internal/hostport"
)

func TestPlanStandbys(t *testing.T) {
	subs := []Subtopology{
		{ID: 0, Topics: []string{"lines"}},
		{ID: 1, Topics: []string{"words"}, Stateful: true},
	}
	parts := map[string]int32{"lines": 3, "words": 3}
	members := []Member{
		{ID: "a1", ProcessID: "A"}, {ID: "a2", ProcessID: "A"},
		{ID: "b1", ProcessID: "B"},
		{ID: "c1", ProcessID: "C", State: map[TaskID]int64{{1, 0}: 10}},
	}
	active, err := Plan(subs, parts, members)
	if err != nil {
		t.Fatal(err)
	}
	proc := map[string]string{}
	for _, m := range members {
		proc[m.ID] = m.ProcessID
	}
	runs := func(standbys map[string][]TaskID) map[TaskID][]string {
		at := map[TaskID][]string{}
		for id, ts := range active {
			for _, tk := range ts {
				at[tk] = append(at[tk], proc[id])
			}
		}
		for id, ts := range standbys {
			for _, tk := range ts {
				at[tk] = append(at[tk], proc[id])
			}
		}
		return at
	}
	for _, replicas := range []int{1, 2, 5} {
		sb, err := PlanStandbys(subs, parts, members, active, replicas)
		if err != nil {
			t.Fatal(err)
		}
		want := min(replicas, 2) // three processes: at most two copies besides the active
		n := 0
		for tk, procs := range runs(sb) {
			if len(procs) != len(slices.Compact(slices.Sorted(slices.Values(procs)))) {
				t.Errorf("replicas %d: task %v has two copies on one process: %v", replicas, tk, procs)
			}
			if tk.Subtopology == 0 && len(procs) != 1 {
				t.Errorf("replicas %d: stateless task %v got standbys: %v", replicas, tk, procs)
			}
			if tk.Subtopology == 1 {
				if len(procs) != 1+want {
					t.Errorf("replicas %d: task %v runs on %v, want the active and %d standbys", replicas, tk, procs, want)
				}
				n += len(procs) - 1
			}
		}
		if n != 3*want {
			t.Errorf("replicas %d: %d standbys, want %d", replicas, n, 3*want)
		}
		// Deterministic: the same input in another order gives the same plan.
		rev := slices.Clone(members)
		slices.Reverse(rev)
		again, err := PlanStandbys(subs, parts, rev, active, replicas)
		if err != nil {
			t.Fatal(err)
		}
		if !maps.EqualFunc(sb, again, slices.Equal) {
			t.Errorf("replicas %d: plan depends on the members' order: %v vs %v", replicas, sb, again)
		}
	}
	// The process holding a task's state gets its standby, unless it runs
	// the task.
	sb, err := PlanStandbys(subs, parts, members, active, 1)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(active["c1"], TaskID{1, 0}) && !slices.Contains(sb["c1"], TaskID{1, 0}) {
		t.Errorf("standbys %v: task 1_0's state is on C, yet its standby is elsewhere", sb)
	}
	// None asked for, or one process: none placed.
	for _, tc := range []struct {
		members  []Member
		replicas int
	}{{members, 0}, {[]Member{{ID: "a1", ProcessID: "A"}, {ID: "a2", ProcessID: "A"}}, 1}} {
		act, err := Plan(subs, parts, tc.members)
		if err != nil {
			t.Fatal(err)
		}
		sb, err := PlanStandbys(subs, parts, tc.members, act, tc.replicas)
		if err != nil || len(sb) != 0 {
			t.Errorf("PlanStandbys(%d members, replicas %d) = %v, %v; want none", len(tc.members), tc.replicas, sb, err)
		}
	}
}

func TestPlanStandbysSpreadsOverMembers(t *testing.T) {
	subs := []Subtopology{{ID: 0, Topics: []string{"in"}, Stateful: true}}
	parts := map[string]int32{"in": 8}
	members := []Member{
		{ID: "a1", ProcessID: "A"}, {ID: "a2", ProcessID: "A"},
		{ID: "b1", ProcessID: "B"}, {ID: "b2", ProcessID: "B"},
	}
	active, err := Plan(subs, parts, members)
	if err != nil {
		t.Fatal(err)
	}
	sb, err := PlanStandbys(subs, parts, members, active, 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range members {
		if len(sb[m.ID]) != 2 {
			t.Errorf("member %s has standbys %v, want 2 of the 8", m.ID, sb[m.ID])
		}
	}
}

func TestAssignmentEncoding(t *testing.T) {
	for _, a := range []Assignment{
		{},
		{Standbys: []TaskID{{0, 1}}},
		{Standbys: []TaskID{{0, 0}, {0, 5}, {3, 2}}, Hosts: []Host{
			{Addr: "a:1", Active: []TaskID{{0, 1}}},
			{Addr: "b:2", Active: []TaskID{{0, 0}, {3, 2}}, Standby: []TaskID{{0, 1}}},
			{Addr: "c:3"},
		}},
		{Warmups: []TaskID{{0, 2}, {1, 0}}},
		{Standbys: []TaskID{{0, 1}}, Warmups: []TaskID{{0, 1}, {0, 3}}, Hosts: []Host{{Addr: "a:1", Standby: []TaskID{{0, 1}, {0, 3}}}}},
		{Pending: []TaskID{{0, 2}, {0, 3}}},
	} {
		got, err := decodeAssignment(encodeAssignment(a))
		if err != nil || !reflect.DeepEqual(got, a) {
			t.Errorf("round trip of %+v = %+v, %v", a, got, err)
		}
	}
	// A leader's hosts whose address is not a plain host:port (a member
	// advertising a path, say) are dropped: no lookup goes there.
	forged := Assignment{Hosts: []Host{{Addr: "evil/x?:80", Active: []TaskID{{0, 1}}}, {Addr: "b:2", Active: []TaskID{{0, 0}}}}}
	if got, err := decodeAssignment(encodeAssignment(forged)); err != nil || !reflect.DeepEqual(got.Hosts, forged.Hosts[1:]) {
		t.Errorf("hosts of an assignment with a forged address = %+v, %v; want only b:2", got.Hosts, err)
	}
	if got, err := decodeAssignment(nil); err != nil || !reflect.DeepEqual(got, Assignment{}) {
		t.Errorf("no user data = %+v, %v; want nothing", got, err)
	}
	// Version 1, from a leader of an older weir: no warm-ups.
	if got, err := decodeAssignment([]byte{1, 1, 0, 1, 2, 0}); err != nil || !reflect.DeepEqual(got, Assignment{Standbys: []TaskID{{0, 2}}}) {
		t.Errorf("version 1 = %+v, %v; want standby 0_2", got, err)
	}
	// Version 2: warm-ups, no pending tasks.
	if got, err := decodeAssignment([]byte{2, 0, 0, 1, 0, 1, 2}); err != nil || !reflect.DeepEqual(got, Assignment{Warmups: []TaskID{{0, 2}}}) {
		t.Errorf("version 2 = %+v, %v; want warm-up 0_2", got, err)
	}
	for _, bad := range [][]byte{{4, 0, 0, 0, 0}, {3, 0, 0, 0}, {0, 0, 0}, {2, 0, 0}, {1, 1, 0, 1}, {1, 0, 7}, {1, 0, 1, 9, 'a'}, {1, 0, 0, 0}, {2, 0, 0, 0, 0}} {
		if _, err := decodeAssignment(bad); err == nil {
			t.Errorf("decodeAssignment(%v) accepted it", bad)
		}
	}
}

// The leader's standbys reach each member through the assignment's user
// data, and onAssign hands them on.
func TestStrategyHandsOutStandbys(t *testing.T) {
	subs := []Subtopology{{ID: 0, Topics: []string{"in"}, Stateful: true}}
	topics := map[string][]int32{"in": {0, 1, 2, 3}}
	got := map[string][]TaskID{}
	hosts := map[string][]Host{}
	strategies := map[string]*Strategy{}
	metas := map[string]sarama.ConsumerGroupMemberMetadata{}
	for _, m := range []struct{ id, proc string }{{"m1", "A"}, {"m2", "B"}} {
		s := NewStrategy(subs, func() UserData { return UserData{ProcessID: m.proc, Addr: m.proc + ":80"} }, func(_ []TaskID, a Assignment, _ int32) {
			got[m.id] = a.Standbys
			hosts[m.id] = a.Hosts
		}).WithStandbys(1)
		strategies[m.id] = s
		ud, err := s.SubscriptionUserData(nil)
		if err != nil {
			t.Fatal(err)
		}
		metas[m.id] = sarama.ConsumerGroupMemberMetadata{Version: 2, UserData: ud, GenerationID: -1}
	}
	leader := strategies["m1"]
	plan, err := leader.Plan(metas, topics)
	if err != nil {
		t.Fatal(err)
	}
	for id, s := range strategies {
		data, err := leader.AssignmentData(id, plan[id], 1)
		if err != nil {
			t.Fatal(err)
		}
		s.OnAssignment(&sarama.ConsumerGroupMemberAssignment{Topics: plan[id], UserData: data}, 1)
	}
	for id, ts := range got {
		if len(ts) != 2 {
			t.Errorf("member %s got standbys %v, want 2", id, ts)
		}
		for _, tk := range ts {
			if slices.Contains(plan[id]["in"], tk.Partition) {
				t.Errorf("member %s got task %v both active and standby", id, tk)
			}
		}
	}
	if len(got) != 2 {
		t.Errorf("onAssign saw %v", got)
	}
	// Every member learns every host, with the tasks of the plan.
	for id, hs := range hosts {
		if len(hs) != 2 || hs[0].Addr != "A:80" || hs[1].Addr != "B:80" {
			t.Fatalf("member %s got hosts %+v", id, hs)
		}
		for i, m := range []string{"m1", "m2"} {
			if want := completeTasks(subs, plan[m]); !slices.Equal(hs[i].Active, want) {
				t.Errorf("member %s: host %s runs %v, want %v", id, hs[i].Addr, hs[i].Active, want)
			}
			if !slices.Equal(hs[i].Standby, got[m]) {
				t.Errorf("member %s: host %s holds standbys %v, want %v", id, hs[i].Addr, hs[i].Standby, got[m])
			}
		}
	}
}

// The standbys of one process's tasks go to different processes, so that
// its failover fits the balance: every survivor has room for one of them.
func TestPlanStandbysSpreadAProcesssTasks(t *testing.T) {
	for _, withState := range []bool{false, true} {
		for procs := 3; procs <= 5; procs++ {
			for tasks := int32(procs); tasks <= int32(3*procs); tasks++ {
				subs := []Subtopology{{ID: 0, Topics: []string{"in"}, Stateful: true}}
				parts := map[string]int32{"in": tasks}
				var members []Member
				for i := range procs {
					members = append(members, Member{ID: fmt.Sprintf("m%d", i), ProcessID: fmt.Sprintf("P%d", i)})
				}
				if withState {
					// P1 holds state of every task (it ran their standbys):
					// spreading still comes first.
					members[1].State = map[TaskID]int64{}
					for p := range tasks {
						members[1].State[TaskID{0, p}] = 100
					}
				}
				active, err := Plan(subs, parts, members)
				if err != nil {
					t.Fatal(err)
				}
				sb, err := PlanStandbys(subs, parts, members, active, 1)
				if err != nil {
					t.Fatal(err)
				}
				for _, failed := range members {
					hosts := map[string]int{}
					for _, tk := range active[failed.ID] {
						for id, ts := range sb {
							if slices.Contains(ts, tk) {
								hosts[id]++
							}
						}
					}
					// Its k tasks over the procs-1 others: at most ceil(k/(procs-1)) each.
					k := len(active[failed.ID])
					limit := (k + procs - 2) / (procs - 1)
					for id, n := range hosts {
						if n > limit {
							t.Errorf("%d processes, %d tasks, state on P1 %v: %s holds the standbys of %d of %s's tasks %v (standbys %v), more than %d",
								procs, tasks, withState, id, n, failed.ID, active[failed.ID], sb, limit)
						}
					}
				}
			}
		}
	}
}

// FuzzDecodeAssignment: the leader's assignment reaches every member as
// bytes any member of the group may have written; it decodes or fails,
// never panics, and every host it keeps has a plain host:port address.
func FuzzDecodeAssignment(f *testing.F) {
	f.Add(encodeAssignment(Assignment{Standbys: []TaskID{{0, 1}}, Hosts: []Host{{Addr: "a:1", Active: []TaskID{{0, 0}}}}}))
	f.Add(encodeAssignment(Assignment{Hosts: []Host{{Addr: "evil/x?:80"}}}))
	f.Add([]byte{2, 0, 1, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Fuzz(func(t *testing.T, b []byte) {
		a, err := decodeAssignment(b)
		if err != nil {
			return
		}
		for _, h := range a.Hosts {
			if hostport.Check(h.Addr) != nil {
				t.Fatalf("kept a host with address %q", h.Addr)
			}
		}
	})
}
