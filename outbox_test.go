package orisun_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/orisun-io/orisun"
	"github.com/orisun-io/orisun/internal/pgtest"
	"github.com/orisun-io/orisun/internal/testutil"
)

// TestOutboxRelaysExactlyCommitted_I1_I2_I4: events appended with the SQL
// function orisun_append in application transactions (docs/outbox.md) are
// relayed by a node on the same database exactly when the transaction
// commits: the stream holds the committed events at their positions,
// nothing of a rolled-back transaction or savepoint, mixed with the node's
// own appends. The node polls once a minute, so only the NOTIFY sent at the
// commit can wake it within the wait: the relay learns of the commit.
func TestOutboxRelaysExactlyCommitted_I1_I2_I4(t *testing.T) {
	n, url := pgNode(t, time.Minute)
	ctx := context.Background()
	conn := pgtest.Connect(t, url)
	committed := map[uint64]string{}
	inTx := func(commit bool, fn func(tx pgx.Tx)) {
		t.Helper()
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		fn(tx)
		if commit {
			err = tx.Commit(ctx)
		} else {
			err = tx.Rollback(ctx)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	sqlAppend := func(tx pgx.Tx, record bool, events string) {
		t.Helper()
		var first, last int64
		if err := tx.QueryRow(ctx, `SELECT first_position, last_position FROM orisun_append('default', $1::json)`, events).Scan(&first, &last); err != nil {
			t.Fatal(err)
		}
		// Read in a statement of its own: the function's rows are not in
		// the snapshot of the statement that calls it.
		rows, err := tx.Query(ctx, `SELECT id::text, position FROM orisun_events WHERE boundary = 'default' AND position BETWEEN $1 AND $2`, first, last)
		if err != nil {
			t.Fatal(err)
		}
		got := map[uint64]string{}
		for rows.Next() {
			var id string
			var pos int64
			if err := rows.Scan(&id, &pos); err != nil {
				t.Fatal(err)
			}
			got[uint64(pos)] = id
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		if record {
			for p, id := range got {
				committed[p] = id
			}
		}
	}
	for round := range 5 {
		// The node's own append first: the last commit of each round is
		// an application transaction's.
		res, err := n.Append(ctx, "default", events(1, "api", 32), nil)
		if err != nil {
			t.Fatal(err)
		}
		_, evs, err := n.Read(ctx, "default", res.First-1, 1, nil)
		if err != nil || len(evs) != 1 {
			t.Fatal(evs, err)
		}
		committed[res.First] = evs[0].ID
		inTx(false, func(tx pgx.Tx) {
			sqlAppend(tx, false, `[{"type":"sql.rolledback","data":{}}]`)
		})
		inTx(true, func(tx pgx.Tx) {
			if _, err := tx.Exec(ctx, `SAVEPOINT s`); err != nil {
				t.Fatal(err)
			}
			sqlAppend(tx, false, `[{"type":"sql.savepoint","data":{}}]`)
			if _, err := tx.Exec(ctx, `ROLLBACK TO SAVEPOINT s`); err != nil {
				t.Fatal(err)
			}
		})
		inTx(true, func(tx pgx.Tx) {
			sqlAppend(tx, true, fmt.Sprintf(`[{"type":"sql.committed","data":{"round":%d}},{"type":"sql.committed","data":{"round":%d,"n":2}}]`, round, round))
		})
	}
	start := time.Now()
	st := waitSettled(t, n, 10*time.Second)
	t.Logf("settled %s after the last commit (poll interval 1m)", time.Since(start))
	if h := st.Boundaries[0].Head; h != uint64(len(committed)) {
		t.Fatalf("head %d, want %d committed events", h, len(committed))
	}
	first, last := checkStream(t, n, "default")
	if first != 1 || last != uint64(len(committed)) {
		t.Fatalf("stream %d..%d, want 1..%d", first, last, len(committed))
	}
	_, evs, err := n.Read(ctx, "default", 0, 1000, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs {
		if committed[e.Position] != e.ID || strings.HasPrefix(e.Type, "sql.rolledback") || e.Type == "sql.savepoint" {
			t.Fatalf("position %d holds %s %s; the committed event there is %s", e.Position, e.Type, e.ID, committed[e.Position])
		}
	}
	if len(evs) != len(committed) {
		t.Fatalf("%d events read, %d committed", len(evs), len(committed))
	}
}

// TestOutboxNodeLimitsRollingChange: every node on one database checks
// its append limits against those recorded for orisun_append and
// orisun_enqueue: a node that accepts less than the row allows is refused
// at start, naming its own and the recorded ones; one that accepts more
// starts (docs/outbox.md "Changing the limits": the row is lowered first,
// raised last), and so does one with the lower limits once the row was
// lowered.
func TestOutboxNodeLimitsRollingChange(t *testing.T) {
	_, url := pgNode(t, 100*time.Millisecond)
	start := func(maxEvents int) error {
		t.Helper()
		n, err := orisun.New(orisun.Config{DataDir: t.TempDir(), NATSPort: -1, Backend: "postgres", PGURL: url,
			Boundaries: []string{"default"}, MaxAppendEvents: maxEvents})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		err = n.Start(ctx)
		if serr := n.Stop(); err == nil && serr != nil {
			t.Fatal(serr)
		}
		return err
	}
	err := start(5)
	if err == nil || !strings.Contains(err.Error(), "ORISUN_MAX_APPEND_EVENTS 5") ||
		!strings.Contains(err.Error(), fmt.Sprintf("max_append_events %d", orisun.MaxAppendEventsDefault)) {
		t.Fatalf("start with lower limits: %v, want a refusal naming both", err)
	}
	if err := start(orisun.MaxAppendEventsDefault + 1); err != nil {
		t.Fatalf("start with higher limits than the row's: %v", err)
	}
	if _, err := pgtest.Connect(t, url).Exec(context.Background(), `UPDATE orisun_append_limits SET max_append_events = 5`); err != nil {
		t.Fatal(err)
	}
	if err := start(5); err != nil {
		t.Fatalf("start with the lowered row's limits: %v", err)
	}
}

// TestOutboxHeldTransactionShownInStatus_I1_I7: an application transaction
// that called orisun_append holds the boundary's head row until it ends
// (docs/outbox.md): a node's append waits for it, the status says the
// publisher waits for a transaction holding the row, and after the commit
// everything is relayed, densely, the application's event first.
//
// With savepoint=true the call is made inside a savepoint that is then
// released: the row's xmax is the savepoint's subtransaction id, which
// pg_locks no longer lists, and the status said "caught up" while the
// transaction held the row until the head read asked pg_xact_status
// instead (backend/postgres/read.go, docs/outbox.md).
func TestOutboxHeldTransactionShownInStatus_I1_I7(t *testing.T) {
	for _, savepoint := range []bool{false, true} {
		t.Run(fmt.Sprintf("savepoint=%v", savepoint), func(t *testing.T) {
			n, url := pgNode(t, 100*time.Millisecond)
			ctx := context.Background()
			mustAppend(t, ctx, n, "default", events(2, "before", 16))
			waitSettled(t, n, 10*time.Second)
			tx := pgtest.Begin(t, pgtest.Connect(t, url))
			if savepoint {
				if _, err := tx.Exec(ctx, `SAVEPOINT s`); err != nil {
					t.Fatal(err)
				}
			}
			var first int64
			if err := tx.QueryRow(ctx, `SELECT first_position FROM orisun_append('default', '[{"type":"app","data":{}}]')`).Scan(&first); err != nil {
				t.Fatal(err)
			}
			if savepoint {
				if _, err := tx.Exec(ctx, `RELEASE SAVEPOINT s`); err != nil {
					t.Fatal(err)
				}
			}
			appended := make(chan error, 1)
			go func() {
				_, err := n.Append(ctx, "default", events(1, "node", 16), nil)
				appended <- err
			}()
			waitHeadHeld(t, n, nil)
			testutil.NotYet(t, appended, "a node's append went through while the transaction held the row")
			testutil.Release(t, appended, func() error { return tx.Commit(ctx) })
			st := waitSettled(t, n, 10*time.Second)
			if st.Boundaries[0].Head != 4 || first != 3 {
				t.Fatalf("head %d, application's event at %d: want 4 and 3", st.Boundaries[0].Head, first)
			}
			_, evs, err := n.Read(ctx, "default", 2, 10, nil)
			if err != nil || len(evs) != 2 || evs[0].Type != "app" || evs[1].Type != "node" {
				t.Fatalf("after the commit: %+v %v", evs, err)
			}
			if f, l := checkStream(t, n, "default"); f != 1 || l != 4 {
				t.Fatalf("stream %d..%d, want 1..4", f, l)
			}
		})
	}
}

// TestOutboxShortHoldersNotReportedHeld_I7: application transactions that
// each hold the head row for about 100 ms (orisun_append, a pause, the
// commit), one after the other from two connections, the next one always
// waiting for the row when the previous commits: the row is held all the
// time, but by no transaction for long. The status never says that a
// transaction holds the head row (I7: "held since T" is said only when the
// same transaction held the row at two probes a probe interval apart, here
// 400 ms, the poll interval). A round lasts 3 s and measures each hold
// (from the grant of the row to the return of the commit); a round in
// which one lasted a probe interval or more (a commit stalled by a busy
// machine) proves nothing and is run again, up to three times. Then one
// transaction holding the row for long is reported. When the probe only
// asked whether the row was held, the succession read as one long holder.
func TestOutboxShortHoldersNotReportedHeld_I7(t *testing.T) {
	const probe = 400 * time.Millisecond
	n, url := pgNode(t, probe)
	ctx := context.Background()
	waitSettled(t, n, 10*time.Second)
	conns := [2]*pgx.Conn{pgtest.Connect(t, url), pgtest.Connect(t, url)}
	// take begins a transaction on conn and appends, which waits for the
	// row; it sends the transaction once the row is granted.
	take := func(conn *pgx.Conn) <-chan pgx.Tx {
		got := make(chan pgx.Tx, 1)
		go func() {
			tx, err := conn.Begin(ctx)
			if err == nil {
				_, err = tx.Exec(ctx, `SELECT orisun_append('default', '[{"type":"app.short","data":{}}]')`)
			}
			if err != nil {
				t.Error(err)
				close(got)
				return
			}
			got <- tx
		}()
		return got
	}
	round := func() (held, samples, count int, longest time.Duration) {
		done := make(chan struct{})
		go func() {
			defer close(done)
			cur, granted := <-take(conns[0]), time.Now()
			for i := 1; ; i++ {
				if cur == nil {
					return
				}
				next := take(conns[i%2])
				time.Sleep(100 * time.Millisecond) // the next one waits for the row meanwhile
				if err := cur.Commit(ctx); err != nil {
					t.Error(err)
					return
				}
				longest = max(longest, time.Since(granted))
				count++
				if count >= 25 {
					if tx := <-next; tx != nil {
						_ = tx.Commit(ctx)
					}
					return
				}
				cur, granted = <-next, time.Now()
			}
		}()
		for {
			select {
			case <-done:
				return held, samples, count, longest
			case <-time.After(10 * time.Millisecond):
			}
			st := testutil.Get(t, n.Status)
			samples++
			if r := st.Boundaries[0].Reason; strings.HasPrefix(r, "waiting") {
				if held == 0 {
					t.Logf("the status says %q", r)
				}
				held++
			}
		}
	}
	valid := false
	for r := 1; r <= 3 && !valid; r++ {
		held, samples, count, longest := round()
		t.Logf("round %d: %d transactions, the longest hold %s; %d of %d status samples said waiting",
			r, count, longest.Round(time.Millisecond), held, samples)
		if t.Failed() {
			t.FailNow()
		}
		if longest >= probe {
			continue // a hold as long as a probe interval: this round proves nothing
		}
		valid = true
		if held > 0 {
			t.Fatalf("the status said a transaction holds the head row while none held it for %s", probe)
		}
	}
	if !valid {
		t.Fatalf("in three rounds a transaction held the row for a probe interval (%s) or more: the machine is too busy for this test", probe)
	}
	// The control: one transaction holding the row is reported.
	tx := pgtest.Begin(t, pgtest.Connect(t, url))
	if _, err := tx.Exec(ctx, `SELECT orisun_append('default', '[{"type":"app.long","data":{}}]')`); err != nil {
		t.Fatal(err)
	}
	waitHeadHeld(t, n, nil)
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	waitSettled(t, n, 10*time.Second)
}
