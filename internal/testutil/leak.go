package testutil

import (
	"bytes"
	"fmt"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Main runs the tests of m and exits with their result. Every package's
// TestMain calls it, after any work of its own (a test binary re-executed
// as a child process runs its child instead):
//
//	func TestMain(m *testing.M) { testutil.Main(m) }
//
// Once the tests passed, it fails the run, printing their stacks, if
// goroutines other than the runtime's, those of background (below) and
// those allow names still run: it looks again and again for up to 5 s, as
// goroutines take a moment to notice they were told to end. It removes
// what Build built.
func Main(m *testing.M, allow ...Allow) {
	code := m.Run()
	removeBuilt()
	if code == 0 {
		if leaked := waitForLeaks(nil, mainLeakWait, allow); len(leaked) > 0 {
			fmt.Fprintf(os.Stderr, "testutil: %d goroutine(s) still run %s after the tests (a test did not close what it opened):\n\n%s\n",
				len(leaked), mainLeakWait, joinStacks(leaked))
			code = 1
		}
	}
	os.Exit(code)
}

// Allow names a goroutine that Main lets outlive one package's tests: one
// with Func on its stack. It is for a leak of non-test code that a test
// found and its owner has yet to fix; Why names that code.
type Allow struct {
	Func, Why string
}

// How long Main and NoLeaks wait for goroutines to end: a node's
// goroutines take a moment to notice they were told to stop, a pool's
// health check a moment more.
const (
	mainLeakWait = 5 * time.Second
	testLeakWait = 10 * time.Second
)

// NoLeaks makes the test fail, at its end (after the cleanups registered
// after this call), if a goroutine that started after this call still
// runs (it looks for up to 10 s). For a test that checks that a part
// leaves nothing running once closed; such a test must not run in parallel
// with others, whose goroutines it would count.
func NoLeaks(t testing.TB) {
	t.Helper()
	before := map[uint64]bool{}
	for _, g := range goroutines() {
		before[g.id] = true
	}
	t.Cleanup(func() {
		if leaked := waitForLeaks(before, testLeakWait, nil); len(leaked) > 0 {
			t.Errorf("%d goroutine(s) started by the test still run %s after it:\n\n%s", len(leaked), testLeakWait, joinStacks(leaked))
		}
	})
}

// background lists the goroutines that may outlive every test, by a
// function on their stack: each is the standard library's or a
// dependency's, never orisun's.
var background = []Allow{
	// signal.Notify starts one goroutine per process that never ends:
	// cmd/orisun's tests run serve, tail and bench in the test process,
	// and those stop on SIGINT and SIGTERM (signal.NotifyContext). The
	// function at its top has had both names across Go versions.
	{Func: "os/signal.signal_recv", Why: "os/signal's receiver, started once per process by signal.Notify"},
	{Func: "os/signal.loop", Why: "os/signal's receiver, started once per process by signal.Notify"},
}

type goroutine struct {
	id    uint64
	stack string
}

// goroutines returns every goroutine but the caller's.
func goroutines() []goroutine {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var out []goroutine
	// The first is the caller's: runtime.Stack puts the current goroutine
	// first.
	for i, s := range bytes.Split(buf, []byte("\n\n")) {
		if i == 0 || len(s) == 0 {
			continue
		}
		head, _, _ := strings.Cut(string(s), " [")
		id, err := strconv.ParseUint(strings.TrimPrefix(head, "goroutine "), 10, 64)
		if err != nil {
			continue
		}
		out = append(out, goroutine{id: id, stack: string(s)})
	}
	return out
}

// leaks returns the goroutines not in before that are neither background
// nor allowed.
func leaks(before map[uint64]bool, allow []Allow) []goroutine {
	var out []goroutine
	for _, g := range goroutines() {
		if !before[g.id] && !isBackground(g.stack, allow) {
			out = append(out, g)
		}
	}
	return out
}

// waitForLeaks returns leaks(before) once wait has passed, or nil as soon
// as there is none.
func waitForLeaks(before map[uint64]bool, wait time.Duration, allow []Allow) []goroutine {
	deadline := time.Now().Add(wait)
	for {
		// Idle keep-alive connections of net/http's default transport
		// (status and metrics requests) each hold two goroutines until
		// closed: close them, as a client that is done would.
		http.DefaultClient.CloseIdleConnections()
		leaked := leaks(before, allow)
		if len(leaked) == 0 || time.Now().After(deadline) {
			return leaked
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// isBackground reports whether a goroutine's stack is one of background
// or allow, or the runtime's own.
func isBackground(stack string, allow []Allow) bool {
	fns := functions(stack)
	for _, b := range append(background, allow...) {
		if slices.Contains(fns, b.Func) {
			return true
		}
	}
	for _, fn := range fns {
		if !strings.HasPrefix(fn, "runtime.") {
			return false
		}
	}
	return true // GOTRACEBACK=system shows the runtime's goroutines too
}

// functions returns the functions of a goroutine's stack, innermost first
// ("created by" lines excluded).
func functions(stack string) []string {
	var fns []string
	for _, line := range strings.Split(stack, "\n")[1:] {
		if line == "" || line[0] == '\t' || strings.HasPrefix(line, "created by ") {
			continue
		}
		if i := strings.LastIndexByte(line, '('); i > 0 {
			line = line[:i]
		}
		fns = append(fns, line)
	}
	return fns
}

func joinStacks(gs []goroutine) string {
	var b strings.Builder
	for _, g := range gs {
		b.WriteString(g.stack)
		b.WriteString("\n\n")
	}
	return b.String()
}
