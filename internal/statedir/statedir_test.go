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

// The state directory is the instance's alone: created 0700, refused when
// others may write it or another user owns it, and its files are written
// so that a planted symbolic link is replaced, never written through.
func TestStateDirIsPrivate(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	d, err := Open(root, "app")
	if err != nil {
		t.Fatal(err)
	}
	d.Close()
	path := filepath.Join(root, "app")
	for _, name := range []string{"", processIDFile, lockFile} {
		fi, err := os.Stat(filepath.Join(path, name))
		if err != nil {
			t.Fatal(err)
		}
		if perm := fi.Mode().Perm(); perm&0o077 != 0 {
			t.Errorf("%s/%s has mode %v; want nothing for group or others", path, name, perm)
		}
	}

	// An older directory others may read is narrowed; one they may write
	// is refused.
	if err := os.Chmod(path, 0o755); err != nil {
		t.Fatal(err)
	}
	if d, err = Open(root, "app"); err != nil {
		t.Fatalf("open of a 0755 directory: %v", err)
	}
	d.Close()
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o700 {
		t.Fatalf("a 0755 directory was left at %v, want 0700", fi.Mode().Perm())
	}
	if err := os.Chmod(path, 0o777); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(root, "app"); !errors.Is(err, ErrUnsafe) {
		t.Fatalf("open of a world-writable directory = %v, want ErrUnsafe", err)
	}
	if err := os.Chmod(path, 0o700); err != nil {
		t.Fatal(err)
	}
	if os.Getuid() == 0 { // only root can give a directory to another user
		other := filepath.Join(root, "other")
		if err := os.Mkdir(other, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(other, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		if _, err := Open(root, "other"); !errors.Is(err, ErrUnsafe) {
			t.Fatalf("open of another user's directory = %v, want ErrUnsafe", err)
		}
	}
}

// A symbolic link planted where weir writes a file is replaced, and what
// it points to is left alone; a planted lock file link is refused.
func TestStateFilesDoNotFollowLinks(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	path := filepath.Join(root, "app")
	if err := os.Mkdir(path, 0o700); err != nil {
		t.Fatal(err)
	}
	victim := filepath.Join(root, "victim")
	if err := os.WriteFile(victim, []byte("precious"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{processIDFile, processIDFile + ".tmp"} {
		if err := os.Symlink(victim, filepath.Join(path, name)); err != nil {
			t.Fatal(err)
		}
	}
	os.Remove(filepath.Join(path, processIDFile)) // Open reads a link there; .tmp is what older weirs wrote through
	d, err := Open(root, "app")
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(path, "reset-epoch")
	if err := os.Symlink(victim, file); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(file, []byte("7\n")); err != nil {
		t.Fatal(err)
	}
	if err := d.SetMemberID(0, "m-1"); err != nil {
		t.Fatal(err)
	}
	d.Close()
	if b, _ := os.ReadFile(victim); string(b) != "precious" {
		t.Fatalf("a file a planted link pointed to now holds %q", b)
	}
	if fi, err := os.Lstat(file); err != nil || !fi.Mode().IsRegular() {
		t.Fatalf("the link at %s was not replaced by a file: %v, %v", file, fi, err)
	}
	lock := filepath.Join(path, lockFile)
	os.Remove(lock)
	if err := os.Symlink(victim, lock); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(root, "app"); err == nil {
		t.Fatal("Open locked through a planted link")
	}
}
