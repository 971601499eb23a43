package weir

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestStateDirIsExclusive(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	first, err := openStateDir(root, "app")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := openStateDir(root, "app"); !errors.Is(err, ErrStateDirLocked) {
		t.Fatalf("second open = %v, want ErrStateDirLocked", err)
	}
	if err := first.close(); err != nil {
		t.Fatal(err)
	}
	again, err := openStateDir(root, "app")
	if err != nil {
		t.Fatalf("open after close: %v", err)
	}
	defer again.close()
	if again.processID != first.processID || len(first.processID) != 32 {
		t.Errorf("process id changed or malformed: %q then %q", first.processID, again.processID)
	}
}

func TestCorruptProcessIDIsAnError(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "app"), 0o755)
	os.WriteFile(filepath.Join(root, "app", processIDFile), []byte("not an id"), 0o644)
	if _, err := openStateDir(root, "app"); err == nil {
		t.Fatal("accepted a corrupt process id")
	}
}
