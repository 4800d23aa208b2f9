package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/orisun-io/orisun/internal/testutil"
)

// readmeSkips are the README commands this test does not run, by the start
// of the command, with why: each runs for minutes or is the test command
// itself.
var readmeSkips = []struct{ prefix, why string }{
	{"go test ", "a benchmark or fuzz run of minutes"},
	{"orisun bench", "minutes of load on a fresh store"},
	{"scripts/soak", "a soak of 20 minutes"},
}

// TestREADME follows README.md as a newcomer would, on a fresh copy of the
// repository's tracked files (git ls-files: what a clone holds, in the
// working tree's version): it reads every sh block of the README, in
// order, and runs each command with bash in the copy: the install (into a
// temporary GOBIN on PATH), the server (in the background, until SIGINT as
// Ctrl-C), every CLI example (each must exit 0; tail follows until it
// printed, then gets SIGINT), curl; another server's configuration example
// is checked to name only variables orisun reads; the test command must be
// there and executable; the commands that run for minutes are skipped,
// named in the log. The README's addresses 127.0.0.1:4222 and
// 127.0.0.1:8990 become free ports, set for the server and the clients
// alike. A command that stops working fails the test (issue 18: the README
// ran orisun status before any step installed it).
func TestREADME(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	clone := copyTracked(t, root)
	readme, err := os.ReadFile(filepath.Join(clone, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	cmds := shellCommands(string(readme))
	gobin := t.TempDir()
	natsPort, httpPort := testutil.FreePort(t), testutil.FreePort(t)
	natsAddr, httpAddr := "127.0.0.1:"+strconv.Itoa(natsPort), "127.0.0.1:"+strconv.Itoa(httpPort)
	env := append(withoutOrisunEnv(), "PATH="+gobin+string(os.PathListSeparator)+os.Getenv("PATH"),
		"ORISUN_NATS_PORT="+strconv.Itoa(natsPort), "ORISUN_HTTP_ADDR="+httpAddr, "ORISUN_URL=nats://"+natsAddr)
	addrs := strings.NewReplacer("127.0.0.1:4222", natsAddr, "127.0.0.1:8990", httpAddr)

	var server *testutil.Process
	installed, tested := false, false
	for _, raw := range cmds {
		cmd := addrs.Replace(raw)
		assigns, rest := splitAssignments(stripComment(cmd))
		switch {
		case rest == "":
			continue
		case strings.HasPrefix(rest, "go install ./cmd/orisun") || strings.HasPrefix(rest, "go build ") && strings.Contains(rest, "./cmd/orisun"):
			runReadmeCommand(t, clone, append(env, "GOBIN="+gobin), cmd, 5*time.Minute)
			if _, err := exec.LookPath(filepath.Join(gobin, "orisun")); err != nil {
				t.Fatalf("README: %q installed no orisun into GOBIN: %v", cmd, err)
			}
			installed = true
		case rest == "orisun" || rest == "orisun serve" || rest == "go run ./cmd/orisun":
			if !installed && rest != "go run ./cmd/orisun" {
				t.Fatalf("README: %q runs orisun before any command installed it", cmd)
			}
			if server != nil || len(assigns) > 0 {
				// Another server's configuration: every variable it sets
				// must be one orisun reads.
				for _, a := range assigns {
					if name, _, _ := strings.Cut(a, "="); !isVariable(name) {
						t.Errorf("README: %q sets %s, which is not a variable of orisun", cmd, name)
					}
				}
				t.Logf("README: %q: a configuration example; its variables are orisun's", cmd)
				continue
			}
			server = testutil.StartProcess(t, testutil.Command{Name: "orisun (README)", Path: filepath.Join(gobin, "orisun"), Dir: clone, Env: env})
			server.WaitLine(t, "orisun started", lineWait)
			t.Logf("README: %q: started", cmd)
		case rest == "scripts/test" || strings.HasPrefix(rest, "scripts/test "):
			if fi, err := os.Stat(filepath.Join(clone, "scripts/test")); err != nil || fi.Mode()&0o111 == 0 {
				t.Errorf("README: the test command %q is not an executable file in the repository (%v)", cmd, err)
			}
			tested = true
			t.Logf("README: %q: the test command (this test is part of it); it is there and executable", cmd)
		case skipped(rest) != "":
			t.Logf("README: %q: not run here: %s", cmd, skipped(rest))
		case strings.HasPrefix(rest, "orisun tail "):
			if server == nil {
				t.Fatalf("README: %q comes before orisun runs", cmd)
			}
			followReadmeCommand(t, clone, env, cmd)
		case strings.HasPrefix(rest, "curl ") && !haveCommand("curl"):
			t.Logf("README: %q: not run: no curl on this machine", cmd)
		default:
			if server == nil && strings.HasPrefix(rest, "orisun ") {
				t.Fatalf("README: %q comes before orisun runs", cmd)
			}
			runReadmeCommand(t, clone, env, cmd, 2*time.Minute)
		}
	}
	if !installed || server == nil || !tested {
		t.Fatalf("README: want a command that installs orisun (%v), one that runs it (%v) and the test command (%v)", installed, server != nil, tested)
	}
	if err := server.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	server.WaitLine(t, "orisun stopped", lineWait)
	if code := server.Wait().ExitCode(); code != 0 {
		t.Fatalf("README: orisun exited %d after Ctrl-C (SIGINT), want 0", code)
	}
}

// copyTracked copies the files git tracks under root, as they are in the
// working tree, into a new directory: what a fresh clone holds.
func copyTracked(t *testing.T, root string) string {
	t.Helper()
	out, err := exec.Command("git", "-C", root, "ls-files", "-z").Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	dst := t.TempDir()
	for _, name := range strings.Split(strings.TrimRight(string(out), "\x00"), "\x00") {
		src := filepath.Join(root, name)
		fi, err := os.Lstat(src)
		if errors.Is(err, os.ErrNotExist) {
			continue // deleted in the working tree, not yet in git
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Join(dst, filepath.Dir(name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if fi.Mode()&os.ModeSymlink != 0 {
			target, err := os.Readlink(src)
			if err == nil {
				err = os.Symlink(target, filepath.Join(dst, name))
			}
			if err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := copyFile(src, filepath.Join(dst, name), fi.Mode().Perm()); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

func copyFile(src, dst string, perm os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, perm)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// shellCommands returns the commands of the ```sh blocks of a Markdown
// text, in order, with continued lines (a trailing backslash) joined.
func shellCommands(md string) []string {
	var cmds []string
	in := false
	cont := ""
	for _, line := range strings.Split(md, "\n") {
		switch {
		case !in && strings.TrimSpace(line) == "```sh":
			in = true
			continue
		case in && strings.TrimSpace(line) == "```":
			in = false
			continue
		case !in:
			continue
		}
		if l, ok := strings.CutSuffix(line, "\\"); ok {
			cont += l + " "
			continue
		}
		cmd := strings.TrimSpace(cont + line)
		cont = ""
		if cmd != "" && !strings.HasPrefix(cmd, "#") {
			cmds = append(cmds, cmd)
		}
	}
	return cmds
}

// stripComment drops a shell comment (a # after a blank, outside quotes).
func stripComment(cmd string) string {
	var quote byte
	for i := 0; i < len(cmd); i++ {
		c := cmd[i]
		switch {
		case quote != 0:
			if c == quote {
				quote = 0
			}
		case c == '\'' || c == '"':
			quote = c
		case c == '#' && (i == 0 || cmd[i-1] == ' ' || cmd[i-1] == '\t'):
			return strings.TrimSpace(cmd[:i])
		}
	}
	return strings.TrimSpace(cmd)
}

var assignment = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*=\S*$`)

// splitAssignments separates the variable assignments before a command
// from the command.
func splitAssignments(cmd string) (assigns []string, rest string) {
	f := strings.Fields(cmd)
	i := 0
	for i < len(f) && assignment.MatchString(f[i]) {
		i++
	}
	return f[:i], strings.Join(f[i:], " ")
}

func isVariable(name string) bool {
	for _, v := range variables() {
		if v.Name == name {
			return true
		}
	}
	return false
}

func skipped(cmd string) string {
	for _, s := range readmeSkips {
		if strings.HasPrefix(cmd, s.prefix) {
			return s.why
		}
	}
	return ""
}

func haveCommand(name string) bool {
	_, err := exec.LookPath(name)
	return err == nil
}

// withoutOrisunEnv is this process's environment less ORISUN_* (but the
// test suite's ORISUN_TEST_*) and NATS_URL: the README's commands run as
// on a newcomer's machine.
func withoutOrisunEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "ORISUN_") && !strings.HasPrefix(kv, "ORISUN_TEST_") || strings.HasPrefix(kv, "NATS_") {
			continue
		}
		env = append(env, kv)
	}
	return env
}

// runReadmeCommand runs one command line with bash in dir; it must exit 0.
func runReadmeCommand(t *testing.T, dir string, env []string, cmd string, timeout time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	c := exec.CommandContext(ctx, "bash", "-c", cmd)
	c.Dir, c.Env = dir, env
	var out bytes.Buffer
	c.Stdout, c.Stderr = &out, &out
	err := c.Run()
	t.Logf("README: %q:\n%s", cmd, strings.TrimRight(out.String(), "\n"))
	if err != nil {
		t.Fatalf("README: %q failed: %v\n%s", cmd, err, out.String())
	}
}

// followReadmeCommand runs a command that follows until Ctrl-C: it must
// print a line, then end with exit 0 on SIGINT.
func followReadmeCommand(t *testing.T, dir string, env []string, cmd string) {
	t.Helper()
	p := testutil.StartProcess(t, testutil.Command{Name: "README tail", Path: "bash", Args: []string{"-c", "exec " + stripComment(cmd)}, Dir: dir, Env: env})
	line, ok := p.NextLine(t, lineWait)
	if !ok {
		t.Fatalf("README: %q printed nothing within %s and ended: %q", cmd, lineWait, p.Lines())
	}
	if err := p.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if code := p.Wait().ExitCode(); code != 0 {
		t.Fatalf("README: %q exited %d after Ctrl-C (SIGINT): %q", cmd, code, p.Lines())
	}
	t.Logf("README: %q printed %q, then stopped on Ctrl-C", cmd, line)
}
