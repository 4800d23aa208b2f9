package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/orisun-io/orisun/bench"
)

// TestBenchCommand runs a tiny `orisun bench` on SQLite through the
// command's flags: the JSON report parses and its checks (events out =
// events in) hold, and --report prints the saved report as text. Nothing
// is timed. (Both backends: TestSmoke in package bench.)
func TestBenchCommand(t *testing.T) {
	tiny := []string{"bench", "--quiet", "--events", "500", "--append-duration", "100ms", "--duration", "300ms",
		"--rates", "50", "--callers", "2", "--scale-boundaries", "5", "--scale-busy", "1", "--scale-rate", "10",
		"--scale-idle", "100ms"}
	var stdout, stderr bytes.Buffer
	memprofile := filepath.Join(t.TempDir(), "bench.mem")
	rows := filepath.Join(t.TempDir(), "rows") // made by the run
	if code := run(append(tiny, "--json", "--memprofile", memprofile, "--row-cpuprofiles", rows), &stdout, &stderr); code != 0 {
		t.Fatalf("orisun bench --json: exit %d\n%s", code, stderr.String())
	}
	// A CPU profile of each append row of the api workload (its content:
	// TestAPIWorkload in package bench).
	if b, err := os.ReadFile(filepath.Join(rows, "api-1.prof")); err != nil || len(b) < 2 || b[0] != 0x1f || b[1] != 0x8b {
		t.Errorf("--row-cpuprofiles wrote %d bytes (%v) for the first api row, want a gzipped pprof profile", len(b), err)
	}
	// The allocation profile is written at the end: a gzipped pprof
	// profile.
	if b, err := os.ReadFile(memprofile); err != nil || len(b) < 100 || b[0] != 0x1f || b[1] != 0x8b {
		t.Errorf("--memprofile wrote %d bytes (%v), want a gzipped pprof profile", len(b), err)
	}
	var rep bench.Report
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("the JSON report does not parse: %v\n%s", err, stdout.String())
	}
	// Before anything, the run says what it will do and cost.
	if !strings.Contains(stderr.String(), "orisun bench: SQLite in a temporary directory") ||
		!strings.Contains(stderr.String(), "a backlog of 500 events of 1024 bytes, about 0.0 GB of disk") {
		t.Errorf("no plan printed at the start: %q", stderr.String())
	}
	// A run that ends by itself was not interrupted, and says nothing of
	// the kind.
	if strings.Contains(stderr.String(), "interrupted") {
		t.Errorf("a run that completed says it was interrupted: %q", stderr.String())
	}
	if rep.Backend != "sqlite" || len(rep.Rows) == 0 || len(rep.Checks) == 0 {
		t.Fatalf("report: backend %q, %d rows, %d checks", rep.Backend, len(rep.Rows), len(rep.Checks))
	}
	for _, c := range rep.Checks {
		if !c.OK {
			t.Errorf("check %q failed: want %d, got %d", c.Name, c.Want, c.Got)
		}
	}
	saved := filepath.Join(t.TempDir(), "report.json")
	if err := os.WriteFile(saved, stdout.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	stdout.Reset()
	if code := run([]string{"bench", "--report", saved}, &stdout, &stderr); code != 0 {
		t.Fatalf("orisun bench --report: exit %d\n%s", code, stderr.String())
	}
	for _, want := range []string{"raw_publish", "backlog to JetStream", "subscriber from 0", "50 events/s", "checks:"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("the text report lacks %q:\n%s", want, stdout.String())
		}
	}
}

// TestBenchCommandErrors: bad flags exit 2 with a message naming the flag.
func TestBenchCommandErrors(t *testing.T) {
	tmp := t.TempDir()
	used := filepath.Join(tmp, "used")
	if err := os.MkdirAll(used, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(used, "api-1.prof"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--backend", "oracle"}, "backend"},
		{[]string{"--backend", "postgres", "--pg-url", ""}, "pg-url"},
		{[]string{"--rates", "1000,fast"}, "rates"},
		{[]string{"--callers", "0"}, "callers"},
		{[]string{"--api-boundaries", "1001"}, "api-boundaries: 1001 is outside 1–1000"},
		{[]string{"--outbox-rates", "0"}, "outbox-rates"},
		{[]string{"--events", "-5"}, "events"},
		{[]string{"--only", "relay,teleport"}, "only"},
		{[]string{"--log-level", "loud"}, "log-level"},
		{[]string{"--memprofile", "/nonexistent-dir/bench.mem"}, "memprofile"},
		{[]string{"extra"}, "unexpected argument"},
		{[]string{"--row-cpuprofiles", filepath.Join(tmp, "rows"), "--cpuprofile", filepath.Join(tmp, "run.prof")}, "--row-cpuprofiles and --cpuprofile"},
		{[]string{"--row-cpuprofiles", "/dev/null/rows"}, "row-cpuprofiles: "},
		{[]string{"--row-cpuprofiles", filepath.Join(tmp, "rows"), "--only", "relay"}, "row-cpuprofiles: the api workload is not among --only relay"},
		{[]string{"--row-cpuprofiles", used}, "row-cpuprofiles: " + used + " is not empty"},
	} {
		t.Setenv("ORISUN_PG_URL", "")
		var stdout, stderr bytes.Buffer
		code := run(append([]string{"bench"}, tc.args...), &stdout, &stderr)
		if code != 2 || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("orisun bench %v: exit %d, stderr %q; want exit 2 naming %s", tc.args, code, stderr.String(), tc.want)
		}
	}
}

// TestBenchPGURLNotFromEnv: the bench never loads the node's own store:
// ORISUN_PG_URL set, --backend postgres without --pg-url is refused with
// exit 2 naming pg-url, before anything is created.
func TestBenchPGURLNotFromEnv(t *testing.T) {
	t.Setenv("ORISUN_PG_URL", "postgres://postgres@127.0.0.1:1/production")
	var stdout, stderr bytes.Buffer
	code := run([]string{"bench", "--backend", "postgres"}, &stdout, &stderr)
	if code != 2 || !strings.Contains(stderr.String(), "pg-url: the postgres backend needs an explicit --pg-url") {
		t.Fatalf("orisun bench --backend postgres with ORISUN_PG_URL set: exit %d, stderr %q; want exit 2 asking for --pg-url", code, stderr.String())
	}
}
