// Package datadir locks a node's data directory (ORISUN_DATA_DIR) for one
// process, and keeps in the lock file the lease holder names of the
// processes that held it. Being internal, it is orisun's machinery: its
// API may change without notice.
//
// The lock is an exclusive flock on the file LOCK in the directory. The
// kernel drops it when the process dies, so a crash never leaves a stale
// lock, and while a process holds it no other process (and no other Lock
// of the same process) can. That is what makes the names in the file
// worth keeping: every holder the file names held the lock before this
// process took it, so each of them has ended. A lease still recorded for
// one of them in the store (docs/design.md §9) belongs to a process that is
// gone, and the process holding the lock now may take it at once instead
// of waiting for it to expire.
//
// The file reads, one record a line:
//
//	pid 4242
//	inode 1837461
//	holder "node-a#1f2e3d4c"
//	gone "node-a#9a8b7c6d"
//	gone "node-a#0a1b2c3d"
//
// holder is the name the process that holds (or last held) the lock took
// for its leases (Claim), gone the earlier ones, newest first, at most
// MaxGone; names are Go-quoted, so any node id fits. inode is the file's own inode number, written by the process
// that last wrote it: a file found under another inode was copied (a copied
// or restored directory, perhaps beside the live original), and its names
// are not trusted: two live copies must never take each other's leases.
// A copy that keeps inode numbers (a cloned disk image) is not told apart
// here; the lease's term still fences whatever such a twin writes (I6),
// and with placement on a node withdraws a name whose holder writes a
// heartbeat after its own first one (the root package's placement.go).
//
// The file is rewritten in place, never replaced: the lock belongs to the
// file's inode, and a new file under the same name would let a second
// process lock it beside the first.
package datadir

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/orisun-io/orisun/event"
)

// LockFile is the name of the lock file inside the data directory.
const LockFile = "LOCK"

// MaxGone is how many ended holders the lock file keeps. Each restart adds
// one; a holder's leases expire by themselves within a lease TTL anyway,
// so older names would only matter to a node that restarts many times
// within one TTL.
const MaxGone = 8

// ErrUnsupported is what Acquire returns where it cannot lock a directory.
var ErrUnsupported = errors.New("locking a data directory is not supported on this system")

// LockedError says that another process owns the data directory.
type LockedError struct {
	Dir string
	PID string // "unknown" when the file does not say
}

func (e *LockedError) Error() string {
	return fmt.Sprintf("data directory %q is locked by another orisun process (pid %s); stop it or choose another directory",
		e.Dir, e.PID)
}

// Is makes errors.Is(err, event.ErrUnavailable) true: the directory cannot
// be used now.
func (e *LockedError) Is(target error) bool { return target == event.ErrUnavailable }

// Lock is a data directory locked for this process.
type Lock struct {
	dir  string
	f    *os.File
	rec  records  // what this process wrote into the file
	gone []string // the holders of the processes before it
	// copied says why the names of the file were not trusted ("" when
	// they were).
	copied string
}

// Acquire locks dir (which must exist) for this process, or fails with a
// *LockedError when another process (or another Lock of this one) holds
// it. It reads the names of the earlier holders (Gone) and writes this
// process's pid, keeping those names for the next process even if this one
// never claims a name of its own.
func Acquire(dir string) (*Lock, error) {
	path := filepath.Join(dir, LockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("data directory: open lock file %q: %w", path, err)
	}
	locked, err := tryLock(f)
	if err != nil || !locked {
		pid := "unknown"
		if b, rerr := os.ReadFile(path); rerr == nil && parse(b).pid != "" {
			pid = parse(b).pid
		}
		_ = f.Close()
		if err != nil {
			return nil, fmt.Errorf("data directory: lock %q: %w", path, err)
		}
		return nil, &LockedError{Dir: dir, PID: pid}
	}
	l := &Lock{dir: dir, f: f}
	old, err := io.ReadAll(io.NewSectionReader(f, 0, 1<<20))
	if err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("data directory: read lock file %q: %w", path, err)
	}
	prev := parse(old)
	ino := inode(f)
	switch {
	case prev.inode != 0 && ino != 0 && prev.inode != ino:
		l.copied = fmt.Sprintf("%s was written as inode %d and is now inode %d: the directory was copied or restored, "+
			"so the processes it names may still run elsewhere", path, prev.inode, ino)
	default:
		l.gone = prev.ended()
	}
	l.rec = records{pid: strconv.Itoa(os.Getpid()), inode: ino, gone: l.gone}
	// Not synced: losing this write to a power loss loses no name (the
	// old content stays), and Claim syncs.
	if err := l.write(); err != nil {
		_ = f.Close()
		return nil, err
	}
	return l, nil
}

// Dir is the directory locked.
func (l *Lock) Dir() string { return l.dir }

// Gone returns the lease holder names of the processes that held this
// directory before this one, newest first: each of them has ended, since
// this process holds the lock they held. Nil when the file named none, or
// when it was copied (Copied).
func (l *Lock) Gone() []string { return slices.Clone(l.gone) }

// Copied says why the lock file's names were not trusted (the file has
// another inode than the one it recorded: the directory was copied or
// restored), or "" when they were.
func (l *Lock) Copied() string { return l.copied }

// Claim records holder as the lease holder name of this process, durably,
// before the process takes any lease under it: the next process to lock
// the directory then knows this one's leases for those of an ended
// process. A second Claim with another name fails: the first name's leases
// would be forgotten.
func (l *Lock) Claim(holder string) error {
	if holder == "" {
		return fmt.Errorf("%w: data directory: the holder name to record is empty", event.ErrInvalid)
	}
	if l.f == nil {
		return fmt.Errorf("data directory %q: claim %q after the lock was released: %w", l.dir, holder, event.ErrClosed)
	}
	if l.rec.holder != "" && l.rec.holder != holder {
		return fmt.Errorf("%w: data directory %q: this process claimed %q already, not %q", event.ErrInvalid, l.dir, l.rec.holder, holder)
	}
	l.rec.holder = holder
	if err := l.write(); err != nil {
		return err
	}
	if err := l.f.Sync(); err != nil {
		return fmt.Errorf("data directory: sync lock file in %q: %w", l.dir, err)
	}
	return nil
}

// write puts l.rec into the file, in place.
func (l *Lock) write() error {
	b := l.rec.format()
	if _, err := l.f.WriteAt(b, 0); err != nil {
		return fmt.Errorf("data directory: write lock file in %q: %w", l.dir, err)
	}
	if err := l.f.Truncate(int64(len(b))); err != nil {
		return fmt.Errorf("data directory: write lock file in %q: %w", l.dir, err)
	}
	return nil
}

// Release unlocks the directory. The file stays, with this process's name
// in it for the next one; removing it would let two processes lock two
// different inodes of one path. Safe to call twice.
func (l *Lock) Release() error {
	if l == nil || l.f == nil {
		return nil
	}
	err := l.f.Close() // closing the file releases the flock
	l.f = nil
	if err != nil {
		return fmt.Errorf("data directory %q: release the lock: %w", l.dir, err)
	}
	return nil
}

// records is the content of the lock file.
type records struct {
	pid    string
	inode  uint64
	holder string
	gone   []string
}

// parse reads a lock file. An unknown or malformed line is skipped: the
// file only ever loses names that way, and a lost name costs a lease TTL,
// never safety. A file with a bare number (an older orisun's) holds a pid.
func parse(b []byte) records {
	var r records
	for line := range strings.Lines(string(b)) {
		key, value, ok := strings.Cut(strings.TrimSpace(line), " ")
		if !ok {
			if _, err := strconv.Atoi(key); err == nil {
				r.pid = key
			}
			continue
		}
		switch key {
		case "pid":
			if _, err := strconv.Atoi(value); err == nil {
				r.pid = value
			}
		case "inode":
			r.inode, _ = strconv.ParseUint(value, 10, 64)
		case "holder":
			if name, err := strconv.Unquote(value); err == nil && name != "" {
				r.holder = name
			}
		case "gone":
			if name, err := strconv.Unquote(value); err == nil && name != "" && len(r.gone) < MaxGone {
				r.gone = append(r.gone, name)
			}
		}
	}
	return r
}

// format writes the lock file's content.
func (r records) format() []byte {
	var b strings.Builder
	fmt.Fprintf(&b, "pid %s\n", r.pid)
	if r.inode != 0 {
		fmt.Fprintf(&b, "inode %d\n", r.inode)
	}
	if r.holder != "" {
		fmt.Fprintf(&b, "holder %q\n", r.holder)
	}
	for _, g := range r.gone {
		fmt.Fprintf(&b, "gone %q\n", g)
	}
	return []byte(b.String())
}

// ended is what a new process takes from the records of the previous one:
// its holder, then the names it kept, newest first, without repeats, at
// most MaxGone.
func (r records) ended() []string {
	var gone []string
	for _, g := range append([]string{r.holder}, r.gone...) {
		if g != "" && len(gone) < MaxGone && !slices.Contains(gone, g) {
			gone = append(gone, g)
		}
	}
	return gone
}
