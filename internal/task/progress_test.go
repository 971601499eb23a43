package task

import (
	"strings"
	"testing"
	"time"
)

// Where a reset left a partition (Progress.ReplayEnd) is committed with its
// offset until the task passes it, and the records before it are a replay;
// a partition without one commits what an earlier weir reads.
func TestReplayEndTravelsUntilPassed(t *testing.T) {
	t.Parallel()
	tk, qs, _ := twoPartitionTask(0)
	tk.byTP = map[TP]*Input{}
	for _, in := range tk.parts {
		tk.byTP[in.tp] = in
	}
	if !tk.Attach(TP{Topic: "a"}, qs[0], nil, 10, EncodeProgress(Progress{Version: 9, ReplayEnd: 20})) || !tk.Attach(TP{Topic: "b"}, qs[1], nil, 0, "") {
		t.Fatal("Attach refused a partition of the task")
	}
	if tk.parts[0].replayEnd != 20 || tk.parts[1].replayEnd != 0 {
		t.Fatalf("replay ends %d, %d; want 20, 0", tk.parts[0].replayEnd, tk.parts[1].replayEnd)
	}
	tk.parts[0].consumed, tk.parts[1].consumed = 12, 3
	offsets, metas := map[string]map[int32]int64{}, map[string]map[int32]string{}
	tk.Offsets(offsets, metas)
	if p, ok := DecodeProgress(metas["a"][0]); !ok || p.ReplayEnd != 20 || p.Version != 9 {
		t.Fatalf("a/0 at 12 commits %q (%+v); want the replay end 20 and version 9", metas["a"][0], p)
	}
	if p, ok := DecodeProgress(metas["b"][0]); !ok || p.ReplayEnd != 0 {
		t.Fatalf("b/0 commits %q (%+v); want no replay end", metas["b"][0], p)
	}
	tk.PostCommit(offsets)
	tk.parts[0].consumed = 20
	offsets, metas = map[string]map[int32]int64{}, map[string]map[int32]string{}
	tk.Offsets(offsets, metas)
	if !strings.HasPrefix(metas["a"][0], "weir2:") {
		t.Fatalf("a/0 past its replay end commits %q; want the replay over", metas["a"][0])
	}
}

func TestProgressEncoding(t *testing.T) {
	t.Parallel()
	st := time.UnixMilli(1_700_000_123_456)
	for _, p := range []Progress{{StreamTime: st, Version: 42}, {Version: 7}, {StreamTime: st}, {Version: 3, ReplayEnd: 99}, {StreamTime: st, Version: 1, ReplayEnd: 5}} {
		enc := EncodeProgress(p)
		got, ok := DecodeProgress(enc)
		if !ok || !got.StreamTime.Equal(p.StreamTime) || got.Version != p.Version || got.ReplayEnd != p.ReplayEnd {
			t.Errorf("DecodeProgress(EncodeProgress(%+v)) = %+v, %v", p, got, ok)
		}
		// Without a replay pending, the format an earlier weir reads.
		if strings.HasPrefix(enc, "weir2:") != (p.ReplayEnd == 0) {
			t.Errorf("EncodeProgress(%+v) = %q", p, enc)
		}
	}
	// What an earlier weir committed is still read.
	if got, ok := DecodeProgress("weir1:1700000123456"); !ok || !got.StreamTime.Equal(st) || got.Version != 0 {
		t.Errorf("DecodeProgress(weir1) = %+v, %v", got, ok)
	}
	for _, other := range []string{"", "weir1:", "weir1:x", "weir1:-5", "weir2:1", "weir2:1:x", "weir2:-1:3", "weir3:1:2", "weir3:1:2:x", "weir3:1:2:-4", "weir4:1:2:3", "some other client's metadata"} {
		if _, ok := DecodeProgress(other); ok {
			t.Errorf("DecodeProgress(%q) accepted", other)
		}
	}
}

// A task commits its stream time and version with its offsets, and the
// task's next owner starts from them: windows closed before a restart
// stay closed, and versions never go back.
func TestProgressTravelsWithTheOffsets(t *testing.T) {
	t.Parallel()
	st := time.UnixMilli(1_700_000_123_456)
	tk, qs, _ := twoPartitionTask(0)
	tk.streamTime = st
	tk.version = 1_000
	tk.parts[0].consumed, tk.parts[1].consumed = 12, 22
	offsets, metas := map[string]map[int32]int64{}, map[string]map[int32]string{}
	tk.Offsets(offsets, metas)
	meta := EncodeProgress(Progress{StreamTime: st, Version: 1_000})
	if metas["a"][0] != meta || metas["b"][0] != meta {
		t.Fatalf("metadata %v, want %q for both partitions", metas, meta)
	}

	// The next owner's clock is behind the versions the task gave.
	clock := time.UnixMicro(10)
	next, _, _ := twoPartitionTask(0)
	next.sh.Clock = func() time.Time { return clock }
	next.byTP = map[TP]*Input{}
	for _, in := range next.parts {
		next.byTP[in.tp] = in
	}
	if !next.Attach(TP{Topic: "a"}, qs[0], nil, 12, metas["a"][0]) || !next.Attach(TP{Topic: "b"}, qs[1], nil, 22, "") {
		t.Fatal("Attach refused a partition of the task")
	}
	if !next.streamTime.Equal(st) || !next.committedTime.Equal(st) {
		t.Fatalf("stream time after Attach %v (committed %v), want %v", next.streamTime, next.committedTime, st)
	}
	// Its processors start from it too (see internal/streamtime); the
	// first owner's started from nothing.
	if got := next.ResumedStreamTime(); !got.Equal(st) {
		t.Fatalf("resumed stream time %v, want %v", got, st)
	}
	if got := tk.ResumedStreamTime(); !got.IsZero() {
		t.Fatalf("resumed stream time of a task that attached no commit: %v", got)
	}
	if v := next.NextVersion(); v != 1_001 {
		t.Fatalf("first version of the next owner %d, want 1001 (after the committed 1000, its clock behind)", v)
	}
	// An older commit never moves stream time or versions back.
	next.Attach(TP{Topic: "a"}, qs[0], nil, 12, EncodeProgress(Progress{StreamTime: st.Add(-time.Hour), Version: 3}))
	if !next.streamTime.Equal(st) || next.version != 1_001 {
		t.Fatalf("stream time %v, version %d after an older commit", next.streamTime, next.version)
	}
	// Once the clock passes the versions, it gives them.
	clock = time.UnixMicro(5_000)
	if v := next.NextVersion(); v != 5_000 {
		t.Fatalf("version %d, want the clock's 5000", v)
	}
	clock = time.UnixMicro(4_000) // the clock steps back
	if v := next.NextVersion(); v != 5_001 {
		t.Fatalf("version %d after the clock stepped back, want 5001", v)
	}
}

// A version given without any offset moving (a punctuator emitted table
// updates) is committed with the positions as they stand, so that the
// next owner continues after it; once committed, an idle task commits
// nothing.
func TestVersionCommittedWithoutNewOffsets(t *testing.T) {
	t.Parallel()
	tk, _, _ := twoPartitionTask(0)
	tk.sh.Clock = func() time.Time { return time.UnixMicro(77) }
	tk.parts[0].start, tk.parts[1].start = 5, -1 // b's position is not known yet
	tk.parts[0].committed = -1
	offsets, metas := map[string]map[int32]int64{}, map[string]map[int32]string{}
	tk.Offsets(offsets, metas)
	if len(offsets) != 0 {
		t.Fatalf("an idle task commits %v", offsets)
	}
	tk.NextVersion()
	tk.Offsets(offsets, metas)
	if len(offsets) != 1 || offsets["a"][0] != 5 {
		t.Fatalf("offsets %v, want a/0 at its start 5 only", offsets)
	}
	if p, ok := DecodeProgress(metas["a"][0]); !ok || p.Version != 77 || !p.StreamTime.IsZero() {
		t.Fatalf("metadata %q: %+v, %v", metas["a"][0], p, ok)
	}
	tk.PostCommit(offsets)
	offsets, metas = map[string]map[int32]int64{}, map[string]map[int32]string{}
	tk.Offsets(offsets, metas)
	if len(offsets) != 0 {
		t.Fatalf("after the commit, offsets %v", offsets)
	}
}
