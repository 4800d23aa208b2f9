//go:build !unix

package sqlite

import (
	"fmt"
	"runtime"

	"github.com/orisun-io/orisun/event"
)

// LockFile is the name of the lock file inside the data directory.
const LockFile = "LOCK"

type dirLock struct{}

// lockDir refuses to run: without an exclusive directory lock two processes
// could share one database and both believe their local leases (docs/design.md §9).
func lockDir(dir string) (*dirLock, error) {
	return nil, fmt.Errorf("%w: sqlite: data directory %q: locking a directory is not supported on %s",
		event.ErrUnavailable, dir, runtime.GOOS)
}

func (l *dirLock) unlock() error { return nil }
