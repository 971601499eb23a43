package repair

import (
	"encoding/binary"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/weirstream/weir/internal/assign"
)

// groupPartition places groups as Kafka does (Utils.abs(hashCode) %
// partitions). A mask instead of the absolute value put groups with a
// negative hash on the wrong partition.
func TestGroupPartition(t *testing.T) {
	for _, c := range []struct {
		group string
		n     int32
		want  int32
	}{
		// Expected values from Java: Math.abs(s.hashCode()) % n.
		{"", 50, 0},
		{"a", 50, 47},
		{"my-group", 50, 12}, // a negative hash code (-1906497762)
		{"app-wordcount", 50, 49},
		{"grüße", 7, 4},
	} {
		if got := groupPartition(c.group, c.n); got != c.want {
			t.Errorf("groupPartition(%q, %d) = %d, want %d", c.group, c.n, got, c.want)
		}
	}
}

// abandonedBy lets a thread take over only the transactional ids of its
// application's departed processes (out of the group since an earlier
// generation) whose last transaction completed with the open records'
// producer id and epoch.
func TestAbandonedBy(t *testing.T) {
	const (
		app   = "orders"
		self  = "00000000000000000000000000000001"
		live  = "00000000000000000000000000000002"
		gone  = "00000000000000000000000000000003"
		brief = "00000000000000000000000000000004"
		pid   = int64(4000)
		epoch = int16(7)
	)
	open := sarama.ProducerState{ProducerID: pid, ProducerEpoch: int32(epoch), CurrentTxnStartOffset: 12}
	done := func(state string) LastTransaction {
		return LastTransaction{State: state, ProducerID: pid, ProducerEpoch: epoch}
	}
	// This process is not among the members: its threads may all be
	// out of the group while they rejoin.
	members := map[string]bool{live: true}
	tests := []struct {
		name string
		id   string
		last LastTransaction
		may  bool
	}{
		{"a process out of the group in this generation only", app + "-" + brief + "-0", done("CompleteCommit"), false},
		{"departed process, committed", app + "-" + gone + "-0", done("CompleteCommit"), true},
		{"departed process, aborted", app + "-" + gone + "-3", done("CompleteAbort"), true},
		{"this process", app + "-" + self + "-0", done("CompleteCommit"), false},
		{"a member's process", app + "-" + live + "-1", done("CompleteCommit"), false},
		{"another application", "orders-v2-" + gone + "-0", done("CompleteCommit"), false},
		{"not weir's form", "orders-payments", done("CompleteCommit"), false},
		{"in progress", app + "-" + gone + "-0", done("Ongoing"), false},
		{"committing", app + "-" + gone + "-0", done("PrepareCommit"), false},
		{"a later epoch", app + "-" + gone + "-0", LastTransaction{State: "CompleteCommit", ProducerID: pid, ProducerEpoch: epoch + 1}, false},
		{"another producer id", app + "-" + gone + "-0", LastTransaction{State: "CompleteCommit", ProducerID: pid + 1, ProducerEpoch: epoch}, false},
		{"unknown to the coordinator", app + "-" + gone + "-0", LastTransaction{}, false},
	}
	for _, tc := range tests {
		gone := strings.Contains(tc.id, gone) // brief is out of the group, not yet gone
		why := abandonedBy(app, self, members, gone, tc.id, open, tc.last)
		if (why == "") != tc.may {
			t.Errorf("%s: abandonedBy = %q; may take over: %v", tc.name, why, tc.may)
		}
	}
}

// memberMetadata encodes a consumer's subscription (version 0: topics,
// then user data) as a group describes it.
func memberMetadata(userData []byte) []byte {
	b := binary.BigEndian.AppendUint16(nil, 0)
	b = binary.BigEndian.AppendUint32(b, 1)
	b = binary.BigEndian.AppendUint16(b, 2)
	b = append(b, "in"...)
	b = binary.BigEndian.AppendUint32(b, uint32(len(userData)))
	return append(b, userData...)
}

// TestLiveProcessesRefusesUnknownMembers: a member whose user data this
// weir cannot read (a newer weir in a rolling upgrade) makes the group's
// processes unknown, so that no take-over fences it; a probe runs no
// process's tasks and is left out. The member was dropped, and its
// process's records taken over.
func TestLiveProcessesRefusesUnknownMembers(t *testing.T) {
	t.Parallel()
	const proc = "0123456789abcdef0123456789abcdef"
	ud, _ := assign.NewStrategy(nil, func() assign.UserData { return assign.UserData{ProcessID: proc} }, nil).SubscriptionUserData(nil)
	member := func(data []byte) *sarama.GroupMemberDescription {
		return &sarama.GroupMemberDescription{ClientId: "c", MemberMetadata: memberMetadata(data)}
	}
	live, err := liveProcesses(&sarama.GroupDescription{Members: map[string]*sarama.GroupMemberDescription{
		"m1": member(ud), "probe": member(assign.ProbeUserData())}})
	if err != nil || len(live) != 1 || !live[proc] {
		t.Fatalf("liveProcesses = %v, %v; want only %s", live, err, proc)
	}
	newer := append([]byte{99}, ud[1:]...) // a user data version from the future
	if live, err := liveProcesses(&sarama.GroupDescription{Members: map[string]*sarama.GroupMemberDescription{
		"m1": member(ud), "m2": member(newer)}}); err == nil || !strings.Contains(err.Error(), "m2") {
		t.Fatalf("liveProcesses = %v, %v; want an error naming m2", live, err)
	}
}

// TestAbsenceNeedsTwoGenerationsOrAMinute: a process seen out of the
// group for the first time is not gone yet; it is once this thread runs a
// later generation, or a minute later; back in the group, it starts over.
func TestAbsenceNeedsTwoGenerationsOrAMinute(t *testing.T) {
	t.Parallel()
	const (
		app  = "orders"
		self = "00000000000000000000000000000001"
		proc = "00000000000000000000000000000003"
		id   = app + "-" + proc + "-0"
	)
	ap := sarama.ProducerState{ProducerID: 9, ProducerEpoch: 2, CurrentTxnStartOffset: 40}
	last := LastTransaction{State: "CompleteAbort", ProducerID: 9, ProducerEpoch: 2}
	out, in := map[string]bool{}, map[string]bool{proc: true}
	t0 := time.Unix(1_000_000, 0)
	var a absence
	steps := []struct {
		live map[string]bool
		gen  int32
		at   time.Duration
		may  bool
	}{
		{out, 4, 0, false},                           // first seen out
		{out, 4, 30 * time.Second, false},            // same generation, half a minute
		{out, 5, 31 * time.Second, true},             // a later generation
		{in, 5, 32 * time.Second, false},             // back
		{out, 5, 33 * time.Second, false},            // out again: starts over
		{out, 5, 33*time.Second + time.Minute, true}, // a minute later
	}
	for i, st := range steps {
		why := a.judge(app, self, st.live, st.gen, t0.Add(st.at), id, ap, last)
		if (why == "") != st.may {
			t.Fatalf("step %d: judge = %q, want may take over: %v", i, why, st.may)
		}
	}
}
