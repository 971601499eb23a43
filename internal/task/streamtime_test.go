package task

import (
	"testing"
	"time"
)

// A task commits its stream time with its offsets, and the task's next
// owner starts from it: windows closed before a restart stay closed.
func TestStreamTimeTravelsWithTheOffsets(t *testing.T) {
	t.Parallel()
	st := time.UnixMilli(1_700_000_123_456)
	meta := EncodeStreamTime(st)
	if got, ok := DecodeStreamTime(meta); !ok || !got.Equal(st) {
		t.Fatalf("DecodeStreamTime(%q) = %v, %v", meta, got, ok)
	}
	for _, other := range []string{"", "weir1:", "weir1:x", "weir1:-5", "weir2:1", "some other client's metadata"} {
		if _, ok := DecodeStreamTime(other); ok {
			t.Errorf("DecodeStreamTime(%q) accepted", other)
		}
	}

	tk, qs, _ := twoPartitionTask(0)
	tk.streamTime = st
	tk.parts[0].consumed, tk.parts[1].consumed = 12, 22
	offsets, metas := map[string]map[int32]int64{}, map[string]map[int32]string{}
	tk.Offsets(offsets, metas)
	if metas["a"][0] != meta || metas["b"][0] != meta {
		t.Fatalf("metadata %v, want the stream time %q for both partitions", metas, meta)
	}

	next, _, _ := twoPartitionTask(0)
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
	// An older committed time never moves stream time back.
	next.Attach(TP{Topic: "a"}, qs[0], nil, 12, EncodeStreamTime(st.Add(-time.Hour)))
	if !next.streamTime.Equal(st) {
		t.Fatalf("stream time moved back to %v", next.streamTime)
	}
}
