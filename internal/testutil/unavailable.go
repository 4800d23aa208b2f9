package testutil

import (
	"os"
	"testing"
)

// Unavailable ends a test that needs what this machine lacks (root to
// mount a file system, Linux, a tool) and says what. Under CI (CI set, as
// .ci/run sets it) the test fails: a skip there would hide a test that
// never ran. Elsewhere (a developer's laptop) it is skipped. It is the one
// place a test of orisun may skip.
func Unavailable(t testing.TB, why string) {
	t.Helper()
	if os.Getenv("CI") != "" {
		t.Fatal(why + " (CI is set: a required test may not skip)")
	}
	t.Skip(why)
}
