//go:build !linux

package testutil

import (
	"os"
	"testing"
)

// MountTmpfs needs Linux: elsewhere it skips the test, or fails it under
// CI (see the Linux version).
func MountTmpfs(t testing.TB, size, owner string) string {
	t.Helper()
	msg := "mounting a tmpfs of " + size + " needs Linux"
	if os.Getenv("CI") != "" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// FreeBytes needs Linux: elsewhere it skips the test.
func FreeBytes(t testing.TB, dir string) int64 {
	t.Helper()
	t.Skip("the free space of a file system is read on Linux only")
	return 0
}
