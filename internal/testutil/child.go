package testutil

import (
	"fmt"
	"os"
	"slices"
	"testing"
)

// childVar tells a test binary that StartChild started which child it is.
const childVar = "ORISUN_TEST_CHILD"

// Children lets a test binary run as a child process of its own tests:
// when StartChild started it, it runs the child's main of mains, named as
// StartChild named it, in place of the tests, and exits with its status
// (an unknown name exits with status 2). Otherwise it returns, and
// TestMain goes on:
//
//	func TestMain(m *testing.M) {
//		testutil.Children(map[string]func() int{"relay": relayMain})
//		testutil.Main(m)
//	}
func Children(mains map[string]func() int) {
	name, ok := os.LookupEnv(childVar)
	if !ok || name == "" {
		return
	}
	child, ok := mains[name]
	if !ok {
		fmt.Fprintf(os.Stderr, "testutil: %s=%q names no child of this test binary\n", childVar, name)
		os.Exit(2)
	}
	os.Exit(child())
}

// ChildCommand is the test binary itself as its child named child (a key
// of the map its TestMain gives Children), running no tests, with env on
// top of the child's environment: for StartProcess, or a harness that
// starts its processes its own way.
func ChildCommand(child string, env ...string) Command {
	return Command{Path: os.Args[0], Args: []string{"-test.run=^$"},
		Env: append([]string{childVar + "=" + child}, slices.Clone(env)...)}
}

// StartChild starts ChildCommand(child, env...) with StartProcess (its
// output kept, ended with the test); name names it in the test's output.
func StartChild(t testing.TB, name, child string, env ...string) *Process {
	t.Helper()
	c := ChildCommand(child, env...)
	c.Name = name
	return StartProcess(t, c)
}
