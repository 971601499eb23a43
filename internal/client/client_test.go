package client

import "testing"

func TestThreadInstanceID(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		o    Options
		want string
	}{
		{Options{ApplicationID: "app"}, ""},
		{Options{ApplicationID: "app", StaticMemberID: "pod-1"}, "pod-1-2"},
		{Options{ApplicationID: "app", StaticFromProcess: true}, "proc-2"},
		{Options{ApplicationID: "app", StaticMemberID: "pod-1", StaticFromProcess: true}, "pod-1-2"},
	} {
		sc := Thread(&tc.o, "proc", 2, nil)
		if got := sc.Consumer.Group.InstanceId; got != tc.want {
			t.Errorf("%+v: instance id %q, want %q", tc.o, got, tc.want)
		}
	}
}
