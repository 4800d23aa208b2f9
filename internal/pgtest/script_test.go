package pgtest

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestScriptPackagePatterns: scripts/test adds ./... only when no package
// is given. "." (the root package, as in `scripts/test -bench X .`) is a
// package: taking it for a flag made the script test every package besides.
// The go command is a stand-in that records its arguments, and
// ORISUN_TEST_PG_URL is set, so the script starts no server;
// ORISUN_TEST_PROGRESS=0, so that it runs go test itself rather than the
// progress printer the stand-in does not build.
func TestScriptPackagePatterns(t *testing.T) {
	script, err := filepath.Abs("../../scripts/test")
	if err != nil {
		t.Fatal(err)
	}
	bin := t.TempDir()
	fake := "#!/bin/sh\nprintf '%s\\n' \"$@\" > \"$ORISUN_FAKE_GO_ARGS\"\n"
	if err := os.WriteFile(filepath.Join(bin, "go"), []byte(fake), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		all  bool // ./... must be added
	}{
		{[]string{"-run", "TestX"}, true},
		{[]string{"-run", "TestX", "."}, false},
		{[]string{"-bench", "B", "-run", "^$", "."}, false},
		{[]string{"-run", "TestX", "./backend/postgres"}, false},
		{[]string{"github.com/orisun-io/orisun/lease"}, false},
		// "." as a flag's value is no package.
		{[]string{"-run", ".", "-bench", "."}, true},
		{[]string{"-v", "-run", "."}, true},
		{[]string{"-timeout", "5m", "-run", "TestX", "."}, false},
	} {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "args")
			cmd := exec.Command(script, c.args...)
			cmd.Env = append(os.Environ(), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"),
				"ORISUN_FAKE_GO_ARGS="+out, "ORISUN_TEST_PROGRESS=0", EnvURL+"=postgres://unused@127.0.0.1:1/postgres")
			if b, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("scripts/test %v: %v\n%s", c.args, err, b)
			}
			b, err := os.ReadFile(out)
			if err != nil {
				t.Fatal(err)
			}
			got := strings.Split(strings.TrimSpace(string(b)), "\n")
			if slices.Contains(got, "./...") != c.all {
				t.Fatalf("scripts/test %v ran go %v; ./... added: %v, want %v", c.args, got, !c.all, c.all)
			}
			for _, a := range c.args {
				if !slices.Contains(got, a) {
					t.Fatalf("scripts/test %v ran go %v, without %q", c.args, got, a)
				}
			}
		})
	}
	// After -args the arguments are the test binary's: ./... must come
	// before it, or the binary would get it as an argument.
	t.Run("args", func(t *testing.T) {
		out := filepath.Join(t.TempDir(), "args")
		cmd := exec.Command(script, "-run", "TestSoak", "-args", "-soak", "1m")
		cmd.Env = append(os.Environ(), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"),
			"ORISUN_FAKE_GO_ARGS="+out, "ORISUN_TEST_PROGRESS=0", EnvURL+"=postgres://unused@127.0.0.1:1/postgres")
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("scripts/test: %v\n%s", err, b)
		}
		b, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		got := strings.Split(strings.TrimSpace(string(b)), "\n")
		all, argsAt := slices.Index(got, "./..."), slices.Index(got, "-args")
		if all < 0 || argsAt < 0 || all > argsAt || !slices.Equal(got[argsAt:], []string{"-args", "-soak", "1m"}) {
			t.Fatalf("scripts/test -run TestSoak -args -soak 1m ran go %v; want ./... before -args, and -args -soak 1m last", got)
		}
	})
}

// TestCIRunSetsCI: .ci/run tells the tests they run in CI (CI=true, unless
// the runner set CI itself), so that the full-disk tests fail rather than
// skip where they cannot mount a tmpfs, and scripts/test may install
// PostgreSQL. The go, gofmt and staticcheck commands are stand-ins; the
// go stand-in records CI as `go test` sees it.
func TestCIRunSetsCI(t *testing.T) {
	script, err := filepath.Abs("../../.ci/run")
	if err != nil {
		t.Fatal(err)
	}
	bin := t.TempDir()
	gopath := t.TempDir()
	fakeGo := "#!/bin/sh\ncase \"$1\" in\nenv) echo \"$ORISUN_FAKE_GOPATH\" ;;\n" +
		"test) printf '%s' \"${CI-unset}\" > \"$ORISUN_FAKE_CI\" ;;\nesac\nexit 0\n"
	for name, text := range map[string]string{"go": fakeGo, "gofmt": "#!/bin/sh\nexit 0\n"} {
		if err := os.WriteFile(filepath.Join(bin, name), []byte(text), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(filepath.Join(gopath, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(gopath, "bin", "staticcheck"), []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ ci, want string }{{"", "true"}, {"github", "github"}} {
		out := filepath.Join(t.TempDir(), "ci")
		env := []string{"PATH=" + bin + string(os.PathListSeparator) + os.Getenv("PATH"),
			"ORISUN_FAKE_GOPATH=" + gopath, "ORISUN_FAKE_CI=" + out, "ORISUN_TEST_PROGRESS=0",
			EnvURL + "=postgres://unused@127.0.0.1:1/postgres"}
		for _, kv := range os.Environ() {
			if !strings.HasPrefix(kv, "CI=") && !strings.HasPrefix(kv, "PATH=") {
				env = append(env, kv)
			}
		}
		if c.ci != "" {
			env = append(env, "CI="+c.ci)
		}
		cmd := exec.Command(script)
		cmd.Env = env
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf(".ci/run (CI=%q): %v\n%s", c.ci, err, b)
		}
		got, err := os.ReadFile(out)
		if err != nil {
			t.Fatalf(".ci/run (CI=%q) never ran go test: %v", c.ci, err)
		}
		if string(got) != c.want {
			t.Fatalf(".ci/run with CI=%q ran the tests with CI=%q, want %q", c.ci, got, c.want)
		}
	}
}
