package main

import (
	"strings"
	"testing"
	"time"

	"github.com/orisun-io/orisun/internal/testutil"
)

func TestMain(m *testing.M) { testutil.Main(m) }

// A run of go test -json (abridged from a real one): a package that
// passes, one whose test fails, one without tests, one that does not build.
const run1 = `{"Action":"start","Package":"ex/ok"}
{"Action":"start","Package":"ex/bad"}
{"Action":"run","Package":"ex/ok","Test":"TestGood"}
{"Action":"output","Package":"ex/ok","Test":"TestGood","Output":"=== RUN   TestGood\n"}
{"Action":"output","Package":"ex/ok","Test":"TestGood","Output":"    ok_test.go:9: quiet detail\n"}
{"Action":"output","Package":"ex/ok","Test":"TestGood","Output":"--- PASS: TestGood (0.00s)\n"}
{"Action":"pass","Package":"ex/ok","Test":"TestGood"}
{"Action":"output","Package":"ex/ok","Output":"PASS\n"}
{"Action":"output","Package":"ex/ok","Output":"ok  \tex/ok\t0.01s\n"}
{"Action":"pass","Package":"ex/ok"}
{"Action":"run","Package":"ex/bad","Test":"TestBad"}
{"Action":"output","Package":"ex/bad","Test":"TestBad","Output":"=== RUN   TestBad\n"}
{"Action":"output","Package":"ex/bad","Test":"TestBad","Output":"    bad_test.go:7: want 2, got 3\n"}
{"Action":"output","Package":"ex/bad","Test":"TestBad","Output":"--- FAIL: TestBad (0.00s)\n"}
{"Action":"fail","Package":"ex/bad","Test":"TestBad"}
{"Action":"output","Package":"ex/bad","Output":"FAIL\n"}
{"Action":"output","Package":"ex/bad","Output":"FAIL\tex/bad\t0.02s\n"}
{"Action":"fail","Package":"ex/bad"}
{"Action":"start","Package":"ex/none"}
{"Action":"output","Package":"ex/none","Output":"?   \tex/none\t[no test files]\n"}
{"Action":"skip","Package":"ex/none"}
{"ImportPath":"ex/broken","Action":"build-output","Output":"ex/broken/x.go:2:12: undefined: undefined\n"}
{"ImportPath":"ex/broken","Action":"build-fail"}
`

func TestPrintsWhatGoTestPrints(t *testing.T) {
	var out strings.Builder
	code := run(strings.NewReader(run1), &out, 0)
	got := out.String()
	for _, want := range []string{
		"ok  \tex/ok\t0.01s\n",
		"bad_test.go:7: want 2, got 3\n--- FAIL: TestBad",
		"FAIL\tex/bad\t0.02s\n",
		"?   \tex/none\t[no test files]\n",
		"undefined: undefined\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the output lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "quiet detail") || strings.Contains(got, "PASS\n") {
		t.Errorf("the output of a passing test or package shows:\n%s", got)
	}
	if code != 1 || !strings.HasSuffix(got, "\nFAIL\n") {
		t.Errorf("exit %d, last line of %q: want 1 and FAIL", code, got)
	}
	var okRun strings.Builder
	for _, l := range strings.SplitAfter(run1, "\n") {
		if strings.Contains(l, `"ex/ok"`) {
			okRun.WriteString(l)
		}
	}
	out.Reset()
	if code := run(strings.NewReader(okRun.String()), &out, 0); code != 0 || out.String() != "ok  \tex/ok\t0.01s\n" {
		t.Errorf("a run without failures: exit %d, output %q; want 0 and the ok line alone", code, out.String())
	}
}

// TestNamesTheRunningTests: while a test runs, a line names it, its
// package and how long it has run; a package that timed out prints the
// output of the tests that never ended.
func TestNamesTheRunningTests(t *testing.T) {
	p := newPrinter(&strings.Builder{})
	var out strings.Builder
	p.w = &out
	p.handle(`{"Action":"start","Package":"ex/slow"}`)
	p.handle(`{"Action":"run","Package":"ex/slow","Test":"TestSlow"}`)
	p.handle(`{"Action":"run","Package":"ex/slow","Test":"TestSlow/sub"}`)
	p.handle(`{"Action":"output","Package":"ex/slow","Test":"TestSlow","Output":"    slow_test.go:3: waiting for the leader\n"}`)
	p.progress(time.Now().Add(90*time.Second), 30*time.Second)
	if got := out.String(); !strings.Contains(got, "running ex/slow (TestSlow 1m30s)") || strings.Contains(got, "TestSlow/sub") {
		t.Fatalf("progress line %q: want the package, the top-level test and its time", got)
	}
	out.Reset()
	p.handle(`{"Action":"output","Package":"ex/slow","Output":"panic: test timed out after 1m0s\n"}`)
	p.handle(`{"Action":"fail","Package":"ex/slow"}`)
	if got := out.String(); !strings.Contains(got, "waiting for the leader") || !strings.Contains(got, "panic: test timed out") {
		t.Fatalf("a timed-out package printed %q: want the unfinished test's output and the panic", got)
	}
}
