package assign

import (
	"bytes"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"
)

// equalSubscription compares decoded subscriptions, treating nil and empty
// collections alike.
func equalSubscription(a, b subscription) bool {
	if a.ProcessID != b.ProcessID || a.Addr != b.Addr || a.Generation != b.Generation || len(a.Prev) != len(b.Prev) || len(a.State) != len(b.State) {
		return false
	}
	if len(a.Prev) > 0 && !reflect.DeepEqual(a.Prev, b.Prev) {
		return false
	}
	for t, v := range a.State {
		if w, ok := b.State[t]; !ok || w != v {
			return false
		}
	}
	return true
}

func TestSubscriptionRoundTrip(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   subscription
		want subscription // the canonical form decoded; zero means in
	}{
		{name: "empty", in: subscription{Generation: -1}},
		{name: "process only", in: subscription{UserData: UserData{ProcessID: "6f1c-ä"}, Generation: 0}},
		{
			name: "everything",
			in: subscription{
				UserData: UserData{ProcessID: "proc", Addr: "10.0.0.7:8080", State: map[TaskID]int64{
					{0, 0}: 0, {0, 7}: 123456789, {3, 1}: -2, {math.MaxInt32, math.MaxInt32}: math.MaxInt64, {4, 0}: math.MinInt64,
				}},
				Generation: math.MaxInt32,
				Prev:       tasks("0_0", "0_1", "0_5", "2_0", "9_2147483647"),
			},
		},
		{
			name: "prev is sorted and deduplicated",
			in:   subscription{Generation: math.MinInt32, Prev: tasks("1_2", "0_3", "1_2", "0_0")},
			want: subscription{Generation: math.MinInt32, Prev: tasks("0_0", "0_3", "1_2")},
		},
		{
			name: "invalid task ids are left out",
			in: subscription{
				UserData: UserData{State: map[TaskID]int64{{-1, 0}: 1, {0, -1}: 2, {1, 1}: 3}},
				Prev:     []TaskID{{-1, 0}, {0, 1}, {2, -5}},
			},
			want: subscription{UserData: UserData{State: map[TaskID]int64{{1, 1}: 3}}, Prev: tasks("0_1")},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			want := tc.want
			if reflect.ValueOf(want).IsZero() {
				want = tc.in
			}
			b := encodeSubscription(tc.in)
			if b[0] != userDataVersion {
				t.Fatalf("version byte %d, want %d", b[0], userDataVersion)
			}
			got, err := decodeSubscription(b)
			if err != nil {
				t.Fatal(err)
			}
			if !equalSubscription(got, want) {
				t.Fatalf("round trip: got %+v, want %+v", got, want)
			}
			if again := encodeSubscription(got); !bytes.Equal(again, b) {
				t.Fatalf("encoding not canonical: %x then %x", b, again)
			}
		})
	}
}

func TestSubscriptionEncodingIsCompact(t *testing.T) {
	t.Parallel()
	s := subscription{UserData: UserData{ProcessID: "0123456789abcdef", State: map[TaskID]int64{}}}
	for p := range int32(64) {
		s.Prev = append(s.Prev, TaskID{1, p})
		s.State[TaskID{1, p}] = 100000
	}
	// version, process id (length + 16), generation, then per task set a
	// group count, sub-topology and task count; a task takes one byte in
	// Prev and four (gap + 3-byte varint) in State; then the address's
	// length (0).
	if n, want := len(encodeSubscription(s)), 1+17+1+3+64+3+64*4+1; n != want {
		t.Errorf("encoding of 64 tasks takes %d bytes, want %d", n, want)
	}
}

func TestDecodeSubscriptionErrors(t *testing.T) {
	t.Parallel()
	valid := encodeSubscription(subscription{UserData: UserData{ProcessID: "p", State: map[TaskID]int64{{0, 1}: 5}}, Prev: tasks("0_1")})
	tests := []struct {
		name string
		in   []byte
		want string
	}{
		{"nil", nil, "empty"},
		{"version 0", []byte{0}, "unknown version 0"},
		{"version 3", append([]byte{3}, valid[1:]...), "unknown version 3"},
		{"sarama cooperative-sticky data", []byte{0, 0, 0, 5}, "unknown version 0"},
		{"truncated", valid[:len(valid)-2], "bad offset sum"},
		{"no address", valid[:len(valid)-1], "bad address length"},
		{"address longer than data", append(bytes.Clone(valid[:len(valid)-1]), 5, 'a'), "exceeds"},
		{"trailing bytes", append(bytes.Clone(valid), 0), "1 trailing bytes"},
		{"process id longer than data", []byte{1, 50, 'a'}, "exceeds"},
		{"bad varint", []byte{1, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, "bad generation"},
		{"generation out of int32", []byte{1, 0, 0x80, 0x80, 0x80, 0x80, 0x10}, "generation"},
		{"huge group count", []byte{1, 0, 1, 0xff, 0xff, 0x03}, "exceeds"},
		{"empty group", []byte{1, 0, 1, 1, 0, 0, 0}, "empty group"},
		{"subtopology out of range", []byte{1, 0, 1, 1, 0x80, 0x80, 0x80, 0x80, 0x08, 1, 0, 0}, "subtopology out of range"},
		{"partition out of range", []byte{1, 0, 1, 1, 0, 1, 0x80, 0x80, 0x80, 0x80, 0x08, 0}, "partition out of range"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := decodeSubscription(tc.in)
			if err == nil {
				t.Fatalf("decode(%x) succeeded", tc.in)
			}
			if !errors.Is(err, errUserData) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("decode(%x) = %v, want errUserData containing %q", tc.in, err, tc.want)
			}
		})
	}
}

// FuzzDecodeUserData: decoding arbitrary bytes never panics, and whatever
// decodes re-encodes to the same bytes (the encoding is canonical) and
// decodes again to the same value.
func FuzzDecodeUserData(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{1})
	f.Add([]byte{2, 0, 0, 0, 0})
	f.Add([]byte{1, 0, 1, 1, 0, 0, 0})
	f.Add(encodeSubscription(subscription{Generation: -1}))
	f.Add(encodeSubscription(subscription{
		UserData:   UserData{ProcessID: "proc", State: map[TaskID]int64{{0, 3}: 10, {2, 0}: -1}},
		Generation: 42,
		Prev:       tasks("0_3", "1_1", "1_9"),
	}))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := decodeSubscription(b)
		if err != nil {
			if !errors.Is(err, errUserData) {
				t.Fatalf("error %v does not wrap errUserData", err)
			}
			return
		}
		enc := encodeSubscription(s)
		again, err := decodeSubscription(enc)
		if err != nil {
			t.Fatalf("re-encoding of %+v does not decode: %v", s, err)
		}
		if !equalSubscription(s, again) {
			t.Fatalf("round trip changed %+v to %+v", s, again)
		}
		// Only non-minimal varints may encode differently; a version 1
		// input re-encodes as version 2, one byte longer (the empty
		// address).
		if b[0] == 1 {
			enc = append([]byte{1}, enc[1:len(enc)-1]...)
		}
		if !bytes.Equal(enc, b) && len(enc) >= len(b) {
			t.Fatalf("input %x decodes but re-encodes to %x", b, enc)
		}
	})
}

// A version 1 subscription (before the address) still decodes, with no
// address; a version from the future does not.
func TestSubscriptionReadsVersion1(t *testing.T) {
	t.Parallel()
	in := subscription{UserData: UserData{ProcessID: "p", State: map[TaskID]int64{{0, 1}: 5}}, Generation: 3, Prev: tasks("0_1")}
	b := encodeSubscription(in)
	// Version 1 is version 2 without the address (here empty: one 0 byte).
	v1 := append([]byte{1}, b[1:len(b)-1]...)
	got, err := decodeSubscription(v1)
	if err != nil || !equalSubscription(got, in) {
		t.Fatalf("version 1 decoded to %+v, %v; want %+v", got, err, in)
	}
	if _, err := decodeSubscription(append([]byte{userDataVersion + 1}, b[1:]...)); err == nil {
		t.Error("a version from the future decoded")
	}
}

// SubscriptionProcess names the process of weir's own subscriptions only:
// a probe, empty data and data of another assignor name none.
func TestSubscriptionProcess(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		data []byte
		want string
		ok   bool
	}{
		{"member", encodeSubscription(subscription{UserData: UserData{ProcessID: "0123456789abcdef0123456789abcdef"}, Generation: 4}), "0123456789abcdef0123456789abcdef", true},
		{"no process id", encodeSubscription(subscription{Generation: -1}), "", false},
		{"probe", []byte{probeVersion}, "", false},
		{"empty", nil, "", false},
		{"foreign", []byte("range"), "", false},
	}
	for _, tc := range tests {
		got, ok := SubscriptionProcess(tc.data)
		if got != tc.want || ok != tc.ok {
			t.Errorf("%s: SubscriptionProcess = %q, %v; want %q, %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
}

// A member's address reaches the URLs other members send lookups to: one
// that is not a plain host:port is dropped at decoding, and the member
// serves no queries.
func TestSubscriptionDropsAForgedAddress(t *testing.T) {
	t.Parallel()
	for _, addr := range []string{"host:1/latest/meta-data/?leak=", "evil/x?:80", "http://h:1"} {
		got, err := decodeSubscription(encodeSubscription(subscription{UserData: UserData{ProcessID: "p", Addr: addr}}))
		if err != nil || got.Addr != "" || got.ProcessID != "p" {
			t.Errorf("address %q decoded as %+v, %v; want it dropped", addr, got, err)
		}
	}
}
