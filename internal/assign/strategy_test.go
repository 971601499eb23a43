package assign

import (
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/IBM/sarama"
)

func newTestLogger(w io.Writer) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, nil))
}

// partitionsOf returns sarama's topic -> partition ids view.
func partitionsOf(counts map[string]int32) map[string][]int32 {
	out := map[string][]int32{}
	for t, n := range counts {
		for p := range n {
			out[t] = append(out[t], p)
		}
	}
	return out
}

// metadata builds a member's subscription as sarama sends it with
// Version >= 3.2 brokers.
func metadata(t *testing.T, s subscription, owned map[string][]int32, gen int32) sarama.ConsumerGroupMemberMetadata {
	t.Helper()
	meta := sarama.ConsumerGroupMemberMetadata{Version: 2, UserData: encodeSubscription(s), GenerationID: gen}
	for _, topic := range slices.Sorted(maps.Keys(owned)) {
		meta.OwnedPartitions = append(meta.OwnedPartitions, &sarama.OwnedPartition{Topic: topic, Partitions: owned[topic]})
	}
	return meta
}

func TestStrategyInterfaces(t *testing.T) {
	t.Parallel()
	s := NewStrategy(nil, nil, nil)
	if s.Name() != "weir" {
		t.Errorf("Name() = %q", s.Name())
	}
	if got := s.SupportedProtocols(); !slices.Contains(got, sarama.RebalanceProtocolCooperative) || !slices.Contains(got, sarama.RebalanceProtocolEager) {
		t.Errorf("SupportedProtocols() = %v, want cooperative and eager", got)
	}
	if b, err := s.AssignmentData("m", nil, 1); b != nil || err != nil {
		t.Errorf("AssignmentData = %v, %v; want nil, nil", b, err)
	}
	cfg := sarama.NewConfig()
	cfg.Version = sarama.V4_0_0_0
	cfg.Consumer.Group.Rebalance.GroupStrategies = []sarama.BalanceStrategy{s}
	if err := cfg.Validate(); err != nil {
		t.Errorf("sarama rejects the strategy: %v", err)
	}
}

// TestStrategyCoPartitioning: the sarama plan gives partition p of every
// topic of a sub-topology to one member, and every partition once.
func TestStrategyCoPartitioning(t *testing.T) {
	t.Parallel()
	subs := []Subtopology{{ID: 0, Topics: []string{"a", "b", "c"}}, {ID: 1, Topics: []string{"d", "e"}}}
	counts := map[string]int32{"a": 7, "b": 7, "c": 7, "d": 5, "e": 5}
	s := NewStrategy(subs, nil, nil)
	members := map[string]sarama.ConsumerGroupMemberMetadata{}
	for i := range 5 {
		members[fmt.Sprint("m", i)] = metadata(t, subscription{Generation: -1}, nil, -1)
	}
	plan, err := s.Plan(members, partitionsOf(counts))
	if err != nil {
		t.Fatal(err)
	}
	holder := map[topicPartition]string{}
	for id, topics := range plan {
		for topic, ps := range topics {
			for _, p := range ps {
				tp := topicPartition{topic, p}
				if h, dup := holder[tp]; dup {
					t.Fatalf("%v assigned to %s and %s", tp, h, id)
				}
				holder[tp] = id
			}
		}
	}
	for topic, n := range counts {
		for p := range n {
			if _, ok := holder[topicPartition{topic, p}]; !ok {
				t.Fatalf("%s-%d not assigned", topic, p)
			}
		}
	}
	for _, sub := range subs {
		for p := range counts[sub.Topics[0]] {
			for _, topic := range sub.Topics[1:] {
				if a, b := holder[topicPartition{sub.Topics[0], p}], holder[topicPartition{topic, p}]; a != b {
					t.Errorf("task %d_%d split: %s-%d to %s, %s-%d to %s", sub.ID, p, sub.Topics[0], p, a, topic, p, b)
				}
			}
		}
	}
}

func TestStrategyCooperativeHandOver(t *testing.T) {
	t.Parallel()
	subs := []Subtopology{{ID: 0, Topics: []string{"in1", "in2"}}}
	topics := partitionsOf(map[string]int32{"in1": 4, "in2": 4})
	s := NewStrategy(subs, nil, nil)
	all := []int32{0, 1, 2, 3}

	// Round 1: a owns everything, b joins. b's share moves from a, so b
	// gets nothing yet and a keeps its share.
	plan, err := s.Plan(map[string]sarama.ConsumerGroupMemberMetadata{
		"a": metadata(t, subscription{Generation: 3}, map[string][]int32{"in1": all, "in2": all}, 3),
		"b": metadata(t, subscription{Generation: -1}, nil, -1),
	}, topics)
	if err != nil {
		t.Fatal(err)
	}
	want := sarama.BalanceStrategyPlan{
		"a": {"in1": {0, 1}, "in2": {0, 1}},
		"b": {},
	}
	if !reflect.DeepEqual(plan, want) {
		t.Fatalf("round 1 = %v, want %v", plan, want)
	}
	// b learns that two tasks wait for it (it is still rebalancing), a
	// that none does.
	for id, wantPending := range map[string][]TaskID{"a": nil, "b": {{0, 2}, {0, 3}}} {
		data, err := s.AssignmentData(id, plan[id], 4)
		if err != nil {
			t.Fatal(err)
		}
		a, err := decodeAssignment(data)
		if err != nil || !reflect.DeepEqual(a.Pending, wantPending) {
			t.Fatalf("round 1: %s's pending tasks = %v, %v; want %v", id, a.Pending, err, wantPending)
		}
	}

	// Round 2: a revoked 0_2 and 0_3; nobody owns them, b gets them whole.
	plan, err = s.Plan(map[string]sarama.ConsumerGroupMemberMetadata{
		"a": metadata(t, subscription{Generation: 4}, map[string][]int32{"in1": {0, 1}, "in2": {0, 1}}, 4),
		"b": metadata(t, subscription{Generation: 4}, nil, 4),
	}, topics)
	if err != nil {
		t.Fatal(err)
	}
	want = sarama.BalanceStrategyPlan{
		"a": {"in1": {0, 1}, "in2": {0, 1}},
		"b": {"in1": {2, 3}, "in2": {2, 3}},
	}
	if !reflect.DeepEqual(plan, want) {
		t.Fatalf("round 2 = %v, want %v", plan, want)
	}
	data, err := s.AssignmentData("b", plan["b"], 5)
	if a, derr := decodeAssignment(data); err != nil || derr != nil || len(a.Pending) != 0 {
		t.Fatalf("round 2: b's pending tasks = %v (%v, %v); want none", a.Pending, err, derr)
	}
}

// TestStrategyPartialOwnership: when a task's partitions are split between
// members, the new owner keeps what it holds and waits for the rest.
func TestStrategyPartialOwnership(t *testing.T) {
	t.Parallel()
	subs := []Subtopology{{ID: 0, Topics: []string{"in1", "in2"}}}
	topics := partitionsOf(map[string]int32{"in1": 2, "in2": 2})
	var got []TaskID
	s := NewStrategy(subs, nil, func(ts []TaskID, _ Assignment, _ int32) { got = ts })
	plan, err := s.Plan(map[string]sarama.ConsumerGroupMemberMetadata{
		"a": metadata(t, subscription{Generation: 7}, map[string][]int32{"in1": {0, 1}, "in2": {0}}, 7),
		"b": metadata(t, subscription{Generation: 7}, map[string][]int32{"in2": {1}}, 7),
	}, topics)
	if err != nil {
		t.Fatal(err)
	}
	want := sarama.BalanceStrategyPlan{
		"a": {"in1": {0}, "in2": {0}},
		"b": {"in2": {1}},
	}
	if !reflect.DeepEqual(plan, want) {
		t.Fatalf("plan = %v, want %v", plan, want)
	}
	s.OnAssignment(&sarama.ConsumerGroupMemberAssignment{Topics: plan["b"]}, 8)
	if len(got) != 0 {
		t.Errorf("partial task reported as assigned: %v", got)
	}
}

// TestStrategyStaleGeneration: ownership reported with an older generation
// than the group's is ignored for stickiness (but the partitions are still
// withheld from their new owner until revoked).
func TestStrategyStaleGeneration(t *testing.T) {
	t.Parallel()
	subs := []Subtopology{{ID: 0, Topics: []string{"in"}}}
	topics := partitionsOf(map[string]int32{"in": 2})
	s := NewStrategy(subs, nil, nil)
	current := sarama.BalanceStrategyPlan{"a": {"in": {1}}, "b": {"in": {0}}}
	stale := sarama.BalanceStrategyPlan{"a": {"in": {0}}, "b": {}}
	for _, tc := range []struct {
		name             string
		userGen, metaGen int32 // of a, which owns partition 1; b is at 5
		want             sarama.BalanceStrategyPlan
	}{
		{"current", 5, 5, current},
		{"stale", 4, 4, stale},
		{"current in user data (eager)", 5, -1, current},
		{"stale in user data (eager)", 4, -1, stale},
		// sarama advances the metadata generation when a SyncGroup is retried
		// after the member joined a newer generation with its claims.
		{"metadata newer than user data", 4, 5, current},
	} {
		a := metadata(t, subscription{Generation: tc.userGen}, map[string][]int32{"in": {1}}, tc.metaGen)
		b := metadata(t, subscription{Generation: 5}, nil, 5)
		plan, err := s.Plan(map[string]sarama.ConsumerGroupMemberMetadata{"a": a, "b": b}, topics)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(plan, tc.want) {
			t.Errorf("%s: plan = %v, want %v", tc.name, plan, tc.want)
		}
	}
}

// TestStrategyUndecodableUserData: a member whose user data is garbage or
// of an unknown version takes part as a member without user data.
func TestStrategyUndecodableUserData(t *testing.T) {
	t.Parallel()
	subs := []Subtopology{{ID: 0, Topics: []string{"in"}}}
	topics := partitionsOf(map[string]int32{"in": 3})
	var logged strings.Builder
	s := NewStrategy(subs, nil, nil).WithLogger(newTestLogger(&logged))
	good := metadata(t, subscription{UserData: UserData{ProcessID: "p", State: state("0_2", 1)}, Generation: 2}, nil, -1)
	for _, bad := range [][]byte{{9, 1, 2}, {0xfe}, []byte("not weir")} {
		garbage := good
		garbage.UserData = bad
		plan, err := s.Plan(map[string]sarama.ConsumerGroupMemberMetadata{"a": garbage, "b": good}, topics)
		if err != nil {
			t.Fatalf("user data %x: %v", bad, err)
		}
		// b's process holds 0_2; a's claim to the same state is unreadable.
		want := sarama.BalanceStrategyPlan{"a": {"in": {0, 1}}, "b": {"in": {2}}}
		if !reflect.DeepEqual(plan, want) {
			t.Errorf("user data %x: plan = %v, want %v", bad, plan, want)
		}
	}
	if !strings.Contains(logged.String(), "malformed subscription user data") {
		t.Errorf("nothing logged about the bad user data: %q", logged.String())
	}
}

func TestStrategyPlanError(t *testing.T) {
	t.Parallel()
	s := NewStrategy([]Subtopology{{ID: 3, Topics: []string{"clicks", "views"}}}, nil, nil)
	_, err := s.Plan(map[string]sarama.ConsumerGroupMemberMetadata{"a": {}},
		partitionsOf(map[string]int32{"clicks": 8, "views": 6}))
	if err == nil || !strings.Contains(err.Error(), "clicks=8, views=6") || !strings.Contains(err.Error(), "subtopology 3") {
		t.Errorf("Plan error = %v, want the topics and counts named", err)
	}
}

func TestStrategySubscriptionAndOnAssignment(t *testing.T) {
	t.Parallel()
	subs := []Subtopology{{ID: 0, Topics: []string{"a", "b"}}, {ID: 1, Topics: []string{"c"}}}
	local := UserData{ProcessID: "proc-1", State: state("0_4", 77)}
	var mu sync.Mutex
	var gotTasks []TaskID
	var gotGen int32
	s := NewStrategy(subs, func() UserData { return local }, func(ts []TaskID, _ Assignment, g int32) {
		mu.Lock()
		defer mu.Unlock()
		gotTasks, gotGen = ts, g
	})

	b, err := s.SubscriptionUserData([]string{"a", "b", "c"})
	if err != nil {
		t.Fatal(err)
	}
	sub, err := decodeSubscription(b)
	if err != nil {
		t.Fatal(err)
	}
	if want := (subscription{UserData: local, Generation: -1}); !equalSubscription(sub, want) {
		t.Errorf("first subscription = %+v, want %+v", sub, want)
	}

	s.OnAssignment(&sarama.ConsumerGroupMemberAssignment{Topics: map[string][]int32{
		"a": {2, 0, 5}, "b": {0, 5, 6}, // 0_0 and 0_5 whole; 0_2 and 0_6 partial
		"c": {1},
	}}, 12)
	mu.Lock()
	if want := tasks("0_0", "0_5", "1_1"); !reflect.DeepEqual(gotTasks, want) || gotGen != 12 {
		t.Errorf("onAssign(%v, %d), want (%v, 12)", gotTasks, gotGen, want)
	}
	mu.Unlock()

	b, _ = s.SubscriptionUserData(nil)
	sub, err = decodeSubscription(b)
	if err != nil {
		t.Fatal(err)
	}
	if want := (subscription{UserData: local, Generation: 12, Prev: tasks("0_0", "0_5", "1_1")}); !equalSubscription(sub, want) {
		t.Errorf("second subscription = %+v, want %+v", sub, want)
	}
}

// simMember is one member of a simulated consumer group.
type simMember struct {
	id     string
	proc   string
	s      *Strategy
	claims map[string][]int32
	gen    int32
}

// simGroup runs the JoinGroup/SyncGroup protocol between strategies the way
// sarama does, with processes that keep the state of every task they ran.
type simGroup struct {
	t           *testing.T
	rng         *rand.Rand
	cooperative bool
	subs        []Subtopology
	topics      map[string][]int32
	members     []*simMember
	gen         int32
	mu          sync.Mutex
	procState   map[string]map[TaskID]int64
	next        int
}

func (g *simGroup) add(proc string) {
	id := fmt.Sprintf("member-%03d", g.next)
	g.next++
	m := &simMember{id: id, proc: proc, gen: -1}
	m.s = NewStrategy(g.subs, func() UserData {
		g.mu.Lock()
		defer g.mu.Unlock()
		return UserData{ProcessID: proc, State: maps.Clone(g.procState[proc])}
	}, func(ts []TaskID, _ Assignment, gen int32) {
		g.mu.Lock()
		defer g.mu.Unlock()
		if g.procState[proc] == nil {
			g.procState[proc] = map[TaskID]int64{}
		}
		for _, t := range ts {
			g.procState[proc][t] = int64(gen)
		}
	})
	g.members = append(g.members, m)
}

// round runs one rebalance and reports whether a member revoked anything
// (under the cooperative protocol that makes sarama rejoin).
func (g *simGroup) round() bool {
	t := g.t
	t.Helper()
	g.gen++
	metas := map[string]sarama.ConsumerGroupMemberMetadata{}
	for _, m := range g.members {
		ud, err := m.s.SubscriptionUserData(nil)
		if err != nil {
			t.Fatal(err)
		}
		meta := sarama.ConsumerGroupMemberMetadata{Version: 2, UserData: ud, GenerationID: -1}
		if g.cooperative {
			meta.GenerationID = m.gen
			for _, topic := range slices.Sorted(maps.Keys(m.claims)) {
				meta.OwnedPartitions = append(meta.OwnedPartitions, &sarama.OwnedPartition{Topic: topic, Partitions: m.claims[topic]})
			}
		}
		metas[m.id] = meta
	}
	leader := g.members[g.rng.IntN(len(g.members))]
	plan, err := leader.s.Plan(metas, g.topics)
	if err != nil {
		t.Fatal(err)
	}
	assigned := map[topicPartition]string{}
	for id, topics := range plan {
		for topic, ps := range topics {
			for _, p := range ps {
				tp := topicPartition{topic, p}
				if h, dup := assigned[tp]; dup {
					t.Fatalf("%v assigned to %s and %s", tp, h, id)
				}
				assigned[tp] = id
				if !g.cooperative {
					continue
				}
				for _, o := range g.members {
					if o.id != id && slices.Contains(o.claims[topic], p) {
						t.Fatalf("%v assigned to %s while %s still owns it", tp, id, o.id)
					}
				}
			}
		}
	}
	revoked := false
	for _, m := range g.members {
		next := plan[m.id]
		for topic, ps := range m.claims {
			for _, p := range ps {
				revoked = revoked || !slices.Contains(next[topic], p)
			}
		}
		m.claims = next
		m.gen = g.gen
		m.s.OnAssignment(&sarama.ConsumerGroupMemberAssignment{Topics: next}, g.gen)
	}
	return revoked
}

// rebalance runs rounds until no member revoked anything and returns how
// many it took.
func (g *simGroup) rebalance() int {
	n := 1
	for g.round() && g.cooperative {
		n++
		if n > 5 {
			g.t.Fatal("rebalance does not settle")
		}
	}
	return n
}

// tasks returns each member's complete tasks and fails on partial ones.
func (g *simGroup) tasks() map[string][]TaskID {
	out := map[string][]TaskID{}
	for _, m := range g.members {
		ts := completeTasks(g.subs, m.claims)
		n := 0
		for _, ps := range m.claims {
			n += len(ps)
		}
		for _, task := range ts {
			for _, sub := range g.subs {
				if sub.ID == task.Subtopology {
					n -= len(sub.Topics)
				}
			}
		}
		if n != 0 {
			g.t.Fatalf("%s holds partial tasks after the rebalance: %v", m.id, m.claims)
		}
		out[m.id] = ts
	}
	return out
}

// TestStrategyGroupSimulation runs random join and leave sequences through
// the sarama protocol: no partition is ever assigned while another member
// owns it, a change settles in at most two rounds (one under eager), the
// result is balanced and complete, a join moves exactly the newcomer's
// share, and a leave moves exactly the leaver's tasks.
func TestStrategyGroupSimulation(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(11, 12))
	for i := range 200 {
		subs, counts := randomTopology(rng)
		g := &simGroup{t: t, rng: rng, cooperative: i%3 != 0, subs: subs, topics: partitionsOf(counts), procState: map[string]map[TaskID]int64{}}
		procs := 1 + rng.IntN(4)
		for range 1 + rng.IntN(4) {
			g.add(fmt.Sprint("p", rng.IntN(procs)))
		}
		g.rebalance()
		sc := scenario{subs: subs, partitions: counts}
		for step := range 12 {
			before := g.tasks()
			n := len(sc.tasks())
			var wantMoved int
			switch op := rng.IntN(3); {
			case op == 0 && len(g.members) > 1:
				k := rng.IntN(len(g.members))
				wantMoved = len(before[g.members[k].id])
				g.members = slices.Delete(g.members, k, k+1)
			case op == 1 && len(g.members) < 12:
				g.add(fmt.Sprint("p", rng.IntN(procs+1)))
				wantMoved = n / len(g.members)
			default: // a rebalance without a membership change
			}
			rounds := g.rebalance()
			if rounds > 2 {
				t.Fatalf("case %d step %d: took %d rounds", i, step, rounds)
			}
			after := g.tasks()
			sc.members = nil
			for _, m := range g.members {
				sc.members = append(sc.members, Member{ID: m.id})
			}
			checkPlan(t, sc, after)
			if got := moved(before, after); got != wantMoved {
				t.Fatalf("case %d step %d (cooperative %v): %d tasks moved, want %d\nbefore %v\nafter %v",
					i, step, g.cooperative, got, wantMoved, before, after)
			}
		}
	}
}
