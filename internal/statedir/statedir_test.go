package statedir

import (
	"errors"
	"os"
	"path/filepath"
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
