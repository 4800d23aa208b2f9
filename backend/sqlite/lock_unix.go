//go:build unix

package sqlite

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// LockFile is the name of the lock file inside the data directory.
const LockFile = "LOCK"

// dirLock is the exclusive lock of a data directory: one orisun process owns
// it, which is what lets SQLite leases be local (docs/design.md §9). flock locks
// belong to the open file description, so a second Open in the same process
// is refused too, and the kernel drops the lock when the process dies: a
// crash never leaves a stale lock behind.
type dirLock struct {
	f *os.File
}

func lockDir(dir string) (*dirLock, error) {
	path := filepath.Join(dir, LockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("sqlite: open lock file %q: %w", path, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		_ = f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, &lockedError{dir: dir, pid: readPID(path)}
		}
		return nil, fmt.Errorf("sqlite: lock %q: %w", path, err)
	}
	// The pid is only for the message another process prints.
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return &dirLock{f: f}, nil
}

func readPID(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "unknown"
	}
	pid := strings.TrimSpace(string(b))
	if _, err := strconv.Atoi(pid); err != nil {
		return "unknown"
	}
	return pid
}

func (l *dirLock) unlock() error {
	if l == nil || l.f == nil {
		return nil
	}
	// Closing the file releases the flock. The file stays: removing it
	// would let two processes lock two different inodes of one path.
	err := l.f.Close()
	l.f = nil
	if err != nil {
		return fmt.Errorf("sqlite: release directory lock: %w", err)
	}
	return nil
}
