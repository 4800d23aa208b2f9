package datadir_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/orisun-io/orisun/event"
	"github.com/orisun-io/orisun/internal/datadir"
	"github.com/orisun-io/orisun/internal/testutil"
)

func acquire(t *testing.T, dir string) *datadir.Lock {
	t.Helper()
	l, err := datadir.Acquire(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Release() })
	return l
}

// TestOneLockPerDirectory: a second Acquire of a locked directory, in the
// same process too, fails with the holder's pid, as ErrUnavailable; after
// Release the directory can be locked again.
func TestOneLockPerDirectory(t *testing.T) {
	dir := t.TempDir()
	first := acquire(t, dir)
	_, err := datadir.Acquire(dir)
	var locked *datadir.LockedError
	if !errors.As(err, &locked) || locked.PID != strconv.Itoa(os.Getpid()) || !errors.Is(err, event.ErrUnavailable) {
		t.Fatalf("second Acquire: %v, want a *LockedError with pid %d that is ErrUnavailable", err, os.Getpid())
	}
	want := fmt.Sprintf("data directory %q is locked by another orisun process (pid %d)", dir, os.Getpid())
	if !strings.Contains(err.Error(), want) {
		t.Fatalf("second Acquire: %q, want it to contain %q", err, want)
	}
	if err := first.Release(); err != nil {
		t.Fatal(err)
	}
	if err := first.Release(); err != nil {
		t.Fatalf("second Release: %v", err)
	}
	acquire(t, dir)
}

// TestGoneNamesEarlierHolders: each process that locks the directory
// learns the names of those before it, newest first, also across a process
// that never claimed a name, at most MaxGone.
func TestGoneNamesEarlierHolders(t *testing.T) {
	dir := t.TempDir()
	var want []string
	for i := range datadir.MaxGone + 3 {
		l := acquire(t, dir)
		if got := l.Gone(); !slices.Equal(got, want) {
			t.Fatalf("run %d: Gone() = %q, want %q", i, got, want)
		}
		if i == 2 {
			// A process that locks and claims nothing (a tool that opens
			// the store) keeps the names for the next one.
			l.Release()
			continue
		}
		name := fmt.Sprintf("node#%d", i)
		if err := l.Claim(name); err != nil {
			t.Fatal(err)
		}
		if err := l.Claim(name); err != nil {
			t.Fatalf("the same Claim again: %v", err)
		}
		if err := l.Claim("other#1"); !errors.Is(err, event.ErrInvalid) {
			t.Fatalf("a second Claim with another name: %v, want ErrInvalid", err)
		}
		l.Release()
		want = append([]string{name}, want...)[:min(len(want)+1, datadir.MaxGone)]
	}
}

// TestAnyNameIsKept: any holder name a node id can make is kept, white
// space and all; only an empty one is refused.
func TestAnyNameIsKept(t *testing.T) {
	dir := t.TempDir()
	l := acquire(t, dir)
	if err := l.Claim(""); !errors.Is(err, event.ErrInvalid) {
		t.Errorf("Claim(\"\"): %v, want ErrInvalid", err)
	}
	name := "node a\n\"x\"\x00#" + strings.Repeat("é", 300) + "#1f2e"
	if err := l.Claim(name); err != nil {
		t.Fatal(err)
	}
	l.Release()
	if err := l.Claim(name); !errors.Is(err, event.ErrClosed) {
		t.Fatalf("Claim after Release: %v, want ErrClosed", err)
	}
	if g := acquire(t, dir).Gone(); !slices.Equal(g, []string{name}) {
		t.Fatalf("Gone() = %q, want [%q]", g, name)
	}
}

// TestCopiedDirectoryNamesNobody: a lock file copied into another
// directory (another inode) names nobody there, so a copy started beside
// the live original never takes the original's leases; the copy's own
// names are trusted from then on.
func TestCopiedDirectoryNamesNobody(t *testing.T) {
	orig, copyDir := t.TempDir(), t.TempDir()
	l := acquire(t, orig)
	if err := l.Claim("node-a#1"); err != nil {
		t.Fatal(err)
	}
	// The original still runs; its directory is copied meanwhile.
	b, err := os.ReadFile(filepath.Join(orig, datadir.LockFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(copyDir, datadir.LockFile), b, 0o644); err != nil {
		t.Fatal(err)
	}
	c := acquire(t, copyDir)
	if g := c.Gone(); g != nil || !strings.Contains(c.Copied(), "copied") {
		t.Fatalf("a copied lock file: Gone() = %q, Copied() = %q; want no names and the reason", g, c.Copied())
	}
	if err := c.Claim("node-a#2"); err != nil {
		t.Fatal(err)
	}
	c.Release()
	again := acquire(t, copyDir)
	if g := again.Gone(); !slices.Equal(g, []string{"node-a#2"}) || again.Copied() != "" {
		t.Fatalf("the copy's next start: Gone() = %q, Copied() = %q; want [node-a#2]", g, again.Copied())
	}
}

// TestOlderAndDamagedFiles: an older orisun's lock file (a bare pid) and
// lines that cannot be read name nobody, and never fail the lock.
func TestOlderAndDamagedFiles(t *testing.T) {
	for _, c := range []struct {
		content string
		gone    []string
	}{
		{"4242\n", nil},
		{"", nil},
		{"holder\ngone \ngone a b\ngone \"\"\nholder \"x#1\"\n\x00\x01garbage\n", []string{"x#1"}},
		{"gone \"y#2\"\nholder \"x#1\"\ngone \"y#2\"\n", []string{"x#1", "y#2"}},
	} {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, datadir.LockFile), []byte(c.content), 0o644); err != nil {
			t.Fatal(err)
		}
		l := acquire(t, dir)
		if g := l.Gone(); !slices.Equal(g, c.gone) {
			t.Errorf("lock file %q: Gone() = %q, want %q", c.content, g, c.gone)
		}
		l.Release()
	}
}

// TestKilledHolderIsGone: a process that holds the lock keeps it from
// everyone; killed with SIGKILL it leaves the lock free (the kernel drops
// it), and the next process learns its name.
func TestKilledHolderIsGone(t *testing.T) {
	dir := t.TempDir()
	child := testutil.StartChild(t, "lock holder", "lock holder", "DATADIR_CHILD_DIR="+dir, "DATADIR_CHILD_HOLDER=child#1")
	child.WaitLine(t, "locked", 30*time.Second)
	_, err := datadir.Acquire(dir)
	var locked *datadir.LockedError
	if !errors.As(err, &locked) || locked.PID != strconv.Itoa(child.Cmd.Process.Pid) {
		t.Fatalf("Acquire while the child holds the lock: %v, want a *LockedError naming pid %d", err, child.Cmd.Process.Pid)
	}
	child.Kill(t)
	l := acquire(t, dir)
	if g := l.Gone(); !slices.Equal(g, []string{"child#1"}) {
		t.Fatalf("after the SIGKILL: Gone() = %q, want [child#1]", g)
	}
}
