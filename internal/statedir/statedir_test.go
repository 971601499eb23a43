package statedir

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestStateDirIsExclusive(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	first, err := Open(root, "app")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Open(root, "app"); !errors.Is(err, ErrLocked) {
		t.Fatalf("second open = %v, want ErrLocked", err)
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	again, err := Open(root, "app")
	if err != nil {
		t.Fatalf("open after close: %v", err)
	}
	defer again.Close()
	if again.ProcessID != first.ProcessID || len(first.ProcessID) != 32 {
		t.Errorf("process id changed or malformed: %q then %q", first.ProcessID, again.ProcessID)
	}
}

func TestCorruptProcessIDIsAnError(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "app"), 0o755)
	os.WriteFile(filepath.Join(root, "app", processIDFile), []byte("not an id"), 0o644)
	if _, err := Open(root, "app"); err == nil {
		t.Fatal("accepted a corrupt process id")
	}
}

func TestMemberIDRoundTrip(t *testing.T) {
	t.Parallel()
	d, err := Open(t.TempDir(), "app")
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if id := d.MemberID(0); id != "" {
		t.Fatalf("MemberID before any = %q", id)
	}
	if err := d.SetMemberID(0, "app-0-5b6c"); err != nil {
		t.Fatal(err)
	}
	if err := d.SetMemberID(1, "app-1-77aa"); err != nil {
		t.Fatal(err)
	}
	if a, b := d.MemberID(0), d.MemberID(1); a != "app-0-5b6c" || b != "app-1-77aa" {
		t.Errorf("MemberID = %q, %q", a, b)
	}
	for _, bad := range []string{"", "a\nb", strings.Repeat("x", maxMemberIDBytes+1)} {
		if err := d.SetMemberID(2, bad); err == nil {
			t.Errorf("SetMemberID(%q) accepted it", bad)
		}
	}
	if err := os.WriteFile(d.memberFile(3), []byte("two\nlines\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if id := d.MemberID(3); id != "" {
		t.Errorf("MemberID of a file it did not write = %q, want none", id)
	}
}
