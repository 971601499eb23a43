// Package statedir holds an instance's state directory: the exclusive lock
// that keeps a second instance off it, and the process id kept in it.
package statedir

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// ErrLocked is returned by Open when another instance holds the
// directory.
var ErrLocked = errors.New("weir: state directory is in use by another instance")

// Dir is an application's directory under Config.StateDir, held
// exclusively by one instance for as long as it runs.
type Dir struct {
	// Path is the directory, <root>/<application id>.
	Path string
	// ProcessID identifies this instance across its restarts: 32 hex
	// digits, created on first use and kept in the directory.
	ProcessID string
	lock      *os.File
}

const (
	lockFile      = ".lock"
	processIDFile = "process-id"
)

// ErrUnsafe is returned by Open for a state directory that another user
// could have written: owned by another user, or writable by its group or
// by others. Its files decide what the instance restores and which
// transactional ids it uses, so they must be the instance's alone.
var ErrUnsafe = errors.New("weir: state directory is not the instance's alone")

// Open creates and locks root/<app>. The process id is created
// on first use and kept, so a restarted instance is recognisable: its
// transactional ids fence its previous incarnation and the group finds the
// tasks whose state it holds.
//
// The directory is created with mode 0700, as Kafka Streams creates its
// own; an existing one is accepted only when this process's user owns it
// and neither its group nor others may write it ([ErrUnsafe] otherwise),
// and one that others may read is narrowed to 0700. Files weir writes
// there are 0600 and written through a new temporary file renamed into
// place, so a symbolic link planted at a file's name is replaced, never
// followed.
func Open(root, app string) (*Dir, error) {
	path := filepath.Join(root, app)
	if err := os.MkdirAll(path, 0o700); err != nil {
		return nil, fmt.Errorf("weir: state directory: %w", err)
	}
	if err := checkOwner(path); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(filepath.Join(path, lockFile), os.O_RDWR|os.O_CREATE|noFollow, 0o600)
	if err != nil {
		return nil, fmt.Errorf("weir: state directory: %w", err)
	}
	if err := lockExclusive(f); err != nil {
		f.Close()
		if errors.Is(err, errLocked) {
			return nil, fmt.Errorf("%w: %s", ErrLocked, path)
		}
		return nil, fmt.Errorf("weir: locking state directory %s: %w", path, err)
	}
	id, err := readOrCreateProcessID(filepath.Join(path, processIDFile))
	if err != nil {
		unlock(f)
		f.Close()
		return nil, err
	}
	return &Dir{Path: path, ProcessID: id, lock: f}, nil
}

func readOrCreateProcessID(file string) (string, error) {
	b, err := os.ReadFile(file)
	if err == nil {
		id := strings.TrimSpace(string(b))
		if ValidProcessID(id) {
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
	if err := WriteFile(file, []byte(id+"\n")); err != nil {
		return "", fmt.Errorf("weir: writing process id: %w", err)
	}
	return id, nil
}

// WriteFile replaces file with data, mode 0600: it writes a new temporary
// file beside it (created exclusively, so never through a link) and
// renames it over file, which replaces a symbolic link at that name
// instead of writing where it points. A reader sees the old content or
// the new, never a part.
func WriteFile(file string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(file), "."+filepath.Base(file)+".tmp-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, file)
	}
	if err != nil {
		os.Remove(tmp)
	}
	return err
}

// Close releases the lock; it is safe to call more than once.
func (d *Dir) Close() error {
	if d == nil || d.lock == nil {
		return nil
	}
	unlock(d.lock)
	err := d.lock.Close()
	d.lock = nil
	return err
}

// ValidProcessID reports whether id has the form of the process ids Open
// creates: 32 hex digits.
func ValidProcessID(id string) bool {
	if len(id) != 32 {
		return false
	}
	_, err := hex.DecodeString(id)
	return err == nil
}

// maxMemberIDBytes bounds a recorded member id (Kafka makes them from the
// client id and a UUID).
const maxMemberIDBytes = 512

// memberFile is where thread's last group member id is kept.
func (d *Dir) memberFile(thread int) string {
	return filepath.Join(d.Path, "member-"+strconv.Itoa(thread))
}

// MemberID returns the consumer group member id thread last joined with,
// as SetMemberID recorded it, or "" when none is recorded (or the file is
// not one SetMemberID wrote).
func (d *Dir) MemberID(thread int) string {
	b, err := os.ReadFile(d.memberFile(thread))
	if err != nil || len(b) > maxMemberIDBytes+1 {
		return ""
	}
	id := strings.TrimSuffix(string(b), "\n")
	if id == "" || strings.ContainsAny(id, "\n\r") {
		return ""
	}
	return id
}

// SetMemberID records the member id thread joined the group with, so that
// its next incarnation can remove it from the group (see
// stream.Thread's leavePredecessor).
func (d *Dir) SetMemberID(thread int, id string) error {
	if id == "" || len(id) > maxMemberIDBytes || strings.ContainsAny(id, "\n\r") {
		return fmt.Errorf("weir: member id of %d bytes not recorded", len(id))
	}
	if err := WriteFile(d.memberFile(thread), []byte(id+"\n")); err != nil {
		return fmt.Errorf("weir: recording member id: %w", err)
	}
	return nil
}
