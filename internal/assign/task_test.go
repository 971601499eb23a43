package assign

import (
	"errors"
	"math"
	"strings"
	"testing"
)

func TestTaskIDStringParse(t *testing.T) {
	t.Parallel()
	for _, id := range []TaskID{{0, 0}, {0, 3}, {12, 7}, {math.MaxInt32, math.MaxInt32}} {
		s := id.String()
		got, err := ParseTaskID(s)
		if err != nil || got != id {
			t.Errorf("ParseTaskID(%q) = %v, %v; want %v", s, got, err, id)
		}
	}
	if s := (TaskID{Subtopology: 1, Partition: 3}).String(); s != "1_3" {
		t.Errorf("String() = %q, want 1_3", s)
	}
}

func TestParseTaskIDErrors(t *testing.T) {
	t.Parallel()
	for _, in := range []string{"", "_", "1", "1_", "_1", "a_1", "1_b", "1_2_3", "-1_2", "1_-2",
		"+1_2", "01_2", "1_02", "1_2147483648", "2147483648_1", " 1_2", "1_2 "} {
		_, err := ParseTaskID(in)
		if err == nil {
			t.Errorf("ParseTaskID(%q) succeeded, want error", in)
			continue
		}
		if !strings.Contains(err.Error(), `"`+in+`"`) {
			t.Errorf("ParseTaskID(%q) error %q does not quote the input", in, err)
		}
	}
}

func TestTaskIDCompare(t *testing.T) {
	t.Parallel()
	tests := []struct {
		a, b TaskID
		want int
	}{
		{TaskID{0, 1}, TaskID{0, 1}, 0},
		{TaskID{0, 9}, TaskID{1, 0}, -1},
		{TaskID{1, 0}, TaskID{0, 9}, 1},
		{TaskID{2, 3}, TaskID{2, 4}, -1},
	}
	for _, tc := range tests {
		if got := tc.a.Compare(tc.b); got != tc.want {
			t.Errorf("%v.Compare(%v) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
	}
}

func TestSubtopologyErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		subs       []Subtopology
		partitions map[string]int32
		want       []string // substrings of the error
		countErr   *PartitionCountError
	}{
		{
			name:       "different partition counts",
			subs:       []Subtopology{{ID: 1, Topics: []string{"orders", "payments"}}},
			partitions: map[string]int32{"orders": 6, "payments": 4},
			want:       []string{"subtopology 1", "not co-partitioned", "orders=6", "payments=4"},
			countErr:   &PartitionCountError{Subtopology: 1, Topics: []string{"orders", "payments"}, Counts: []int32{6, 4}},
		},
		{
			name:       "missing topic",
			subs:       []Subtopology{{ID: 0, Topics: []string{"orders", "payments"}}},
			partitions: map[string]int32{"orders": 6},
			want:       []string{"subtopology 0", "payments", "orders=6", "payments=unknown"},
			countErr:   &PartitionCountError{Subtopology: 0, Topics: []string{"orders", "payments"}, Counts: []int32{6, -1}},
		},
		{
			name: "every problem at once",
			subs: []Subtopology{
				{ID: 0, Topics: []string{"a", "b"}},
				{ID: 1, Topics: []string{"c", "d"}},
			},
			partitions: map[string]int32{"a": 1, "b": 2, "c": 3, "d": 4},
			want:       []string{"a=1, b=2", "c=3, d=4"},
		},
		{
			name:       "duplicate id",
			subs:       []Subtopology{{ID: 0, Topics: []string{"a"}}, {ID: 0, Topics: []string{"b"}}},
			partitions: map[string]int32{"a": 1, "b": 1},
			want:       []string{"subtopology id 0 appears twice"},
		},
		{
			name:       "topic in two subtopologies",
			subs:       []Subtopology{{ID: 0, Topics: []string{"a"}}, {ID: 1, Topics: []string{"a"}}},
			partitions: map[string]int32{"a": 1},
			want:       []string{"topic a is a source of subtopologies 0 and 1"},
		},
		{
			name:       "no topics",
			subs:       []Subtopology{{ID: 2}},
			partitions: map[string]int32{},
			want:       []string{"subtopology 2 has no source topics"},
		},
		{
			name:       "negative id",
			subs:       []Subtopology{{ID: -1, Topics: []string{"a"}}},
			partitions: map[string]int32{"a": 1},
			want:       []string{"subtopology id -1 out of range"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := Plan(tc.subs, tc.partitions, []Member{{ID: "m"}})
			if err == nil {
				t.Fatal("Plan succeeded, want error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
			if tc.countErr != nil {
				var pe *PartitionCountError
				if !errors.As(err, &pe) {
					t.Fatalf("error %v is not a *PartitionCountError", err)
				}
				if pe.Subtopology != tc.countErr.Subtopology || strings.Join(pe.Topics, ",") != strings.Join(tc.countErr.Topics, ",") ||
					len(pe.Counts) != len(tc.countErr.Counts) || pe.Counts[0] != tc.countErr.Counts[0] || pe.Counts[1] != tc.countErr.Counts[1] {
					t.Errorf("PartitionCountError = %+v, want %+v", pe, tc.countErr)
				}
			}
		})
	}
}
