//go:build linux

package testutil

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
)

// MountTmpfs mounts a tmpfs of size (as mount's size= takes it, e.g.
// "24m") on a new directory, owned by owner (an OS user name; "" leaves
// root), and unmounts it when the test ends: a small file system for a test
// to fill, as a full disk. It needs root (CAP_SYS_ADMIN). A machine that
// cannot mount skips the test, except under CI (CI set, as .ci/run sets
// it), where it fails: a full-disk test that silently does not run checks
// nothing.
//
// Register it before what keeps files open on it (a database server), so
// that the unmount, a cleanup, runs after that is stopped.
func MountTmpfs(t testing.TB, size, owner string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "orisun-tmpfs-")
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size+",mode=0755", "tmpfs", dir).CombinedOutput(); err != nil {
		os.Remove(dir)
		msg := fmt.Sprintf("cannot mount a tmpfs of %s on %s (%v: %s): this test fills a small file system, which needs "+
			"root (CAP_SYS_ADMIN)", size, dir, err, strings.TrimSpace(string(out)))
		Unavailable(t, msg)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, out)
			return
		}
		os.Remove(dir)
	})
	if owner != "" {
		if out, err := exec.Command("chown", owner, dir).CombinedOutput(); err != nil {
			t.Fatalf("chown %s %s: %v: %s", owner, dir, err, out)
		}
	}
	return dir
}

// FreeBytes is what the file system of dir has free.
func FreeBytes(t testing.TB, dir string) int64 {
	t.Helper()
	var fs syscall.Statfs_t
	if err := syscall.Statfs(dir, &fs); err != nil {
		t.Fatal(err)
	}
	return int64(fs.Bavail) * int64(fs.Bsize)
}
