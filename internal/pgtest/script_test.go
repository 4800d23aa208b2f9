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
// ORISUN_TEST_PG_URL is set, so the script starts no server.
//
// The progress printer is off (noProgress): the stand-in builds nothing.
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
				"ORISUN_FAKE_GO_ARGS="+out, EnvURL+"=postgres://unused@127.0.0.1:1/postgres", noProgress)
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
			"ORISUN_FAKE_GO_ARGS="+out, EnvURL+"=postgres://unused@127.0.0.1:1/postgres", noProgress)
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

// noProgress turns scripts/test's progress printer off: it would build
// scripts/testprogress with the stand-in go command, which builds nothing.
const noProgress = "ORISUN_TEST_PROGRESS=0"
