//go:build unix

package statedir

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// noFollow makes an open fail on a symbolic link.
const noFollow = syscall.O_NOFOLLOW

// checkOwner refuses a directory that another user owns or that its
// group or others may write (ErrUnsafe), and narrows one that they may
// read or enter to 0700.
func checkOwner(path string) error {
	fi, err := os.Lstat(path)
	if err != nil {
		return fmt.Errorf("weir: state directory: %w", err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("%w: %s is not a directory (a symbolic link is refused too)", ErrUnsafe, path)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fmt.Errorf("%w: %s: its owner cannot be read", ErrUnsafe, path)
	}
	if uid := os.Getuid(); int(st.Uid) != uid {
		return fmt.Errorf("%w: %s is owned by user %d, and this process runs as user %d", ErrUnsafe, path, st.Uid, uid)
	}
	if fi.Mode().Perm()&0o022 != 0 {
		return fmt.Errorf("%w: %s has mode %v, which lets its group or others write it; check what they left there, then chmod 700 it", ErrUnsafe, path, fi.Mode().Perm())
	}
	if fi.Mode().Perm()&0o077 != 0 {
		if err := os.Chmod(path, 0o700); err != nil {
			return fmt.Errorf("weir: state directory: %w", err)
		}
	}
	return nil
}

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
