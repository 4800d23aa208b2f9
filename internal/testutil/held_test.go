package testutil

import (
	"errors"
	"strings"
	"testing"
)

// TestNotYet: an empty channel passes; a value on it fails the test with
// what and the value.
func TestNotYet(t *testing.T) {
	ch := make(chan error, 1)
	if got := failing(t, func(tb testing.TB) { NotYet(tb, ch, "the append went through") }); got != "" {
		t.Fatalf("NotYet on an empty channel failed: %q", got)
	}
	ch <- errors.New("too early")
	got := failing(t, func(tb testing.TB) { NotYet(tb, ch, "the append went through") })
	if got != "the append went through: too early" {
		t.Fatalf("NotYet with a value: %q, want what and the value", got)
	}
}

// TestRelease: release runs before the result is waited for; a failed
// release or a failed result fails the test with its error.
func TestRelease(t *testing.T) {
	ch := make(chan error, 1)
	released := false
	if got := failing(t, func(tb testing.TB) {
		Release(tb, ch, func() error { released = true; ch <- nil; return nil })
	}); got != "" || !released {
		t.Fatalf("Release: failed %q, released %v", got, released)
	}
	if got := failing(t, func(tb testing.TB) {
		Release(tb, ch, func() error { return errors.New("commit failed") })
	}); got != "commit failed" {
		t.Fatalf("Release with a failed release: %q", got)
	}
	if got := failing(t, func(tb testing.TB) {
		Release(tb, ch, func() error { ch <- errors.New("append failed"); return nil })
	}); got != "append failed" {
		t.Fatalf("Release with a failed result: %q", got)
	}
}

// TestChildren: StartChild runs the named child of TestMain's Children in
// place of the tests (TestProcess* use "child"); a name that no child has
// ends the process with status 2 and says so.
func TestChildren(t *testing.T) {
	p := StartChild(t, "unknown child", "no such child")
	if code := p.Wait().ExitCode(); code != 2 {
		t.Fatalf("a child of no known name exited with %d, want 2", code)
	}
	if out := strings.Join(p.Lines(), "\n"); !strings.Contains(out, `ORISUN_TEST_CHILD="no such child" names no child`) {
		t.Fatalf("a child of no known name said %q", out)
	}
	p = StartChild(t, "known child", "child", "TESTUTIL_CHILD_OUT=hello")
	if code := p.Wait().ExitCode(); code != 0 || !p.Logged("hello") {
		t.Fatalf("the child %q exited %d with %q", "child", code, p.Lines())
	}
}
