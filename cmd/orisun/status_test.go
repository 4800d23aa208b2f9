package main

import (
	"context"
	"encoding/json"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/orisun-io/orisun"
	"github.com/orisun-io/orisun/backend/postgres"
	"github.com/orisun-io/orisun/event"
	"github.com/orisun-io/orisun/internal/pgtest"
	"github.com/orisun-io/orisun/internal/testutil"
	"github.com/orisun-io/orisun/internal/testutil/storetest"
	"github.com/orisun-io/orisun/status"
)

// httpAddrOf waits for the process's status listener and returns its address.
func httpAddrOf(t *testing.T, p *testutil.Process) string {
	t.Helper()
	line := p.WaitLine(t, "status HTTP listener ready", lineWait)
	m := regexp.MustCompile(`addr=(\S+)`).FindStringSubmatch(line)
	if m == nil {
		t.Fatalf("no address in %q", line)
	}
	return m[1]
}

// runBin runs the built binary with args and returns its exit code, stdout
// and stderr.
func runBin(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(testutil.OrisunBinary(t), args...)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return code, out.String(), errb.String()
}

// TestStatusWaitSettled uses `orisun status` as a user's script would:
// append, `orisun status --wait-settled` exits 0 once everything is
// published; with an event that cannot be published it exits 1 on timeout
// and says which boundary is behind and why.
func TestStatusWaitSettled(t *testing.T) {
	url := pgtest.URL(t)
	p := start(t, t.TempDir(), "ORISUN_BACKEND=postgres", "ORISUN_PG_URL="+url, "ORISUN_NATS_MAX_PAYLOAD=4096",
		"ORISUN_POLL_INTERVAL=100ms", "ORISUN_NODE_ID=status-node")
	addr := httpAddrOf(t, p)
	started := p.WaitLine(t, "orisun started", lineWait)
	natsURL := regexp.MustCompile(`nats_url=(\S+)`).FindStringSubmatch(started)[1]
	p.WaitLine(t, "publisher leading", lineWait)

	ctx := context.Background()
	store := storetest.Postgres(t, postgres.Config{URL: url})
	evs := make([]orisun.Input, 50)
	for i := range evs {
		evs[i] = orisun.Input{Type: "script.step", Data: json.RawMessage(`{"n":1}`)}
	}
	evs, err := event.Prepare("default", evs, event.Limits{MaxAppendEvents: 100, MaxAppendBytes: 1 << 20, MaxEventBytes: 4096})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Append(ctx, "default", evs, nil); err != nil {
		t.Fatal(err)
	}
	code, out, errs := runBin(t, "status", "--http", addr, "--wait-settled=60s")
	if code != 0 || !strings.Contains(out, "settled: yes") || !strings.Contains(out, "default") {
		t.Fatalf("status --wait-settled: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}
	t.Logf("orisun status --wait-settled:\n%s", out)

	code, out, errs = runBin(t, "status", "--http", addr, "--json")
	var st orisun.Status
	if err := json.Unmarshal([]byte(out), &st); code != 0 || err != nil {
		t.Fatalf("status --json: exit %d, %v\n%s%s", code, err, out, errs)
	}
	if !st.Settled || st.NodeID != "status-node" || len(st.Boundaries) != 1 || st.Boundaries[0].Head != 50 || st.Boundaries[0].Published != 50 {
		t.Fatalf("status --json: %+v", st)
	}

	// An event larger than the NATS max payload, committed behind the
	// API's back: the boundary cannot settle.
	if _, err := pgtest.Connect(t, url).Exec(ctx, `WITH h AS (UPDATE orisun_boundaries SET head = head + 1 WHERE name = 'default' RETURNING head)
		INSERT INTO orisun_events (boundary, position, id, type, time, tags, data)
		SELECT 'default', h.head, gen_random_uuid(), 'raw.big', now(), '{}', json_build_object('p', repeat('x', 8000)) FROM h`); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	code, _, errs = runBin(t, "status", "--http", addr, "--wait-settled=3s")
	if code != 1 || !strings.Contains(errs, "not settled after 3s") || !strings.Contains(errs, "published 50 of head 51") ||
		!strings.Contains(errs, "max payload") {
		t.Fatalf("status --wait-settled with an unpublishable event: exit %d, stderr:\n%s", code, errs)
	}
	if time.Since(start) < 3*time.Second {
		t.Fatalf("gave up after %s, before its timeout", time.Since(start))
	}
	t.Logf("orisun status --wait-settled=3s: %s", errs)

	// The same document over NATS.
	code, out, errs = runBin(t, "status", "--server", natsURL, "--json")
	st = orisun.Status{}
	if err := json.Unmarshal([]byte(out), &st); code != 0 || err != nil || st.NodeID != "status-node" || st.Settled {
		t.Fatalf("status --server --json: exit %d, %v, %+v\n%s", code, err, st, errs)
	}

	// No node there: exit 3 and say where it looked; --wait-settled too.
	code, _, errs = runBin(t, "status", "--http", "127.0.0.1:1")
	if code != 3 || !strings.Contains(errs, "127.0.0.1:1") {
		t.Fatalf("status against nothing: exit %d, %s", code, errs)
	}
	code, _, errs = runBin(t, "status", "--http", "127.0.0.1:1", "--wait-settled=1s")
	if code != 3 || !strings.Contains(errs, "could not read the status") {
		t.Fatalf("status --wait-settled against nothing: exit %d, %s", code, errs)
	}
	code, _, errs = runBin(t, "status", "--http", "off")
	if code != 2 || !strings.Contains(errs, "listener is off") {
		t.Fatalf("status --http off: exit %d, %s", code, errs)
	}
}

func TestStatusFlags(t *testing.T) {
	var out, errw strings.Builder
	if code := run([]string{"status", "--wait-settled=soon"}, &out, &errw); code != 2 || !strings.Contains(errw.String(), "wait-settled") {
		t.Fatalf("bad timeout: code %d, %q", code, errw.String())
	}
	w := &waitFlag{timeout: time.Minute}
	if err := w.Set("true"); err != nil || !w.on || w.timeout != time.Minute {
		t.Fatalf("bare --wait-settled: %+v %v", w, err)
	}
	if err := w.Set("90s"); err != nil || !w.on || w.timeout != 90*time.Second {
		t.Fatalf("--wait-settled=90s: %+v %v", w, err)
	}
	for in, want := range map[string]string{"127.0.0.1:8990": "http://127.0.0.1:8990/status", ":9000": "http://127.0.0.1:9000/status", "https://h:1/": "https://h:1/status"} {
		if got := statusURL(in); got != want {
			t.Fatalf("statusURL(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestStatusSaysWhyStagedIsNotSettled (I7, docs/outbox.md "Visibility"):
// committed enqueued events not yet moved keep the node unsettled although
// every boundary is published to its head; `orisun status` and
// --wait-settled say so, naming the boundary, the staged count, the
// oldest's age and the mover's error, and the table shows the staged and
// set-aside events in the boundary's reason.
func TestStatusSaysWhyStagedIsNotSettled(t *testing.T) {
	st := orisun.Status{Settled: false, Time: time.Now()}
	st.Store.OK, st.NATS.OK = true, true
	st.Boundaries = []status.BoundaryStatus{
		{Name: "calm", Head: 3, Published: 3, State: "leading"},
		{Name: "held", Head: 5, Published: 5, State: "standby", Staged: 2, StagedSeconds: 7.4,
			MoveError: "lease lost", SetAside: 1, SetAsideReason: "id x is stored at position 1 with other content"},
	}
	reason := unsettledReason(st, nil)
	for _, want := range []string{"boundary held", "2 enqueued events staged", "7.4s", "the mover fails: lease lost"} {
		if !strings.Contains(reason, want) {
			t.Errorf("unsettled reason %q does not say %q", reason, want)
		}
	}
	if strings.Contains(reason, "calm") || reason == "unknown" {
		t.Errorf("unsettled reason %q: want the staged boundary alone", reason)
	}
	var out strings.Builder
	printStatus(&out, st, false)
	var row string
	for _, l := range strings.Split(out.String(), "\n") {
		if strings.HasPrefix(l, "held ") {
			row = l
		}
	}
	for _, want := range []string{"2 enqueued events staged", "the mover fails: lease lost", "1 enqueued events set aside", "other content"} {
		if !strings.Contains(row, want) {
			t.Errorf("the table's row of boundary held %q does not say %q", row, want)
		}
	}
}
