package testutil

import (
	"fmt"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestProcess: the output of both streams line by line, waited on and
// read; SIGTERM at Stop; the ORISUN_* variables of the test binary stay
// out of the child's environment, but ORISUN_TEST_*.
func TestProcess(t *testing.T) {
	t.Setenv("ORISUN_SOMETHING", "developer's")
	t.Setenv("ORISUN_TEST_SOMETHING", "script's")
	p := startChild(t, "TESTUTIL_CHILD_OUT=one|err:two|three four", "TESTUTIL_CHILD_WAIT=1")
	if l, ok := p.NextLine(t, 30*time.Second); !ok || l != "one" {
		t.Fatalf("first line %q %v", l, ok)
	}
	if l := p.WaitLine(t, "four", 30*time.Second); l != "three four" {
		t.Fatalf("WaitLine: %q", l)
	}
	if l := p.WaitLine(t, "env:", 30*time.Second); l != "env:  script's" {
		t.Fatalf("the child's environment: %q", l)
	}
	if !p.Logged("two") || !p.Logged("three", "four") || p.Logged("three", "five") {
		t.Fatalf("Logged: %q", p.Lines())
	}
	mark := p.LineCount()
	if mark != 4 || p.Tail(2) != "three four\nenv:  script's" {
		t.Fatalf("%d lines, tail %q", mark, p.Tail(2))
	}
	if p.Exited() {
		t.Fatal("exited before SIGTERM")
	}
	if !p.Stop(30 * time.Second) {
		t.Fatal("did not end on SIGTERM")
	}
	if got := p.LinesFrom(mark); !slices.Equal(got, []string{"terminated"}) {
		t.Fatalf("lines after SIGTERM: %q", got)
	}
	if code := p.Wait().ExitCode(); code != 0 {
		t.Fatalf("exit code %d", code)
	}
	if err := p.Signal(syscall.SIGTERM); err == nil {
		t.Fatal("a signal to an exited process was sent")
	}
	if l, ok := p.NextLine(t, time.Second); !ok || l != "terminated" {
		t.Fatalf("NextLine after SIGTERM: %q %v", l, ok)
	}
	if l, ok := p.NextLine(t, time.Second); ok || l != "" {
		t.Fatalf("NextLine at the end: %q %v", l, ok)
	}
}

func TestProcessKillAndEnd(t *testing.T) {
	p := startChild(t, "TESTUTIL_CHILD_OUT=up", "TESTUTIL_CHILD_WAIT=1")
	p.WaitLine(t, "up", 30*time.Second)
	p.Kill(t)
	if ws := p.Wait().Sys().(syscall.WaitStatus); !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("ended with %s", p.Wait())
	}
	if msg := failing(t, func(tb testing.TB) { p.Kill(tb) }); !strings.Contains(msg, "has exited") {
		t.Fatalf("Kill of an exited process: %q", msg)
	}

	q := startChild(t, "TESTUTIL_CHILD_OUT=a|b", "TESTUTIL_CHILD_EXIT=3")
	msg := failing(t, func(tb testing.TB) { q.WaitLine(tb, "never written", 30*time.Second) })
	if !strings.Contains(msg, "ended (exit status 3) before it wrote a line containing \"never written\"") ||
		!strings.Contains(msg, "a\nb") {
		t.Fatalf("WaitLine on a process that ends: %q", msg)
	}
	r := startChild(t, "TESTUTIL_CHILD_OUT=x", "TESTUTIL_CHILD_WAIT=1")
	msg = failing(t, func(tb testing.TB) { r.WaitLine(tb, "never written", 200*time.Millisecond) })
	if !strings.Contains(msg, "wrote no line containing \"never written\" within 200ms") {
		t.Fatalf("WaitLine timing out: %q", msg)
	}
}

// TestProcessKeepLines: a process that writes much keeps its last lines.
func TestProcessKeepLines(t *testing.T) {
	var out []string
	for i := range 100 {
		out = append(out, fmt.Sprint(i))
	}
	c := ChildCommand("child", "TESTUTIL_CHILD_OUT="+strings.Join(out, "|"))
	c.KeepLines = 10
	p := StartProcess(t, c)
	p.Wait()
	lines := p.Lines()
	if n := p.LineCount(); n != 101 || len(lines) < 10 || len(lines) > 20 || lines[len(lines)-2] != "99" {
		t.Fatalf("%d lines, kept %q", n, lines)
	}
	if got := p.LinesFrom(99); !slices.Equal(got, []string{"99", lines[len(lines)-1]}) {
		t.Fatalf("LinesFrom(99): %q", got)
	}
	if l, ok := p.NextLine(t, time.Second); !ok || l != lines[0] {
		t.Fatalf("NextLine after dropped lines: %q, want the first kept %q", l, lines[0])
	}
}
