package pgtest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/orisun-io/orisun/internal/testutil"
)

// Server is a PostgreSQL server of one test's own, for tests that crash or
// restart the server: they must not disturb the shared server that other
// test packages use at the same time.
type Server struct {
	URL  string
	bin  string
	data string
	user string
	opts string
}

// StartServer starts a throwaway PostgreSQL on a free loopback port with
// the binaries scripts/test found (ORISUN_TEST_PG_BIN, run as
// ORISUN_TEST_PG_OSUSER), and stops and removes it when the test ends. It
// fails the test when those variables are not set. Each of settings
// ("name=value") is passed to the server as -c name=value.
func StartServer(t testing.TB, settings ...string) *Server {
	t.Helper()
	bin := os.Getenv(EnvBin)
	if bin == "" {
		t.Fatalf("%s is not set: this test starts a PostgreSQL server of its own with the binaries "+
			"scripts/test finds; run the tests with scripts/test", EnvBin)
	}
	s := &Server{bin: bin, user: os.Getenv(EnvOSUser)}
	dir, err := os.MkdirTemp("", "orisun-pg-own-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if s.user != "" {
		if out, err := exec.Command("chown", "-R", s.user, dir).CombinedOutput(); err != nil {
			t.Fatalf("chown %s: %v\n%s", dir, err, out)
		}
	}
	s.data = filepath.Join(dir, "data")
	s.run(t, "initdb", "-D", s.data, "-U", "postgres", "--auth=trust", "--encoding=UTF8", "--locale=C", "--no-sync")
	port := testutil.FreePort(t)
	s.opts = fmt.Sprintf("-c listen_addresses=127.0.0.1 -p %d -k %s", port, dir)
	for _, kv := range settings {
		s.opts += " -c " + kv
	}
	s.Start(t)
	t.Cleanup(func() {
		_ = s.command("pg_ctl", "-D", s.data, "-m", "immediate", "-w", "-t", "30", "stop").Run()
	})
	s.URL = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port)
	return s
}

// CrashRestart stops the server at once, without a checkpoint (as a crash
// would), and starts it again.
func (s *Server) CrashRestart(t testing.TB) {
	t.Helper()
	s.run(t, "pg_ctl", "-D", s.data, "-l", filepath.Join(s.data, "server.log"), "-m", "immediate", "-w", "-t", "60", "restart")
}

// Stop shuts the server down (fast mode: sessions are ended, committed data
// stays), so that tests can see the store unreachable.
func (s *Server) Stop(t testing.TB) {
	t.Helper()
	s.run(t, "pg_ctl", "-D", s.data, "-m", "fast", "-w", "-t", "60", "stop")
}

// Start starts the server (again) on its port.
func (s *Server) Start(t testing.TB) {
	t.Helper()
	s.run(t, "pg_ctl", "-D", s.data, "-l", filepath.Join(s.data, "server.log"), "-w", "-t", "60", "-o", s.opts, "start")
}

func (s *Server) command(name string, args ...string) *exec.Cmd {
	path := filepath.Join(s.bin, name)
	if s.user != "" {
		return exec.Command("runuser", append([]string{"-u", s.user, "--", path}, args...)...)
	}
	return exec.Command(path, args...)
}

func (s *Server) run(t testing.TB, name string, args ...string) {
	t.Helper()
	if out, err := s.command(name, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", name, err, out)
	}
}
