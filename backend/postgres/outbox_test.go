package postgres

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/orisun-io/orisun/api"
	"github.com/orisun-io/orisun/event"
	"github.com/orisun-io/orisun/internal/pgtest"
	"github.com/orisun-io/orisun/stream"
)

// outboxLimits are the limits the outbox tests record (those of a node with
// the defaults and NATS's default max payload).
var outboxLimits = event.Limits{MaxAppendEvents: 10_000, MaxAppendBytes: 32 << 20, MaxEventBytes: 1 << 20, EncodedSize: stream.EncodedSize}

// outboxSetup opens a store on a fresh database with boundary "b" and the
// limits recorded, and returns it with the database's URL and a
// connection of the test's own to it (an application's), closed with the
// test.
func outboxSetup(t testing.TB) (*Store, string, *pgx.Conn) {
	t.Helper()
	url := pgtest.URL(t)
	return outboxStore(t, Config{URL: url}), url, pgtest.Connect(t, url)
}

// outboxStore opens a store with cfg (setup) with boundary "b" and the
// limits recorded.
func outboxStore(t testing.TB, cfg Config) *Store {
	t.Helper()
	s := setup(t, cfg)
	ctx := context.Background()
	if _, _, err := s.CreateBoundary(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	if err := s.RecordAppendLimits(ctx, outboxLimits, "test"); err != nil {
		t.Fatal(err)
	}
	return s
}

// sqlAppend calls orisun_append in tx.
func sqlAppend(ctx context.Context, tx pgx.Tx, boundary, events string, cond any) (event.AppendResult, error) {
	var r event.AppendResult
	var first, last int64
	err := tx.QueryRow(ctx, `SELECT epoch::text, first_position, last_position FROM orisun_append($1, $2::json, $3::json)`,
		boundary, events, cond).Scan(&r.Epoch, &first, &last)
	r.First, r.Last = uint64(first), uint64(last)
	return r, err
}

// pgErr returns err's PostgreSQL error, failing the test when it has none.
func pgErr(t *testing.T, err error) *pgconn.PgError {
	t.Helper()
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		t.Fatalf("got %v, want a PostgreSQL error", err)
	}
	return pe
}

// readAll reads every event of boundary b.
func readAll(t *testing.T, s *Store, b string) []event.Event {
	t.Helper()
	var all []event.Event
	for {
		_, evs, err := s.Read(context.Background(), b, uint64(len(all)), 10_000, nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) == 0 {
			return all
		}
		all = append(all, evs...)
	}
}

// checkDense fails unless evs hold positions 1..len(evs) in order (I1).
func checkDense(t *testing.T, evs []event.Event) {
	t.Helper()
	for i, e := range evs {
		if e.Position != uint64(i+1) {
			t.Fatalf("I1: event %d has position %d, want %d", i, e.Position, i+1)
		}
	}
}

// TestOutboxEncodedSizeMatchesStream: orisun_encoded_size, the size
// orisun_append holds against the NATS max payload, is stream.EncodedSize
// for events with every kind of byte its JSON encoding escapes.
func TestOutboxEncodedSizeMatchesStream(t *testing.T) {
	t.Parallel()
	_, url, _ := outboxSetup(t)
	conn := pgtest.Connect(t, url)
	cases := []event.Input{
		{ID: "0190f7a2-0000-7000-8000-000000000001", Type: "a", Data: json.RawMessage(`1`)},
		{ID: "0190f7a2-0000-7000-8000-000000000002", Type: "seat.booked:x-y_z", Data: json.RawMessage(`{"a":"<&>"}`),
			Metadata: json.RawMessage(`{"m":true}`), Tags: []string{"t1", "<b>&", "q\"uote\\", "ctl\x01\x1f\t\n\r\b\f\x0b", "é ü 漢", "\u2028\u2029", "\x7f"}},
		{ID: "0190f7a2-0000-7000-8000-000000000003", Type: "x", Data: json.RawMessage(`"` + strings.Repeat("y", 3000) + `"`), Tags: []string{}},
	}
	for i, in := range cases {
		var got int
		var md *string
		if in.Metadata != nil {
			m := string(in.Metadata)
			md = &m
		}
		if in.Tags == nil {
			in.Tags = []string{}
		}
		if err := conn.QueryRow(context.Background(), `SELECT orisun_encoded_size($1, $2, $3, $4, $5, $6)`,
			"b", in.ID, in.Type, in.Tags, string(in.Data), md).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if want := stream.EncodedSize("b", &in); got != want {
			t.Errorf("case %d: orisun_encoded_size %d, stream.EncodedSize %d", i, got, want)
		}
	}
}

// TestOutboxCommitRollback_I1: events appended with orisun_append exist if
// and only if the caller's transaction commits: a committed transaction's
// events are in the log at dense positions with the application's own row;
// a rolled-back transaction, a rolled-back savepoint and a transaction that
// failed after the append leave nothing, and their positions are reused.
func TestOutboxCommitRollback_I1(t *testing.T) {
	t.Parallel()
	s, _, conn := outboxSetup(t)
	ctx := context.Background()
	if _, err := conn.Exec(ctx, `CREATE TABLE orders (id int PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	run := func(fn func(tx pgx.Tx) error) error {
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = tx.Rollback(ctx) }()
		if err := fn(tx); err != nil {
			return err
		}
		return tx.Commit(ctx)
	}
	order := func(tx pgx.Tx, id int) error {
		_, err := tx.Exec(ctx, `INSERT INTO orders VALUES ($1)`, id)
		return err
	}
	// Committed: two events at 1, 2.
	err := run(func(tx pgx.Tx) error {
		if err := order(tx, 1); err != nil {
			return err
		}
		r, err := sqlAppend(ctx, tx, "b", `[{"type":"order.placed","data":{"order":1},"tags":["order:1"]},{"type":"order.paid","data":{"order":1}}]`, nil)
		if err == nil && (r.First != 1 || r.Last != 2) {
			t.Errorf("committed append got %d..%d, want 1..2", r.First, r.Last)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	// Rolled back.
	errRollback := errors.New("the application changed its mind")
	err = run(func(tx pgx.Tx) error {
		if err := order(tx, 2); err != nil {
			return err
		}
		if _, err := sqlAppend(ctx, tx, "b", `[{"type":"order.placed","data":{"order":2}}]`, nil); err != nil {
			return err
		}
		return errRollback
	})
	if !errors.Is(err, errRollback) {
		t.Fatal(err)
	}
	// A savepoint rolled back, then another append committed: position 3.
	err = run(func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SAVEPOINT sp`); err != nil {
			return err
		}
		if _, err := sqlAppend(ctx, tx, "b", `[{"type":"order.placed","data":{"order":3}}]`, nil); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `ROLLBACK TO SAVEPOINT sp`); err != nil {
			return err
		}
		if err := order(tx, 4); err != nil {
			return err
		}
		r, err := sqlAppend(ctx, tx, "b", `[{"type":"order.placed","data":{"order":4}}]`, nil)
		if err == nil && (r.First != 3 || r.Last != 3) {
			t.Errorf("append after the rolled-back savepoint got %d..%d, want 3..3", r.First, r.Last)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	// An error after the append, in the same transaction: the commit
	// answers ROLLBACK.
	err = run(func(tx pgx.Tx) error {
		if _, err := sqlAppend(ctx, tx, "b", `[{"type":"order.placed","data":{"order":5}}]`, nil); err != nil {
			return err
		}
		if err := order(tx, 1); err == nil {
			t.Error("a duplicate order id was accepted")
		}
		return nil
	})
	if err == nil {
		t.Fatal("the commit of a failed transaction succeeded")
	}

	evs := readAll(t, s, "b")
	checkDense(t, evs)
	var got []string
	for _, e := range evs {
		got = append(got, string(e.Data))
	}
	if want := []string{`{"order":1}`, `{"order":1}`, `{"order":4}`}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("the log holds %v, want %v (only committed work)", got, want)
	}
	if evs[0].Type != "order.placed" || fmt.Sprint(evs[0].Tags) != "[order:1]" || len(evs[1].Tags) != 0 {
		t.Fatalf("stored events %+v", evs)
	}
	for _, e := range evs {
		if e.ID[14] != '7' {
			t.Fatalf("generated id %s is not a UUIDv7", e.ID)
		}
	}
	var orders int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM orders`).Scan(&orders); err != nil || orders != 2 {
		t.Fatalf("orders: %d (%v), want 2", orders, err)
	}
	b, err := s.Boundary(ctx, "b")
	if err != nil || b.Head != 3 {
		t.Fatalf("head %d (%v), want 3", b.Head, err)
	}
}

// TestOutboxIdempotentByID: orisun_append is idempotent by id as the Go
// append is (docs/design.md §3), across both paths: a retry through SQL or
// through the Go append returns the stored positions and writes nothing,
// JSON that differs only in white space included; the same id with other
// content is a conflict (SQLSTATE ORCFL) naming the position.
func TestOutboxIdempotentByID(t *testing.T) {
	t.Parallel()
	s, _, conn := outboxSetup(t)
	ctx := context.Background()
	const id1, id2 = "0190f7a2-0000-7000-8000-000000000001", "0190f7a2-0000-7000-8000-000000000002"
	evs := `[{"id":"` + id1 + `","type":"a","data":{"x": 1, "s": "a b"},"tags":["t"]},{"id":"` + id2 + `","type":"a","data":[1, 2],"metadata":{"m": 1}}]`
	appendTx := func(events string) (event.AppendResult, error) {
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = tx.Rollback(ctx) }()
		r, err := sqlAppend(ctx, tx, "b", events, nil)
		if err != nil {
			return r, err
		}
		return r, tx.Commit(ctx)
	}
	r1, err := appendTx(evs)
	if err != nil || r1.First != 1 || r1.Last != 2 {
		t.Fatalf("first append: %+v %v", r1, err)
	}
	// The same through SQL, upper-case ids and other white space.
	r2, err := appendTx(strings.ReplaceAll(strings.ReplaceAll(evs, id1, strings.ToUpper(id1)), `{"x": 1`, `{ "x" :1`))
	if err != nil || r2 != r1 {
		t.Fatalf("SQL retry: %+v %v, want %+v", r2, err, r1)
	}
	// The same through the Go append.
	in, err := event.Prepare("b", []event.Input{
		{ID: id1, Type: "a", Data: json.RawMessage(`{"x":1,"s":"a b"}`), Tags: []string{"t"}},
		{ID: id2, Type: "a", Data: json.RawMessage(`[1,2]`), Metadata: json.RawMessage(`{"m":1}`)},
	}, outboxLimits)
	if err != nil {
		t.Fatal(err)
	}
	r3, err := s.Append(ctx, "b", in, nil)
	if err != nil || r3 != r1 {
		t.Fatalf("Go retry of a SQL append: %+v %v, want %+v", r3, err, r1)
	}
	// A Go append retried through SQL.
	in, err = event.Prepare("b", []event.Input{{Type: "g", Data: json.RawMessage(`{"y":"z"}`)}}, outboxLimits)
	if err != nil {
		t.Fatal(err)
	}
	r4, err := s.Append(ctx, "b", in, nil)
	if err != nil {
		t.Fatal(err)
	}
	r5, err := appendTx(`[{"id":"` + in[0].ID + `","type":"g","data":{"y" : "z"}}]`)
	if err != nil || r5 != r4 {
		t.Fatalf("SQL retry of a Go append: %+v %v, want %+v", r5, err, r4)
	}
	// Other content.
	for _, c := range []struct{ events, message string }{
		{`[{"id":"` + id1 + `","type":"a","data":{"x":2,"s":"a b"},"tags":["t"]}]`, "events[0].id " + id1 + " is already stored at position 1 with other content"},
		{`[{"id":"` + id1 + `","type":"a","data":{"x":1,"s":"a b"}}]`, "with other content"},
		{`[{"type":"n","data":1},{"id":"` + id2 + `","type":"a","data":[1,2],"metadata":{"m":1}}]`, "events[1].id " + id2 + " is already stored at position 2 but events[0].id"},
		{`[{"id":"` + id2 + `","type":"a","data":[1,2],"metadata":{"m":1}},{"id":"` + id1 + `","type":"a","data":{"x":1,"s":"a b"},"tags":["t"]}]`, "a retry must resend the events in their original order"},
	} {
		_, err := appendTx(c.events)
		pe := pgErr(t, err)
		if pe.Code != "ORCFL" || pe.Hint != "conflict" || !strings.Contains(pe.Message, c.message) {
			t.Errorf("%s: got %s %q (hint %q), want ORCFL with %q", c.events, pe.Code, pe.Message, pe.Hint, c.message)
		}
	}
	all := readAll(t, s, "b")
	checkDense(t, all)
	if len(all) != 3 {
		t.Fatalf("%d events stored, want 3", len(all))
	}
}

// TestOutboxConditionFails: a condition that matches an event after its
// position aborts the caller's transaction with the conflict's position in
// the message (SQLSTATE ORCFL), and nothing of the transaction is written;
// one that matches nothing appends.
func TestOutboxConditionFails(t *testing.T) {
	t.Parallel()
	s, _, conn := outboxSetup(t)
	ctx := context.Background()
	in, _ := event.Prepare("b", []event.Input{
		{Type: "seat.booked", Data: json.RawMessage(`{"seat":1}`), Tags: []string{"seat:1"}},
		{Type: "seat.booked", Data: json.RawMessage(`{"seat":2}`), Tags: []string{"seat:2", "row:a"}},
	}, outboxLimits)
	if _, err := s.Append(ctx, "b", in, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `CREATE TABLE seats (n int)`); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		cond string
		at   int // 0: passes
	}{
		{`{"query":{"items":[{"tags":["seat:2"]}]},"after":0}`, 2},
		{`{"query":{"items":[{"tags":["seat:2","row:a"]}]},"after":1}`, 2},
		{`{"query":{"items":[{"tags":["seat:2","row:b"]}]},"after":0}`, 0},
		{`{"query":{"items":[{"types":["other"]},{"types":["seat.booked"],"tags":["seat:1"]}]},"after":0}`, 1},
		{`{"query":{"items":[{"tags":["seat:1"]}]},"after":1}`, 0},
		{`{"after":1}`, 2},
		{`{"query":{"items":[]},"after":0}`, 1},
		{`{"query":{"items":[{"types":["seat.booked"]}]},"after":5}`, 0},
		{`{"query":{"items":[{"types":["seat.booked"]}]},"after":18446744073709551615}`, 0},
		{`{"query":{"items":[{"types":["other","seat.booked"],"tags":["row:a"]}]},"after":0}`, 2},
		{`{"query":{"items":[{"types":["other"],"tags":["seat:1"]},{"tags":["seat:3"]}]},"after":0}`, 0},
	} {
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO seats VALUES (1)`); err != nil {
			t.Fatal(err)
		}
		_, err = sqlAppend(ctx, tx, "b", `[{"type":"seat.booked","data":{"seat":9},"tags":["seat:9"]}]`, c.cond)
		if c.at == 0 {
			if err != nil {
				t.Fatalf("%s: %v, want it to pass", c.cond, err)
			}
			_ = tx.Rollback(ctx)
			continue
		}
		pe := pgErr(t, err)
		if want := fmt.Sprintf("an event matching the query exists at position %d", c.at); pe.Code != "ORCFL" || !strings.Contains(pe.Message, want) {
			t.Fatalf("%s: got %s %q, want ORCFL with %q", c.cond, pe.Code, pe.Message, want)
		}
		// The caller's transaction is aborted: its commit is a rollback.
		if err := tx.Commit(ctx); err == nil {
			t.Fatalf("%s: the transaction committed after a failed condition", c.cond)
		}
	}
	var seats int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM seats`).Scan(&seats); err != nil || seats != 0 {
		t.Fatalf("seats %d (%v), want 0", seats, err)
	}
	if all := readAll(t, s, "b"); len(all) != 2 {
		t.Fatalf("%d events, want 2", len(all))
	}
}

// TestOutboxInvalidInput: every bad append is refused with SQLSTATE class
// OR (the API's code as the hint), a message naming the event, the field
// and the limit in the API's words, and nothing written.
func TestOutboxInvalidInput(t *testing.T) {
	t.Parallel()
	s, _, conn := outboxSetup(t)
	ctx := context.Background()
	for _, c := range invalidAppends() {
		t.Run(c.name, func(t *testing.T) {
			tx := pgtest.Begin(t, conn)
			_, err := sqlAppend(ctx, tx, c.boundary, c.events, c.cond)
			pe := pgErr(t, err)
			if pe.Code != c.code || !strings.Contains(pe.Message, c.message) {
				t.Fatalf("got %s %q, want %s with %q", pe.Code, pe.Message, c.code, c.message)
			}
			if !strings.HasPrefix(pe.Code, "OR") || pe.Hint == "" {
				t.Fatalf("code %s hint %q: want class OR and the API's code", pe.Code, pe.Hint)
			}
			// The refusal aborted the transaction: the caller's COMMIT
			// rolls it back (checked below: nothing in the log).
			if err := tx.Commit(ctx); !errors.Is(err, pgx.ErrTxCommitRollback) {
				t.Fatalf("COMMIT after the refusal: %v, want the transaction rolled back", err)
			}
		})
	}
	if all := readAll(t, s, "b"); len(all) != 0 {
		t.Fatalf("%d events written by refused appends", len(all))
	}
}

// TestOutboxLimits: orisun_append refuses appends over the limits the nodes
// recorded; with no limits recorded it refuses every append (ORUNV); a
// node that accepts less than the recorded limits is refused, naming both,
// and one that accepts more starts (a rolling change of the limits).
func TestOutboxLimits(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	s := setup(t, Config{URL: url})
	ctx := context.Background()
	if _, _, err := s.CreateBoundary(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	conn := pgtest.Connect(t, url)
	try := func(events string) error {
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = tx.Rollback(ctx) }()
		_, err = sqlAppend(ctx, tx, "b", events, nil)
		return err
	}
	if pe := pgErr(t, try(`[{"type":"a","data":1}]`)); pe.Code != "ORUNV" || !strings.Contains(pe.Message, "orisun_append_limits") {
		t.Fatalf("with no limits recorded: %s %q", pe.Code, pe.Message)
	}
	lim := event.Limits{MaxAppendEvents: 2, MaxAppendBytes: 1024, MaxEventBytes: 1100}
	if err := s.RecordAppendLimits(ctx, lim, "node-a"); err != nil {
		t.Fatal(err)
	}
	if err := s.RecordAppendLimits(ctx, lim, "node-b"); err != nil {
		t.Fatalf("the same limits again: %v", err)
	}
	// A node that accepts more than the row starts (the row was lowered
	// first, or is raised last: docs/outbox.md "Changing the limits"); one
	// that accepts less is refused, naming both.
	higher := lim
	higher.MaxAppendBytes, higher.MaxEventBytes = 2048, 4096
	if err := s.RecordAppendLimits(ctx, higher, "node-c"); err != nil {
		t.Fatalf("limits above the row's: %v", err)
	}
	for _, lower := range []event.Limits{
		{MaxAppendEvents: 1, MaxAppendBytes: 2048, MaxEventBytes: 4096},
		{MaxAppendEvents: 2, MaxAppendBytes: 1000, MaxEventBytes: 4096},
		{MaxAppendEvents: 2, MaxAppendBytes: 2048, MaxEventBytes: 1099},
	} {
		err := s.RecordAppendLimits(ctx, lower, "node-d")
		if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("ORISUN_MAX_APPEND_EVENTS %d, ORISUN_MAX_APPEND_BYTES %d, NATS max payload %d",
			lower.MaxAppendEvents, lower.MaxAppendBytes, lower.MaxEventBytes)) ||
			!strings.Contains(err.Error(), "max_append_events 2, max_append_bytes 1024, max_event_bytes 1100") || !strings.Contains(err.Error(), "node-a") {
			t.Fatalf("limits %+v below the row's: %v, want a refusal naming both", lower, err)
		}
	}
	for _, c := range []struct{ events, code, message string }{
		{`[{"type":"a","data":1},{"type":"a","data":1},{"type":"a","data":1}]`, "ORBIG", "events: the append holds 3 events, the limit is 2"},
		{`[{"type":"a","data":"` + strings.Repeat("x", 600) + `"}]`, "ORBIG", "the limit (NATS max payload) is 1100"},
		{`[{"type":"a","data":"` + strings.Repeat("x", 500) + `"},{"type":"a","data":"` + strings.Repeat("x", 500) + `"}]`, "ORBIG", "events: the append is over 1078 bytes (at events[1]), the limit is 1024"},
	} {
		if pe := pgErr(t, try(c.events)); pe.Code != c.code || !strings.Contains(pe.Message, c.message) {
			t.Errorf("got %s %q, want %s with %q", pe.Code, pe.Message, c.code, c.message)
		}
	}
	if err := try(`[{"type":"a","data":"` + strings.Repeat("x", 400) + `"}]`); err != nil {
		t.Fatalf("an append within the limits: %v", err)
	}
}

// TestOutboxConcurrentWithGoAppends_I1: application transactions appending
// with orisun_append (a third of them rolled back) and Go appends to the
// same boundary at once: positions 1..head are dense, every committed event
// is stored once, nothing of a rolled-back transaction is.
func TestOutboxConcurrentWithGoAppends_I1(t *testing.T) {
	t.Parallel()
	s, url, setupConn := outboxSetup(t)
	ctx := context.Background()
	if _, err := setupConn.Exec(ctx, `CREATE TABLE app (id text PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	const sqlWorkers, sqlTxs, goWorkers, goAppends = 12, 10, 4, 20
	var mu sync.Mutex
	committed, rolledBack := map[string]bool{}, map[string]bool{}
	var wg sync.WaitGroup
	errs := make(chan error, sqlWorkers+goWorkers)
	for w := range sqlWorkers {
		conn := pgtest.Connect(t, url)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range sqlTxs {
				id := event.NewID()
				tx, err := conn.Begin(ctx)
				if err != nil {
					errs <- err
					return
				}
				if _, err := tx.Exec(ctx, `INSERT INTO app VALUES ($1)`, id); err != nil {
					errs <- err
					return
				}
				if _, err := sqlAppend(ctx, tx, "b", fmt.Sprintf(`[{"id":"%s","type":"sql","data":{"w":%d,"i":%d}}]`, id, w, i), nil); err != nil {
					errs <- err
					return
				}
				keep := (w+i)%3 != 0
				if keep {
					err = tx.Commit(ctx)
				} else {
					err = tx.Rollback(ctx)
				}
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				if keep {
					committed[id] = true
				} else {
					rolledBack[id] = true
				}
				mu.Unlock()
			}
		}()
	}
	for w := range goWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range goAppends {
				in, err := event.Prepare("b", []event.Input{
					{Type: "go", Data: json.RawMessage(fmt.Sprintf(`{"w":%d,"i":%d}`, w, i))},
					{Type: "go", Data: json.RawMessage(`2`)},
				}, outboxLimits)
				if err != nil {
					errs <- err
					return
				}
				if _, err := s.Append(ctx, "b", in, nil); err != nil {
					errs <- err
					return
				}
				mu.Lock()
				committed[in[0].ID], committed[in[1].ID] = true, true
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	all := readAll(t, s, "b")
	checkDense(t, all)
	seen := map[string]bool{}
	for _, e := range all {
		if seen[e.ID] {
			t.Fatalf("event %s stored twice", e.ID)
		}
		seen[e.ID] = true
		if !committed[e.ID] {
			t.Fatalf("event %s at %d is not of a committed transaction (rolled back: %v)", e.ID, e.Position, rolledBack[e.ID])
		}
	}
	if len(all) != len(committed) || len(rolledBack) == 0 {
		t.Fatalf("%d events stored, %d committed, %d rolled back", len(all), len(committed), len(rolledBack))
	}
	b, err := s.Boundary(ctx, "b")
	if err != nil || b.Head != uint64(len(all)) {
		t.Fatalf("head %d (%v), want %d", b.Head, err, len(all))
	}
	t.Logf("%d events, %d of them from %d SQL transactions (%d rolled back)", len(all), len(committed)-2*goWorkers*goAppends,
		sqlWorkers*sqlTxs, len(rolledBack))
}

// BenchmarkOutboxAppend reports what one orisun_append costs in a
// transaction of its own (BEGIN, the call, COMMIT; one connection, so the
// boundary is never contended): 1 event and 64 events of 1 KB, with ids
// generated in SQL, and the same events through the Go append (one caller,
// a group of one) for comparison. Reporting only.
func BenchmarkOutboxAppend(b *testing.B) {
	for _, n := range []int{1, 64} {
		events := benchEvents(n)
		b.Run(fmt.Sprintf("sql/events=%d", n), func(b *testing.B) {
			url := pgtest.URL(b)
			s := setup(b, Config{URL: url})
			ctx := context.Background()
			if _, _, err := s.CreateBoundary(ctx, "b"); err != nil {
				b.Fatal(err)
			}
			if err := s.RecordAppendLimits(ctx, outboxLimits, "bench"); err != nil {
				b.Fatal(err)
			}
			conn := pgtest.Connect(b, url)
			b.ResetTimer()
			for b.Loop() {
				tx, err := conn.Begin(ctx)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := sqlAppend(ctx, tx, "b", events, nil); err != nil {
					b.Fatal(err)
				}
				if err := tx.Commit(ctx); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N*n)/b.Elapsed().Seconds(), "events/s")
		})
		b.Run(fmt.Sprintf("go/events=%d", n), func(b *testing.B) {
			s := setup(b, Config{})
			ctx := context.Background()
			if _, _, err := s.CreateBoundary(ctx, "b"); err != nil {
				b.Fatal(err)
			}
			var raw []event.Input
			if err := json.Unmarshal([]byte(events), &raw); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for b.Loop() {
				in, err := event.Prepare("b", raw, outboxLimits)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := s.Append(ctx, "b", in, nil); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N*n)/b.Elapsed().Seconds(), "events/s")
		})
	}
}

// TestOutboxValidatesAsTheAPI: orisun_append accepts exactly the appends the
// API accepts and refuses the others with the same kind of error (invalid
// or too large): 600 appends built at random from valid and invalid
// fields, half of them with a condition built so too, each judged by the
// API's decoding (unknown fields refused), event.Prepare and the
// condition's query check, and by the SQL function in a transaction
// rolled back. A lone surrogate, which the API reads as U+FFFD, must be
// refused by name (docs/outbox.md, "Errors").
// orisun_enqueue, called on each too, must say exactly what orisun_append
// says (the same validation, orisun_prepare_events).
func TestOutboxValidatesAsTheAPI(t *testing.T) {
	t.Parallel()
	_, _, conn := outboxSetup(t)
	ctx := context.Background()
	// Each field: its valid forms, then its invalid ones; a field is
	// valid nine times in ten, so that every outcome is common.
	// rare, when set, is a form picked once in 30 (a lone surrogate, which
	// the API accepts and the functions refuse by name).
	type field struct {
		valid, invalid []string
		rare           string
	}
	fields := []field{
		{[]string{"", `"id":"0190f7a2-0000-7000-8000-00000000000a",`, `"id":"0190F7A2-0000-7000-8000-00000000000B",`, `"id":"",`, `"id":null,`},
			[]string{`"id":"nope",`, `"id":"0190f7a2000070008000000000000001",`, `"id":"{0190f7a2-0000-7000-8000-00000000000c}",`, `"id":5,`}, ""},
		{[]string{`"type":"a",`, `"type":"seat.booked",`, `"type":"a:b-c_d",`, `"type":"` + strings.Repeat("t", 255) + `",`},
			[]string{`"type":"a b",`, `"type":"a.",`, `"type":".a",`, `"type":"a..b",`, `"type":"*",`, `"type":"é",`, `"type":"",`, ``,
				`"type":null,`, `"type":3,`, `"type":"` + strings.Repeat("t", 256) + `",`}, ""},
		{[]string{`"data":1`, `"data":{"a": [1, 2 ], "b" : "x y"}`, `"data":"s"`, `"data":[]`, `"data":true`, `"data":{}`},
			[]string{`"data":null`, `"data":"` + strings.Repeat("x", 1<<20) + `"`, `"data":"` + strings.Repeat("x", 500<<10) + `"`},
			`"data":{"s":"a\ud800"}`},
		{[]string{"", `,"metadata":null`, `,"metadata":{"m": 1}`, `,"metadata":[]`}, []string{`,"metadata":"` + strings.Repeat("m", 1<<20) + `"`}, ""},
		{[]string{"", `,"tags":null`, `,"tags":[]`, `,"tags":["a","b"]`, `,"tags":["` + strings.Repeat("t", 255) + `"]`, `,"tags":["é","<&>"]`,
			`,"tags":[` + strings.Repeat(`"t",`, 63) + `"t"]`},
			[]string{`,"tags":[""]`, `,"tags":["` + strings.Repeat("t", 256) + `"]`, `,"tags":[1]`, `,"tags":"a"`, `,"tags":[` + strings.Repeat(`"t",`, 64) + `"t"]`}, ""},
		{[]string{""}, []string{`,"tag":["x"]`}, ""}, // (a key given twice: TestOutboxInvalidInput)
	}
	// The condition, in half the appends: valid nine times in ten.
	conds := field{
		[]string{`null`, `{"after":0}`, `{"after":3,"query":{"items":[{"types":["a","b.c"],"tags":["x"]}]}}`, `{"query":{"items":[]}}`,
			`{"query":null}`, `{"query":{"items":[{"types":[],"tags":[]}]}}`, `{"after":18446744073709551615}`, `{"query":{"items":null}}`},
		[]string{`{"after":-1}`, `{"afer":1}`, `{"after":1.5}`, `{"after":"1"}`, `{"query":{"items":[{"types":["*"]}]}}`,
			`{"query":{"items":[{"tags":[""]}]}}`, `[1]`, `{"query":{"items":[{"types":"a"}]}}`, `{"query":{"items":[{"tag":["x"]}]}}`,
			`{"query":{"items":[` + strings.Repeat(`{"tags":["t"]},`, 64) + `{}]}}`,
			`{"query":{"items":[{"tags":[` + strings.Repeat(`"t",`, 64) + `"t"]}]}}`, `{"query":{"items":[{"types":[1]}]}}`}, "",
	}
	rng := rand.New(rand.NewPCG(19, 19))
	pick := func(f field) string {
		if f.rare != "" && rng.IntN(30) == 0 {
			return f.rare
		}
		if rng.IntN(10) == 0 {
			return f.invalid[rng.IntN(len(f.invalid))]
		}
		return f.valid[rng.IntN(len(f.valid))]
	}
	// apiJudges is the API's judgement of a request: the decoding of the
	// whole request (unknown fields refused), event.Prepare, then the
	// condition's query (node.Append).
	apiJudges := func(body, cond string) error {
		req := `{"events":` + body + `}`
		if cond != "" {
			req = `{"events":` + body + `,"condition":` + cond + `}`
		}
		var r api.AppendRequest
		dec := json.NewDecoder(strings.NewReader(req))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&r); err != nil {
			return fmt.Errorf("%w: %v", event.ErrInvalid, err)
		}
		if _, err := event.Prepare("b", r.Events, outboxLimits); err != nil {
			return err
		}
		if r.Condition != nil {
			return event.ValidateQuery(&r.Condition.Query)
		}
		return nil
	}
	kindOf := func(err error) string {
		if errors.Is(err, event.ErrTooLarge) {
			return "ORBIG"
		}
		return "ORINV"
	}
	kinds := map[string]int{}
	for range 600 {
		n := 1 + rng.IntN(3)
		parts := make([]string, n)
		for i := range parts {
			var sb strings.Builder
			for _, f := range fields {
				sb.WriteString(pick(f))
			}
			parts[i] = "{" + sb.String() + "}"
		}
		body := "[" + strings.Join(parts, ",") + "]"
		var cond any
		var condText string
		if rng.IntN(2) == 0 {
			// invalid one time in three
			if rng.IntN(3) == 0 {
				condText = conds.invalid[rng.IntN(len(conds.invalid))]
			} else {
				condText = conds.valid[rng.IntN(len(conds.valid))]
			}
			cond = condText
		}
		apiErr := apiJudges(body, condText)
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		_, sqlErr := sqlAppend(ctx, tx, "b", body, cond)
		_ = tx.Rollback(ctx)
		short := body + " condition " + condText
		if len(short) > 300 {
			short = short[:300] + "…"
		}
		if tx, err = conn.Begin(ctx); err != nil {
			t.Fatal(err)
		}
		_, enqErr := sqlEnqueue(ctx, tx, "b", body)
		_ = tx.Rollback(ctx)
		if cond == nil && ((enqErr == nil) != (sqlErr == nil) || enqErr != nil &&
			strings.ReplaceAll(pgErr(t, enqErr).Message, "orisun_enqueue", "orisun_append") != pgErr(t, sqlErr).Message) {
			t.Fatalf("%s: orisun_append says %v, orisun_enqueue %v", short, sqlErr, enqErr)
		}
		// orisun_enqueue takes no condition: it judges the events alone.
		eventsErr := apiJudges(body, "")
		if (enqErr == nil) != (eventsErr == nil) && !strings.Contains(body, `\ud800`) {
			t.Fatalf("%s: the API judges the events %v, orisun_enqueue %v", short, eventsErr, enqErr)
		}
		switch {
		case strings.Contains(body, `\ud800`) || strings.Contains(condText, `\ud800`):
			// The documented difference: the API reads a lone surrogate
			// as U+FFFD, the functions refuse it by name, in their first
			// pass over the events (before any limit; an event before it
			// may be refused first, as invalid too): docs/outbox.md,
			// "Errors".
			pe := pgErr(t, sqlErr)
			if pe.Code != "ORINV" || apiErr == nil && !strings.Contains(pe.Message, "lone UTF-16 surrogate") {
				t.Fatalf("%s: a lone surrogate (the API says %v): orisun_append says %s %q, want ORINV naming it",
					short, apiErr, pe.Code, pe.Message)
			}
			kinds["surrogate"]++
		case apiErr == nil && sqlErr == nil:
			kinds["accepted"]++
		case apiErr == nil:
			t.Fatalf("%s: the API accepts it, orisun_append refuses: %v", short, sqlErr)
		case sqlErr == nil:
			t.Fatalf("%s: orisun_append accepts it, the API refuses: %v", short, apiErr)
		default:
			pe := pgErr(t, sqlErr)
			// The one documented order difference: the functions judge
			// the events' limits before the condition's form, the API
			// decodes the condition first (docs/outbox.md, "Errors").
			if want := kindOf(apiErr); pe.Code != want && (eventsErr == nil || kindOf(eventsErr) != pe.Code) {
				t.Fatalf("%s: the API refuses it with %v, orisun_append with %s %q", short, apiErr, pe.Code, pe.Message)
			}
			kinds[pe.Code]++
			if cond != nil && eventsErr == nil {
				kinds["condition "+pe.Code]++
			}
		}
		if cond != nil && apiErr == nil {
			kinds["condition accepted"]++
		}
	}
	t.Logf("%v", kinds)
	if kinds["accepted"] == 0 || kinds["ORINV"] == 0 || kinds["ORBIG"] == 0 || kinds["surrogate"] == 0 ||
		kinds["condition accepted"] == 0 || kinds["condition ORINV"] == 0 || kinds["condition ORBIG"] == 0 {
		t.Fatalf("the random appends did not cover every outcome: %v", kinds)
	}
}

// invalidAppend is a bad append request and how the SQL functions refuse
// it: the SQLSTATE and a part of the message.
type invalidAppend struct {
	name, boundary, events string
	cond                   any
	code, message          string
}

// invalidAppends are the API's bad-input cases, as SQL function calls.
func invalidAppends() []invalidAppend {
	big := strings.Repeat("x", 1<<20)
	return []invalidAppend{
		{"no events", "b", `[]`, nil, "ORINV", "events: the append holds no events"},
		{"events not an array", "b", `{"type":"a","data":1}`, nil, "ORINV", "events: a JSON object cannot be a list of events"},
		{"events null", "b", `null`, nil, "ORINV", "events: a JSON null"},
		{"event not an object", "b", `[1]`, nil, "ORINV", "events[0]: a JSON number cannot be an event"},
		{"unknown event field", "b", `[{"type":"a","data":1,"tag":["x"]}]`, nil, "ORINV", `events[0]: unknown field "tag"`},
		{"duplicate key", "b", `[{"type":"a","data":1,"data":2}]`, nil, "ORINV", `duplicate key "data" in events[0]`},
		{"no data", "b", `[{"type":"a"}]`, nil, "ORINV", "events[0]: data is missing"},
		{"null data", "b", `[{"type":"a","data":null}]`, nil, "ORINV", "events[0]: data is missing"},
		{"no type", "b", `[{"data":1}]`, nil, "ORINV", "events[0]: type: type is empty"},
		{"type not a string", "b", `[{"type":1,"data":1}]`, nil, "ORINV", "events[0].type: a JSON number cannot be a string"},
		{"invalid type", "b", `[{"type":"a b","data":1}]`, nil, "ORINV", "events[0]: type"},
		{"wildcard type", "b", `[{"type":"a.>","data":1}]`, nil, "ORINV", "events[0]: type"},
		{"empty token", "b", `[{"type":"a..b","data":1}]`, nil, "ORINV", "events[0]: type"},
		{"long type", "b", `[{"type":"` + strings.Repeat("t", 256) + `","data":1}]`, nil, "ORINV", "type is 256 bytes long, the limit is 255"},
		{"bad id", "b", `[{"id":"nope","type":"a","data":1}]`, nil, "ORINV", `events[0]: id "nope" is not a UUID`},
		{"id not a string", "b", `[{"id":7,"type":"a","data":1}]`, nil, "ORINV", "events[0].id: a JSON number"},
		{"duplicate ids", "b", `[{"id":"0190f7a2-0000-7000-8000-000000000001","type":"a","data":1},{"id":"0190F7A2-0000-7000-8000-000000000001","type":"a","data":1}]`, nil, "ORINV", "events[1].id: 0190f7a2-0000-7000-8000-000000000001 is also the id of events[0]"},
		{"tags not a list", "b", `[{"type":"a","data":1,"tags":"x"}]`, nil, "ORINV", "events[0]: tags: a JSON string cannot be a list"},
		{"tag not a string", "b", `[{"type":"a","data":1,"tags":["x",2]}]`, nil, "ORINV", "events[0]: tags[1]: a JSON number"},
		{"empty tag", "b", `[{"type":"a","data":1,"tags":["x",""]}]`, nil, "ORINV", "events[0]: tags[1]: tag is empty"},
		{"long tag", "b", `[{"type":"a","data":1,"tags":["` + strings.Repeat("t", 256) + `"]}]`, nil, "ORINV", "events[0]: tags[0]: tag is 256 bytes long, the limit is 255"},
		{"NUL tag", "b", `[{"type":"a","data":1,"tags":["a\u0000"]}]`, nil, "ORINV", `\u0000`},
		{"too many tags", "b", `[{"type":"a","data":1,"tags":[` + strings.Repeat(`"t",`, 64) + `"t"]}]`, nil, "ORBIG", "events[0]: tags: the event has 65 tags, the limit is 64"},
		{"oversized event", "b", `[{"type":"a","data":"` + big + `"}]`, nil, "ORBIG", "events[0]: the encoded event is"},
		{"bad boundary name", "Nope", `[{"type":"a","data":1}]`, nil, "ORINV", "boundary name"},
		{"unknown boundary", "nosuch", `[{"type":"a","data":1}]`, nil, "ORNFD", `boundary "nosuch" does not exist`},
		{"condition unknown field", "b", `[{"type":"a","data":1}]`, `{"after":0,"afer":1}`, "ORINV", `condition: unknown field "afer"`},
		{"condition negative after", "b", `[{"type":"a","data":1}]`, `{"after":-1}`, "ORINV", "condition.after: -1"},
		{"condition after too large", "b", `[{"type":"a","data":1}]`, `{"after":18446744073709551616}`, "ORINV", "condition.after: 18446744073709551616 is beyond"},
		{"condition fractional after", "b", `[{"type":"a","data":1}]`, `{"after":1.5}`, "ORINV", "condition.after: 1.5"},
		{"condition bad type", "b", `[{"type":"a","data":1}]`, `{"query":{"items":[{"types":["*"]}]}}`, "ORINV", "query item 0"},
		{"condition empty tag", "b", `[{"type":"a","data":1}]`, `{"query":{"items":[{"tags":[""]}]}}`, "ORINV", "query item 0: tag is empty"},
		{"condition not an object", "b", `[{"type":"a","data":1}]`, `[1]`, "ORINV", "condition: a JSON array"},
		{"condition NUL tag", "b", `[{"type":"a","data":1}]`, `{"query":{"items":[{"tags":["a\u0000"]}]}}`, "ORINV", `condition: a JSON string holds \u0000`},
		// Lone UTF-16 surrogates: the API reads them as U+FFFD; PostgreSQL's
		// JSON functions cannot read them, so the functions refuse them by
		// name (docs/outbox.md, "Errors").
		{"lone high surrogate in data", "b", `[{"type":"a","data":"\ud800"}]`, nil, "ORINV", `events[0].data: a JSON string holds \ud800, a lone UTF-16 surrogate`},
		{"lone low surrogate deep in data", "b", `[{"type":"a","data":1},{"type":"a","data":{"x":["\ud83d\ude00","a\udc00"]}}]`, nil, "ORINV", `events[1].data: a JSON string holds \udc00, a lone UTF-16 surrogate`},
		{"lone surrogate in metadata", "b", `[{"type":"a","data":1,"metadata":{"m":"\uDBFF"}}]`, nil, "ORINV", `events[0].metadata: a JSON string holds \uDBFF`},
		{"lone surrogate in a tag", "b", `[{"type":"a","data":1,"tags":["ok","x\ud800"]}]`, nil, "ORINV", `events[0].tags: a JSON string holds \ud800`},
		{"condition lone surrogate", "b", `[{"type":"a","data":1}]`, `{"query":{"items":[{"tags":["\ud800"]}]}}`, "ORINV", `condition.query: a JSON string holds \ud800`},
	}
}

// TestJSONCompactAgreesWithGo: orisun_json_compact, which the SQL
// functions store data and metadata through, gives the bytes Go's
// json.Compact gives the API (event.Prepare), for texts already compact
// (returned as they are) and for texts with white space beside every kind
// of token, inside strings next to commas and colons, escaped quotes and
// backslashes, and at either end.
func TestJSONCompactAgreesWithGo(t *testing.T) {
	t.Parallel()
	_, _, conn := outboxSetup(t)
	ctx := context.Background()
	for _, text := range []string{
		`{"customer":"c-000042","amount":1234,"note":"abcdefghij"}`,
		`[1,2.5e3,true,false,null,"x",{},[]]`,
		`"a, b: c { d } [ e ]"`,
		`{"s":"a , b","t":" : "}`,
		`{"q":"say \"hi, there\" \\ ","n":[ ]}`,
		`{ "a" : 1 }`,
		"{\n\t\"a\":\r\n [1 ,2\t, 3],\n \"b\" : { \"c\" : \"d e\" }\n}",
		` 1`,
		`1 `,
		` "x" `,
		`[ "a , b" , "c" ]`,
		`{"a":"\u0020, "}`,
		`{"a":"x\\","b" :2}`,
		`{"a":[{"b":[{"c":"d"}]},{"e" :"f"}]}`,
	} {
		var want bytes.Buffer
		if err := json.Compact(&want, []byte(text)); err != nil {
			t.Fatalf("%q: %v", text, err)
		}
		var got string
		if err := conn.QueryRow(ctx, `SELECT orisun_json_compact($1::json)`, text).Scan(&got); err != nil {
			t.Fatalf("%q: %v", text, err)
		}
		if got != want.String() {
			t.Errorf("orisun_json_compact(%q) = %q, json.Compact gives %q", text, got, want.String())
		}
	}
}
