package testutil

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

func TestMain(m *testing.M) {
	if os.Getenv("TESTUTIL_CHILD") != "" {
		os.Exit(child())
	}
	Main(m)
}

// child is the process of the Process tests: it writes what it was told
// (TESTUTIL_CHILD_OUT, lines separated by "|"; an "err:" line to stderr)
// and then, with TESTUTIL_CHILD_WAIT set, waits for SIGTERM and writes
// "terminated"; it exits with TESTUTIL_CHILD_EXIT's code.
func child() int {
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)
	for _, l := range strings.Split(os.Getenv("TESTUTIL_CHILD_OUT"), "|") {
		if s, ok := strings.CutPrefix(l, "err:"); ok {
			fmt.Fprintln(os.Stderr, s)
		} else {
			fmt.Println(l)
		}
	}
	fmt.Println("env:", os.Getenv("ORISUN_SOMETHING"), os.Getenv("ORISUN_TEST_SOMETHING"))
	if os.Getenv("TESTUTIL_CHILD_WAIT") != "" {
		<-term
		fmt.Println("terminated")
	}
	code := 0
	fmt.Sscan(os.Getenv("TESTUTIL_CHILD_EXIT"), &code)
	return code
}

func startChild(t *testing.T, env ...string) *Process {
	return StartProcess(t, Command{Name: "child", Path: os.Args[0], Args: []string{"-test.run=^$"},
		Env: append([]string{"TESTUTIL_CHILD=1"}, env...)})
}

// fakeT records a failure and ends the goroutine as t.FailNow would: run
// what takes it in failing().
type fakeT struct {
	testing.TB
	mu     sync.Mutex
	failed []string
}

func (f *fakeT) Helper() {}
func (f *fakeT) Fatalf(format string, args ...any) {
	f.Errorf(format, args...)
	runtime.Goexit()
}
func (f *fakeT) Fatal(args ...any) { f.Fatalf("%s", fmt.Sprint(args...)) }
func (f *fakeT) Errorf(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failed = append(f.failed, fmt.Sprintf(format, args...))
}

// failing runs fn with a fakeT and returns what it failed with ("" if
// nothing).
func failing(t *testing.T, fn func(tb testing.TB)) string {
	f := &fakeT{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn(f)
	}()
	<-done
	return strings.Join(f.failed, "\n")
}

func TestEventually(t *testing.T) {
	calls := 0
	took := Eventually(t, "the third call", 5*time.Second, time.Millisecond, func() bool { calls++; return calls == 3 })
	if calls != 3 || took <= 0 || took > 5*time.Second {
		t.Fatalf("returned after %d calls, %s", calls, took)
	}
	msg := failing(t, func(tb testing.TB) {
		Eventually(tb, "never", 50*time.Millisecond, 10*time.Millisecond, func() bool { return false })
		tb.Errorf("Eventually returned though the condition never held")
	})
	if msg != "timed out after 50ms waiting for never" {
		t.Fatalf("failed with %q", msg)
	}
}

func TestFreePorts(t *testing.T) {
	ports := FreePorts(t, 5)
	if len(ports) != 5 {
		t.Fatalf("%d ports", len(ports))
	}
	for i, p := range ports {
		if slices.Contains(ports[:i], p) {
			t.Fatalf("port %d twice in %v", p, ports)
		}
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			t.Fatalf("port %d is not free: %v", p, err)
		}
		l.Close()
	}
	if p := FreePort(t); p <= 0 {
		t.Fatalf("FreePort: %d", p)
	}
}

// TestBuild: a binary is built once for each package and tags, however
// many ask at once, with the tags given.
func TestBuild(t *testing.T) {
	const pkg = "github.com/orisun-io/orisun/internal/testutil/testdata/hello"
	var wg sync.WaitGroup
	bins := make([]string, 4)
	for i := range bins {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tags := []string(nil)
			if i%2 == 1 {
				tags = []string{"testutiltag"}
			}
			bins[i] = Build(t, Binary{Pkg: pkg, Tags: tags})
		}()
	}
	wg.Wait()
	if bins[0] != bins[2] || bins[1] != bins[3] || bins[0] == bins[1] {
		t.Fatalf("built %v: want one binary per set of tags", bins)
	}
	for i, want := range []string{"hello", "hello, tagged"} {
		out, err := exec.Command(bins[i]).Output()
		if err != nil || strings.TrimSpace(string(out)) != want {
			t.Fatalf("%s: %q %v, want %q", bins[i], out, err, want)
		}
	}
	if filepath.Base(bins[0]) != "hello" {
		t.Fatalf("binary named %s", filepath.Base(bins[0]))
	}
	msg := failing(t, func(tb testing.TB) { Build(tb, Binary{Pkg: pkg + "/nosuch"}) })
	if !strings.Contains(msg, "go build") || !strings.Contains(msg, "nosuch") {
		t.Fatalf("a failed build failed with %q", msg)
	}
}

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
	p := StartProcess(t, Command{Path: os.Args[0], Args: []string{"-test.run=^$"}, KeepLines: 10,
		Env: []string{"TESTUTIL_CHILD=1", "TESTUTIL_CHILD_OUT=" + strings.Join(out, "|")}})
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

// TestLeakCheck is the negative control of the leak checks: a goroutine
// left running is found, with its stack, and nothing once it ended.
func TestLeakCheck(t *testing.T) {
	before := map[uint64]bool{}
	for _, g := range goroutines() {
		before[g.id] = true
	}
	stop := make(chan struct{})
	go leakyWorker(stop)
	leaked := waitForLeaks(before, 100*time.Millisecond)
	if len(leaked) != 1 || !strings.Contains(leaked[0].stack, "testutil.leakyWorker") {
		t.Fatalf("found %d leaked goroutine(s):\n%s", len(leaked), joinStacks(leaked))
	}
	close(stop)
	if leaked := waitForLeaks(before, 5*time.Second); len(leaked) != 0 {
		t.Fatalf("a goroutine that ended is still found:\n%s", joinStacks(leaked))
	}

	// NoLeaks fails the test whose goroutine outlives it.
	stop = make(chan struct{})
	defer close(stop)
	msg := failing(t, func(tb testing.TB) {
		ft := &cleanupT{TB: tb}
		NoLeaks(ft)
		go leakyWorker(stop)
		ft.cleanup()
	})
	if !strings.Contains(msg, "1 goroutine(s) started by the test still run") || !strings.Contains(msg, "leakyWorker") {
		t.Fatalf("NoLeaks failed with %q", msg)
	}
	msg = failing(t, func(tb testing.TB) {
		ft := &cleanupT{TB: tb}
		NoLeaks(ft)
		done := make(chan struct{})
		go func() { close(done) }()
		<-done
		ft.cleanup()
	})
	if msg != "" {
		t.Fatalf("NoLeaks failed a test that left nothing running: %q", msg)
	}
}

func leakyWorker(stop chan struct{}) { <-stop }

// cleanupT runs the cleanups of a fake test when told.
type cleanupT struct {
	testing.TB
	fns []func()
}

func (c *cleanupT) Cleanup(fn func()) { c.fns = append(c.fns, fn) }
func (c *cleanupT) cleanup() {
	for _, fn := range slices.Backward(c.fns) {
		fn()
	}
}

// TestBackground: the runtime's goroutines and those of the allowlist are
// not leaks; anything else is.
func TestBackground(t *testing.T) {
	for stack, want := range map[string]bool{
		"goroutine 5 [syscall]:\nos/signal.signal_recv()\n\t/go/src/runtime/sigqueue.go:152 +0x29\nos/signal.loop()\n\t/go/src/os/signal/signal_unix.go:23 +0x13\ncreated by os/signal.Notify.func1.1 in goroutine 1": true,
		"goroutine 2 [force gc (idle)]:\nruntime.gopark(0x0?, 0x0?, 0x0?, 0x0?, 0x0?)\n\t/go/src/runtime/proc.go:435 +0xce\nruntime.forcegchelper()\n\t/go/src/runtime/proc.go:348 +0xb3":                             true,
		"goroutine 9 [chan receive]:\ngithub.com/orisun-io/orisun/publisher.(*Publisher).run(0xc000)\n\t/x/publisher.go:10 +0x1\ncreated by os/signal.Notify in goroutine 1":                                          false,
		"goroutine 9 [IO wait]:\nnet/http.(*persistConn).readLoop(0xc000)\n\t/go/src/net/http/transport.go:2300 +0x1":                                                                                                 false,
	} {
		if got := isBackground(stack); got != want {
			t.Errorf("isBackground = %v, want %v:\n%s", got, want, stack)
		}
	}
}

// TestEveryPackageCallsMain: every package of the module with tests has a
// TestMain that calls testutil.Main, so that the leak check runs after
// every package's tests.
func TestEveryPackageCallsMain(t *testing.T) {
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "list", "-f", "{{.ImportPath}}\t{{.Dir}}\t{{.TestGoFiles}}\t{{.XTestGoFiles}}", "./...")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	packages := 0
	s := bufio.NewScanner(strings.NewReader(string(out)))
	for s.Scan() {
		f := strings.Split(s.Text(), "\t")
		files := strings.Fields(strings.Trim(f[2], "[]") + " " + strings.Trim(f[3], "[]"))
		if len(files) == 0 {
			continue
		}
		packages++
		found := false
		for _, name := range files {
			b, err := os.ReadFile(filepath.Join(f[1], name))
			if err != nil {
				t.Fatal(err)
			}
			src := string(b)
			if strings.Contains(src, "func TestMain(m *testing.M)") &&
				(strings.Contains(src, "testutil.Main(m)") || f[0] == "github.com/orisun-io/orisun/internal/testutil") {
				found = true
			}
		}
		if !found {
			t.Errorf("%s has tests but no TestMain calling testutil.Main(m): add func TestMain(m *testing.M) { testutil.Main(m) }", f[0])
		}
	}
	if packages < 10 {
		t.Fatalf("go list found %d packages with tests: the check looked at the wrong tree", packages)
	}
}

// TestGo: halt stops the goroutine and waits for it, more than once; the
// test's cleanup halts one the test left running.
func TestGo(t *testing.T) {
	var n atomic.Int64
	var left atomic.Bool
	t.Run("left running", func(t *testing.T) {
		fn := func(stop <-chan struct{}) {
			<-stop
			left.Store(true)
		}
		Go(t, fn)
	})
	if !left.Load() {
		t.Fatal("the goroutine a test left running was not halted by its cleanup")
	}
	halt := Go(t, func(stop <-chan struct{}) {
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
				n.Add(1)
			}
		}
	})
	Eventually(t, "the goroutine to run", 10*time.Second, time.Millisecond, func() bool { return n.Load() > 3 })
	halt()
	stopped := n.Load()
	halt()
	time.Sleep(20 * time.Millisecond)
	if n.Load() != stopped {
		t.Fatal("the goroutine ran on after halt returned")
	}
}
