package sqlite

import (
	"fmt"

	"github.com/orisun-io/orisun/event"
)

// lockedError says that another process owns the data directory.
type lockedError struct {
	dir string
	pid string
}

func (e *lockedError) Error() string {
	return fmt.Sprintf("data directory %q is locked by another orisun process (pid %s); stop it or choose another directory",
		e.dir, e.pid)
}

// Is makes errors.Is(err, event.ErrUnavailable) true: the store cannot be
// opened now.
func (e *lockedError) Is(target error) bool { return target == event.ErrUnavailable }
