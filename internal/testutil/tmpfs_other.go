//go:build !linux

package testutil

import (
	"testing"
)

// MountTmpfs needs Linux: elsewhere it skips the test, or fails it under
// CI (see the Linux version).
func MountTmpfs(t testing.TB, size, owner string) string {
	t.Helper()
	Unavailable(t, "mounting a tmpfs of "+size+" needs Linux")
	return ""
}

// FreeBytes needs Linux: elsewhere it skips the test, or fails it under CI.
func FreeBytes(t testing.TB, dir string) int64 {
	t.Helper()
	Unavailable(t, "the free space of a file system is read on Linux only")
	return 0
}
