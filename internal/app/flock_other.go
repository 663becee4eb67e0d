//go:build !(linux || darwin || freebsd || openbsd || netbsd || dragonfly)

package app

import (
	"errors"
	"os"
)

// tryLock: no flock here, so no instance lock; leases of a dead process expire instead.
func tryLock(*os.File) error { return errors.ErrUnsupported }
