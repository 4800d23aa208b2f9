package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/orisun-io/orisun/backend"
	"github.com/orisun-io/orisun/event"
	"github.com/orisun-io/orisun/internal/pgtest"
	"github.com/orisun-io/orisun/internal/testutil"
)

// sqlEnqueue calls orisun_enqueue in tx.
func sqlEnqueue(ctx context.Context, tx pgx.Tx, boundary, events string) (int, error) {
	var n int
	err := tx.QueryRow(ctx, `SELECT orisun_enqueue($1, $2::json)`, boundary, events).Scan(&n)
	return n, err
}

// enqueueSetup is outboxSetup with boundary b's lease taken by "mover",
// which moves its staged events.
func enqueueSetup(t testing.TB) (*Store, string, *pgx.Conn, backend.Lease) {
	t.Helper()
	s, url, conn := outboxSetup(t)
	return s, url, conn, moverLease(t, s)
}

// moverLease takes boundary b's lease as "mover".
func moverLease(t testing.TB, s *Store) backend.Lease {
	t.Helper()
	l, err := s.AcquireLease(context.Background(), "b", "mover", nil, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// enqueueCommitted enqueues events in a transaction of its own on conn.
func enqueueCommitted(t *testing.T, conn *pgx.Conn, boundary, events string) int {
	t.Helper()
	ctx := context.Background()
	tx := pgtest.Begin(t, conn)
	n, err := sqlEnqueue(ctx, tx, boundary, events)
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	return n
}

// stagedOf is boundary b's staging as the status reads it.
func stagedOf(t *testing.T, s *Store, b string) StagedState {
	t.Helper()
	all, err := s.StagedStates(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range all {
		if st.Boundary == b {
			return st
		}
	}
	return StagedState{Boundary: b}
}

// moveAll moves until nothing is left, and returns the sum of the moves.
func moveAll(t *testing.T, s *Store, l backend.Lease, max int) MoveResult {
	t.Helper()
	var sum MoveResult
	for {
		r, err := s.MoveStaged(context.Background(), l, max)
		if err != nil {
			t.Fatal(err)
		}
		sum.Moved += r.Moved
		sum.Duplicates += r.Duplicates
		sum.SetAside += r.SetAside
		if !r.More && r.Moved+r.Duplicates+r.SetAside == 0 {
			return sum
		}
	}
}

// typeEvents is a JSON array of n events of type typ, data i.
func typeEvents(typ string, n int) string {
	var b strings.Builder
	b.WriteString("[")
	for i := range n {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `{"type":%q,"data":%d}`, typ, i)
	}
	b.WriteString("]")
	return b.String()
}

// TestEnqueueHoldsNoBoundary: two application transactions enqueue to one
// boundary and stay open; neither waits for the other (with a lock timeout
// of 2 s, a wait would fail the call), a Go append to the boundary goes
// through meanwhile (the head row is not held), and both commit. With the
// head row taken, as orisun_append does, the second enqueue would wait.
func TestEnqueueHoldsNoBoundary(t *testing.T) {
	t.Parallel()
	s, url, _, _ := enqueueSetup(t)
	ctx := context.Background()
	var txs []pgx.Tx
	for i := range 2 {
		tx := pgtest.Begin(t, pgtest.Connect(t, url))
		if _, err := tx.Exec(ctx, `SET LOCAL lock_timeout = '2s'`); err != nil {
			t.Fatal(err)
		}
		if n, err := sqlEnqueue(ctx, tx, "b", typeEvents(fmt.Sprintf("t%d", i), 3)); err != nil || n != 3 {
			t.Fatalf("enqueue %d while the other transaction is open: %d staged, %v", i, n, err)
		}
		txs = append(txs, tx)
	}
	actx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := s.Append(actx, "b", prepared(t, 1), nil); err != nil {
		t.Fatalf("a Go append while two enqueuing transactions are open: %v", err)
	}
	if st := stagedOf(t, s, "b"); st.Staged != 0 {
		t.Fatalf("%d staged events seen before their transactions committed", st.Staged)
	}
	for _, tx := range txs {
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if st := stagedOf(t, s, "b"); st.Staged != 6 || st.Oldest.IsZero() {
		t.Fatalf("staged %+v after both commits, want 6 with the oldest's time", st)
	}
	if b, err := s.Boundary(ctx, "b"); err != nil || b.Head != 1 {
		t.Fatalf("head %d (%v): the staged events must not be in the log before they are moved", b.Head, err)
	}
}

// TestEnqueueCommitRollbackMove_I1: only committed enqueues are moved (a
// rolled-back transaction, a rolled-back savepoint and a transaction that
// failed after the enqueue leave nothing), into dense positions after the
// Go appends, in the order of the calls, exactly once: a second move finds
// nothing and the staging table is empty.
func TestEnqueueCommitRollbackMove_I1(t *testing.T) {
	t.Parallel()
	s, _, conn, l := enqueueSetup(t)
	ctx := context.Background()
	if _, err := s.Append(ctx, "b", prepared(t, 2), nil); err != nil {
		t.Fatal(err)
	}
	enqueueCommitted(t, conn, "b", typeEvents("first", 3))

	tx := pgtest.Begin(t, conn)
	if _, err := sqlEnqueue(ctx, tx, "b", typeEvents("rolledback", 2)); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}

	tx = pgtest.Begin(t, conn)
	if _, err := tx.Exec(ctx, `SAVEPOINT sp`); err != nil {
		t.Fatal(err)
	}
	if _, err := sqlEnqueue(ctx, tx, "b", typeEvents("savepoint", 2)); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `ROLLBACK TO SAVEPOINT sp`); err != nil {
		t.Fatal(err)
	}
	if _, err := sqlEnqueue(ctx, tx, "b", typeEvents("second", 2)); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}

	tx = pgtest.Begin(t, conn)
	if _, err := sqlEnqueue(ctx, tx, "b", typeEvents("failed", 2)); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `SELECT 1/0`); err == nil {
		t.Fatal("division by zero succeeded")
	}
	if err := tx.Commit(ctx); err == nil {
		t.Fatal("the commit of a failed transaction succeeded")
	}

	r, err := s.MoveStaged(ctx, l, 100)
	if err != nil {
		t.Fatal(err)
	}
	if r.Moved != 5 || r.First != 3 || r.Last != 7 || r.More {
		t.Fatalf("move: %+v, want 5 events at 3..7", r)
	}
	all := readAll(t, s, "b")
	checkDense(t, all)
	want := []string{"first", "first", "first", "second", "second"}
	if len(all) != 2+len(want) {
		t.Fatalf("%d events in the log, want %d", len(all), 2+len(want))
	}
	data := []string{"0", "1", "2", "0", "1"}
	for i, typ := range want {
		if e := all[2+i]; e.Type != typ || string(e.Data) != data[i] {
			t.Fatalf("position %d: %s %s, want %s %s", e.Position, e.Type, e.Data, typ, data[i])
		}
	}
	if r, err := s.MoveStaged(ctx, l, 100); err != nil || r.Moved+r.Duplicates+r.SetAside != 0 {
		t.Fatalf("a second move: %+v, %v; want nothing", r, err)
	}
	if st := stagedOf(t, s, "b"); st.Staged != 0 {
		t.Fatalf("%d events still staged after the move", st.Staged)
	}
}

// TestEnqueueInvalidInput: the API's bad-input cases through
// orisun_enqueue: SQLSTATE class OR, the message naming the event and the
// field, and nothing staged.
func TestEnqueueInvalidInput(t *testing.T) {
	t.Parallel()
	_, _, conn, _ := enqueueSetup(t)
	ctx := context.Background()
	for _, c := range invalidAppends() {
		if c.cond != nil {
			continue // orisun_enqueue takes no condition
		}
		t.Run(c.name, func(t *testing.T) {
			tx := pgtest.Begin(t, conn)
			_, err := sqlEnqueue(ctx, tx, c.boundary, c.events)
			pe := pgErr(t, err)
			msg := strings.ReplaceAll(c.message, "orisun_append", "orisun_enqueue")
			if pe.Code != c.code || !strings.Contains(pe.Message, msg) {
				t.Fatalf("got %s %q, want %s with %q", pe.Code, pe.Message, c.code, msg)
			}
			if !strings.HasPrefix(pe.Code, "OR") || pe.Hint == "" {
				t.Fatalf("code %s hint %q: want class OR and the API's code", pe.Code, pe.Hint)
			}
			// The refusal aborted the transaction: the caller's COMMIT
			// rolls it back (checked below: nothing staged).
			if err := tx.Commit(ctx); !errors.Is(err, pgx.ErrTxCommitRollback) {
				t.Fatalf("COMMIT after the refusal: %v, want the transaction rolled back", err)
			}
		})
	}
	var n int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM orisun_staged`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d events staged by refused enqueues (%v)", n, err)
	}
}

// TestEnqueueIdempotentByID: an id staged or in the log with the same
// content is a no-op (0 staged, nothing moved twice); with other content it
// is refused at enqueue (ORCFL, naming the event and the field), whether
// the id is staged, in the log, or staged by a transaction that commits
// while the enqueue waits for it.
func TestEnqueueIdempotentByID(t *testing.T) {
	t.Parallel()
	s, url, conn, l := enqueueSetup(t)
	ctx := context.Background()
	const id1, id2 = "0190f7a2-0000-7000-8000-0000000000a1", "0190f7a2-0000-7000-8000-0000000000a2"
	ev := func(id string, data int) string { return fmt.Sprintf(`{"id":%q,"type":"a","data":%d}`, id, data) }
	if n := enqueueCommitted(t, conn, "b", "["+ev(id1, 1)+"]"); n != 1 {
		t.Fatalf("%d staged, want 1", n)
	}
	if n := enqueueCommitted(t, conn, "b", "["+ev(id1, 1)+"]"); n != 0 {
		t.Fatalf("a retry of a staged event staged %d, want 0", n)
	}
	refused := func(events, want string) {
		t.Helper()
		tx := pgtest.Begin(t, conn)
		defer func() { _ = tx.Rollback(ctx) }()
		_, err := sqlEnqueue(ctx, tx, "b", events)
		pe := pgErr(t, err)
		if pe.Code != "ORCFL" || pe.Hint != "conflict" || !strings.Contains(pe.Message, want) {
			t.Fatalf("got %s %q (hint %s), want ORCFL with %q", pe.Code, pe.Message, pe.Hint, want)
		}
	}
	refused("["+ev(id2, 0)+","+ev(id1, 2)+"]", "events[1].id: "+id1+" is already enqueued")
	if r := moveAll(t, s, l, 10); r.Moved != 1 {
		t.Fatalf("moved %+v, want 1 event", r)
	}
	if n := enqueueCommitted(t, conn, "b", "["+ev(id1, 1)+"]"); n != 0 {
		t.Fatalf("a retry of a moved event staged %d, want 0", n)
	}
	refused("["+ev(id1, 3)+"]", "events[0].id: "+id1+" is already stored at position 1 with other content")

	// A transaction stages id2 and stays open; another enqueues id2 with
	// other content: it waits, and is refused once the first commits.
	tx1 := pgtest.Begin(t, pgtest.Connect(t, url))
	if _, err := sqlEnqueue(ctx, tx1, "b", "["+ev(id2, 5)+"]"); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		tx, err := conn.Begin(ctx)
		if err != nil {
			done <- err
			return
		}
		_, err = sqlEnqueue(ctx, tx, "b", "["+ev(id2, 6)+"]")
		_ = tx.Rollback(ctx) // before done: the test then uses conn again
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("the enqueue of an id staged by an open transaction returned at once: %v", err)
	case <-time.After(200 * time.Millisecond):
	}
	if err := tx1.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	pe := pgErr(t, <-done)
	if pe.Code != "ORCFL" || !strings.Contains(pe.Message, "events[0].id: "+id2+" is already enqueued") {
		t.Fatalf("got %s %q, want ORCFL naming events[0].id", pe.Code, pe.Message)
	}
	if r := moveAll(t, s, l, 10); r.Moved != 1 {
		t.Fatalf("moved %+v, want the one event of the first transaction", r)
	}
	all := readAll(t, s, "b")
	checkDense(t, all)
	if len(all) != 2 || string(all[1].Data) != "5" {
		t.Fatalf("log %v, want id1 and the committed id2 (data 5)", all)
	}
}

// TestMoveSetsAsideConflicts: an event whose id is appended with other
// content after its enqueue looked (an API append) is set aside when the
// mover meets it, with the reason; the events behind it move; the status's
// figures show the count and the reason. An event appended with the same
// content is dropped as a retry.
func TestMoveSetsAsideConflicts(t *testing.T) {
	t.Parallel()
	s, _, conn, l := enqueueSetup(t)
	ctx := context.Background()
	in := prepared(t, 2)
	enqueueCommitted(t, conn, "b", fmt.Sprintf(`[{"id":%q,"type":"a","data":"staged"}]`, in[0].ID))
	enqueueCommitted(t, conn, "b", fmt.Sprintf(`[{"id":%q,"type":%q,"data":%s}]`, in[1].ID, in[1].Type, in[1].Data))
	enqueueCommitted(t, conn, "b", typeEvents("behind", 3))
	if _, err := s.Append(ctx, "b", in, nil); err != nil {
		t.Fatal(err)
	}
	r, err := s.MoveStaged(ctx, l, 100)
	if err != nil {
		t.Fatal(err)
	}
	if r.Moved != 3 || r.SetAside != 1 || r.Duplicates != 1 || r.First != 3 || r.Last != 5 {
		t.Fatalf("move: %+v, want 3 moved at 3..5, 1 set aside, 1 duplicate", r)
	}
	all := readAll(t, s, "b")
	checkDense(t, all)
	if len(all) != 5 || all[2].Type != "behind" {
		t.Fatalf("log holds %d events (position 3: %s), want the 2 appended and the 3 behind the conflict", len(all), all[2].Type)
	}
	st := stagedOf(t, s, "b")
	if st.Staged != 0 || st.SetAside != 1 || !strings.Contains(st.Reason, in[0].ID) || !strings.Contains(st.Reason, "position 1 with other content") {
		t.Fatalf("staging %+v, want nothing staged, 1 set aside with the id and its position in the reason", st)
	}
}

// TestMoveFencedByLease: a holder whose term is not the current one (the
// lease expired and another node took it) moves nothing: ErrLeaseLost and
// the events stay staged for the new holder.
func TestMoveFencedByLease(t *testing.T) {
	t.Parallel()
	s, _, conn := outboxSetup(t)
	ctx := context.Background()
	old, err := s.AcquireLease(ctx, "b", "old", nil, 50*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	enqueueCommitted(t, conn, "b", typeEvents("a", 2))
	time.Sleep(100 * time.Millisecond)
	cur, err := s.AcquireLease(ctx, "b", "new", nil, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.MoveStaged(ctx, old, 100); !errors.Is(err, event.ErrLeaseLost) {
		t.Fatalf("a move by the old term: %v, want ErrLeaseLost", err)
	}
	if st := stagedOf(t, s, "b"); st.Staged != 2 {
		t.Fatalf("%d staged after the refused move, want 2", st.Staged)
	}
	if r, err := s.MoveStaged(ctx, cur, 100); err != nil || r.Moved != 2 {
		t.Fatalf("the current holder's move: %+v, %v", r, err)
	}
}

// TestMoveSkipsOpenTransactions: a transaction that enqueued and stays
// open does not hold the mover back: events enqueued and committed after
// it move at once, and its own events move once it commits, after them
// (positions follow the order the mover finds committed events, not the
// order the transactions began).
func TestMoveSkipsOpenTransactions(t *testing.T) {
	t.Parallel()
	s, url, _, l := enqueueSetup(t)
	ctx := context.Background()
	tx := pgtest.Begin(t, pgtest.Connect(t, url))
	if _, err := sqlEnqueue(ctx, tx, "b", typeEvents("early", 2)); err != nil {
		t.Fatal(err)
	}
	enqueueCommitted(t, pgtest.Connect(t, url), "b", typeEvents("late", 2))
	mctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if r, err := s.MoveStaged(mctx, l, 100); err != nil || r.Moved != 2 {
		t.Fatalf("move with an enqueuing transaction open: %+v, %v; want the 2 committed events", r, err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if r := moveAll(t, s, l, 100); r.Moved != 2 {
		t.Fatalf("moved %+v after the commit, want 2", r)
	}
	all := readAll(t, s, "b")
	checkDense(t, all)
	if len(all) != 4 || all[0].Type != "late" || all[2].Type != "early" {
		t.Fatalf("log %v: want the late transaction's events first", all)
	}
}

// TestMoveBatchesWholeCalls: a move takes at most its batch, in whole
// enqueue calls (a call larger than the batch moves whole), and says when
// more may wait; the events of a call stay consecutive and in order.
func TestMoveBatchesWholeCalls(t *testing.T) {
	t.Parallel()
	s, _, conn, l := enqueueSetup(t)
	ctx := context.Background()
	for _, n := range []int{3, 3, 10, 2, 3, 1} {
		enqueueCommitted(t, conn, "b", typeEvents(fmt.Sprintf("call%d", n), n))
	}
	var got []int
	for {
		r, err := s.MoveStaged(ctx, l, 5)
		if err != nil {
			t.Fatal(err)
		}
		if r.Moved == 0 {
			break
		}
		got = append(got, r.Moved)
	}
	// The fourth move fills the batch exactly with whole calls.
	if fmt.Sprint(got) != "[3 3 10 5 1]" {
		t.Fatalf("moves of %v events, want [3 3 10 5 1] (whole calls, at most 5 unless one call is larger)", got)
	}
	all := readAll(t, s, "b")
	checkDense(t, all)
	want := []string{"call3", "call3", "call3", "call3", "call3", "call3"}
	for range 10 {
		want = append(want, "call10")
	}
	want = append(want, "call2", "call2", "call3", "call3", "call3", "call1")
	for i, e := range all {
		if e.Type != want[i] {
			t.Fatalf("position %d holds %s, want %s: a call's events not consecutive", e.Position, e.Type, want[i])
		}
		if i >= 6 && i < 16 && string(e.Data) != fmt.Sprint(i-6) {
			t.Fatalf("position %d holds data %s, want %d: a call's events out of order", e.Position, e.Data, i-6)
		}
	}
}

// TestEnqueueConcurrentWithAppends_I1: 32 application transactions enqueue
// (a quarter rolled back) while Go appends and a mover run, to one
// boundary: the log ends dense, with every committed event once and
// nothing of a rolled-back transaction, and nothing staged.
func TestEnqueueConcurrentWithAppends_I1(t *testing.T) {
	t.Parallel()
	s, url, _, l := enqueueSetup(t)
	ctx := context.Background()
	const writers, rounds = 32, 5
	var wg sync.WaitGroup
	errs := make(chan error, writers+2)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			conn, err := pgx.Connect(ctx, url)
			if err != nil {
				errs <- err
				return
			}
			defer conn.Close(ctx)
			for r := range rounds {
				tx, err := conn.Begin(ctx)
				if err != nil {
					errs <- err
					return
				}
				typ := "keep"
				if (w+r)%4 == 0 {
					typ = "drop"
				}
				if _, err := sqlEnqueue(ctx, tx, "b", fmt.Sprintf(`[{"type":%q,"data":"%d-%d"}]`, typ, w, r)); err != nil {
					_ = tx.Rollback(ctx)
					errs <- err
					return
				}
				if typ == "drop" {
					err = tx.Rollback(ctx)
				} else {
					err = tx.Commit(ctx)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	all := appendAndMove(t, s, l, errs)(wg.Wait)
	seen := map[string]bool{}
	kept := 0
	for _, e := range all {
		switch e.Type {
		case "drop":
			t.Fatalf("position %d holds an event of a rolled-back transaction", e.Position)
		case "keep":
			if seen[string(e.Data)] {
				t.Fatalf("event %s at position %d twice", e.Data, e.Position)
			}
			seen[string(e.Data)] = true
			kept++
		}
	}
	if want := writers * rounds * 3 / 4; kept != want {
		t.Fatalf("%d enqueued events in the log, want %d", kept, want)
	}
	if st := stagedOf(t, s, "b"); st.Staged != 0 {
		t.Fatalf("%d events left staged", st.Staged)
	}
}

// prepared is n prepared events of type "go" for boundary b (ids
// generated), as the Go append takes them.
func prepared(t *testing.T, n int) []event.Input {
	t.Helper()
	in := make([]event.Input, n)
	for i := range in {
		in[i] = event.Input{Type: "go", Data: json.RawMessage(fmt.Sprint(i))}
	}
	out, err := event.Prepare("b", in, outboxLimits)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// benchEvents is a JSON array of n events of 1 KB of data, one tag, ids
// generated by the function called.
func benchEvents(n int) string {
	data := `{"p":"` + strings.Repeat("x", 1000) + `"}`
	var sb strings.Builder
	sb.WriteString("[")
	for i := range n {
		if i > 0 {
			sb.WriteString(",")
		}
		sb.WriteString(`{"type":"bench.event","data":` + data + `,"tags":["order:1"]}`)
	}
	sb.WriteString("]")
	return sb.String()
}

// BenchmarkOutboxEnqueue reports what one orisun_enqueue costs in a
// transaction of its own (BEGIN, the call, COMMIT; one connection), with 1
// and 64 events of 1 KB as BenchmarkOutboxAppend, and what the mover then
// costs per event (the staged events of those calls moved in batches of
// 1,000, timed alone). Reporting only.
func BenchmarkOutboxEnqueue(b *testing.B) {
	for _, n := range []int{1, 64} {
		events := benchEvents(n)
		b.Run(fmt.Sprintf("enqueue/events=%d", n), func(b *testing.B) {
			_, _, conn, _ := enqueueSetup(b)
			ctx := context.Background()
			for b.Loop() {
				tx, err := conn.Begin(ctx)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := sqlEnqueue(ctx, tx, "b", events); err != nil {
					b.Fatal(err)
				}
				if err := tx.Commit(ctx); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N*n)/b.Elapsed().Seconds(), "events/s")
		})
		b.Run(fmt.Sprintf("move/events=%d", n), func(b *testing.B) {
			s, _, conn, l := enqueueSetup(b)
			ctx := context.Background()
			// Each round stages 1,000 events (or the nearest whole calls)
			// untimed, then times their move.
			calls := max(1, 1000/n)
			moved := 0
			for b.Loop() {
				b.StopTimer()
				tx, err := conn.Begin(ctx)
				if err != nil {
					b.Fatal(err)
				}
				for range calls {
					if _, err := sqlEnqueue(ctx, tx, "b", events); err != nil {
						b.Fatal(err)
					}
				}
				if err := tx.Commit(ctx); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				r, err := s.MoveStaged(ctx, l, 1000)
				if err != nil || r.Moved != calls*n {
					b.Fatalf("moved %+v (%v), want %d", r, err, calls*n)
				}
				moved += r.Moved
			}
			b.ReportMetric(float64(moved)/b.Elapsed().Seconds(), "events/s")
		})
	}
}

// TestMoveWaitingForHeadRowHoldsNoLease: a move that waits for the head row
// (an application transaction holds it after orisun_append) holds nothing
// of the lease meanwhile: the holder's renewal and checkpoint write go
// through at once, and the move completes once the transaction commits,
// after its event. Were the lease row read FOR SHARE before the head row,
// the renewal would wait for the application's transaction.
func TestMoveWaitingForHeadRowHoldsNoLease(t *testing.T) {
	t.Parallel()
	s, url, _, l := enqueueSetup(t)
	ctx := context.Background()
	enqueueCommitted(t, pgtest.Connect(t, url), "b", typeEvents("staged", 2))
	tx := pgtest.Begin(t, pgtest.Connect(t, url))
	if _, err := sqlAppend(ctx, tx, "b", typeEvents("held", 1), nil); err != nil {
		t.Fatal(err)
	}
	moved := make(chan error, 1)
	go func() {
		r, err := s.MoveStaged(ctx, l, 100)
		if err == nil && (r.Moved != 2 || r.First != 2) {
			err = fmt.Errorf("move %+v, want 2 events from position 2", r)
		}
		moved <- err
	}()
	time.Sleep(200 * time.Millisecond)
	rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if _, err := s.RenewLease(rctx, l, time.Minute); err != nil {
		t.Fatalf("renewal while a move waits for the head row: %v", err)
	}
	if err := s.SaveCheckpoint(rctx, "b", l, 0); err != nil {
		t.Fatalf("checkpoint write while a move waits for the head row: %v", err)
	}
	testutil.NotYet(t, moved, "the move returned while the head row was held")
	testutil.Release(t, moved, func() error { return tx.Commit(ctx) })
	checkDense(t, readAll(t, s, "b"))
}
