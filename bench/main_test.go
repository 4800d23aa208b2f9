package bench

import (
	"os"
	"testing"

	"github.com/orisun-io/orisun/internal/testutil"
)

// TestMain runs the tests, or, when the api workload re-executes this test
// binary as its client process (clientCommand), ClientMain.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == ClientArg {
		os.Exit(ClientMain(os.Args[2:], os.Stdin, os.Stdout, os.Stderr))
	}
	testutil.Main(m)
}

// clientCommand is the api workload's client process in the tests: this
// test binary (TestMain).
func clientCommand() []string { return []string{os.Args[0], ClientArg} }
