package hostport

import "testing"

func TestCheck(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"localhost:8080", "127.0.0.1:1", "[::1]:65535", "app-1.svc.cluster.local:443", "a:9"} {
		if err := Check(ok); err != nil {
			t.Errorf("Check(%q) = %v, want nil", ok, err)
		}
	}
	for _, bad := range []string{
		"evil/x?:80", // the review's: accepted by net.SplitHostPort alone
		"host:port/latest/meta-data/iam/security-credentials/?leak=",
		"http://host:80", "user@host:80", "host:80/path", "host:80?q", "host:80#f",
		"host:0", "host:65536", "host:+80", "host:080", "host:", ":80", "host",
		"ho st:80", ".host:80", "-host:80", "host-:80", "a..b:80",
		"[fe80::1%eth0]:80", "::1:80", "host:80 ", "\x00:80",
	} {
		if err := Check(bad); err == nil {
			t.Errorf("Check(%q) = nil, want an error", bad)
		}
	}
}

func FuzzCheck(f *testing.F) {
	f.Add("localhost:8080")
	f.Add("evil/x?:80")
	f.Fuzz(func(t *testing.T, s string) {
		if Check(s) != nil {
			return
		}
		for i := 0; i < len(s); i++ {
			switch s[i] {
			case '/', '?', '#', '@', ' ', '%', '\\':
				t.Fatalf("Check(%q) accepted a byte %q", s, s[i])
			}
		}
	})
}
