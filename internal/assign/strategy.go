package assign

import (
	"log/slog"
	"maps"
	"slices"
	"sync"

	"github.com/IBM/sarama"
)

// StrategyName is the protocol name weir's strategy registers with the
// group coordinator. Every member of a group must use it.
const StrategyName = "weir"

// noGeneration is the generation a member reports before its first
// assignment, as sarama does.
const noGeneration = -1

// Strategy is weir's [sarama.BalanceStrategy]: it assigns whole tasks with
// [Plan], so partition p of every source topic of a sub-topology goes to one
// member. It also implements [sarama.SubscriptionUserDataBalanceStrategy]
// (it sends [UserData], its last generation and last assignment),
// [sarama.OnAssignmentBalanceStrategy] (it reports the tasks received) and
// [sarama.RebalanceProtocolBalanceStrategy] (cooperative and eager).
//
// A Strategy is stateful, like sarama's cooperative-sticky strategy: use
// one per consumer group member (stream thread), never share it between
// members. Its methods are safe for concurrent use.
type Strategy struct {
	subs     []Subtopology
	local    func() UserData
	onAssign func(tasks []TaskID, a Assignment, generation int32)

	mu         sync.Mutex
	generation int32
	prev       []TaskID
	logger     *slog.Logger
	replicas   int
	warmups    Warmups
	// planned are the standbys of the last Plan, per member, warm its
	// warm-ups and hosts its hosts, which AssignmentData hands out
	// (sarama calls it right after Plan).
	planned map[string][]TaskID
	warm    map[string][]TaskID
	// pending are the tasks each member's plan withholds this round for a
	// cooperative hand-over (Assignment.Pending).
	pending map[string][]TaskID
	hosts   []Host
}

var (
	_ sarama.SubscriptionUserDataBalanceStrategy = (*Strategy)(nil)
	_ sarama.OnAssignmentBalanceStrategy         = (*Strategy)(nil)
	_ sarama.RebalanceProtocolBalanceStrategy    = (*Strategy)(nil)
)

// NewStrategy returns a Strategy for the topology's sub-topologies, which
// must be the same in every member of the group.
//
// local is called on every JoinGroup (on sarama's rebalance path, so it must
// return promptly) to get the process's current [UserData]; nil means no
// user data. onAssign is called after every SyncGroup (a cooperative
// hand-over takes two) with the complete tasks this member was assigned,
// sorted, the rest of its [Assignment] (standbys and hosts), and the
// generation; sarama calls it before it stops revoked claims or starts new
// ones, so the tasks are the member's target set. It must return promptly
// and do no I/O. It may be nil. subs is copied.
func NewStrategy(subs []Subtopology, local func() UserData, onAssign func(tasks []TaskID, a Assignment, generation int32)) *Strategy {
	c := make([]Subtopology, len(subs))
	for i, s := range subs {
		c[i] = Subtopology{ID: s.ID, Topics: slices.Clone(s.Topics), Stateful: s.Stateful}
	}
	return &Strategy{subs: c, local: local, onAssign: onAssign, generation: noGeneration}
}

// WithLogger makes s log, at warn level, what it ignores when it plans as
// group leader (subscriptions it cannot decode, stale ownership) and, at
// info level, the warm-ups it places. By default it logs nothing. It
// returns s.
func (s *Strategy) WithLogger(l *slog.Logger) *Strategy {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.logger = l
	return s
}

// WithStandbys makes s, as group leader, place n standby copies of every
// stateful task ([PlanStandbys]) and send each member its standbys in the
// assignment's user data. 0 (the default) places none. It returns s.
func (s *Strategy) WithStandbys(n int) *Strategy {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.replicas = n
	return s
}

// WithWarmups makes s, as group leader, keep tasks with their caught-up
// owners and place warm-ups where the balanced plan would move them
// ([KeepCaughtUp]). By default (the zero Warmups) it places none, and
// every task moves where the balanced plan puts it. It returns s.
func (s *Strategy) WithWarmups(w Warmups) *Strategy {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.warmups = w
	return s
}

// Name returns [StrategyName].
func (s *Strategy) Name() string { return StrategyName }

// SupportedProtocols returns cooperative and eager. sarama runs the
// cooperative protocol when every configured strategy supports it, so a
// consumer group configured with only this strategy is cooperative.
func (s *Strategy) SupportedProtocols() []sarama.RebalanceProtocol {
	return []sarama.RebalanceProtocol{sarama.RebalanceProtocolCooperative, sarama.RebalanceProtocolEager}
}

// AssignmentData returns the member's [Assignment] of the last Plan (its
// standby and warm-up tasks and the group's hosts), encoded, or nil when
// it has none of them.
func (s *Strategy) AssignmentData(member string, _ map[string][]int32, _ int32) ([]byte, error) {
	s.mu.Lock()
	a := Assignment{Standbys: s.planned[member], Warmups: s.warm[member], Pending: s.pending[member], Hosts: s.hosts}
	s.mu.Unlock()
	if len(a.Standbys) == 0 && len(a.Warmups) == 0 && len(a.Pending) == 0 && len(a.Hosts) == 0 {
		return nil, nil
	}
	return encodeAssignment(a), nil
}

// SubscriptionUserData encodes the process's [UserData] (from local), the
// generation of this member's last assignment and the tasks of that
// assignment. It never fails.
func (s *Strategy) SubscriptionUserData([]string) ([]byte, error) {
	var ud UserData
	if s.local != nil {
		ud = s.local()
	}
	s.mu.Lock()
	sub := subscription{UserData: ud, Generation: s.generation, Prev: s.prev}
	s.mu.Unlock()
	return encodeSubscription(sub), nil
}

// OnAssignment records the assignment and its generation for the next
// subscription and calls onAssign with the tasks for which the member got
// every partition and with its standby tasks. A task with only some of
// its partitions (a task being handed over under the cooperative
// protocol) is left out. Standbys that cannot be decoded are logged and
// dropped: a standby is an optimisation, never needed for correctness.
func (s *Strategy) OnAssignment(assignment *sarama.ConsumerGroupMemberAssignment, generation int32) {
	var topics map[string][]int32
	var extra Assignment
	if assignment != nil {
		topics = assignment.Topics
		var err error
		if extra, err = decodeAssignment(assignment.UserData); err != nil {
			s.warn("ignoring the standby tasks and hosts of the assignment", "err", err)
		}
	}
	tasks := completeTasks(s.subs, topics)
	s.mu.Lock()
	s.generation = generation
	s.prev = tasks
	s.mu.Unlock()
	if s.onAssign != nil {
		s.onAssign(slices.Clone(tasks), extra, generation)
	}
}

// completeTasks returns, sorted, the tasks of subs for which topics holds
// partition p of every source topic.
func completeTasks(subs []Subtopology, topics map[string][]int32) []TaskID {
	var tasks []TaskID
	for _, sub := range subs {
		if len(sub.Topics) == 0 {
			continue
		}
	next:
		for _, p := range topics[sub.Topics[0]] {
			for _, t := range sub.Topics[1:] {
				if !slices.Contains(topics[t], p) {
					continue next
				}
			}
			tasks = append(tasks, TaskID{Subtopology: sub.ID, Partition: p})
		}
	}
	slices.SortFunc(tasks, TaskID.Compare)
	return slices.Compact(tasks)
}

type topicPartition struct {
	topic     string
	partition int32
}

// Plan implements [sarama.BalanceStrategy] for the group leader. It turns
// each member's metadata into a [Member] and calls the pure [Plan] with
// the partition counts of topics, then expands every task into its
// partitions.
//
// Ownership, for stickiness, is the member's OwnedPartitions (cooperative
// protocol), or when that is empty the tasks of its last assignment from
// its user data (eager protocol, where sarama sends no OwnedPartitions). A
// member whose generation (the larger of its metadata GenerationID and the
// one in its user data) is below the group's largest owns nothing for
// stickiness: its claims are stale. Undecodable user data (another version
// of weir, another client) counts as no user data.
//
// Cooperative hand-over: when a task assigned to member B has a partition
// that another member A still owns, B gets only the task's partitions it
// already owns (usually none) in this round. A loses the task, revokes it
// and rejoins; in the follow-up rebalance nobody else owns it and B gets
// it whole. So no partition is ever assigned while another member still
// holds it. Under the eager protocol nobody reports owned partitions and
// nothing is withheld.
//
// With warm-ups on ([Strategy.WithWarmups]), the balanced plan goes
// through [KeepCaughtUp] before the hand-over, and standbys are placed
// for the tasks where they are then. Probes ([ProbeUserData]) get
// nothing and count for nothing.
func (s *Strategy) Plan(members map[string]sarama.ConsumerGroupMemberMetadata, topics map[string][]int32) (sarama.BalanceStrategyPlan, error) {
	counts := make(map[string]int32, len(topics))
	for t, ps := range topics {
		counts[t] = int32(len(ps))
	}
	ids, input, holders := s.readMembers(members)
	balanced, err := Plan(s.subs, counts, input)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	replicas, warmups := s.replicas, s.warmups
	s.mu.Unlock()
	assignment, warm := KeepCaughtUp(s.subs, input, balanced, warmups)
	// Standbys go where the active plan puts tasks, not where this round's
	// cooperative hand-over lets them start: a task withheld for one
	// round is in nobody's standbys on its target process meanwhile.
	standbys, err := PlanStandbys(s.subs, counts, input, assignment, replicas)
	if err != nil {
		return nil, err
	}
	plan, pending := s.handOver(ids, assignment, holders)
	// The hosts' active tasks are those of the plan sent, so that a task
	// withheld for a hand-over is nobody's for this round: its queries
	// get a retryable answer rather than one from a closing store.
	sent := make(map[string][]TaskID, len(ids))
	for _, id := range ids {
		sent[id] = completeTasks(s.subs, plan[id])
	}
	copies := make(map[string][]TaskID, len(standbys)+len(warm))
	for _, m := range [](map[string][]TaskID){standbys, warm} {
		for id, ts := range m {
			copies[id] = append(copies[id], ts...)
		}
	}
	s.mu.Lock()
	s.planned = standbys
	s.warm = warm
	s.pending = pending
	s.hosts = hostsOf(input, sent, copies)
	s.mu.Unlock()
	if len(warm) > 0 {
		s.info("keeping tasks with their caught-up owners while warm-ups catch up", "warmups", warm)
	}
	return plan, nil
}

// readMembers reads the members' subscriptions: the ids of the members
// that take tasks (probes do not), sorted; each one's process, address,
// state and owned tasks (ownership of a generation older than the
// group's is ignored); and which members hold each partition now.
func (s *Strategy) readMembers(members map[string]sarama.ConsumerGroupMemberMetadata) (ids []string, input []Member, holders map[topicPartition][]string) {
	for _, id := range slices.Sorted(maps.Keys(members)) {
		if !isProbe(members[id].UserData) {
			ids = append(ids, id)
		}
	}
	input = make([]Member, len(ids))
	gens := make([]int32, len(ids))
	maxGen := int32(noGeneration)
	holders = make(map[topicPartition][]string)
	for i, id := range ids {
		meta := members[id]
		sub, err := decodeSubscription(meta.UserData)
		if err != nil {
			s.warn("ignoring subscription user data", "member", id, "err", err)
			sub = subscription{Generation: noGeneration}
		}
		gen := sub.Generation
		if meta.Version >= 2 && meta.GenerationID > gen {
			gen = meta.GenerationID
		}
		gens[i] = gen
		maxGen = max(maxGen, gen)

		owned := s.ownedTasks(meta.OwnedPartitions)
		if len(meta.OwnedPartitions) == 0 {
			owned = sub.Prev
		}
		input[i] = Member{ID: id, ProcessID: sub.ProcessID, Addr: sub.Addr, Owned: owned, State: sub.State}
		for _, op := range meta.OwnedPartitions {
			if op == nil {
				continue
			}
			for _, p := range op.Partitions {
				tp := topicPartition{op.Topic, p}
				holders[tp] = append(holders[tp], id)
			}
		}
	}
	for i := range input {
		if gens[i] < maxGen && len(input[i].Owned) > 0 {
			s.warn("ignoring stale ownership", "member", input[i].ID, "generation", gens[i], "group_generation", maxGen)
			input[i].Owned = nil
		}
	}
	return ids, input, holders
}

// handOver turns the assignment into the plan sent this round: a task
// whose partitions another member still holds is withheld (pending) until
// that member has revoked them, as cooperative rebalancing requires.
func (s *Strategy) handOver(ids []string, assignment map[string][]TaskID, holders map[topicPartition][]string) (sarama.BalanceStrategyPlan, map[string][]TaskID) {
	topicsOf := make(map[int][]string, len(s.subs))
	for _, sub := range s.subs {
		topicsOf[sub.ID] = sub.Topics
	}
	plan := make(sarama.BalanceStrategyPlan, len(ids))
	pending := make(map[string][]TaskID)
	for _, id := range ids {
		plan[id] = make(map[string][]int32)
		for _, task := range assignment[id] {
			ts := topicsOf[task.Subtopology]
			elsewhere := false
			for _, t := range ts {
				for _, h := range holders[topicPartition{t, task.Partition}] {
					elsewhere = elsewhere || h != id
				}
			}
			if elsewhere {
				pending[id] = append(pending[id], task)
			}
			for _, t := range ts {
				if elsewhere && !slices.Contains(holders[topicPartition{t, task.Partition}], id) {
					continue // withheld until the other owner revoked it
				}
				plan[id][t] = append(plan[id][t], task.Partition)
			}
		}
		for _, ps := range plan[id] {
			slices.Sort(ps)
		}
		slices.SortFunc(pending[id], TaskID.Compare)
	}
	return plan, pending
}

// ownedTasks maps owned partitions to the tasks they belong to: a task is
// owned if any of its partitions is.
func (s *Strategy) ownedTasks(owned []*sarama.OwnedPartition) []TaskID {
	var tasks []TaskID
	for _, op := range owned {
		if op == nil {
			continue
		}
		for _, sub := range s.subs {
			if !slices.Contains(sub.Topics, op.Topic) {
				continue
			}
			for _, p := range op.Partitions {
				tasks = append(tasks, TaskID{Subtopology: sub.ID, Partition: p})
			}
		}
	}
	slices.SortFunc(tasks, TaskID.Compare)
	return slices.Compact(tasks)
}

func (s *Strategy) info(msg string, args ...any) {
	s.mu.Lock()
	l := s.logger
	s.mu.Unlock()
	if l != nil {
		l.Info("weir: assign: "+msg, args...)
	}
}

func (s *Strategy) warn(msg string, args ...any) {
	s.mu.Lock()
	l := s.logger
	s.mu.Unlock()
	if l != nil {
		l.Warn("weir: assign: "+msg, args...)
	}
}
