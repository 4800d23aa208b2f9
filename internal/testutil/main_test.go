package testutil

import (
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
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
