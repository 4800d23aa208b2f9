package testutil

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// Binary is a main package for Build.
type Binary struct {
	// Pkg is the main package's import path.
	Pkg string
	// Module is the directory, relative to orisun's module root, of the
	// module Pkg is resolved in: "" for orisun's own module (which also
	// reaches its dependencies, e.g. github.com/nats-io/nats-server/v2),
	// "tools/natscli" for the nats CLI, whose module keeps it out of
	// orisun's go.mod.
	Module string
	// Tags are build tags (-tags), e.g. faultinject.
	Tags []string
}

// OrisunPkg is the import path of the orisun command.
const OrisunPkg = "github.com/orisun-io/orisun/cmd/orisun"

// OrisunBinary returns the orisun command built with tags: see Build.
func OrisunBinary(t testing.TB, tags ...string) string {
	t.Helper()
	return Build(t, Binary{Pkg: OrisunPkg, Tags: tags})
}

var builds struct {
	sync.Mutex
	dir  string // every binary of this test binary; Main removes it
	done map[string]func() (string, error)
}

// Build returns the path of b built with go build. It builds each Binary
// once per test binary, however many tests (parallel or not) ask, into a
// temporary directory that Main removes after the tests. A failed build
// fails every test that asks for the binary, with go build's output.
func Build(t testing.TB, b Binary) string {
	t.Helper()
	key := b.Module + "\x00" + b.Pkg + "\x00" + strings.Join(b.Tags, ",")
	builds.Lock()
	if builds.done == nil {
		builds.done = map[string]func() (string, error){}
	}
	build, ok := builds.done[key]
	if !ok {
		n := len(builds.done)
		build = sync.OnceValues(func() (string, error) { return goBuild(b, n) })
		builds.done[key] = build
	}
	builds.Unlock()
	bin, err := build()
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

func goBuild(b Binary, n int) (string, error) {
	root, err := moduleRoot()
	if err != nil {
		return "", err
	}
	builds.Lock()
	if builds.dir == "" {
		builds.dir, err = os.MkdirTemp("", "orisun-testbin-")
	}
	dir := builds.dir
	builds.Unlock()
	if err != nil {
		return "", err
	}
	// One directory per binary: the name stays the command's (orisun,
	// nats-server, nats), as logs and error messages show it.
	bin := filepath.Join(dir, fmt.Sprint(n), filepath.Base(strings.TrimSuffix(b.Pkg, "/v2")))
	args := []string{"build", "-o", bin}
	if len(b.Tags) > 0 {
		args = append(args, "-tags", strings.Join(b.Tags, ","))
	}
	cmd := exec.Command("go", append(args, b.Pkg)...)
	cmd.Dir = filepath.Join(root, b.Module)
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("testutil: go %s (in %s): %v\n%s", strings.Join(cmd.Args[1:], " "), cmd.Dir, err, out)
	}
	return bin, nil
}

// removeBuilt removes what Build built.
func removeBuilt() {
	builds.Lock()
	defer builds.Unlock()
	if builds.dir != "" {
		os.RemoveAll(builds.dir)
		builds.dir = ""
	}
}

// moduleRoot is the directory of orisun's go.mod, asked of the go command
// from the test's working directory (its package's directory).
var moduleRoot = sync.OnceValues(func() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("testutil: go env GOMOD: %v", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", fmt.Errorf("testutil: the tests do not run inside orisun's module (go env GOMOD is %q)", gomod)
	}
	return filepath.Dir(gomod), nil
})
