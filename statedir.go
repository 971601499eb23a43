package weir

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// stateDir is an application's directory under Config.StateDir, held
// exclusively by one instance for as long as it runs.
type stateDir struct {
	path      string
	processID string
	lock      *os.File
}

const (
	lockFile      = ".lock"
	processIDFile = "process-id"
)

// openStateDir creates and locks StateDir/<app>. The process id is created
// on first use and kept, so a restarted instance is recognisable: its
// transactional ids fence its previous incarnation and the group finds the
// tasks whose state it holds.
func openStateDir(root, app string) (*stateDir, error) {
	path := filepath.Join(root, app)
	if err := os.MkdirAll(path, 0o755); err != nil {
		return nil, fmt.Errorf("weir: state directory: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(path, lockFile), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("weir: state directory: %w", err)
	}
	if err := lockExclusive(f); err != nil {
		f.Close()
		if errors.Is(err, errLocked) {
			return nil, fmt.Errorf("%w: %s", ErrStateDirLocked, path)
		}
		return nil, fmt.Errorf("weir: locking state directory %s: %w", path, err)
	}
	id, err := readOrCreateProcessID(filepath.Join(path, processIDFile))
	if err != nil {
		unlock(f)
		f.Close()
		return nil, err
	}
	return &stateDir{path: path, processID: id, lock: f}, nil
}

func readOrCreateProcessID(file string) (string, error) {
	b, err := os.ReadFile(file)
	if err == nil {
		id := strings.TrimSpace(string(b))
		if len(id) == 32 && legalName(id) {
			return id, nil
		}
		return "", fmt.Errorf("weir: %s holds no valid process id; delete it to get a new one", file)
	}
	if !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("weir: reading process id: %w", err)
	}
	var raw [16]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return "", fmt.Errorf("weir: creating process id: %w", err)
	}
	id := hex.EncodeToString(raw[:])
	tmp := file + ".tmp"
	if err := os.WriteFile(tmp, []byte(id+"\n"), 0o644); err != nil {
		return "", fmt.Errorf("weir: writing process id: %w", err)
	}
	if err := os.Rename(tmp, file); err != nil {
		return "", fmt.Errorf("weir: writing process id: %w", err)
	}
	return id, nil
}

func (d *stateDir) close() error {
	if d == nil || d.lock == nil {
		return nil
	}
	unlock(d.lock)
	err := d.lock.Close()
	d.lock = nil
	return err
}
