package orisun_test

import (
	"context"
	"database/sql"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/orisun-io/orisun"
	"github.com/orisun-io/orisun/api"
	"github.com/orisun-io/orisun/backend/sqlite"
	"github.com/orisun-io/orisun/event"
	"github.com/orisun-io/orisun/internal/pgtest"
	"github.com/orisun-io/orisun/internal/testutil"
	"github.com/orisun-io/orisun/internal/testutil/natstest"
)

// logBuffer collects a node's log lines for a test to count.
type logBuffer struct{ testutil.LogBuffer }

// count is how many lines match re.
func (l *logBuffer) count(re string) int {
	return len(regexp.MustCompile("(?m)"+re).FindAllStringIndex(l.String(), -1))
}

// capture returns a logger that writes to a new logBuffer (and to stderr
// with ORISUN_TEST_LOG set).
func capture() (*slog.Logger, *logBuffer) {
	lb := &logBuffer{}
	var w io.Writer = lb
	if os.Getenv("ORISUN_TEST_LOG") != "" {
		w = io.MultiWriter(lb, os.Stderr)
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelInfo})), lb
}

// TestStoreWriteOutageSQLite_I7: the SQLite data directory on a small
// tmpfs is filled until appends fail, as a full disk does, with appends
// sent through the NATS API as a client sends them. While they fail,
// /status says store.ok false with the error and since when and is not
// settled, /readyz answers 503, the log says so once per kind of work that
// fails (however many appends fail: no WARN or ERROR line per request),
// and the counters count every failed append. Once space is freed, with no append sent, all of it
// returns to normal by itself (the node's write probe), and appends and
// publishing go on (I7: the status says what was measured, and a store
// that cannot write is not "ok").
func TestStoreWriteOutageSQLite_I7(t *testing.T) {
	t.Parallel()
	dir := testutil.MountTmpfs(t, "24m", "")
	logger, logs := capture()
	n := setup(t, dir, withHTTP, orisun.WithLogger(logger))
	ctx := context.Background()
	appendSettled(t, ctx, n, events(10, "before", 256), 30*time.Second)

	// Leave about 1.5 MB, and fill it with appends.
	filler := filepath.Join(dir, "filler")
	if err := os.WriteFile(filler, make([]byte, max(testutil.FreeBytes(t, dir)-3<<19, 0)), 0o600); err != nil {
		t.Fatal(err)
	}
	c := natstest.Client(t, n.NATSURL())
	batch := events(4, "fill", 16<<10)
	var ok, failed int
	var lastErr error
	for i := 0; i < 2000 && failed < 40; i++ {
		_, err := c.Append(ctx, "default", batch, nil)
		switch {
		case err == nil:
			ok++
		case errors.Is(err, event.ErrUnavailable):
			failed++
			lastErr = err
		default:
			t.Fatalf("append %d failed, but not as unavailable: %v", i, err)
		}
	}
	t.Logf("disk full after %d appends of 64 KB; %d failed, the last with: %v", ok, failed, lastErr)
	// The client is told the store is unavailable, never the database's
	// words; the status below (an operator's view) names the full disk.
	if failed == 0 {
		t.Fatalf("appends never failed for a full disk (%d ok, %d failed)", ok, failed)
	}

	st := httpStatus(t, n)
	if st.Store.OK || st.Settled || st.Store.Since.IsZero() ||
		!strings.Contains(st.Store.Error, "appends fail since") || !strings.Contains(st.Store.Error, "full") {
		t.Fatalf("status while appends fail: store %+v, settled %v", st.Store, st.Settled)
	}
	if code, body := httpGet(t, n, "/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "store failing: appends fail") {
		t.Fatalf("/readyz while appends fail: %d %s", code, body)
	}
	_, body := httpGet(t, n, "/metrics")
	wantMetric(t, body, "orisun_append_requests_total", `boundary="default",result="unavailable"`, float64(failed))
	wantMetric(t, body, "orisun_append_events_total", `boundary="default",result="unavailable"`, float64(4*failed))
	wantMetric(t, body, "orisun_append_requests_total", `boundary="default",result="ok"`, float64(1+ok))
	wantMetric(t, body, "orisun_store_errors_total", `op="append"`, float64(failed))
	wantMetric(t, body, "orisun_store_failing", `kind="append"`, 1)
	wantMetric(t, body, "orisun_store_up", `backend="sqlite"`, 0)
	wantMetric(t, body, "orisun_settled", "", 0)
	if got := logs.count(`level=ERROR msg="store failing: appends fail`); got != 1 {
		t.Fatalf("%d failed appends logged %d times, want once:\n%s", failed, got, logs)
	}
	if got := logs.count(`level=(WARN|ERROR) msg="api request failed`); got != 0 {
		t.Fatalf("%d failed API appends logged %d WARN or ERROR lines of their own, want none (the store watch logs the outage once):\n%s",
			failed, got, logs)
	}
	if got := logs.count(`level=(WARN|ERROR) `); got > 10 {
		t.Fatalf("%d failed API appends gave %d WARN or ERROR lines, want a few (once per change of state):\n%s", failed, got, logs)
	}

	// The probe (every poll interval, while something fails) speaks for
	// appends once none was tried for 5s: while the disk is still full it
	// fails too, and nothing changes.
	time.Sleep(6 * time.Second)
	if st := httpStatus(t, n); st.Store.OK || !strings.Contains(st.Store.Error, "appends fail since") {
		t.Fatalf("the disk is still full, no append tried for 6s: store %+v", st.Store)
	}
	t.Logf("free space while full: %d bytes", testutil.FreeBytes(t, dir))

	// Free the space; send nothing: the probe sees writes work again.
	freed := time.Now()
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	waitReadyz(t, n, "/readyz 200 after the space is freed", 30*time.Second, http.StatusOK)
	t.Logf("ready again %s after the space was freed, no append sent", time.Since(freed).Round(time.Millisecond))
	st = httpStatus(t, n)
	if !st.Store.OK || st.Store.Error != "" || !st.Store.Since.IsZero() {
		t.Fatalf("store after recovery: %+v", st.Store)
	}
	if got := logs.count(`level=WARN msg="store works again: a write probe succeeded \(no append tried`); got != 1 {
		t.Fatalf("the recovery of appends logged %d times, want once:\n%s", got, logs)
	}
	// Whatever else failed meanwhile (checkpoint writes, lease renewals)
	// was logged once when it began and once when it ended.
	for _, kind := range []string{"read", "append", "checkpoint", "lease", "boundary"} {
		began, ended := logs.count(`level=ERROR msg="store failing.* kind=`+kind+" "), logs.count(`level=WARN msg="store works again.* kind=`+kind+" ")
		if began != ended || began > 1 {
			t.Fatalf("kind %s: %d failures and %d recoveries logged, want at most one of each, as many:\n%s", kind, began, ended, logs)
		}
	}
	res, err := n.Append(ctx, "default", events(3, "after", 256), nil)
	if err != nil {
		t.Fatalf("append after recovery: %v", err)
	}
	final := waitSettled(t, n, 30*time.Second)
	if b := boundaryOf(t, final, "default"); b.Head != res.Last || b.Published != res.Last {
		t.Fatalf("after recovery: head %d published %d, want %d", b.Head, b.Published, res.Last)
	}
	_, body = httpGet(t, n, "/metrics")
	wantMetric(t, body, "orisun_store_failing", `kind="append"`, 0)
	wantMetric(t, body, "orisun_store_up", `backend="sqlite"`, 1)
	wantMetric(t, body, "orisun_published_events_total", `boundary="default"`, float64(res.Last))
	if code := api.CodeOf(lastErr); code != api.CodeUnavailable {
		t.Fatalf("a full disk's append error is %q to a client, want unavailable", code)
	}
}

// TestStoreOutagePostgres_I7: PostgreSQL (a server of this test's own: the
// other packages share scripts/test's) is stopped under append load and
// started again. While it is down, /status says store.ok false with the
// error and since when, /readyz answers 503, the log says so once per
// kind of work that fails, and every failed append is counted; once it is
// back all of it returns to normal by itself, the load's appends succeed
// again and everything acknowledged is published (I7).
func TestStoreOutagePostgres_I7(t *testing.T) {
	t.Parallel()
	srv := pgtest.StartServer(t)
	logger, logs := capture()
	n := setup(t, "", func(c *orisun.Config) {
		withHTTP(c)
		c.Backend, c.PGURL = "postgres", srv.URL
	}, orisun.WithLogger(logger))

	// The load: in process, so that each result the caller sees is the
	// one the node counted.
	var mu sync.Mutex
	results := map[string]int{}
	var last uint64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				res, err := n.Append(ctx, "default", events(1, "load", 256), nil)
				cancel()
				mu.Lock()
				if err == nil {
					results["ok"]++
					last = max(last, res.Last)
				} else {
					results[api.CodeOf(err)]++
				}
				mu.Unlock()
				if err != nil {
					time.Sleep(20 * time.Millisecond)
				}
			}
		}()
	}
	stopLoad := func() map[string]int {
		close(stop)
		wg.Wait()
		mu.Lock()
		defer mu.Unlock()
		return results
	}
	defer func() {
		select {
		case <-stop:
		default:
			stopLoad()
		}
	}()
	time.Sleep(500 * time.Millisecond)

	stopped := time.Now()
	srv.Stop(t)
	waitReadyz(t, n, "/readyz 503 with PostgreSQL down", 30*time.Second, http.StatusServiceUnavailable)
	t.Logf("not ready %s after PostgreSQL stopped", time.Since(stopped).Round(time.Millisecond))
	time.Sleep(2 * time.Second) // the load goes on failing
	st := httpStatus(t, n)
	if st.Store.OK || st.Settled || st.Store.Since.IsZero() || st.Store.Since.Before(stopped.Add(-time.Second)) ||
		!strings.Contains(st.Store.Error, "appends fail since") {
		t.Fatalf("status with PostgreSQL down: store %+v, settled %v", st.Store, st.Settled)
	}
	if code, body := httpGet(t, n, "/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "store failing") {
		t.Fatalf("/readyz with PostgreSQL down: %d %s", code, body)
	}
	_, body := httpGet(t, n, "/metrics")
	wantMetric(t, body, "orisun_store_failing", `kind="append"`, 1)
	wantMetric(t, body, "orisun_store_up", `backend="postgres"`, 0)
	if got := logs.count(`level=ERROR msg="store failing: appends fail`); got != 1 {
		t.Fatalf("failing appends logged %d times, want once:\n%s", got, logs)
	}

	started := time.Now()
	srv.Start(t)
	waitReadyz(t, n, "/readyz 200 with PostgreSQL back", 60*time.Second, http.StatusOK)
	t.Logf("ready again %s after PostgreSQL started", time.Since(started).Round(time.Millisecond))
	mu.Lock()
	okBefore := results["ok"]
	mu.Unlock()
	testutil.Eventually(t, "appends succeed again", 30*time.Second, 20*time.Millisecond, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return results["ok"] > okBefore+20
	})
	got := stopLoad()
	t.Logf("load results: %v", got)
	if got[api.CodeUnavailable] == 0 {
		t.Fatal("no append failed while PostgreSQL was down")
	}
	for kind := range map[string]bool{"read": true, "append": true, "checkpoint": true, "lease": true, "boundary": true} {
		began, ended := logs.count(`level=ERROR msg="store failing.* kind=`+kind+" "), logs.count(`level=WARN msg="store works again.* kind=`+kind+" ")
		if began != ended || began > 1 {
			t.Fatalf("kind %s: %d failures and %d recoveries logged, want at most one of each, as many:\n%s", kind, began, ended, logs)
		}
	}
	final := waitSettled(t, n, 60*time.Second)
	if b := boundaryOf(t, final, "default"); b.Published < last || !final.Store.OK {
		t.Fatalf("after recovery: published %d of the last acknowledged %d; store %+v", b.Published, last, final.Store)
	}
	_, body = httpGet(t, n, "/metrics")
	for code, count := range got {
		wantMetric(t, body, "orisun_append_requests_total", `boundary="default",result="`+code+`"`, float64(count))
	}
	wantMetric(t, body, "orisun_store_failing", `kind="append"`, 0)
	if v, _ := metric(body, "orisun_store_errors_total", `op="append"`); v < float64(got[api.CodeUnavailable]) {
		t.Fatalf("orisun_store_errors_total{op=append} = %v, fewer than the %d failed appends", v, got[api.CodeUnavailable])
	}
}

// TestCallerDeadlineIsNoStoreFailure: a deadline the caller chose that
// passes while the store is slow (SQLite's write lock held by another
// connection for a moment) is the caller's answer, not the store's
// failure: each append fails with its deadline, but store.ok stays true,
// /readyz answers 200, no store error is counted and nothing is logged at
// ERROR (docs/operations.md, "When the store fails"; I7: a failing store
// is measured, a caller's impatience is not one). Deadlines the node sets
// itself are (TestStoreWatchDeadlines).
func TestCallerDeadlineIsNoStoreFailure(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	logger, logs := capture()
	n := setup(t, dir, withHTTP, orisun.WithLogger(logger))
	ctx := context.Background()
	appendSettled(t, ctx, n, events(3, "before", 64), 30*time.Second)

	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, sqlite.DBFile)+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		actx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		_, err := n.Append(actx, "default", events(1, "impatient", 64), nil)
		cancel()
		if err == nil || actx.Err() == nil {
			t.Fatalf("append %d with the write lock held elsewhere: %v (ctx %v); want it to fail with its deadline", i, err, actx.Err())
		}
		if i == 0 {
			t.Logf("append with a 100 ms deadline, the write lock held elsewhere: %v", err)
		}
	}
	if _, err := conn.ExecContext(ctx, "ROLLBACK"); err != nil {
		t.Fatal(err)
	}
	conn.Close()

	st := httpStatus(t, n)
	if !st.Store.OK || st.Store.Error != "" {
		t.Fatalf("status after appends that ran out of their callers' deadlines: store %+v", st.Store)
	}
	if code, body := httpGet(t, n, "/readyz"); code != http.StatusOK {
		t.Fatalf("/readyz after appends that ran out of their callers' deadlines: %d %s", code, body)
	}
	_, body := httpGet(t, n, "/metrics")
	wantMetric(t, body, "orisun_store_errors_total", `op="append"`, 0)
	wantMetric(t, body, "orisun_store_failing", `kind="append"`, 0)
	if got := logs.count(`level=ERROR `); got != 0 {
		t.Fatalf("appends that ran out of their callers' deadlines logged %d ERROR lines:\n%s", got, logs)
	}
	if _, err := n.Append(ctx, "default", events(1, "after", 64), nil); err != nil {
		t.Fatalf("append once the lock is free: %v", err)
	}
}
