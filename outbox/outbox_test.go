package outbox_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	neturl "net/url"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"

	"github.com/orisun-io/orisun/api"
	"github.com/orisun-io/orisun/backend/postgres"
	"github.com/orisun-io/orisun/event"
	"github.com/orisun-io/orisun/internal/pgtest"
	"github.com/orisun-io/orisun/internal/testutil/storetest"
	"github.com/orisun-io/orisun/outbox"
	"github.com/orisun-io/orisun/stream"
)

// appTx is an application transaction through one of the two drivers: its
// own statements and the helpers of package outbox.
type appTx interface {
	exec(sql string, args ...any) error
	append(boundary string, events []event.Input, cond *event.Condition) (event.AppendResult, error)
	enqueue(boundary string, events []event.Input) (int, error)
	commit() error
	rollback() error
}

type pgxTx struct {
	ctx context.Context
	tx  pgx.Tx
}

func (t pgxTx) exec(q string, args ...any) error {
	_, err := t.tx.Exec(t.ctx, q, args...)
	return err
}
func (t pgxTx) append(b string, evs []event.Input, c *event.Condition) (event.AppendResult, error) {
	return outbox.Append(t.ctx, t.tx, b, evs, c)
}
func (t pgxTx) enqueue(b string, evs []event.Input) (int, error) {
	return outbox.Enqueue(t.ctx, t.tx, b, evs)
}
func (t pgxTx) commit() error   { return t.tx.Commit(t.ctx) }
func (t pgxTx) rollback() error { return t.tx.Rollback(t.ctx) }

type sqlTx struct {
	ctx context.Context
	tx  *sql.Tx
}

func (t sqlTx) exec(q string, args ...any) error {
	_, err := t.tx.ExecContext(t.ctx, q, args...)
	return err
}
func (t sqlTx) append(b string, evs []event.Input, c *event.Condition) (event.AppendResult, error) {
	return outbox.AppendSQL(t.ctx, t.tx, b, evs, c)
}
func (t sqlTx) enqueue(b string, evs []event.Input) (int, error) {
	return outbox.EnqueueSQL(t.ctx, t.tx, b, evs)
}
func (t sqlTx) commit() error   { return t.tx.Commit() }
func (t sqlTx) rollback() error { return t.tx.Rollback() }

// fixture is a fresh database with orisun's schema, boundary "orders", the
// append limits recorded (as a node records them at start) and the
// application's table orders.
type fixture struct {
	store *postgres.Store
	url   string
}

func setup(t *testing.T) fixture {
	t.Helper()
	return setupIn(t, "")
}

// setupIn is setup with orisun in schema (created first, empty: public),
// which orisun's URL and the fixture's url put first on the search_path
// (docs/outbox.md "Privileges").
func setupIn(t *testing.T, schema string) fixture {
	t.Helper()
	url := pgtest.URL(t)
	ctx := context.Background()
	if schema != "" {
		if _, err := pgtest.Connect(t, url).Exec(ctx, `CREATE SCHEMA `+pgx.Identifier{schema}.Sanitize()); err != nil {
			t.Fatal(err)
		}
		url = withParam(t, url, "search_path", schema)
	}
	s := storetest.Postgres(t, postgres.Config{URL: url})
	if _, _, err := s.CreateBoundary(ctx, "orders"); err != nil {
		t.Fatal(err)
	}
	lim := event.Limits{MaxAppendEvents: 100, MaxAppendBytes: 1 << 20, MaxEventBytes: 1 << 20, EncodedSize: stream.EncodedSize}
	if err := s.RecordAppendLimits(ctx, lim, "test"); err != nil {
		t.Fatal(err)
	}
	if _, err := pgtest.Connect(t, url).Exec(ctx, `CREATE TABLE orders (id bigint PRIMARY KEY, customer text NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	return fixture{store: s, url: url}
}

// withParam returns the URL u with the query parameter k set to v (pgx
// passes parameters it does not know to the server as settings).
func withParam(t *testing.T, u, k, v string) string {
	t.Helper()
	p, err := neturl.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	q := p.Query()
	if v == "" {
		q.Del(k)
	} else {
		q.Set(k, v)
	}
	p.RawQuery = q.Encode()
	return p.String()
}

// drivers runs fn once per driver, each with a way to begin transactions.
func drivers(t *testing.T, fn func(t *testing.T, f fixture, begin func() appTx)) {
	t.Run("pgx", func(t *testing.T) {
		f := setup(t)
		conn := pgtest.Connect(t, f.url)
		ctx := context.Background()
		fn(t, f, func() appTx {
			tx, err := conn.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			return pgxTx{ctx, tx}
		})
	})
	t.Run("database/sql", func(t *testing.T) {
		f := setup(t)
		db, err := sql.Open("pgx", f.url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = db.Close() })
		ctx := context.Background()
		fn(t, f, func() appTx {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			return sqlTx{ctx, tx}
		})
	})
}

func placed(order int) event.Input {
	return event.Input{Type: "order.placed", Data: json.RawMessage(fmt.Sprintf(`{"order":%d}`, order)),
		Tags: []string{fmt.Sprintf("order:%d", order)}}
}

// logOf returns the types and data of the boundary's events, checking that
// their positions are 1..n (I1).
func logOf(t *testing.T, f fixture) []string {
	t.Helper()
	_, evs, err := f.store.Read(context.Background(), "orders", 0, 1000, nil)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for i, e := range evs {
		if e.Position != uint64(i+1) {
			t.Fatalf("event %d at position %d: the log is not dense (I1): %+v", i, e.Position, evs)
		}
		out = append(out, string(e.Data))
	}
	return out
}

// texts returns the one text column of query's rows, read on a connection
// of its own.
func texts(t *testing.T, f fixture, query string) []string {
	t.Helper()
	r, err := pgtest.Connect(t, f.url).Query(context.Background(), query)
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(r, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// rows returns the ids of the application's orders.
func rows(t *testing.T, f fixture) []string {
	t.Helper()
	return texts(t, f, `SELECT id::text FROM orders ORDER BY id`)
}

// TestAppendCommitRollback_I1: through either driver, the application's row
// and its event commit together or not at all: after a commit, a rollback,
// and an error of the application's own after the append, the table holds
// exactly the committed orders and the log exactly their events, at dense
// positions, and the result is the API's (epoch, first, last).
func TestAppendCommitRollback_I1(t *testing.T) {
	drivers(t, func(t *testing.T, f fixture, begin func() appTx) {
		b, err := f.store.Boundary(context.Background(), "orders")
		if err != nil {
			t.Fatal(err)
		}
		order := func(id int, commit bool) event.AppendResult {
			t.Helper()
			tx := begin()
			if err := tx.exec(`INSERT INTO orders (id, customer) VALUES ($1, 'c-7')`, id); err != nil {
				t.Fatal(err)
			}
			res, err := tx.append("orders", []event.Input{placed(id)}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if commit {
				err = tx.commit()
			} else {
				err = tx.rollback()
			}
			if err != nil {
				t.Fatal(err)
			}
			return res
		}
		if res := order(1, true); res != (event.AppendResult{Epoch: b.Epoch, First: 1, Last: 1}) {
			t.Fatalf("first append: %+v, want epoch %s positions 1..1", res, b.Epoch)
		}
		order(2, false)
		// An error of the application's after the append: the row of
		// order 1 exists, so the insert fails and aborts the transaction.
		tx := begin()
		if _, err := tx.append("orders", []event.Input{placed(3)}, nil); err != nil {
			t.Fatal(err)
		}
		if err := tx.exec(`INSERT INTO orders (id, customer) VALUES (1, 'again')`); err == nil {
			t.Fatal("a duplicate order went in")
		}
		if err := tx.commit(); err == nil {
			t.Fatal("an aborted transaction committed")
		}
		if res := order(4, true); res.First != 2 || res.Last != 2 {
			t.Fatalf("after a rollback and a failed transaction: %+v, want position 2", res)
		}
		got, want := logOf(t, f), []string{`{"order":1}`, `{"order":4}`}
		if strings.Join(got, " ") != strings.Join(want, " ") {
			t.Fatalf("log %v, want %v", got, want)
		}
		if ids := rows(t, f); strings.Join(ids, ",") != "1,4" {
			t.Fatalf("orders %v, want 1,4", ids)
		}
	})
}

// TestAppendConditionConflict: a condition that fails refuses the append
// with the client's error: errors.Is matches event.ErrConflict, errors.As
// finds the *event.ConflictError with the boundary, the condition's
// position and the conflicting one, and the message is the function's.
// The transaction is aborted: nothing of it is written.
func TestAppendConditionConflict(t *testing.T) {
	drivers(t, func(t *testing.T, f fixture, begin func() appTx) {
		tx := begin()
		if _, err := tx.append("orders", []event.Input{placed(1), placed(2)}, nil); err != nil {
			t.Fatal(err)
		}
		if err := tx.commit(); err != nil {
			t.Fatal(err)
		}
		tx = begin()
		if err := tx.exec(`INSERT INTO orders (id, customer) VALUES (2, 'c-7')`); err != nil {
			t.Fatal(err)
		}
		cond := &event.Condition{Query: event.Query{Items: []event.QueryItem{{Tags: []string{"order:2"}}}}, After: 0}
		_, err := tx.append("orders", []event.Input{{Type: "order.shipped", Data: json.RawMessage(`{}`), Tags: []string{"order:2"}}}, cond)
		var ce *event.ConflictError
		var ae *api.Error
		if !errors.Is(err, event.ErrConflict) || !errors.As(err, &ce) || !errors.As(err, &ae) {
			t.Fatalf("got %v (%T), want an *api.Error matching event.ErrConflict with an *event.ConflictError", err, err)
		}
		if *ce != (event.ConflictError{Boundary: "orders", After: 0, Position: 2}) || ae.Code != api.CodeConflict ||
			!strings.Contains(err.Error(), "exists at position 2 (after 0)") {
			t.Fatalf("conflict %+v, code %s, message %q: want position 2 after 0 in boundary orders", *ce, ae.Code, err)
		}
		_ = tx.rollback()
		if got := logOf(t, f); len(got) != 2 {
			t.Fatalf("log %v after the refused append, want the two events before it", got)
		}
		if ids := rows(t, f); len(ids) != 0 {
			t.Fatalf("orders %v, want none", ids)
		}
		// The same condition after the conflicting position passes.
		tx = begin()
		cond.After = 2
		if res, err := tx.append("orders", []event.Input{placed(3)}, cond); err != nil || res.First != 3 {
			t.Fatalf("append after the conflict: %+v %v", res, err)
		}
		if err := tx.commit(); err != nil {
			t.Fatal(err)
		}
	})
}

// TestAppendRefusals: what the API refuses, the helpers refuse with the
// client's error: the sentinel of the code (errors.Is), the function's
// message naming the event, the field and the limit, and nothing of the
// transaction written.
func TestAppendRefusals(t *testing.T) {
	tags := make([]string, 65)
	for i := range tags {
		tags[i] = fmt.Sprint("t", i)
	}
	cases := []struct {
		name     string
		boundary string
		events   []event.Input
		sentinel error
		code     string
		message  []string
	}{
		{"empty tag", "orders", []event.Input{placed(1), {Type: "x", Data: json.RawMessage(`1`), Tags: []string{""}}},
			event.ErrInvalid, api.CodeInvalid, []string{"events[1]", "tags[0]", "tag is empty"}},
		{"bad type", "orders", []event.Input{{Type: "a..b", Data: json.RawMessage(`1`)}},
			event.ErrInvalid, api.CodeInvalid, []string{"events[0]", "type", `"a..b"`}},
		{"bad id", "orders", []event.Input{{ID: "42", Type: "x", Data: json.RawMessage(`1`)}},
			event.ErrInvalid, api.CodeInvalid, []string{"events[0]", "id", "UUID"}},
		{"no data", "orders", []event.Input{placed(1), placed(2), {Type: "x"}},
			event.ErrInvalid, api.CodeInvalid, []string{"events[2]", "data is missing"}},
		{"no events", "orders", nil, event.ErrInvalid, api.CodeInvalid, []string{"events", "no events"}},
		{"too many tags", "orders", []event.Input{{Type: "x", Data: json.RawMessage(`1`), Tags: tags}},
			event.ErrTooLarge, api.CodeTooLarge, []string{"events[0]", "65 tags", "limit is 64"}},
		{"too many events", "orders", make101(), event.ErrTooLarge, api.CodeTooLarge, []string{"101 events", "limit is 100"}},
		{"unknown boundary", "invoices", []event.Input{placed(1)}, event.ErrNotFound, api.CodeNotFound, []string{`"invoices"`, "does not exist"}},
		{"bad boundary name", "Orders", []event.Input{placed(1)}, event.ErrInvalid, api.CodeInvalid, []string{`"Orders"`, "boundary name"}},
	}
	drivers(t, func(t *testing.T, f fixture, begin func() appTx) {
		for _, c := range cases {
			tx := begin()
			if err := tx.exec(`INSERT INTO orders (id, customer) VALUES (1, 'c-7')`); err != nil {
				t.Fatal(err)
			}
			_, err := tx.append(c.boundary, c.events, nil)
			var ae *api.Error
			if !errors.Is(err, c.sentinel) || !errors.As(err, &ae) || ae.Code != c.code {
				t.Fatalf("%s: got %v (%T), want an *api.Error of code %s", c.name, err, err, c.code)
			}
			for _, m := range c.message {
				if !strings.Contains(ae.Message, m) {
					t.Fatalf("%s: message %q, want it to name %q", c.name, ae.Message, m)
				}
			}
			if err := tx.commit(); err == nil {
				t.Fatalf("%s: the transaction committed after the refusal", c.name)
			}
		}
		if got, ids := logOf(t, f), rows(t, f); len(got) != 0 || len(ids) != 0 {
			t.Fatalf("log %v, orders %v after refusals only: want both empty", got, ids)
		}
		// Data that is not JSON is refused before the round trip, naming
		// the event, as the client refuses it.
		tx := begin()
		defer tx.rollback()
		_, err := tx.append("orders", []event.Input{placed(1), {Type: "x", Data: json.RawMessage(`{`)}}, nil)
		if !errors.Is(err, event.ErrInvalid) || !strings.Contains(err.Error(), "events[1]: data is not valid JSON") {
			t.Fatalf("data that is not JSON: %v", err)
		}
	})
}

func make101() []event.Input {
	evs := make([]event.Input, 101)
	for i := range evs {
		evs[i] = placed(i)
	}
	return evs
}

// TestAppendIdempotentRetry: a retry of a committed append with the same
// ids (its reply was lost, say) returns the positions it got and writes
// nothing, through either driver; the same id with other content is the
// client's conflict, without a position.
func TestAppendIdempotentRetry(t *testing.T) {
	drivers(t, func(t *testing.T, f fixture, begin func() appTx) {
		evs := []event.Input{placed(1), placed(2)}
		evs[0].ID, evs[1].ID = "0190a7e0-0000-7000-8000-000000000001", "0190a7e0-0000-7000-8000-000000000002"
		var first event.AppendResult
		for i := range 3 {
			tx := begin()
			res, err := tx.append("orders", evs, nil)
			if err != nil {
				t.Fatalf("try %d: %v", i, err)
			}
			if err := tx.commit(); err != nil {
				t.Fatal(err)
			}
			if i == 0 {
				first = res
			} else if res != first {
				t.Fatalf("retry %d: %+v, want the original %+v", i, res, first)
			}
		}
		if got := logOf(t, f); len(got) != 2 {
			t.Fatalf("log %v after three tries, want the two events once", got)
		}
		other := []event.Input{evs[0]}
		other[0].Data = json.RawMessage(`{"order":99}`)
		tx := begin()
		defer tx.rollback()
		_, err := tx.append("orders", other, nil)
		var ae *api.Error
		if !errors.Is(err, event.ErrConflict) || !errors.As(err, &ae) || ae.Conflict != nil ||
			!strings.Contains(ae.Message, "other content") {
			t.Fatalf("same id, other content: %v, want a conflict naming the content, no position", err)
		}
	})
}

// staged returns the data of the events staged for boundary orders.
func staged(t *testing.T, f fixture) []string {
	t.Helper()
	return texts(t, f, `SELECT data::text FROM orisun_staged WHERE boundary = 'orders' ORDER BY seq`)
}

// TestEnqueueCommitRollbackRefusals: through either driver, Enqueue stages
// the events in the application's transaction and returns their number:
// a committed transaction's events are staged (the lease holder moves
// them into the log, docs/outbox.md), a rolled-back one's are not, and a
// refusal is the client's error with the function's message, nothing of
// the transaction written.
func TestEnqueueCommitRollbackRefusals(t *testing.T) {
	drivers(t, func(t *testing.T, f fixture, begin func() appTx) {
		for i, commit := range []bool{true, false} {
			tx := begin()
			if err := tx.exec(`INSERT INTO orders (id, customer) VALUES ($1, 'c-7')`, i+1); err != nil {
				t.Fatal(err)
			}
			n, err := tx.enqueue("orders", []event.Input{placed(i + 1), placed(i + 10)})
			if err != nil || n != 2 {
				t.Fatalf("enqueue: %d %v, want 2 staged", n, err)
			}
			if commit {
				err = tx.commit()
			} else {
				err = tx.rollback()
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		if got := staged(t, f); strings.Join(got, " ") != `{"order":1} {"order":10}` {
			t.Fatalf("staged %v, want the committed transaction's two events", got)
		}
		tx := begin()
		if err := tx.exec(`INSERT INTO orders (id, customer) VALUES (3, 'c-7')`); err != nil {
			t.Fatal(err)
		}
		_, err := tx.enqueue("orders", []event.Input{placed(3), {Type: "x", Data: json.RawMessage(`1`), Tags: []string{""}}})
		var ae *api.Error
		if !errors.Is(err, event.ErrInvalid) || !errors.As(err, &ae) || !strings.Contains(ae.Message, "events[1]") ||
			!strings.Contains(ae.Message, "tag is empty") {
			t.Fatalf("an empty tag: %v (%T), want the client's invalid naming events[1] and the tag", err, err)
		}
		if err := tx.commit(); err == nil {
			t.Fatal("the transaction committed after the refusal")
		}
		tx = begin()
		_, err = tx.enqueue("invoices", []event.Input{placed(4)})
		_ = tx.rollback()
		if !errors.Is(err, event.ErrNotFound) {
			t.Fatalf("an unknown boundary: %v, want not found", err)
		}
		if got, ids := staged(t, f), rows(t, f); len(got) != 2 || strings.Join(ids, ",") != "1" {
			t.Fatalf("staged %v, orders %v after the refusals: want the first transaction's only", got, ids)
		}
	})
}
