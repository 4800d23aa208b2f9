package postgres

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/orisun-io/orisun/backend"
	"github.com/orisun-io/orisun/event"
	"github.com/orisun-io/orisun/internal/pgtest"
	"github.com/orisun-io/orisun/internal/testutil"
)

// TestMoveHeldBackByRowLock_I1: a staged row that another session holds a
// row lock on (here FOR KEY SHARE, as a foreign key's check takes it)
// holds back its call and every call behind it: the move fails, naming the
// session's pid, and moves nothing, so no call is split and nothing is
// moved ahead of the held one; once the lock ends, everything moves, whole
// calls in the order of the calls. With SKIP LOCKED the move took the
// unlocked half of the first call and the second call, and left the locked
// row behind, to be moved later at a position after the second call.
func TestMoveHeldBackByRowLock_I1(t *testing.T) {
	t.Parallel()
	s, url, conn, l := enqueueSetup(t)
	ctx := context.Background()
	enqueueCommitted(t, conn, "b", typeEvents("first", 2))
	enqueueCommitted(t, conn, "b", typeEvents("second", 2))
	tx, pid := pgtest.Lock(t, url, `SELECT 1 FROM orisun_staged WHERE type = 'first' AND data::text = '1' FOR KEY SHARE`)
	mctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	r, err := s.MoveStaged(mctx, l, 100)
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("pid %d", pid)) {
		t.Fatalf("move with a staged row locked by pid %d: %+v, %v; want an error naming the pid", pid, r, err)
	}
	t.Logf("the move's error: %v", err)
	if st := stagedOf(t, s, "b"); st.Staged != 4 {
		t.Fatalf("%d staged after the refused move, want all 4", st.Staged)
	}
	if all := readAll(t, s, "b"); len(all) != 0 {
		t.Fatalf("the refused move wrote %d events", len(all))
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if r := moveAll(t, s, l, 100); r.Moved != 4 {
		t.Fatalf("moved %+v once the lock ended, want 4", r)
	}
	all := readAll(t, s, "b")
	checkDense(t, all)
	want := []string{"first 0", "first 1", "second 0", "second 1"}
	for i, e := range all {
		if got := e.Type + " " + string(e.Data); got != want[i] {
			t.Fatalf("position %d holds %s, want %s", e.Position, got, want[i])
		}
	}
}

// TestMoveSetsAsideEventsOverTheCurrentLimit: the limits row can be
// lowered after an event was staged (docs/outbox.md "Changing the
// limits"): the mover checks each event's encoded size against the row's
// max_event_bytes when it moves it, and sets aside, with the reason, an
// event too large for NATS now, instead of putting into the log what the
// publisher could not publish; the events behind it move.
func TestMoveSetsAsideEventsOverTheCurrentLimit(t *testing.T) {
	t.Parallel()
	s, _, conn, l := enqueueSetup(t)
	ctx := context.Background()
	enqueueCommitted(t, conn, "b", `[{"type":"big","data":"`+strings.Repeat("x", 3000)+`"},{"type":"small","data":1}]`)
	enqueueCommitted(t, conn, "b", typeEvents("behind", 1))
	if _, err := conn.Exec(ctx, `UPDATE orisun_append_limits SET max_event_bytes = 2000`); err != nil {
		t.Fatal(err)
	}
	r, err := s.MoveStaged(ctx, l, 100)
	if err != nil {
		t.Fatal(err)
	}
	if r.Moved != 2 || r.SetAside != 1 || r.First != 1 || r.Last != 2 {
		t.Fatalf("move: %+v, want 2 moved at 1..2 and 1 set aside", r)
	}
	all := readAll(t, s, "b")
	checkDense(t, all)
	if len(all) != 2 || all[0].Type != "small" || all[1].Type != "behind" {
		t.Fatalf("log %v, want small then behind", all)
	}
	st := stagedOf(t, s, "b")
	if st.Staged != 0 || st.SetAside != 1 || !strings.Contains(st.Reason, "max_event_bytes") || !strings.Contains(st.Reason, "2000") {
		t.Fatalf("staging %+v, want 1 set aside naming max_event_bytes 2000", st)
	}
	t.Logf("reason: %s", st.Reason)
}

// TestMoveBoundOnTheServer: a move whose process stops answering inside
// its transaction (here: the hook before the commit sleeps, as a frozen
// process would, past the move's deadline) ends on the server at the
// deadline of its context (idle_in_transaction_session_timeout of the
// move's transaction): the lease row, which the move reads FOR SHARE and
// the holder's renewals update, is free again within the bound, and the
// events stay staged for the next move. Without the bound on the server
// the lease row stayed held for the whole sleep: a renewal would wait for
// it, and the node lose its lease.
func TestMoveBoundOnTheServer(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	var frozen atomic.Bool
	inHook := make(chan struct{})
	s, l := moverSetup(t, Config{URL: url, BeforeMoveCommit: func(string, uint64, uint64) {
		if frozen.Load() {
			close(inHook)
			time.Sleep(3 * time.Second)
		}
	}})
	ctx := context.Background()
	conn := pgtest.Connect(t, url)
	enqueueCommitted(t, conn, "b", typeEvents("staged", 2))
	frozen.Store(true)
	moved := make(chan error, 1)
	go func() {
		mctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		_, err := s.MoveStaged(mctx, l, 100)
		moved <- err
	}()
	leaseFree := func() bool {
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = tx.Rollback(ctx) }()
		_, err = tx.Exec(ctx, `SELECT 1 FROM orisun_leases WHERE boundary = 'b' FOR UPDATE NOWAIT`)
		return err == nil
	}
	start := time.Now()
	<-inHook
	if leaseFree() {
		t.Fatal("the lease row is free while the move is in its transaction")
	}
	// The lease row free within the bound and a margin (a deadline, not a
	// timing assertion), while the process still sleeps in its hook.
	testutil.Eventually(t, "the lease row free", 2*time.Second, 20*time.Millisecond, leaseFree)
	t.Logf("the lease row was free %s after the move began (bound 300ms)", time.Since(start).Round(time.Millisecond))
	err := <-moved
	if err == nil || !strings.Contains(err.Error(), "did not end within") {
		t.Fatalf("the frozen move: %v, want its bound named", err)
	}
	t.Logf("the move's error: %v", err)
	frozen.Store(false)
	if st := stagedOf(t, s, "b"); st.Staged != 2 {
		t.Fatalf("%d staged after the move was ended, want 2", st.Staged)
	}
	if r := moveAll(t, s, l, 100); r.Moved != 2 {
		t.Fatalf("the next moves: %+v, want 2 moved", r)
	}
	checkDense(t, readAll(t, s, "b"))
}

// TestMoveEmptyLocksNothing: a move that finds nothing staged takes no
// lock and writes nothing (the mover scans every 10 ms while enqueues come
// in): the head row's xmax and version are unchanged, the probe finds no
// holder, and a REPEATABLE READ transaction whose snapshot predates the
// move appends with orisun_append afterwards without a serialization
// failure. When every move took the head row first, the row changed under
// the snapshot (40001) and the status saw a holder at every scan.
func TestMoveEmptyLocksNothing(t *testing.T) {
	t.Parallel()
	s, url, conn, l := enqueueSetup(t)
	ctx := context.Background()
	row := func() string {
		var v string
		if err := conn.QueryRow(ctx, `SELECT ctid::text || ' ' || xmin::text || ' ' || xmax::text FROM orisun_boundaries WHERE name = 'b'`).Scan(&v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	rr, err := pgtest.Connect(t, url).BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = rr.Rollback(ctx) }()
	if _, err := rr.Exec(ctx, `SELECT head FROM orisun_boundaries`); err != nil { // the snapshot
		t.Fatal(err)
	}
	before := row()
	for range 3 {
		if r, err := s.MoveStaged(ctx, l, 100); err != nil || r.Moved+r.Duplicates+r.SetAside != 0 {
			t.Fatalf("an empty move: %+v, %v", r, err)
		}
	}
	if after := row(); after != before {
		t.Fatalf("the head row (ctid, xmin, xmax) was %s before the empty moves, %s after: they wrote or locked it", before, after)
	}
	if h, err := s.HeadHolder(ctx, "b"); err != nil || h != "" {
		t.Fatalf("probe after the empty moves: holder %q, %v; want none", h, err)
	}
	if _, err := sqlAppend(ctx, rr, "b", typeEvents("rr", 1), nil); err != nil {
		t.Fatalf("orisun_append under REPEATABLE READ after empty moves: %v", err)
	}
	if err := rr.Commit(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestHeadHolderNamesTheTransaction: the probe names the transaction that
// holds the head row, the same one at every probe while it holds it,
// another one for the next holder, none once it is free (I7: the publisher
// says "held since" only for one holder seen at two probes).
func TestHeadHolderNamesTheTransaction(t *testing.T) {
	t.Parallel()
	s, url, _ := outboxSetup(t)
	ctx := context.Background()
	holder := func() string {
		h, err := s.HeadHolder(ctx, "b")
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	if h := holder(); h != "" {
		t.Fatalf("holder %q of a free row", h)
	}
	var seen []string
	for i := range 2 {
		tx, err := pgtest.Connect(t, url).Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := sqlAppend(ctx, tx, "b", typeEvents("held", 1), nil); err != nil {
			t.Fatal(err)
		}
		var xid string
		if err := tx.QueryRow(ctx, `SELECT pg_current_xact_id()::text`).Scan(&xid); err != nil {
			t.Fatal(err)
		}
		a, b := holder(), holder()
		if a == "" || a != b || a != xid {
			t.Fatalf("holder %d: probes %q and %q, the transaction is %s", i, a, b, xid)
		}
		seen = append(seen, a)
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		if h := holder(); h != "" {
			t.Fatalf("holder %q after the commit", h)
		}
	}
	if seen[0] == seen[1] {
		t.Fatalf("two transactions named alike: %v", seen)
	}
}

// TestMoveBatchFloorIsMaxAppendEvents: the move's batch has
// max_append_events for its floor (docs/outbox.md "How large a move is"):
// orisun_enqueue refuses a call of more events than the limits row's
// max_append_events (ORBIG, naming the limit), and a call of that many,
// larger than the mover's batch, moves whole in one move, its events
// consecutive, with the call behind it in the next move.
func TestMoveBatchFloorIsMaxAppendEvents(t *testing.T) {
	t.Parallel()
	s, _, conn, l := enqueueSetup(t)
	ctx := context.Background()
	if _, err := conn.Exec(ctx, `UPDATE orisun_append_limits SET max_append_events = 10`); err != nil {
		t.Fatal(err)
	}
	tx := pgtest.Begin(t, conn)
	_, err := sqlEnqueue(ctx, tx, "b", typeEvents("over", 11))
	_ = tx.Rollback(ctx)
	if pe := pgErr(t, err); pe.Code != "ORBIG" || !strings.Contains(pe.Message, "the limit is 10") {
		t.Fatalf("a call of 11 events: %s %q, want ORBIG naming the limit 10", pe.Code, pe.Message)
	}
	enqueueCommitted(t, conn, "b", typeEvents("whole", 10))
	enqueueCommitted(t, conn, "b", typeEvents("next", 2))
	r, err := s.MoveStaged(ctx, l, 3)
	if err != nil || r.Moved != 10 || !r.More {
		t.Fatalf("a move of batch 3: %+v, %v; want the whole call of 10 and more to come", r, err)
	}
	if r := moveAll(t, s, l, 3); r.Moved != 2 {
		t.Fatalf("then %+v, want the 2 of the next call", r)
	}
	all := readAll(t, s, "b")
	checkDense(t, all)
	for i, e := range all[:10] {
		if e.Type != "whole" || string(e.Data) != fmt.Sprint(i) {
			t.Fatalf("position %d holds %s %s, want whole %d", e.Position, e.Type, e.Data, i)
		}
	}
}

// appendAndMove runs a Go appender of one event at a time and a mover of
// batches of 16 on boundary b, beside the application transactions of a
// test, which send their errors to errs. finish waits for the application
// transactions (wait), stops both, fails the test on any error, moves what
// is left, and returns the log, checked dense.
func appendAndMove(t *testing.T, s *Store, l backend.Lease, errs chan error) (finish func(wait func()) []event.Event) {
	t.Helper()
	ctx := context.Background()
	done := make(chan struct{})
	var wg sync.WaitGroup
	loop := func(step func() error) {
		wg.Go(func() {
			for {
				select {
				case <-done:
					return
				default:
				}
				if err := step(); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	loop(func() error { _, err := s.Append(ctx, "b", prepared(t, 1), nil); return err })
	loop(func() error { _, err := s.MoveStaged(ctx, l, 16); return err })
	return func(wait func()) []event.Event {
		wait()
		close(done)
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		moveAll(t, s, l, 64)
		all := readAll(t, s, "b")
		checkDense(t, all)
		return all
	}
}

// TestMoveHeldBackByPreparedTransaction: a staged row locked by a prepared
// transaction (PREPARE TRANSACTION, which keeps its locks with no session
// until COMMIT or ROLLBACK PREPARED) holds the move back like any row
// lock, and the error names the prepared transaction instead of a pid;
// once it is rolled back, the events move. On a server of its own, with
// max_prepared_transactions above 0.
func TestMoveHeldBackByPreparedTransaction(t *testing.T) {
	t.Parallel()
	srv := pgtest.StartServer(t, "max_prepared_transactions=4")
	s, l := moverSetup(t, Config{URL: srv.URL})
	ctx := context.Background()
	conn := pgtest.Connect(t, srv.URL)
	enqueueCommitted(t, conn, "b", typeEvents("staged", 2))
	for _, q := range []string{`BEGIN`, `SELECT 1 FROM orisun_staged WHERE data::text = '0' FOR KEY SHARE`, `PREPARE TRANSACTION 'orisun-test-locker'`} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	_, err := s.MoveStaged(ctx, l, 100)
	if err == nil || !strings.Contains(err.Error(), `prepared transaction "orisun-test-locker"`) {
		t.Fatalf("move with a staged row locked by a prepared transaction: %v, want it named", err)
	}
	t.Logf("the move's error: %v", err)
	if _, err := conn.Exec(ctx, `ROLLBACK PREPARED 'orisun-test-locker'`); err != nil {
		t.Fatal(err)
	}
	if r := moveAll(t, s, l, 100); r.Moved != 2 {
		t.Fatalf("moved %+v once the prepared transaction ended, want 2", r)
	}
}

// moverSetup is enqueueSetup for a store of the test's own configuration
// or server: outboxStore with cfg, and b's lease taken by "mover".
func moverSetup(t *testing.T, cfg Config) (*Store, backend.Lease) {
	t.Helper()
	s := outboxStore(t, cfg)
	return s, moverLease(t, s)
}
