package testutil

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// NATSCLI is the nats CLI of tools/natscli (natscli v0.5.0, a module of
// its own so that it stays out of orisun's go.mod).
var NATSCLI = Binary{Pkg: "github.com/nats-io/natscli/nats", Module: "tools/natscli"}

// RunNATSCLI runs the nats CLI (NATSCLI, built once) against url with
// args, for at most 30 seconds, with a home of its own (no saved contexts
// of the machine interfere), and returns its standard output and error
// and how it ended. Its request timeout is short (3 s) because `nats micro
// ls` waits all of it for answers.
func RunNATSCLI(t testing.TB, url string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	bin := Build(t, NATSCLI) // before the run's 30 s: a first build takes longer
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, append([]string{"--server", url, "--timeout", "3s"}, args...)...)
	home := t.TempDir()
	cmd.Env = append(os.Environ(), "HOME="+home, "XDG_CONFIG_HOME="+home)
	var errb strings.Builder
	cmd.Stderr = &errb
	out, err := cmd.Output()
	return string(out), errb.String(), err
}
