package main

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/orisun-io/orisun"
	"github.com/orisun-io/orisun/bench"
	"github.com/orisun-io/orisun/internal/testcert"
	"github.com/orisun-io/orisun/internal/testutil"
)

// TestMain runs the tests, or, when `orisun bench`'s api workload
// re-executes this test binary as its client process ("bench api-client"),
// the command as the orisun binary would.
func TestMain(m *testing.M) {
	if len(os.Args) > 2 && os.Args[1] == "bench" && os.Args[2] == bench.ClientArg {
		os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
	}
	testutil.Main(m)
}

func TestConfigFromEnvironment(t *testing.T) {
	t.Setenv("ORISUN_BOUNDARIES", "orders,payments")
	t.Setenv("ORISUN_POLL_INTERVAL", "250ms")
	t.Setenv("ORISUN_NATS_EVENT_STREAM_MAX_MSGS", "1000")
	t.Setenv("ORISUN_SQLITE_SYNCHRONOUS", "NORMAL")
	cfg, err := loadConfig()
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(cfg.Boundaries, []string{"orders", "payments"}) || cfg.PollInterval != 250*time.Millisecond ||
		cfg.EventStreamMaxMsgs != 1000 || cfg.SQLiteSynchronous != "NORMAL" {
		t.Fatalf("unexpected configuration: %+v", cfg)
	}
	if cfg.NATSPort != 4222 || cfg.DataDir != "./data" || cfg.EventStreamMaxAge != 5*time.Minute {
		t.Fatalf("defaults not applied: %+v", cfg)
	}
}

// TestConfigZeroMeansZero: where zero or empty means something, a
// variable set so keeps that meaning; loadConfig starts from the defaults,
// so only an unset variable takes the default.
func TestConfigZeroMeansZero(t *testing.T) {
	t.Setenv("ORISUN_HTTP_ADDR", "")
	t.Setenv("ORISUN_NATS_EVENT_STREAM_MAX_MSGS", "0")
	cfg, err := loadConfig()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.HTTPAddr != "" || cfg.HTTPEnabled() {
		t.Errorf("ORISUN_HTTP_ADDR= gives HTTPAddr %q (enabled %v), want no listener", cfg.HTTPAddr, cfg.HTTPEnabled())
	}
	if cfg.EventStreamMaxMsgs != 0 {
		t.Errorf("ORISUN_NATS_EVENT_STREAM_MAX_MSGS=0 gives %d, want 0 (no limit)", cfg.EventStreamMaxMsgs)
	}
	os.Unsetenv("ORISUN_HTTP_ADDR")
	os.Unsetenv("ORISUN_NATS_EVENT_STREAM_MAX_MSGS")
	cfg, err = loadConfig()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.HTTPAddr != orisun.HTTPAddrDefault || cfg.EventStreamMaxMsgs != orisun.Defaults().EventStreamMaxMsgs {
		t.Errorf("unset: HTTPAddr %q, EventStreamMaxMsgs %d; want the defaults %q, %d",
			cfg.HTTPAddr, cfg.EventStreamMaxMsgs, orisun.HTTPAddrDefault, orisun.Defaults().EventStreamMaxMsgs)
	}
}

// TestConfigAppendTxTimeoutFollowsLeaseTTL: unset, ORISUN_APPEND_TX_TIMEOUT
// follows ORISUN_LEASE_TTL as the README says (a quarter of it below 8s),
// so that a short lease TTL alone is not refused for a variable the
// operator never set (ORISUN_LEASE_TTL=2s was refused: "2s is not below
// half of ORISUN_LEASE_TTL"); set, it is taken as it is and checked.
func TestConfigAppendTxTimeoutFollowsLeaseTTL(t *testing.T) {
	t.Setenv("ORISUN_LEASE_TTL", "2s")
	cfg, err := loadConfig()
	if err != nil {
		t.Fatalf("ORISUN_LEASE_TTL=2s alone: %v", err)
	}
	// Left zero, as orisun.Defaults leaves it: the node fills it from the
	// lease TTL (500ms here; the root package's TestConfigWithDefaults).
	if cfg.AppendTxTimeout != 0 {
		t.Errorf("ORISUN_LEASE_TTL=2s: AppendTxTimeout %s, want it left to the node (0)", cfg.AppendTxTimeout)
	}
	t.Setenv("ORISUN_APPEND_TX_TIMEOUT", "2s")
	if _, err := loadConfig(); err == nil || !strings.Contains(err.Error(), "ORISUN_APPEND_TX_TIMEOUT") {
		t.Errorf("ORISUN_APPEND_TX_TIMEOUT=2s with ORISUN_LEASE_TTL=2s: %v, want it refused by name", err)
	}
}

// TestConfigErrorsNameTheVariable: every bad value is refused with the
// variable's name.
func TestConfigErrorsNameTheVariable(t *testing.T) {
	cases := map[string]string{
		"ORISUN_NATS_PORT":            "99999",
		"ORISUN_POLL_INTERVAL":        "soon",
		"ORISUN_BOUNDARIES":           "ok,Not.Valid",
		"ORISUN_SQLITE_SYNCHRONOUS":   "SOMETIMES",
		"ORISUN_PUBLISH_BATCH":        "0",
		"ORISUN_BACKEND":              "oracle",
		"ORISUN_LOG_FORMAT":           "xml",
		"ORISUN_NATS_MAX_PAYLOAD":     "10",
		"ORISUN_NATS_STREAM_REPLICAS": "3",
		"ORISUN_HTTP_ADDR":            "localhost",
		"ORISUN_STALL_THRESHOLD":      "1ns",
		"ORISUN_APPEND_GROUP_DELAY":   "1s",
		"ORISUN_APPEND_GROUP_MAX":     "0",
		"ORISUN_LEASE_TTL":            "50ms",
		"ORISUN_METRICS_BOUNDARIES":   "0",
	}
	for variable, value := range cases {
		t.Run(variable, func(t *testing.T) {
			t.Setenv(variable, value)
			_, err := loadConfig()
			if err == nil || !strings.Contains(err.Error(), variable) {
				t.Fatalf("%s=%s: got %v, want an error naming %s", variable, value, err, variable)
			}
		})
	}
}

// start runs `orisun serve` on dir (testutil.StartNode: a random NATS
// port and status listener); env adds or overrides variables.
func start(t *testing.T, dir string, env ...string) *testutil.Process {
	t.Helper()
	return testutil.StartNode(t, "orisun", append([]string{"ORISUN_DATA_DIR=" + dir, "ORISUN_LOG_FORMAT=text"}, env...)...)
}

// lineWait is how long a test waits for a log line of an orisun process.
const lineWait = 30 * time.Second

// TestServeStopsCleanlyOnSignal runs the real binary: it starts with no
// configuration but a data directory, a second process on the same
// directory is refused with a clear message, SIGTERM stops the first one
// cleanly (exit 0, lease released), and so does SIGINT a second one on the
// same directory.
func TestServeStopsCleanlyOnSignal(t *testing.T) {
	dir := t.TempDir()
	p := start(t, dir)
	// Either may come first: the publisher can lead before the node's
	// last start step logs "orisun started".
	testutil.Eventually(t, `"orisun started" and "publisher leading"`, lineWait, 10*time.Millisecond, func() bool {
		return p.Logged("orisun started") && p.Logged("publisher leading")
	})

	second := start(t, dir)
	line := second.WaitLine(t, "start failed", lineWait)
	if !strings.Contains(line, "locked") {
		t.Fatalf("second process on the same directory: %s", line)
	}
	if second.Wait().ExitCode() == 0 {
		t.Fatal("second process exited 0")
	}

	if err := p.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	p.WaitLine(t, "lease released", lineWait)
	p.WaitLine(t, "orisun stopped", lineWait)
	if code := p.Wait().ExitCode(); code != 0 {
		t.Fatalf("exit code %d after SIGTERM", code)
	}

	// Ctrl-C (SIGINT) stops it the same way, and the directory the first
	// process left serves again.
	p = start(t, dir)
	p.WaitLine(t, "publisher leading", lineWait)
	if err := p.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	p.WaitLine(t, "shutting down", lineWait)
	p.WaitLine(t, "lease released", lineWait)
	p.WaitLine(t, "orisun stopped", lineWait)
	if code := p.Wait().ExitCode(); code != 0 {
		t.Fatalf("exit code %d after SIGINT", code)
	}
}

// TestNATSAccessConfig: the authentication and TLS variables that go
// together, exclude each other, or point at unreadable files are refused
// with the variable that must change.
func TestNATSAccessConfig(t *testing.T) {
	dir := t.TempDir()
	certs := testcert.Write(t, dir)
	garbage := writeFile(t, dir, "garbage.pem", "not a certificate")
	missing := filepath.Join(dir, "missing.pem")
	checkEnvCases(t, []envCase{
		{"user and password", map[string]string{"ORISUN_NATS_USER": "app", "ORISUN_NATS_PASSWORD": "pw"}, ""},
		{"token", map[string]string{"ORISUN_NATS_TOKEN": "tok"}, ""},
		{"tls", map[string]string{"ORISUN_NATS_TLS_CERT": certs.Cert, "ORISUN_NATS_TLS_KEY": certs.Key}, ""},
		{"tls with client certificates", map[string]string{"ORISUN_NATS_TLS_CERT": certs.Cert, "ORISUN_NATS_TLS_KEY": certs.Key, "ORISUN_NATS_TLS_CA": certs.CA}, ""},
		{"user without password", map[string]string{"ORISUN_NATS_USER": "app"}, "ORISUN_NATS_PASSWORD"},
		{"password without user", map[string]string{"ORISUN_NATS_PASSWORD": "pw"}, "ORISUN_NATS_USER"},
		{"token with user", map[string]string{"ORISUN_NATS_TOKEN": "tok", "ORISUN_NATS_USER": "app", "ORISUN_NATS_PASSWORD": "pw"}, "ORISUN_NATS_TOKEN"},
		{"reserved user", map[string]string{"ORISUN_NATS_USER": "_orisun_internal", "ORISUN_NATS_PASSWORD": "pw"}, "ORISUN_NATS_USER"},
		{"cert without key", map[string]string{"ORISUN_NATS_TLS_CERT": certs.Cert}, "ORISUN_NATS_TLS_KEY"},
		{"key without cert", map[string]string{"ORISUN_NATS_TLS_KEY": certs.Key}, "ORISUN_NATS_TLS_CERT"},
		{"ca without cert", map[string]string{"ORISUN_NATS_TLS_CA": certs.CA}, "ORISUN_NATS_TLS_CA"},
		{"unreadable cert", map[string]string{"ORISUN_NATS_TLS_CERT": missing, "ORISUN_NATS_TLS_KEY": certs.Key}, "ORISUN_NATS_TLS_CERT"},
		{"unreadable key", map[string]string{"ORISUN_NATS_TLS_CERT": certs.Cert, "ORISUN_NATS_TLS_KEY": missing}, "ORISUN_NATS_TLS_KEY"},
		{"key of another certificate", map[string]string{"ORISUN_NATS_TLS_CERT": certs.Cert, "ORISUN_NATS_TLS_KEY": certs.ClientKey}, "ORISUN_NATS_TLS_CERT"},
		{"garbage cert", map[string]string{"ORISUN_NATS_TLS_CERT": garbage, "ORISUN_NATS_TLS_KEY": certs.Key}, "ORISUN_NATS_TLS_CERT"},
		{"unreadable ca", map[string]string{"ORISUN_NATS_TLS_CERT": certs.Cert, "ORISUN_NATS_TLS_KEY": certs.Key, "ORISUN_NATS_TLS_CA": missing}, "ORISUN_NATS_TLS_CA"},
		{"garbage ca", map[string]string{"ORISUN_NATS_TLS_CERT": certs.Cert, "ORISUN_NATS_TLS_KEY": certs.Key, "ORISUN_NATS_TLS_CA": garbage}, "ORISUN_NATS_TLS_CA"},
	})
}

// envCase is a set of variables and the variable loadConfig's error must
// name, "" for a valid set.
type envCase struct {
	name string
	env  map[string]string
	bad  string
}

// checkEnvCases runs loadConfig on each case's variables, in a subtest of
// its own: a valid set must load, a bad one fail with an error naming its
// variable ("VARIABLE: …").
func checkEnvCases(t *testing.T, cases []envCase) {
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for k, v := range c.env {
				t.Setenv(k, v)
			}
			_, err := loadConfig()
			switch {
			case c.bad == "" && err != nil:
				t.Fatalf("valid configuration refused: %v", err)
			case c.bad != "" && (err == nil || !strings.Contains(err.Error(), c.bad+":")):
				t.Fatalf("got %v, want an error naming %s", err, c.bad)
			}
		})
	}
}

// writeFile writes content to the file name in dir, readable by its owner
// only, and returns its path.
func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestUnknownCommand(t *testing.T) {
	var out, errw strings.Builder
	if code := run([]string{"frobnicate"}, &out, &errw); code != 2 || !strings.Contains(errw.String(), "unknown command") {
		t.Fatalf("code %d, stderr %q", code, errw.String())
	}
}

// TestPostgresConfigErrors: the PostgreSQL variables are checked at start-up
// with the variable's name, and the URL (which may hold a password) is never
// repeated; a URL orisun would silently override (pool_max_conns) is refused.
func TestPostgresConfigErrors(t *testing.T) {
	for _, c := range []struct {
		name, url, conns, bad string
	}{
		{"valid", "postgres://orisun:s3cret@db:5432/orisun?sslmode=disable", "", ""},
		{"valid keyword/value", "host=db user=orisun password=s3cret dbname=orisun", "", ""},
		{"missing", "", "", "ORISUN_PG_URL"},
		{"bad port", "postgres://orisun:s3cret@db:notaport/orisun", "", "ORISUN_PG_URL"},
		{"not postgres", "mysql://orisun:s3cret@db/orisun", "", "ORISUN_PG_URL"},
		{"pool size in the URL", "postgres://orisun:s3cret@db/orisun?pool_max_conns=50", "", "ORISUN_PG_MAX_CONNS"},
		{"pool size as a keyword", "host=db dbname=orisun pool_max_conns=50", "", "ORISUN_PG_MAX_CONNS"},
		{"the words in a password", "postgres://orisun:pool_max_conns@db/orisun", "", ""},
		{"pool of one", "postgres://db/orisun", "1", "ORISUN_PG_MAX_CONNS"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv("ORISUN_BACKEND", "postgres")
			t.Setenv("ORISUN_PG_URL", c.url)
			if c.conns != "" {
				t.Setenv("ORISUN_PG_MAX_CONNS", c.conns)
			}
			_, err := loadConfig()
			switch {
			case c.bad == "" && err != nil:
				t.Fatalf("ORISUN_PG_URL=%s: %v, want it accepted", c.url, err)
			case c.bad != "" && (err == nil || !strings.Contains(err.Error(), c.bad)):
				t.Fatalf("ORISUN_PG_URL=%s: got %v, want an error naming %s", c.url, err, c.bad)
			case err != nil && strings.Contains(err.Error(), "s3cret"):
				t.Fatalf("the error repeats the password: %v", err)
			}
		})
	}
}
