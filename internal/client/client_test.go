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

// ParseTransactionalID accepts exactly the ids TransactionalID makes for
// the application, and no other application's.
func TestParseTransactionalID(t *testing.T) {
	t.Parallel()
	const proc = "0123456789abcdef0123456789abcdef"
	tests := []struct {
		app, id string
		proc    string
		thread  int
		ok      bool
	}{
		{"orders", TransactionalID("orders", proc, 0), proc, 0, true},
		{"orders", TransactionalID("orders", proc, 12), proc, 12, true},
		{"my-app", TransactionalID("my-app", proc, 3), proc, 3, true},
		{"orders", TransactionalID("orders-v2", proc, 0), "", 0, false}, // another application
		{"orders-v2", TransactionalID("orders", proc, 0), "", 0, false},
		{"orders", "orders-" + proc, "", 0, false},                            // no thread
		{"orders", "orders-" + proc + "-", "", 0, false},                      // empty thread
		{"orders", "orders-" + proc + "-01", "", 0, false},                    // not canonical
		{"orders", "orders-" + proc + "--1", "", 0, false},                    // negative
		{"orders", "orders-" + proc + "-1-2", "", 0, false},                   // trailing part
		{"orders", "orders-0123456789abcdefg123456789abcdef-0", "", 0, false}, // not hex
		{"orders", "orders-0123-0", "", 0, false},
		{"orders", "", "", 0, false},
	}
	for _, tc := range tests {
		p, th, ok := ParseTransactionalID(tc.app, tc.id)
		if p != tc.proc || th != tc.thread || ok != tc.ok {
			t.Errorf("ParseTransactionalID(%q, %q) = %q, %d, %v; want %q, %d, %v", tc.app, tc.id, p, th, ok, tc.proc, tc.thread, tc.ok)
		}
	}
}
