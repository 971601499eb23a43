//go:build unix

package statedir

import (
	"errors"
	"os"
	"syscall"
)

var errLocked = errors.New("locked")

// lockExclusive takes an advisory lock that the kernel drops when the
// process dies, so a kill -9 never leaves a stale lock behind.
func lockExclusive(f *os.File) error {
	err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	if errors.Is(err, syscall.EWOULDBLOCK) {
		return errLocked
	}
	return err
}

func unlock(f *os.File) { _ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN) }
