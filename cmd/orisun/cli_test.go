package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/orisun-io/orisun"
	"github.com/orisun-io/orisun/api"
	"github.com/orisun-io/orisun/event"
	"github.com/orisun-io/orisun/internal/testutil"
)

// serveNode runs `orisun serve` on a temporary directory and returns its
// NATS URL, read from its start-up log line.
func serveNode(t *testing.T, env ...string) string {
	t.Helper()
	p := start(t, t.TempDir(), env...)
	line := p.WaitLine(t, "orisun started", lineWait)
	m := regexp.MustCompile(`nats_url=(\S+)`).FindStringSubmatch(line)
	if m == nil {
		t.Fatalf("no nats_url in %q", line)
	}
	return m[1]
}

func cli(t *testing.T, stdinText string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errw strings.Builder
	stdin = strings.NewReader(stdinText)
	defer func() { stdin = os.Stdin }()
	code = run(args, &out, &errw)
	return code, out.String(), errw.String()
}

// TestCLIAgainstRunningNode: append (flags and JSON lines), read (human
// and --json), boundaries (list and --create) and status against a real
// orisun process, with the URL from --server and from ORISUN_URL.
func TestCLIAgainstRunningNode(t *testing.T) {
	url := serveNode(t)
	code, out, errs := cli(t, "", "append", "default", "--server", url, "--type", "order.placed", "--data", `{"order":1}`,
		"--tags", "order:1,vip", "--id", "0190b0a0-0000-7000-8000-00000000000a")
	if code != 0 || !strings.Contains(out, "appended positions 1–1") {
		t.Fatalf("append: %d %q %q", code, out, errs)
	}
	t.Setenv("ORISUN_URL", url)
	lines := `{"type":"order.paid","data":{"order":1}}` + "\n\n" + `{"type":"order.shipped","data":{"order":1},"metadata":{"by":"cli"}}` + "\n"
	code, out, errs = cli(t, lines, "append", "default", "--json")
	var res event.AppendResult
	if code != 0 || json.Unmarshal([]byte(out), &res) != nil || res.First != 2 || res.Last != 3 {
		t.Fatalf("append from stdin: %d %q %q", code, out, errs)
	}

	code, out, errs = cli(t, "", "read", "default", "--after", "0", "--limit", "10")
	got := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(got) != 3 {
		t.Fatalf("read: %d %q %q", code, out, errs)
	}
	f := strings.Split(got[0], "\t")
	if len(f) != 5 || f[0] != "1" || f[1] != "order.placed" || f[2] != "0190b0a0-0000-7000-8000-00000000000a" || f[4] != `{"order":1}` {
		t.Fatalf("human line %q", got[0])
	}
	if _, err := time.Parse(time.RFC3339Nano, f[3]); err != nil {
		t.Fatalf("time %q: %v", f[3], err)
	}
	code, out, _ = cli(t, "", "read", "--after", "2", "default", "--json")
	var e event.Event
	if code != 0 || json.Unmarshal([]byte(out), &e) != nil || e.Position != 3 || string(e.Metadata) != `{"by":"cli"}` {
		t.Fatalf("read --json: %d %q", code, out)
	}

	// Queries and a decision: read by type, latest by tag, and an append
	// under "nothing about order 1 after the head I saw".
	code, out, _ = cli(t, "", "read", "default", "--query-types", "order.paid,order.shipped", "--json")
	if lines := strings.Split(strings.TrimSpace(out), "\n"); code != 0 || len(lines) != 2 || !strings.Contains(lines[0], `"order.paid"`) {
		t.Fatalf("read --query-types: %d %q", code, out)
	}
	// Newest first: from the head, before a position, by a query.
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"--backwards"}, []string{"3", "2", "1"}},
		{[]string{"--backwards", "--limit", "1"}, []string{"3"}},
		{[]string{"--backwards", "--before", "3"}, []string{"2", "1"}},
		{[]string{"--backwards", "--before", "1"}, nil},
		{[]string{"--backwards", "--query-types", "order.placed,order.shipped"}, []string{"3", "1"}},
	} {
		code, out, errs = cli(t, "", append([]string{"read", "default"}, c.args...)...)
		var got []string
		for line := range strings.Lines(out) {
			got = append(got, strings.SplitN(line, "\t", 2)[0])
		}
		if code != 0 || !slices.Equal(got, c.want) {
			t.Fatalf("read %v: %d %q %q; want positions %v", c.args, code, out, errs, c.want)
		}
	}
	code, _, errs = cli(t, "", "read", "default", "--backwards", "--after", "2")
	if code != 2 || !strings.Contains(errs, "--after 2 is for a forward read") {
		t.Fatalf("read --backwards --after 2: %d %q", code, errs)
	}
	code, _, errs = cli(t, "", "read", "default", "--before", "2")
	if code != 2 || !strings.Contains(errs, "--before 2 is for a backward read: add --backwards") {
		t.Fatalf("read --before 2: %d %q", code, errs)
	}
	code, out, _ = cli(t, "", "latest", "default", "--query-tags", "order:1,vip")
	if code != 0 || !strings.HasPrefix(out, "head 3\tepoch ") || !strings.Contains(out, "\n1\torder.placed\t") {
		t.Fatalf("latest --query-tags: %d %q", code, out)
	}
	code, out, _ = cli(t, "", "latest", "default", "--query-tags", "nosuch", "--json")
	var l event.Latest
	if code != 0 || json.Unmarshal([]byte(out), &l) != nil || l.Head != 3 || l.Event != nil {
		t.Fatalf("latest --json without a match: %d %q", code, out)
	}
	code, out, errs = cli(t, "", "append", "default", "--type", "order.cancelled", "--data", `{"order":1}`, "--tags", "order:1",
		"--if-none-after", "1", "--query-tags", "order:1")
	if code != 0 || !strings.Contains(out, "appended positions 4–4") {
		t.Fatalf("append with a holding condition: %d %q %q", code, out, errs)
	}
	code, _, errs = cli(t, "", "append", "default", "--type", "order.cancelled", "--data", `{"order":1}`, "--tags", "order:1",
		"--if-none-after", "1", "--query-tags", "order:1")
	if code != exitConflict || !strings.Contains(errs, "orisun append: conflict: ") || !strings.Contains(errs, "position 4") ||
		strings.Count(errs, "conflict") != 1 || strings.Contains(errs, "sqlite") || strings.Contains(errs, "append to") {
		t.Fatalf("append with a failing condition: %d %q; want exit 4 and one conflict: prefix, no store or operation", code, errs)
	}
	code, _, errs = cli(t, "", "append", "default", "--type", "a", "--data", "1", "--query-tags", "order:1")
	if code != 2 || !strings.Contains(errs, "--if-none-after") {
		t.Fatalf("a query without --if-none-after: %d %q", code, errs)
	}
	code, _, errs = cli(t, "", "append", "default", "--type", "a", "--data", "1", "--if-none-after", "-3")
	if code != 2 || !strings.Contains(errs, "if-none-after") {
		t.Fatalf("a negative --if-none-after: %d %q", code, errs)
	}
	// No query: any event after the position fails the condition.
	code, _, errs = cli(t, "", "append", "default", "--type", "a", "--data", "1", "--if-none-after", "3")
	if code != exitConflict || !strings.Contains(errs, "conflict") {
		t.Fatalf("--if-none-after 3 without a query on a head of 4: %d %q", code, errs)
	}
	// The same id with other content: a conflict too, said once.
	code, _, errs = cli(t, "", "append", "default", "--type", "order.placed", "--data", `{"order":2}`, "--id", "0190b0a0-0000-7000-8000-00000000000a")
	if code != exitConflict || errs != "orisun append: conflict: events[0].id 0190b0a0-0000-7000-8000-00000000000a is already stored at position 1 with other content\n" {
		t.Fatalf("an id stored with other content: %d %q", code, errs)
	}

	code, out, _ = cli(t, "", "boundaries", "--create", "late")
	if code != 0 || !strings.HasPrefix(out, "late\thead 0\tepoch ") {
		t.Fatalf("boundaries --create: %d %q", code, out)
	}
	code, out, _ = cli(t, "", "boundaries")
	if code != 0 || !strings.Contains(out, "default\thead 4") || !strings.Contains(out, "late\thead 0") {
		t.Fatalf("boundaries: %d %q", code, out)
	}
	code, out, _ = cli(t, "", "status", "--server", url, "--json")
	var st orisun.Status
	if err := json.Unmarshal([]byte(out), &st); code != 0 || err != nil || len(st.Boundaries) != 2 || st.Boundaries[0].Name != "default" {
		t.Fatalf("status: %d %v %q", code, err, out)
	}

	// Errors: the API's code and message, once, with the exit status of
	// the code; usage errors exit 2.
	code, _, errs = cli(t, "", "read", "default", "--limit", "20000")
	if code != exitInvalid || errs != "orisun read: invalid: limit: 20000 is above the maximum 10000\n" {
		t.Fatalf("read --limit 20000: %d %q", code, errs)
	}
	code, _, errs = cli(t, "", "append", "default", "--type", "bad type", "--data", "1")
	if code != exitInvalid || !strings.HasPrefix(errs, `orisun append: invalid: events[0]: type: type "bad type": byte 3`) {
		t.Fatalf("append a bad type: %d %q", code, errs)
	}
	code, _, errs = cli(t, "", "append", "nosuch", "--type", "a", "--data", "1")
	if code != exitNotFound || !strings.Contains(errs, `not_found: boundary "nosuch" does not exist`) ||
		!strings.Contains(errs, "; create it with orisun boundaries --create nosuch") || !strings.Contains(errs, "as the NATS admin") ||
		strings.Contains(errs, "sqlite") || strings.Count(errs, "\n") != 1 {
		t.Fatalf("append to nosuch: %d %q; want one line with the way to create it", code, errs)
	}
	code, _, errs = cli(t, "", "append", "default", "--type", "a", "--data", "not json")
	if code != 2 || !strings.Contains(errs, "not valid JSON") {
		t.Fatalf("append bad data: %d %q", code, errs)
	}
	code, _, errs = cli(t, "", "append", "default", "--type", "a", "--data", "1", "--metadata", "not json")
	if code != 2 || !strings.Contains(errs, "--metadata is not valid JSON") {
		t.Fatalf("append bad metadata: %d %q", code, errs)
	}
	code, _, errs = cli(t, "not json\n", "append", "default")
	if code != 2 || !strings.Contains(errs, "stdin line 1") {
		t.Fatalf("append bad stdin: %d %q", code, errs)
	}
	code, _, errs = cli(t, "", "read")
	if code != 2 || !strings.Contains(errs, "name one boundary") {
		t.Fatalf("read without boundary: %d %q", code, errs)
	}
	code, _, errs = cli(t, "", "read", "default", "--server", "nats://127.0.0.1:1")
	if code != exitUnavailable || !strings.HasPrefix(errs, "orisun read: cannot connect to nats://127.0.0.1:1: nats: ") ||
		!strings.Contains(errs, "; is orisun running there?") || strings.Contains(errs, "orisun client") || strings.Count(errs, "\n") != 1 {
		t.Fatalf("read from nowhere: %d %q; want one line, one prefix, the URL and the way out", code, errs)
	}
}

// TestCLIFailureLines: each failure of a request is one line with its
// hint after "; " (review of issue 18: hints went on a second line, and a
// node that answered "unavailable" was asked whether orisun runs there):
// a node that answered unavailable points at orisun status, a NATS server
// without orisun says so, a timeout names --timeout.
func TestCLIFailureLines(t *testing.T) {
	s := &session{url: "nats://db:4222"}
	for _, c := range []struct {
		name      string
		err       error
		code      int
		want, not string
	}{
		{"the node answered unavailable", &api.Error{Code: api.CodeUnavailable, Message: "the orisun node is stopping; send the request again"},
			exitUnavailable, "unavailable: the orisun node is stopping; send the request again; orisun status says what fails on the node", "running there"},
		{"no orisun on that NATS", fmt.Errorf("orisun.api.read.default: no orisun service answers (is the relay running?): %w: %w", event.ErrUnavailable, nats.ErrNoResponders),
			exitUnavailable, "no orisun node answers on nats://db:4222: its NATS server is there, but nothing serves orisun's API", "orisun.api"},
		{"no answer in time", fmt.Errorf("orisun.api.read.default: %w: %w", event.ErrUnavailable, context.DeadlineExceeded),
			exitUnavailable, "no answer from nats://db:4222 within the timeout (--timeout)", "orisun.api"},
		{"not found", &api.Error{Code: api.CodeNotFound, Message: `boundary "b" does not exist; create it first`},
			exitNotFound, `not_found: boundary "b" does not exist; create it with orisun boundaries --create b (with access control on, as the NATS admin`, "first"},
		{"a conflict", &api.Error{Code: api.CodeConflict, Message: "events[0].id x is already stored"}, exitConflict, "conflict: events[0].id x", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			var ce *cmdError
			if !errors.As(s.fail(c.err, "b"), &ce) || ce.code != c.code || ce.err == nil {
				t.Fatalf("fail(%v) = %v, want exit %d", c.err, ce, c.code)
			}
			msg := ce.err.Error()
			if !strings.HasPrefix(msg, c.want) || strings.Contains(msg, "\n") || (c.not != "" && strings.Contains(msg, c.not)) {
				t.Errorf("fail(%v) says %q; want one line beginning %q, without %q", c.err, msg, c.want, c.not)
			}
		})
	}
}

// TestCLINoOrisunOnThatNATS: a NATS server without orisun is told apart
// from no server at all: a NATS server answers, nothing serves the API.
func TestCLINoOrisunOnThatNATS(t *testing.T) {
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, NoSigs: true, NoLog: true})
	if err != nil {
		t.Fatal(err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("NATS server not ready")
	}
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	code, _, errs := cli(t, "", "read", "default", "-s", ns.ClientURL(), "--timeout", "5s")
	if code != exitUnavailable || !strings.Contains(errs, "no orisun node answers on "+ns.ClientURL()) || strings.Count(errs, "\n") != 1 {
		t.Fatalf("read from a NATS without orisun: %d %q; want exit 3 and one line saying no orisun node answers", code, errs)
	}
}

// TestCLITail runs `orisun tail` as a process: it prints the events after
// --after, then the ones appended while it follows, one per line, in order
// (I5), and exits 0 on SIGINT.
func TestCLITail(t *testing.T) {
	url := serveNode(t)
	for i := 0; i < 3; i++ {
		if code, _, errs := cli(t, "", "append", "default", "--server", url, "--type", "a", "--data", "1"); code != 0 {
			t.Fatal(errs)
		}
	}
	bin := testutil.OrisunBinary(t)
	cmd := exec.Command(bin, "tail", "default", "--after", "1", "--json")
	cmd.Env = append(os.Environ(), "ORISUN_URL="+url)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill() })
	lines := make(chan string, 100)
	go func() {
		s := bufio.NewScanner(stdout)
		for s.Scan() {
			lines <- s.Text()
		}
		close(lines)
	}()
	next := uint64(2)
	appended := false
	timeout := time.After(60 * time.Second)
	for next <= 6 {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("tail ended early: %s", stderr.String())
			}
			var e event.Event
			if err := json.Unmarshal([]byte(l), &e); err != nil || e.Position != next {
				t.Fatalf("line %q: want position %d (%v)", l, next, err)
			}
			next++
			if next == 4 && !appended {
				appended = true
				if code, _, errs := cli(t, "", "append", "default", "--server", url, "--type", "b", "--data", "2"); code != 0 {
					t.Fatal(errs)
				}
				if code, _, errs := cli(t, `{"type":"c","data":3}`+"\n"+`{"type":"c","data":4}`, "append", "default", "--server", url); code != 0 {
					t.Fatal(errs)
				}
			}
		case <-timeout:
			t.Fatalf("tail printed up to %d within 60s; stderr %s", next-1, stderr.String())
		}
	}
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("tail after SIGINT: %v; stderr %s", err, stderr.String())
	}
}

// TestCLIWithAuth: against a node with a token, the client commands are
// refused without credentials and work with --token or ORISUN_NATS_TOKEN;
// bad credential flags are usage errors.
func TestCLIWithAuth(t *testing.T) {
	url := serveNode(t, "ORISUN_NATS_TOKEN=cli-token-0123456789")
	t.Setenv("ORISUN_NATS_TOKEN", "")
	code, _, errs := cli(t, "", "read", "default", "--server", url, "--timeout", "2s")
	if code != 1 || !strings.Contains(strings.ToLower(errs), "authorization") {
		t.Fatalf("read without credentials: exit %d, %q", code, errs)
	}
	code, out, errs := cli(t, "", "append", "default", "--server", url, "--token", "cli-token-0123456789", "--type", "a.b", "--data", `{"x":1}`)
	if code != 0 || !strings.Contains(out, "appended positions 1–1") {
		t.Fatalf("append with --token: exit %d, %q %q", code, out, errs)
	}
	t.Setenv("ORISUN_NATS_TOKEN", "cli-token-0123456789")
	code, out, errs = cli(t, "", "read", "default", "--server", url)
	if code != 0 || !strings.Contains(out, "a.b") {
		t.Fatalf("read with ORISUN_NATS_TOKEN: exit %d, %q %q", code, out, errs)
	}
	// A credential flag replaces the credentials of the environment:
	// --user does not meet ORISUN_NATS_TOKEN, and needs its password.
	code, _, errs = cli(t, "", "read", "default", "--server", url, "--user", "u")
	if code != 2 || !strings.Contains(errs, "--user needs --password") {
		t.Fatalf("--user with ORISUN_NATS_TOKEN set: exit %d, %q", code, errs)
	}
	code, _, errs = cli(t, "", "read", "default", "--server", url, "--user", "u", "--token", "t")
	if code != 2 || !strings.Contains(errs, "--token and --user") {
		t.Fatalf("--user with --token: exit %d, %q", code, errs)
	}
	code, _, errs = cli(t, "", "read", "default", "--server", url, "--token", "wrong")
	if code != exitFailure || !strings.Contains(errs, "log in with --user and --password, --token or --creds") {
		t.Fatalf("a wrong token: exit %d, %q; want 1 and the ways to log in", code, errs)
	}
	code, _, errs = cli(t, "", "append", "default", "--server", url, "--type", "a.b")
	if code != 2 || !strings.Contains(errs, "--data is required") {
		t.Fatalf("append without --data: exit %d, %q", code, errs)
	}
}

// TestCLIBoundaryCreationIsTheAdmins: against an orisun process with
// application and admin credentials, `boundaries --create` with the
// application's is refused at once (a permissions violation, not a
// timeout) and says what it needs; with ORISUN_NATS_ADMIN_USER and
// _PASSWORD in the environment it creates the boundary, and so with the
// admin's --user and --password; listing stays the application's.
func TestCLIBoundaryCreationIsTheAdmins(t *testing.T) {
	url := serveNode(t, "ORISUN_NATS_USER=app", "ORISUN_NATS_PASSWORD=app-pass",
		"ORISUN_NATS_ADMIN_USER=admin", "ORISUN_NATS_ADMIN_PASSWORD=admin-pass")
	t.Setenv("ORISUN_URL", url)
	t.Setenv("ORISUN_NATS_USER", "app")
	t.Setenv("ORISUN_NATS_PASSWORD", "app-pass")
	t.Setenv("ORISUN_NATS_ADMIN_USER", "")
	t.Setenv("ORISUN_NATS_ADMIN_PASSWORD", "")
	began := time.Now()
	code, _, errs := cli(t, "", "boundaries", "--create", "refused", "--timeout", "20s")
	if code != 1 || !strings.Contains(errs, "permissions violation") || !strings.Contains(errs, "ORISUN_NATS_ADMIN_USER") || strings.Count(errs, "\n") != 1 {
		t.Fatalf("create with the application's credentials: exit %d, %q", code, errs)
	}
	if took := time.Since(began); took > 10*time.Second {
		t.Fatalf("the refusal took %s: it waited for the timeout", took)
	}
	code, out, errs := cli(t, "", "boundaries", "--create", "byflags", "--user", "admin", "--password", "admin-pass")
	if code != 0 || !strings.Contains(out, "byflags") {
		t.Fatalf("create with the admin's flags: exit %d, %q %q", code, out, errs)
	}
	t.Setenv("ORISUN_NATS_ADMIN_USER", "admin")
	t.Setenv("ORISUN_NATS_ADMIN_PASSWORD", "admin-pass")
	code, out, errs = cli(t, "", "boundaries", "--create", "byenv")
	if code != 0 || !strings.Contains(out, "byenv") {
		t.Fatalf("create with ORISUN_NATS_ADMIN_*: exit %d, %q %q", code, out, errs)
	}
	code, out, errs = cli(t, "", "boundaries")
	if code != 0 || !strings.Contains(out, "byenv") || !strings.Contains(out, "byflags") || strings.Contains(out, "refused") {
		t.Fatalf("list: exit %d, %q %q", code, out, errs)
	}
}
