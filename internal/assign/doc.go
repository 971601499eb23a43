// Package assign is weir's consumer-group assignor: it gives whole tasks to
// stream threads, balanced and sticky, and plugs into sarama as the
// [Strategy] balance strategy named "weir".
//
// # Tasks
//
// A sub-topology reads a set of co-partitioned source topics. Its task p
// ([TaskID]{Subtopology, p}, printed "0_3") is partition p of every one of
// those topics; a task always goes whole to one group member, so a join or
// an aggregation sees all records of a key. Each member is one stream
// thread; a process runs one or more of them and reports, in its
// subscription, its process id and the offset sums of the tasks whose
// state it holds on disk ([UserData]).
//
// # Algorithm
//
// [Plan] is a pure function of the sub-topologies, the partition counts
// and the members. With n tasks and m members every member gets
// q = n/m tasks and r = n%m of them get q+1. It then runs three passes:
//
//  1. Sticky. Every member keeps up to q of the tasks it owns; the r extra
//     slots go to members owning more than q, most owned first. A member
//     that must give tasks up gives up first those whose state a member
//     with room holds (most caught up first), and keeps those that would
//     restore in full wherever they went (a standby on a full member does
//     not count). This keeps the most tasks in place that any balanced
//     assignment can, and because only r members may reach q+1, sticky
//     members never starve the others.
//  2. State. Every unassigned task whose state some process holds goes to
//     the most caught-up such process that still has room (tasks with the
//     fewest candidate processes first), to its least-loaded thread.
//  3. Rest. Remaining tasks go, in task order, to the least-loaded member,
//     preferring the one with fewest tasks of the same sub-topology.
//
// Members are handled in member id order and tasks in task order, so the
// result is deterministic. Capacity (q per member plus r extra slots)
// equals n, so every pass respects balance and the last one always places
// everything.
//
// # Cooperative rebalancing
//
// Under the cooperative protocol members keep their partitions during a
// rebalance. [Strategy.Plan] therefore withholds a task that moves from
// member A to member B: B does not get it in this round, A sees it gone and
// revokes it (committing and closing the task), sarama then rejoins, and in
// that follow-up round nobody owns the task and B gets it. A member that
// gives tasks up ends the first round with exactly its share, so in the
// follow-up round it is full and cannot take back what it revoked: a
// membership change settles in two rounds.
//
// Under the eager protocol sarama sends no owned partitions, so members
// also carry the tasks of their last assignment, and its generation, in
// their user data; stickiness works the same in both protocols. Owned
// tasks reported by a member with an older generation than the group's
// newest are ignored, as sarama's cooperative-sticky strategy does.
package assign
