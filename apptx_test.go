package orisun_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/orisun-io/orisun"
	"github.com/orisun-io/orisun/event"
)

// appOrders reads the ids of the embedding program's table through an
// AppendTx that appends nothing.
func appOrders(t *testing.T, n *orisun.Node) []int {
	t.Helper()
	var ids []int
	err := n.AppendTx(context.Background(), func(ctx context.Context, tx *sql.Tx, _ orisun.AppendFunc) error {
		rows, err := tx.QueryContext(ctx, `SELECT id FROM app_orders ORDER BY id`)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var id int
			if err := rows.Scan(&id); err != nil {
				return err
			}
			ids = append(ids, id)
		}
		return rows.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

// createAppTable runs stmt, the application's CREATE TABLE, in an
// AppendTx of its own, as an embedding program creates its tables.
func createAppTable(t *testing.T, n *orisun.Node, stmt string) {
	t.Helper()
	err := n.AppendTx(context.Background(), func(ctx context.Context, tx *sql.Tx, _ orisun.AppendFunc) error {
		_, err := tx.ExecContext(ctx, stmt)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestAppendTxCommitsOrRollsBackTogether_I1_I2: an embedding program on
// SQLite runs its own statements and appends in one transaction of the
// node's writer (Node.AppendTx, docs/outbox.md): its table lives in the
// node's database file, created in a transaction of its own. Its row and
// its event are written together on a commit, and neither when the
// function returns an error, panics (recovered: the node goes on), makes
// an append that fails (even when the function ignores that error), or
// runs past ORISUN_APPEND_TX_TIMEOUT (AppendTx returns at the deadline,
// before the function does; a node's Append waits for the transaction and
// lands after it). The log holds positions 1..n, exactly the committed
// events, and the stream relays exactly them, woken by the commit.
func TestAppendTxCommitsOrRollsBackTogether_I1_I2(t *testing.T) {
	const timeout = time.Second
	// The node polls once a minute: only the wake-up after AppendTx's
	// commit gets its last event relayed within the wait below.
	// The lease TTL is above twice the timeout, as Validate requires.
	n := setup(t, "", func(c *orisun.Config) {
		c.AppendTxTimeout, c.LeaseTTL, c.PollInterval = timeout, 3*timeout, time.Minute
	})
	ctx := context.Background()
	createAppTable(t, n, `CREATE TABLE IF NOT EXISTS app_orders (id INTEGER PRIMARY KEY, customer TEXT NOT NULL)`)
	// order inserts order id and appends its event, then ends as then
	// says.
	order := func(id int, then func(ctx context.Context, tx *sql.Tx, app orisun.AppendFunc) error) error {
		return n.AppendTx(ctx, func(ctx context.Context, tx *sql.Tx, app orisun.AppendFunc) error {
			if _, err := tx.ExecContext(ctx, `INSERT INTO app_orders (id, customer) VALUES (?, 'c-7')`, id); err != nil {
				return err
			}
			if _, err := app("default", []orisun.Input{{Type: "order.placed", Data: json.RawMessage(fmt.Sprintf(`{"order":%d}`, id)),
				Tags: []string{fmt.Sprintf("order:%d", id)}}}, nil); err != nil {
				return err
			}
			return then(ctx, tx, app)
		})
	}
	commit := func(context.Context, *sql.Tx, orisun.AppendFunc) error { return nil }
	if err := order(1, commit); err != nil {
		t.Fatal(err)
	}

	errOwn := errors.New("the application changed its mind")
	if err := order(2, func(context.Context, *sql.Tx, orisun.AppendFunc) error { return errOwn }); err != errOwn {
		t.Fatalf("the function's error: got %v, want it as it is", err)
	}

	err := order(3, func(context.Context, *sql.Tx, orisun.AppendFunc) error { panic("boom") })
	if err == nil || !strings.Contains(err.Error(), "panicked (boom)") {
		t.Fatalf("a panic: got %v, want an error naming it", err)
	}

	err = order(4, func(_ context.Context, _ *sql.Tx, app orisun.AppendFunc) error {
		_, err := app("default", []orisun.Input{{Type: "a..b", Data: json.RawMessage(`1`)}}, nil)
		if !errors.Is(err, event.ErrInvalid) || !strings.Contains(err.Error(), `"a..b"`) {
			t.Errorf("an invalid event: append returned %v, want invalid naming the type", err)
		}
		return nil // ignores it: the transaction rolls back all the same
	})
	if !errors.Is(err, event.ErrInvalid) {
		t.Fatalf("a failed append the function ignored: AppendTx returned %v, want the invalid error", err)
	}

	// Past the deadline, ignoring its context: AppendTx returns before the
	// function does, and a node's Append that arrived meanwhile waited.
	fnDone := make(chan struct{})
	appended := make(chan error, 1)
	start := time.Now()
	err = order(5, func(context.Context, *sql.Tx, orisun.AppendFunc) error {
		defer close(fnDone)
		go func() {
			_, err := n.Append(context.Background(), "default", events(1, "node.append", 16), nil)
			appended <- err
		}()
		time.Sleep(timeout / 2)
		select {
		case err := <-appended:
			t.Errorf("a node's append went through while the transaction held the writer: %v", err)
			appended <- err
		default:
		}
		time.Sleep(3 * timeout)
		return nil
	})
	took := time.Since(start)
	select {
	case <-fnDone:
		t.Fatalf("AppendTx waited for the function past the deadline (%s)", took)
	default:
	}
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "single writer") {
		t.Fatalf("past the deadline: %v, want context.DeadlineExceeded saying it holds the single writer", err)
	}
	t.Logf("AppendTx returned %s after it began, deadline %s", took, timeout)
	<-fnDone
	if err := <-appended; err != nil {
		t.Fatal(err)
	}

	// Past the deadline in a statement given the context: SQLite
	// interrupts it, and the function returns too.
	fnDone = make(chan struct{})
	err = order(6, func(ctx context.Context, tx *sql.Tx, _ orisun.AppendFunc) error {
		defer close(fnDone)
		var x int
		return tx.QueryRowContext(ctx, `WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c`).Scan(&x)
	})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("an endless statement: %v, want context.DeadlineExceeded", err)
	}
	select {
	case <-fnDone:
	case <-time.After(10 * time.Second):
		t.Fatal("the endless statement given the context was not interrupted within 10s of the deadline")
	}

	if err := order(7, commit); err != nil {
		t.Fatalf("after the rollbacks: %v", err)
	}

	if ids := appOrders(t, n); fmt.Sprint(ids) != "[1 7]" {
		t.Fatalf("the application's orders %v, want [1 7]", ids)
	}
	st := waitSettled(t, n, 10*time.Second)
	_, evs, err := n.Read(ctx, "default", 0, 100, nil)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for i, e := range evs {
		if e.Position != uint64(i+1) {
			t.Fatalf("event %d at position %d: not dense (I1)", i, e.Position)
		}
		got = append(got, e.Type+string(e.Data))
	}
	want := `[order.placed{"order":1} node.append{"i":0,"p":""} order.placed{"order":7}]`
	if fmt.Sprint(got) != want || st.Boundaries[0].Head != 3 {
		t.Fatalf("log %v (head %d), want %s", got, st.Boundaries[0].Head, want)
	}
	if first, last := checkStream(t, n, "default"); first != 1 || last != 3 {
		t.Fatalf("stream %d..%d, want 1..3", first, last)
	}
}

// TestAppendTxConcurrentWithAppends_I1: application transactions (a third
// rolled back by their own error, half of them under a condition) and the
// node's appends, all at once on one boundary: positions 1..head dense,
// every committed event once, the application's table holding exactly the
// rows of the committed transactions, nothing deadlocked, and the stream
// relays it all.
func TestAppendTxConcurrentWithAppends_I1(t *testing.T) {
	n := setup(t, "", nil)
	ctx := context.Background()
	createAppTable(t, n, `CREATE TABLE app_rows (id INTEGER PRIMARY KEY)`)
	const workers = 16
	errRollback := errors.New("rolled back on purpose")
	var mu sync.Mutex
	committedTx := map[int]bool{}
	appended := 0
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(2)
		go func() {
			defer wg.Done()
			for i := range 8 {
				id := w*100 + i
				var cond *orisun.Condition
				if i%2 == 0 {
					// A condition that holds: nothing carries this tag.
					cond = &orisun.Condition{Query: orisun.Query{Items: []orisun.QueryItem{{Tags: []string{fmt.Sprint("none:", id)}}}}}
				}
				err := n.AppendTx(ctx, func(ctx context.Context, tx *sql.Tx, app orisun.AppendFunc) error {
					if _, err := tx.ExecContext(ctx, `INSERT INTO app_rows (id) VALUES (?)`, id); err != nil {
						return err
					}
					if _, err := app("default", []orisun.Input{{Type: "app", Data: json.RawMessage(fmt.Sprint(id))}}, cond); err != nil {
						return err
					}
					if i%3 == 0 {
						return errRollback
					}
					return nil
				})
				if err != nil && err != errRollback {
					t.Error(err)
					return
				}
				if err == nil {
					mu.Lock()
					committedTx[id] = true
					mu.Unlock()
				}
			}
		}()
		go func() {
			defer wg.Done()
			for i := range 8 {
				var cond *orisun.Condition
				if i%2 == 0 {
					cond = &orisun.Condition{Query: orisun.Query{Items: []orisun.QueryItem{{Types: []string{fmt.Sprint("none", w)}}}}}
				}
				if _, err := n.Append(ctx, "default", events(1, "node", 16), cond); err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				appended++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	st := waitSettled(t, n, 30*time.Second)
	_, evs, err := n.Read(ctx, "default", 0, 10000, nil)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	nodeEvents := 0
	for i, e := range evs {
		if e.Position != uint64(i+1) {
			t.Fatalf("event %d at position %d: not dense (I1)", i, e.Position)
		}
		if e.Type == "node" {
			nodeEvents++
			continue
		}
		var id int
		if err := json.Unmarshal(e.Data, &id); err != nil || !committedTx[id] || seen[string(e.Data)] {
			t.Fatalf("position %d holds application event %s: not of a committed transaction, or twice", e.Position, e.Data)
		}
		seen[string(e.Data)] = true
	}
	if len(seen) != len(committedTx) || nodeEvents != appended || st.Boundaries[0].Head != uint64(len(evs)) {
		t.Fatalf("%d application events of %d committed transactions, %d node events of %d appended, head %d of %d events",
			len(seen), len(committedTx), nodeEvents, appended, st.Boundaries[0].Head, len(evs))
	}
	var rows int
	if err := n.AppendTx(ctx, func(ctx context.Context, tx *sql.Tx, _ orisun.AppendFunc) error {
		return tx.QueryRowContext(ctx, `SELECT count(*) FROM app_rows`).Scan(&rows)
	}); err != nil {
		t.Fatal(err)
	}
	if rows != len(committedTx) {
		t.Fatalf("%d application rows, %d committed transactions", rows, len(committedTx))
	}
	if first, last := checkStream(t, n, "default"); first != 1 || last != uint64(len(evs)) {
		t.Fatalf("stream %d..%d, want 1..%d", first, last, len(evs))
	}
}

// TestAppendTxRefusedOnPostgres: AppendTx is SQLite's; on PostgreSQL it is
// refused, pointing to orisun_append in the application's transaction.
func TestAppendTxRefusedOnPostgres(t *testing.T) {
	n, _ := pgNode(t, time.Second)
	err := n.AppendTx(context.Background(), func(context.Context, *sql.Tx, orisun.AppendFunc) error {
		t.Error("the function ran on PostgreSQL")
		return nil
	})
	if !errors.Is(err, event.ErrInvalid) || !strings.Contains(err.Error(), "orisun_append") {
		t.Fatalf("AppendTx on PostgreSQL: %v, want invalid naming orisun_append", err)
	}
}

// TestAppendTxEndsWhenTheNodeStops: a node stopped while an application
// transaction runs (one that waits for its context) rolls it back at once
// and stops; AppendTx returns event.ErrClosed and nothing is written. Both
// return within 4 s: the release of the leases in Stop needs the writer,
// and waited out its own 5 s timeout while the transaction held it (the
// transaction's deadline is a minute here).
func TestAppendTxEndsWhenTheNodeStops(t *testing.T) {
	dir := t.TempDir()
	n := setup(t, dir, func(c *orisun.Config) { c.AppendTxTimeout, c.LeaseTTL = time.Minute, 3*time.Minute })
	ctx := context.Background()
	inside := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- n.AppendTx(ctx, func(ctx context.Context, tx *sql.Tx, app orisun.AppendFunc) error {
			if _, err := app("default", events(1, "never", 16), nil); err != nil {
				return err
			}
			close(inside)
			<-ctx.Done()
			return ctx.Err()
		})
	}()
	<-inside
	start := time.Now()
	stopped := make(chan error, 1)
	go func() { stopped <- n.Stop() }()
	for _, c := range []struct {
		what string
		ch   chan error
	}{{"AppendTx", done}, {"Stop", stopped}} {
		select {
		case err := <-c.ch:
			if c.what == "AppendTx" && !errors.Is(err, event.ErrClosed) {
				t.Fatalf("AppendTx while the node stopped: %v, want event.ErrClosed", err)
			}
			if c.what == "Stop" && err != nil {
				t.Fatal(err)
			}
			t.Logf("%s returned %s after Stop began", c.what, time.Since(start))
		case <-time.After(4*time.Second - time.Since(start)):
			t.Fatalf("%s did not return within 4s of Stop", c.what)
		}
	}
	n2 := setup(t, dir, nil)
	if _, evs, err := n2.Read(ctx, "default", 0, 10, nil); err != nil || len(evs) != 0 {
		t.Fatalf("after the restart: %v %v, want no event", evs, err)
	}
}

// TestAppendTxCountedInMetrics_I7: the appends of AppendTx count in the
// node's append metrics as Node.Append's do: a committed transaction's
// append as ok (requests and events), a refused append by its error, an
// overrun's append as unavailable, and the append of a transaction the
// function ended with its own error not at all.
func TestAppendTxCountedInMetrics_I7(t *testing.T) {
	n := setup(t, "", func(c *orisun.Config) { withHTTP(c); c.AppendTxTimeout = 200 * time.Millisecond })
	ctx := context.Background()
	two := []orisun.Input{{Type: "order.placed", Data: json.RawMessage(`{}`)}, {Type: "order.paid", Data: json.RawMessage(`{}`)}}
	run := func(then func(ctx context.Context) error, in []orisun.Input) error {
		return n.AppendTx(ctx, func(ctx context.Context, _ *sql.Tx, app orisun.AppendFunc) error {
			if _, err := app("default", in, nil); err != nil {
				return err
			}
			return then(ctx)
		})
	}
	commit := func(context.Context) error { return nil }
	for range 3 {
		if err := run(commit, two); err != nil {
			t.Fatal(err)
		}
	}
	if err := run(commit, []orisun.Input{{Type: "bad type!", Data: json.RawMessage(`{}`)}}); !errors.Is(err, event.ErrInvalid) {
		t.Fatalf("a bad type: %v, want invalid", err)
	}
	mine := errors.New("the application changed its mind")
	if err := run(func(context.Context) error { return mine }, two); !errors.Is(err, mine) {
		t.Fatalf("the function's error: %v", err)
	}
	if err := run(func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }, two); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("an overrun: %v, want the deadline", err)
	}
	_, body := httpGet(t, n, "/metrics")
	for _, c := range []struct {
		name, labels string
		want         float64
	}{
		{"orisun_append_requests_total", `boundary="default",result="ok"`, 3},
		{"orisun_append_events_total", `boundary="default",result="ok"`, 6},
		{"orisun_append_requests_total", `boundary="default",result="invalid"`, 1},
		{"orisun_append_requests_total", `boundary="default",result="unavailable"`, 1},
		{"orisun_append_events_total", `boundary="default",result="unavailable"`, 2},
		{"orisun_append_duration_seconds_count", "", 5},
	} {
		if v, _ := metric(body, c.name, c.labels); v != c.want {
			t.Errorf("%s{%s} = %v, want %v", c.name, c.labels, v, c.want)
		}
	}
	if b, err := n.Boundary(ctx, "default"); err != nil || b.Head != 6 {
		t.Fatalf("head %d (%v), want the 6 committed events", b.Head, err)
	}
}

// TestAppendTxAppTablesReadOutsideTheWriter (docs/outbox.md, "Reading
// them"): the embedding program reads its own tables through a read-only
// connection pool of its own on orisun's database file (the driver orisun
// uses, query_only): such a read does not wait for the single writer, even
// while an AppendTx holds it, and sees what committed last; a write
// through it is refused.
func TestAppendTxAppTablesReadOutsideTheWriter(t *testing.T) {
	dir := t.TempDir()
	n := setup(t, dir, func(c *orisun.Config) { c.AppendTxTimeout, c.LeaseTTL = 10*time.Second, 30*time.Second })
	ctx := context.Background()
	insert := func(id int, hold func()) error {
		return n.AppendTx(ctx, func(ctx context.Context, tx *sql.Tx, app orisun.AppendFunc) error {
			if _, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS app_orders (id INTEGER PRIMARY KEY, customer TEXT NOT NULL)`); err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, `INSERT INTO app_orders (id, customer) VALUES (?, 'c-7')`, id); err != nil {
				return err
			}
			if _, err := app("default", []orisun.Input{{Type: "order.placed", Data: json.RawMessage(fmt.Sprintf(`{"order":%d}`, id))}}, nil); err != nil {
				return err
			}
			hold()
			return nil
		})
	}
	if err := insert(1, func() {}); err != nil {
		t.Fatal(err)
	}
	path := (&url.URL{Path: filepath.ToSlash(filepath.Join(dir, "orisun.db"))}).EscapedPath()
	ro, err := sql.Open("sqlite", "file:"+path+"?_pragma=query_only(1)&_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	count := func() int {
		t.Helper()
		// The writer is held for as long as the test wants: a read that
		// waited for it would hit this deadline.
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		var c int
		if err := ro.QueryRowContext(cctx, `SELECT count(*) FROM app_orders`).Scan(&c); err != nil {
			t.Fatalf("a read through the read-only pool while AppendTx holds the writer: %v", err)
		}
		return c
	}
	holding, release, done := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	go func() { done <- insert(2, func() { close(holding); <-release }) }()
	<-holding
	if c := count(); c != 1 {
		t.Fatalf("read while the second transaction is open: %d rows, want the 1 committed", c)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// With the writer free, a write through the pool is still refused
	// (query_only), not merely kept waiting.
	if _, err := ro.ExecContext(ctx, `INSERT INTO app_orders (id, customer) VALUES (3, 'c-8')`); err == nil {
		t.Fatal("a write through the read-only pool succeeded")
	}
	if c := count(); c != 2 {
		t.Fatalf("read after the commit: %d rows, want 2", c)
	}
}
