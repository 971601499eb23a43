package assign

import (
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"

	"github.com/weirstream/weir/internal/hostport"
)

// UserData is what a member tells the group leader about its process in
// every JoinGroup: the process id and the tasks whose local state the
// process holds. The runtime supplies it through the local function given
// to [NewStrategy].
type UserData struct {
	// ProcessID identifies the process (instance) the member runs in; it is
	// stable across restarts (kept in the state directory). "" means unknown.
	ProcessID string
	// State maps each task whose state the process holds on disk to its
	// offset sum (sum of the checkpointed changelog offsets of the task's
	// stores; higher is more caught up). Kafka Streams reports the same as
	// "task offset sums" in its subscription.
	State map[TaskID]int64
	// Addr is the address the process serves its stores' queries at
	// (Config.AdvertisedAddr); "" for none. The leader hands every
	// member the addresses of all (see Assignment.Hosts).
	Addr string
}

// userDataVersion is the first byte of every encoded subscription. A
// decoder reads this version and the ones before it and rejects any
// other; a change of format takes a new version. Version 2 added the
// advertised address at the end. A leader running a weir from before it
// cannot read a version 2 subscription and plans as if the member had
// sent none (it loses stickiness for that rebalance), which a rolling
// upgrade meets once.
const userDataVersion = 2

// probeVersion is the first and only byte of a probe's subscription user
// data ([ProbeUserData]). No subscription version will ever take it.
const probeVersion = 0xff

// ProbeUserData returns the subscription user data of a probe: a member
// that joins the group only to start a rebalance (a probing rebalance,
// see [KeepCaughtUp]) and leaves it again before the rebalance completes.
// The leader gives such a member nothing, should it still be in the group
// when the leader plans. A leader of a weir from before probes treats it
// as a member without user data and may give it tasks, which move on when
// its session times out.
func ProbeUserData() []byte { return []byte{probeVersion} }

// isProbe reports whether b is a probe's subscription user data.
func isProbe(b []byte) bool { return len(b) == 1 && b[0] == probeVersion }

// IsProbe reports whether b, a member's subscription user data, is a
// probe's (ProbeUserData): a member that runs no process's tasks.
func IsProbe(b []byte) bool { return isProbe(b) }

// subscription is the encoded subscription user data: the runtime's
// UserData plus what the strategy itself carries across rebalances.
type subscription struct {
	UserData
	// Generation is the generation of the member's last assignment, -1
	// before the first.
	Generation int32
	// Prev are the tasks of the member's last assignment. They stand in for
	// OwnedPartitions, which sarama leaves empty under the eager protocol.
	Prev []TaskID
}

// errUserData is wrapped by every decoding error.
var errUserData = errors.New("weir: malformed subscription user data")

// encodeSubscription returns the version 1 encoding:
//
//	version   byte (1)
//	process   uvarint length, bytes
//	gen       varint (zig-zag)
//	prev      task set
//	state     task set, each task followed by its offset sum as varint
//
// A task set is a uvarint number of sub-topology groups in increasing
// sub-topology order; each group is the sub-topology (the first one
// absolute, later ones as the gap minus one from the previous), a uvarint
// count (>= 1), then the partitions in increasing order, the first
// absolute and later ones as the gap minus one. The encoding is canonical:
// a set has exactly one encoding. Invalid task ids (negative numbers) are
// left out.
//
// Version 2 appends the address: uvarint length, bytes.
func encodeSubscription(s subscription) []byte {
	b := make([]byte, 0, 16+len(s.ProcessID)+len(s.Addr)+3*len(s.Prev)+12*len(s.State))
	b = append(b, userDataVersion)
	b = binary.AppendUvarint(b, uint64(len(s.ProcessID)))
	b = append(b, s.ProcessID...)
	b = binary.AppendVarint(b, int64(s.Generation))
	prev := slices.DeleteFunc(slices.Clone(s.Prev), invalidTask)
	slices.SortFunc(prev, TaskID.Compare)
	prev = slices.Compact(prev)
	b = appendTaskSet(b, prev, nil)
	state := slices.DeleteFunc(slices.Collect(maps.Keys(s.State)), invalidTask)
	slices.SortFunc(state, TaskID.Compare)
	b = appendTaskSet(b, state, s.State)
	b = binary.AppendUvarint(b, uint64(len(s.Addr)))
	b = append(b, s.Addr...)
	return b
}

// invalidTask reports a task id no sub-topology can have; the encoding
// leaves such ids out.
func invalidTask(t TaskID) bool {
	return t.Subtopology < 0 || t.Subtopology > math.MaxInt32 || t.Partition < 0
}

// appendTaskSet encodes sorted, distinct tasks; with values non-nil each
// task is followed by its value.
func appendTaskSet(b []byte, tasks []TaskID, values map[TaskID]int64) []byte {
	groups := 0
	for i := range tasks {
		if i == 0 || tasks[i].Subtopology != tasks[i-1].Subtopology {
			groups++
		}
	}
	b = binary.AppendUvarint(b, uint64(groups))
	for i := 0; i < len(tasks); {
		j := i
		for j < len(tasks) && tasks[j].Subtopology == tasks[i].Subtopology {
			j++
		}
		sub := uint64(tasks[i].Subtopology)
		if i > 0 {
			sub -= uint64(tasks[i-1].Subtopology) + 1
		}
		b = binary.AppendUvarint(b, sub)
		b = binary.AppendUvarint(b, uint64(j-i))
		for k := i; k < j; k++ {
			part := uint64(tasks[k].Partition)
			if k > i {
				part -= uint64(tasks[k-1].Partition) + 1
			}
			b = binary.AppendUvarint(b, part)
			if values != nil {
				b = binary.AppendVarint(b, values[tasks[k]])
			}
		}
		i = j
	}
	return b
}

// SubscriptionProcess returns the process id that a member's subscription
// user data (what [Strategy.SubscriptionUserData] sends) names; ok is
// false for a probe and for data weir did not write.
func SubscriptionProcess(userData []byte) (processID string, ok bool) {
	if isProbe(userData) {
		return "", false
	}
	s, err := decodeSubscription(userData)
	if err != nil || s.ProcessID == "" {
		return "", false
	}
	return s.ProcessID, true
}

// decodeSubscription decodes what encodeSubscription wrote. Any other input
// (empty, unknown version, truncated, out-of-range numbers, unsorted sets,
// trailing bytes) is an error wrapping errUserData; it never panics and
// never allocates more than a small multiple of len(b).
func decodeSubscription(b []byte) (subscription, error) {
	if len(b) == 0 {
		return subscription{}, fmt.Errorf("%w: empty", errUserData)
	}
	version := b[0]
	if version < 1 || version > userDataVersion {
		return subscription{}, fmt.Errorf("%w: unknown version %d (this weir reads versions 1 to %d)", errUserData, b[0], userDataVersion)
	}
	d := decoder{b: b[1:]}
	var s subscription
	n := d.length("process id length")
	s.ProcessID = string(d.bytes(n))
	gen := d.varint("generation")
	if d.err == nil && (gen < math.MinInt32 || gen > math.MaxInt32) {
		d.fail("generation %d out of range", gen)
	}
	s.Generation = int32(gen)
	d.taskSet("previous tasks", func(t TaskID) { s.Prev = append(s.Prev, t) })
	d.taskSet("state", func(t TaskID) {
		off := d.varint("offset sum")
		if s.State == nil {
			s.State = make(map[TaskID]int64)
		}
		s.State[t] = off
	})
	if version >= 2 {
		s.Addr = string(d.bytes(d.length("address length")))
		if s.Addr != "" && hostport.Check(s.Addr) != nil {
			// A member's address ends up in the URLs the others send
			// lookups to: one that is not a plain host:port is dropped,
			// and the member serves no queries.
			s.Addr = ""
		}
	}
	if d.err == nil && len(d.b) > 0 {
		d.fail("%d trailing bytes", len(d.b))
	}
	if d.err != nil {
		return subscription{}, d.err
	}
	return s, nil
}

// decoder reads varints from b, remembering the first error; once it
// failed every read returns zero.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: "+format, append([]any{errUserData}, args...)...)
	}
}

func (d *decoder) uvarint(what string) uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail("bad %s", what)
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) varint(what string) int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail("bad %s", what)
		return 0
	}
	d.b = d.b[n:]
	return v
}

// length reads a count of items that take at least one byte each, so it
// can be at most the number of bytes left.
func (d *decoder) length(what string) int {
	v := d.uvarint(what)
	if d.err == nil && v > uint64(len(d.b)) {
		d.fail("%s %d exceeds the %d bytes left", what, v, len(d.b))
		return 0
	}
	return int(v)
}

func (d *decoder) bytes(n int) []byte {
	if d.err != nil {
		return nil
	}
	v := d.b[:n]
	d.b = d.b[n:]
	return v
}

// taskSet decodes a task set, calling each for every task in order (each
// may read the task's value).
func (d *decoder) taskSet(what string, each func(TaskID)) {
	groups := d.length(what + " group count")
	sub := int64(-1)
	for range groups {
		gap := d.uvarint(what + " subtopology")
		n := d.length(what + " task count")
		if d.err != nil {
			return
		}
		if gap > math.MaxInt32 || sub+1+int64(gap) > math.MaxInt32 {
			d.fail("%s subtopology out of range", what)
			return
		}
		sub += 1 + int64(gap)
		if n == 0 {
			d.fail("%s: empty group for subtopology %d", what, sub)
			return
		}
		part := int64(-1)
		for range n {
			pgap := d.uvarint(what + " partition")
			if d.err != nil {
				return
			}
			if pgap > math.MaxInt32 || part+1+int64(pgap) > math.MaxInt32 {
				d.fail("%s partition out of range", what)
				return
			}
			part += 1 + int64(pgap)
			each(TaskID{Subtopology: int(sub), Partition: int32(part)})
			if d.err != nil {
				return
			}
		}
	}
}
