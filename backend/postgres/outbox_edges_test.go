package postgres

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/orisun-io/orisun/internal/pgtest"
)

// The outbox at the edges of real deployments (docs/outbox.md): callers
// under SERIALIZABLE, two-phase commit, synchronous_commit off, drivers that
// bind the JSON as text or jsonb, and enqueues that repeat part of a call.

// TestEnqueueSerializableEnqueuersBothCommit: two SERIALIZABLE transactions
// enqueue to one boundary, both before either commits, and both commit: no
// 40001 although neither waited. The enqueue's read of the staging (whether
// to notify) would take a predicate lock that the other's insert breaks, so
// under SERIALIZABLE it is not made and the call notifies instead: a
// listener hears each commit. Once with the staging empty, once with a
// committed staged event waiting.
func TestEnqueueSerializableEnqueuersBothCommit(t *testing.T) {
	t.Parallel()
	s, url, _, l := enqueueSetup(t)
	ctx := context.Background()
	c1, c2 := pgtest.Connect(t, url), pgtest.Connect(t, url)
	listener := pgtest.Connect(t, url)
	if _, err := listener.Exec(ctx, `LISTEN orisun_staged`); err != nil {
		t.Fatal(err)
	}
	for round, waiting := range []bool{false, true} {
		if waiting {
			enqueueCommitted(t, c1, "b", typeEvents("waiting", 1))
			drainNotifications(t, listener)
		}
		tx1, err := c1.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.Serializable})
		if err != nil {
			t.Fatal(err)
		}
		tx2, err := c2.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.Serializable})
		if err != nil {
			t.Fatal(err)
		}
		if n, err := sqlEnqueue(ctx, tx1, "b", typeEvents("first", 1)); err != nil || n != 1 {
			t.Fatalf("round %d: first enqueue: %d, %v", round, n, err)
		}
		if n, err := sqlEnqueue(ctx, tx2, "b", typeEvents("second", 1)); err != nil || n != 1 {
			t.Fatalf("round %d: second enqueue: %d, %v", round, n, err)
		}
		if err := tx1.Commit(ctx); err != nil {
			t.Fatalf("round %d: first commit: %v", round, err)
		}
		if err := tx2.Commit(ctx); err != nil {
			t.Fatalf("round %d: second commit: %v (two SERIALIZABLE enqueuers must not fail each other)", round, err)
		}
		for i := range 2 {
			wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			_, err := listener.WaitForNotification(wctx)
			cancel()
			if err != nil {
				t.Fatalf("round %d: notification %d of the 2 SERIALIZABLE enqueues: %v", round, i+1, err)
			}
		}
	}
	if r := moveAll(t, s, l, 100); r.Moved != 5 {
		t.Fatalf("moved %d, want the 5 enqueued events", r.Moved)
	}
	checkDense(t, readAll(t, s, "b"))
}

// drainNotifications takes every notification already delivered to conn.
func drainNotifications(t *testing.T, conn *pgx.Conn) {
	t.Helper()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		_, err := conn.WaitForNotification(ctx)
		cancel()
		if err != nil {
			return
		}
	}
}

// TestOutboxTwoPhaseCommit: PostgreSQL refuses to PREPARE a transaction that
// sent a NOTIFY, so a transaction that calls orisun_append (which always
// notifies) cannot be prepared; with orisun.notify set to off the
// functions send none, and a prepared transaction's events exist once it
// is committed: appended, or staged and then moved. (The relay learns of
// them by its head check, docs/outbox.md "Two-phase commit".) The server is
// the test's own, with max_prepared_transactions above 0.
func TestOutboxTwoPhaseCommit(t *testing.T) {
	t.Parallel()
	srv := pgtest.StartServer(t)
	admin := pgtest.Connect(t, srv.URL)
	ctx := context.Background()
	if _, err := admin.Exec(ctx, `ALTER SYSTEM SET max_prepared_transactions = 4`); err != nil {
		t.Fatal(err)
	}
	admin.Close(ctx)
	srv.Stop(t)
	srv.Start(t)
	admin = pgtest.Connect(t, srv.URL)
	if _, err := admin.Exec(ctx, `CREATE DATABASE twophase`); err != nil {
		t.Fatal(err)
	}
	url := strings.Replace(srv.URL, "/postgres?", "/twophase?", 1)
	s, l := moverSetup(t, Config{URL: url})
	conn := pgtest.Connect(t, url)
	exec := func(q string) error {
		_, err := conn.Exec(ctx, q)
		return err
	}

	// Without orisun.notify = off: the PREPARE is refused.
	for _, q := range []string{`BEGIN`, `SELECT * FROM orisun_append('b', '[{"type":"refused","data":1}]')`} {
		if err := exec(q); err != nil {
			t.Fatal(err)
		}
	}
	if err := exec(`PREPARE TRANSACTION 'notified'`); err == nil || !strings.Contains(err.Error(), "NOTIFY") {
		t.Fatalf("PREPARE after a notifying orisun_append: %v, want PostgreSQL's refusal naming NOTIFY", err)
	}
	_ = exec(`ROLLBACK`)

	if err := exec(`SET orisun.notify = off`); err != nil {
		t.Fatal(err)
	}
	for i, call := range []string{
		`SELECT orisun_enqueue('b', '[{"type":"staged","data":1}]')`, // the staging is empty: it would notify
		`SELECT * FROM orisun_append('b', '[{"type":"appended","data":2}]')`,
	} {
		gid := []string{"'enqueue'", "'append'"}[i]
		for _, q := range []string{`BEGIN`, call, `PREPARE TRANSACTION ` + gid, `COMMIT PREPARED ` + gid} {
			if err := exec(q); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
	}
	evs := readAll(t, s, "b")
	if len(evs) != 1 || evs[0].Type != "appended" {
		t.Fatalf("the log after the prepared append: %+v, want the appended event alone", evs)
	}
	if r := moveAll(t, s, l, 100); r.Moved != 1 {
		t.Fatalf("moved %d, want the 1 event of the prepared enqueue", r.Moved)
	}
	evs = readAll(t, s, "b")
	checkDense(t, evs)
	if len(evs) != 2 || evs[1].Type != "staged" {
		t.Fatalf("the log after the move: %+v, want the staged event after the appended one", evs)
	}
}

// TestOutboxSynchronousCommitOff (I2, I5): a session with synchronous_commit
// off would let the relay publish an event whose commit a crash then takes
// back. orisun_append raises it to local for the rest of the caller's
// transaction; a stronger setting stays as it is, and the session's own
// setting is back after the commit.
func TestOutboxSynchronousCommitOff(t *testing.T) {
	t.Parallel()
	_, _, conn := outboxSetup(t)
	ctx := context.Background()
	show := func(q pgx.Tx) string {
		t.Helper()
		var v string
		if err := q.QueryRow(ctx, `SHOW synchronous_commit`).Scan(&v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	for _, c := range []struct{ session, inTx string }{{"off", "local"}, {"remote_apply", "remote_apply"}, {"on", "on"}} {
		if _, err := conn.Exec(ctx, `SET synchronous_commit = `+c.session); err != nil {
			t.Fatal(err)
		}
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := sqlAppend(ctx, tx, "b", `[{"type":"a","data":1}]`, nil); err != nil {
			t.Fatal(err)
		}
		if got := show(tx); got != c.inTx {
			t.Fatalf("session %s: synchronous_commit after orisun_append is %s, want %s", c.session, got, c.inTx)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		var after string
		if err := conn.QueryRow(ctx, `SHOW synchronous_commit`).Scan(&after); err != nil || after != c.session {
			t.Fatalf("session %s: after the commit %s (%v), want the session's own setting", c.session, after, err)
		}
	}
}

// TestOutboxTypedArguments: drivers bind strings as text or varchar (JDBC's
// setString, Npgsql, psycopg with a type) and psycopg's Jsonb as jsonb, and
// PostgreSQL casts neither to json implicitly: the text and jsonb overloads
// of orisun_append and orisun_enqueue take them, with the same validation
// (a refusal is class OR) and idempotency as the json ones.
func TestOutboxTypedArguments(t *testing.T) {
	t.Parallel()
	s, _, conn, l := enqueueSetup(t)
	ctx := context.Background()
	const id = "0190f7a2-0000-7000-8000-0000000000a1"
	event := `[{"id":"` + id + `","type":"typed","data":{"b":1,"a":[1, 2]}}]`
	for _, typ := range []string{"text", "varchar", "jsonb"} {
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var first int64
		err = tx.QueryRow(ctx, `SELECT first_position FROM orisun_append($1::text, $2::`+typ+`, $3::`+typ+`)`,
			"b", event, `{"after":0}`).Scan(&first)
		switch typ {
		case "jsonb":
			// jsonb keeps no key order: the data arrives as
			// {"a": [1, 2], "b": 1}, not the bytes stored, so the
			// retry is a conflict (docs/outbox.md, "Other languages").
			if pe := pgErr(t, err); pe.Code != "ORCFL" || !strings.Contains(pe.Message, "with other content") {
				t.Fatalf("a retry through jsonb of an event sent as text: %s %q, want ORCFL", pe.Code, pe.Message)
			}
			_ = tx.Rollback(ctx)
			if tx, err = conn.Begin(ctx); err != nil {
				t.Fatal(err)
			}
			err = tx.QueryRow(ctx, `SELECT first_position FROM orisun_append($1::text, $2::jsonb)`,
				"b", strings.Replace(event, "a1", "a2", 1)).Scan(&first)
			if err != nil || first != 2 {
				t.Fatalf("orisun_append(text, jsonb) of a new event: position %d, %v; want 2", first, err)
			}
		default:
			// The first call appends at 1; the second is a retry (the
			// same id and content) and returns 1, writing nothing.
			if err != nil || first != 1 {
				t.Fatalf("orisun_append(text, %s, %s): position %d, %v; want 1", typ, typ, first, err)
			}
		}
		var n int
		if err := tx.QueryRow(ctx, `SELECT orisun_enqueue($1::text, $2::`+typ+`)`, "b", typeEvents("typed."+typ, 1)).Scan(&n); err != nil || n != 1 {
			t.Fatalf("orisun_enqueue(text, %s): %d, %v", typ, n, err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		tx, err = conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		_, err = tx.Exec(ctx, `SELECT orisun_enqueue($1::text, $2::`+typ+`)`, "b", `[{"type":"a b","data":1}]`)
		if pe := pgErr(t, err); pe.Code != "ORINV" || !strings.Contains(pe.Message, "events[0]: type") {
			t.Fatalf("an invalid event through (text, %s): %s %q, want ORINV naming the event", typ, pe.Code, pe.Message)
		}
		_ = tx.Rollback(ctx)
	}
	if r := moveAll(t, s, l, 100); r.Moved != 3 {
		t.Fatalf("moved %d, want the 3 enqueued events", r.Moved)
	}
	evs := readAll(t, s, "b")
	checkDense(t, evs)
	if len(evs) != 5 || string(evs[0].Data) != `{"b":1,"a":[1,2]}` || string(evs[1].Data) != `{"a":[1,2],"b":1}` {
		t.Fatalf("the log: %d events, data %s and %s; want 5, the first as sent as text (compacted), the second as jsonb wrote it",
			len(evs), evs[0].Data, evs[1].Data)
	}
}

// TestEnqueueSomeIdsInTheLog: an enqueue whose first event is in the log
// already (the same id and content: a retry of an event moved before) and
// whose second is new stages the new one alone, returns 1, and the mover
// moves it once, after the first.
func TestEnqueueSomeIdsInTheLog(t *testing.T) {
	t.Parallel()
	s, url, _, l := enqueueSetup(t)
	conn := pgtest.Connect(t, url)
	const old = `{"id":"0190f7a2-0000-7000-8000-0000000000b1","type":"old","data":{"n":1},"tags":["x"]}`
	const fresh = `{"id":"0190f7a2-0000-7000-8000-0000000000b2","type":"fresh","data":{"n":2}}`
	if n := enqueueCommitted(t, conn, "b", "["+old+"]"); n != 1 {
		t.Fatalf("the first enqueue staged %d, want 1", n)
	}
	if r := moveAll(t, s, l, 100); r.Moved != 1 {
		t.Fatalf("moved %d, want 1", r.Moved)
	}
	if n := enqueueCommitted(t, conn, "b", "["+old+","+fresh+"]"); n != 1 {
		t.Fatalf("the enqueue of the stored event and a new one staged %d, want 1 (the new one)", n)
	}
	if st := stagedOf(t, s, "b"); st.Staged != 1 {
		t.Fatalf("staged %d, want 1", st.Staged)
	}
	if r := moveAll(t, s, l, 100); r.Moved != 1 || r.Duplicates != 0 {
		t.Fatalf("moved %d (duplicates %d), want the new event alone", r.Moved, r.Duplicates)
	}
	evs := readAll(t, s, "b")
	checkDense(t, evs)
	if len(evs) != 2 || evs[0].Type != "old" || evs[1].Type != "fresh" {
		t.Fatalf("the log: %+v, want old then fresh", evs)
	}
}
