package assign

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// TaskID identifies a task: partition Partition of every source topic of
// sub-topology Subtopology. It is comparable and usable as a map key.
// Valid task ids have Subtopology >= 0 and Partition >= 0.
type TaskID struct {
	Subtopology int
	Partition   int32
}

// String returns "<subtopology>_<partition>", e.g. "0_3", as Kafka Streams
// prints task ids. [ParseTaskID] is its inverse.
func (t TaskID) String() string {
	return strconv.Itoa(t.Subtopology) + "_" + strconv.FormatInt(int64(t.Partition), 10)
}

// Compare orders task ids by sub-topology, then partition. It returns -1, 0
// or +1 like [cmp.Compare] and suits [slices.SortFunc].
func (t TaskID) Compare(u TaskID) int {
	if c := cmp.Compare(t.Subtopology, u.Subtopology); c != 0 {
		return c
	}
	return cmp.Compare(t.Partition, u.Partition)
}

// ParseTaskID parses the form [TaskID.String] produces. Both numbers must
// be non-negative decimal integers without sign or leading zeros, the
// sub-topology at most math.MaxInt32 and the partition at most
// math.MaxInt32; anything else is an error naming the input.
func ParseTaskID(s string) (TaskID, error) {
	sub, part, ok := strings.Cut(s, "_")
	if !ok {
		return TaskID{}, fmt.Errorf("weir: invalid task id %q: want <subtopology>_<partition>", s)
	}
	n, err := parseCanonical(sub)
	if err != nil {
		return TaskID{}, fmt.Errorf("weir: invalid task id %q: subtopology: %w", s, err)
	}
	p, err := parseCanonical(part)
	if err != nil {
		return TaskID{}, fmt.Errorf("weir: invalid task id %q: partition: %w", s, err)
	}
	return TaskID{Subtopology: int(n), Partition: int32(p)}, nil
}

// parseCanonical parses a non-negative int32 written the way strconv
// formats it, so that ParseTaskID(s).String() == s for every accepted s.
func parseCanonical(s string) (int64, error) {
	n, err := strconv.ParseInt(s, 10, 32)
	if err != nil {
		return 0, err
	}
	if n < 0 || strconv.FormatInt(n, 10) != s {
		return 0, fmt.Errorf("%q is not a non-negative integer in canonical form", s)
	}
	return n, nil
}

// Subtopology is the assignor's view of a sub-topology: its id and its
// source topics (user topics and repartition topics). All source topics
// must have the same partition count; task p of the sub-topology is
// partition p of every topic in Topics. A topic belongs to at most one
// sub-topology. IDs must be unique and non-negative.
type Subtopology struct {
	ID     int
	Topics []string
	// Stateful: the sub-topology's tasks have stores, so they get standby
	// copies (see [PlanStandbys]).
	Stateful bool
}

// PartitionCountError reports a sub-topology whose source topics cannot be
// split into tasks: their partition counts differ, or a topic has no known
// partition count (it is missing from the metadata). It corresponds to
// Kafka Streams' "topics not co-partitioned" TopologyException.
type PartitionCountError struct {
	// Subtopology is the id of the offending sub-topology.
	Subtopology int
	// Topics are the sub-topology's source topics, in the order given.
	Topics []string
	// Counts[i] is the partition count of Topics[i], -1 when unknown.
	Counts []int32
}

// Error names the sub-topology and every topic with its partition count.
func (e *PartitionCountError) Error() string {
	var b strings.Builder
	var missing []string
	for i, t := range e.Topics {
		if i > 0 {
			b.WriteString(", ")
		}
		if e.Counts[i] < 0 {
			missing = append(missing, t)
			fmt.Fprintf(&b, "%s=unknown", t)
		} else {
			fmt.Fprintf(&b, "%s=%d", t, e.Counts[i])
		}
	}
	if len(missing) > 0 {
		return fmt.Sprintf("weir: subtopology %d: no partition count for source topic(s) %s (partition counts: %s)",
			e.Subtopology, strings.Join(missing, ", "), b.String())
	}
	return fmt.Sprintf("weir: subtopology %d: source topics are not co-partitioned (partition counts: %s)",
		e.Subtopology, b.String())
}

// subtopologyTasks validates subs against partitions and returns every
// task, sorted. It reports every problem at once.
func subtopologyTasks(subs []Subtopology, partitions map[string]int32) ([]TaskID, error) {
	var errs []error
	seenID := make(map[int]bool, len(subs))
	topicOwner := make(map[string]int)
	var tasks []TaskID
	for _, s := range subs {
		switch {
		case s.ID < 0 || s.ID > math.MaxInt32:
			errs = append(errs, fmt.Errorf("weir: subtopology id %d out of range [0, %d]", s.ID, math.MaxInt32))
			continue
		case seenID[s.ID]:
			errs = append(errs, fmt.Errorf("weir: subtopology id %d appears twice", s.ID))
			continue
		case len(s.Topics) == 0:
			errs = append(errs, fmt.Errorf("weir: subtopology %d has no source topics", s.ID))
			continue
		}
		seenID[s.ID] = true
		dup := false
		for _, t := range s.Topics {
			if o, ok := topicOwner[t]; ok {
				errs = append(errs, fmt.Errorf("weir: topic %s is a source of subtopologies %d and %d", t, o, s.ID))
				dup = true
				continue
			}
			topicOwner[t] = s.ID
		}
		if dup {
			continue
		}
		counts := make([]int32, len(s.Topics))
		bad := false
		for i, t := range s.Topics {
			n, ok := partitions[t]
			if !ok || n < 0 {
				n = -1
			}
			counts[i] = n
			bad = bad || n != counts[0] || n < 0
		}
		if bad {
			errs = append(errs, &PartitionCountError{Subtopology: s.ID, Topics: slices.Clone(s.Topics), Counts: counts})
			continue
		}
		for p := range counts[0] {
			tasks = append(tasks, TaskID{Subtopology: s.ID, Partition: p})
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	slices.SortFunc(tasks, TaskID.Compare)
	return tasks, nil
}

// processKey names the process of member m for grouping: members with the
// same ProcessID share one, and a member without one is a process of its
// own.
func processKey(m Member) string {
	if m.ProcessID == "" {
		return "member:" + m.ID
	}
	return "process:" + m.ProcessID
}

// mergeState adds the offset sums of from to into, keeping the highest
// per task: a process's state is the best any of its members reports.
func mergeState(into, from map[TaskID]int64) {
	for t, off := range from {
		if old, ok := into[t]; !ok || off > old {
			into[t] = off
		}
	}
}

// statefulSubs reports, per sub-topology id, whether it is stateful.
func statefulSubs(subs []Subtopology) map[int]bool {
	m := make(map[int]bool, len(subs))
	for _, s := range subs {
		m[s.ID] = s.Stateful
	}
	return m
}

// sortedMembers returns members sorted by id, for deterministic loops.
func sortedMembers(members []Member) []Member {
	ms := slices.Clone(members)
	slices.SortFunc(ms, func(a, b Member) int { return cmp.Compare(a.ID, b.ID) })
	return ms
}
