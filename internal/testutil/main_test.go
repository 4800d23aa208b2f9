package testutil

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
)

func TestMain(m *testing.M) {
	Children(map[string]func() int{"child": child})
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
	return StartChild(t, "child", "child", env...)
}

// fakeT records a failure and ends the goroutine as t.FailNow would: run
// what takes it in failing().
type fakeT struct {
	testing.TB
	mu      sync.Mutex
	failed  []string
	skipped bool
}

func (f *fakeT) Skip(args ...any) {
	f.mu.Lock()
	f.skipped = true
	f.mu.Unlock()
	runtime.Goexit()
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
				(strings.Contains(src, "testutil.Main(m") || f[0] == "github.com/orisun-io/orisun/internal/testutil") {
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

// TestUnavailableFailsUnderCI: with CI set, a test that lacks what it
// needs fails instead of skipping; without it, it skips.
func TestUnavailableFailsUnderCI(t *testing.T) {
	for _, ci := range []string{"true", ""} {
		t.Setenv("CI", ci)
		ft := &fakeT{}
		done := make(chan struct{})
		go func() { defer close(done); Unavailable(ft, "no mount") }()
		<-done
		if failed := len(ft.failed) > 0; failed != (ci != "") || ft.skipped == (ci != "") {
			t.Fatalf("CI=%q: failed %v, skipped %v; want the test failed under CI, skipped elsewhere", ci, ft.failed, ft.skipped)
		}
	}
}
