package assign

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/weirstream/weir/internal/hostport"
)

// Assignment is what the group leader tells each member besides its
// partitions: its standby and warm-up tasks and where every task of the
// group runs.
type Assignment struct {
	// Standbys are the member's standby tasks, sorted.
	Standbys []TaskID
	// Warmups are the member's warm-up tasks ([KeepCaughtUp]), sorted: kept
	// current like standbys, and once one is caught up the member's
	// instance asks for a probing rebalance, which moves the task to it.
	// A task may be in both lists.
	Warmups []TaskID
	// Pending are the tasks the plan gives the member but that this round
	// withholds, sorted: another member still owns a partition of each,
	// and the member gets them in the follow-up rebalance the cooperative
	// protocol starts once that member has revoked them. Until then the
	// member is not done rebalancing (App.State, /readyz).
	Pending []TaskID
	// Hosts are the processes of the group that advertise an address
	// (UserData.Addr), sorted by it, with their tasks: what queries of a
	// store partition are sent to. Processes without one are left out.
	Hosts []Host
}

// Host is one process of the group in an [Assignment].
type Host struct {
	Addr string
	// Active are the tasks it runs as of this assignment: a task being
	// handed over under the cooperative protocol is in no host's Active
	// until its new owner gets it. Standby are its standby and warm-up
	// tasks. Both sorted.
	Active, Standby []TaskID
}

// assignmentVersion is the first byte of the assignment user data the
// leader sends each member; a change of format takes a new version.
// Version 2 added the warm-up tasks at the end, version 3 the pending
// tasks after them. A member running a weir from before a version cannot
// read its assignments: it logs that and runs without standbys and hosts
// until the leader is of its version again, which a rolling upgrade meets
// for a while.
const assignmentVersion = 3

// encodeAssignment encodes a as the version byte, the standby task set
// (see encodeSubscription for task sets), the uvarint number of hosts,
// and per host its address (uvarint length, bytes), active task set and
// standby task set; version 2 appends the warm-up task set, version 3 the
// pending task set. The tasks must be sorted and distinct.
func encodeAssignment(a Assignment) []byte {
	b := []byte{assignmentVersion}
	b = appendTaskSet(b, a.Standbys, nil)
	b = binary.AppendUvarint(b, uint64(len(a.Hosts)))
	for _, h := range a.Hosts {
		b = binary.AppendUvarint(b, uint64(len(h.Addr)))
		b = append(b, h.Addr...)
		b = appendTaskSet(b, h.Active, nil)
		b = appendTaskSet(b, h.Standby, nil)
	}
	b = appendTaskSet(b, a.Warmups, nil)
	return appendTaskSet(b, a.Pending, nil)
}

// decodeAssignment decodes what encodeAssignment wrote, of this version or
// an earlier one (version 1: no warm-ups; 2: no pending tasks). Empty input is the zero Assignment (a leader that placed no standbys and knows no
// addresses sends none); anything else that is not a valid encoding is an
// error wrapping errUserData.
func decodeAssignment(b []byte) (Assignment, error) {
	var a Assignment
	if len(b) == 0 {
		return a, nil
	}
	version := b[0]
	if version < 1 || version > assignmentVersion {
		return a, fmt.Errorf("%w: unknown assignment version %d (this weir reads versions 1 to %d)", errUserData, b[0], assignmentVersion)
	}
	d := decoder{b: b[1:]}
	d.taskSet("standby tasks", func(t TaskID) { a.Standbys = append(a.Standbys, t) })
	n := d.length("host count")
	for range n {
		if d.err != nil {
			break
		}
		var h Host
		h.Addr = string(d.bytes(d.length("host address length")))
		d.taskSet("host active tasks", func(t TaskID) { h.Active = append(h.Active, t) })
		d.taskSet("host standby tasks", func(t TaskID) { h.Standby = append(h.Standby, t) })
		if hostport.Check(h.Addr) != nil {
			// Not a plain host:port (see hostport): no lookup goes there.
			continue
		}
		a.Hosts = append(a.Hosts, h)
	}
	if version >= 2 {
		d.taskSet("warm-up tasks", func(t TaskID) { a.Warmups = append(a.Warmups, t) })
	}
	if version >= 3 {
		d.taskSet("pending tasks", func(t TaskID) { a.Pending = append(a.Pending, t) })
	}
	if d.err == nil && len(d.b) > 0 {
		d.fail("%d trailing bytes", len(d.b))
	}
	if d.err != nil {
		return Assignment{}, d.err
	}
	return a, nil
}

// hostsOf groups the members that advertise an address by it, with the
// tasks each process runs (active, from the plan actually sent) and
// holds as standbys.
func hostsOf(members []Member, active, standbys map[string][]TaskID) []Host {
	byAddr := map[string]*Host{}
	for _, m := range members {
		if m.Addr == "" {
			continue
		}
		h := byAddr[m.Addr]
		if h == nil {
			h = &Host{Addr: m.Addr}
			byAddr[m.Addr] = h
		}
		h.Active = append(h.Active, active[m.ID]...)
		h.Standby = append(h.Standby, standbys[m.ID]...)
	}
	out := make([]Host, 0, len(byAddr))
	for _, h := range byAddr {
		slices.SortFunc(h.Active, TaskID.Compare)
		h.Active = slices.Compact(h.Active)
		slices.SortFunc(h.Standby, TaskID.Compare)
		h.Standby = slices.Compact(h.Standby)
		out = append(out, *h)
	}
	slices.SortFunc(out, func(a, b Host) int { return cmp.Compare(a.Addr, b.Addr) })
	return out
}
