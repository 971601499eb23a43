//go:build !unix

package statedir

import (
	"errors"
	"os"
)

var errLocked = errors.New("locked")

// lockExclusive is not implemented off unix: weir's state directory lock
// relies on flock(2).
func lockExclusive(*os.File) error {
	return errors.New("state directory locking needs a unix system")
}

func unlock(*os.File) {}

// noFollow is not known off unix.
const noFollow = 0

// checkOwner has no owner to check off unix, where Open fails at its lock
// anyway.
func checkOwner(string) error { return nil }
