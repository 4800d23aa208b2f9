package outbox_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/orisun-io/orisun/event"
	"github.com/orisun-io/orisun/internal/pgtest"
	"github.com/orisun-io/orisun/outbox"
)

// sqlState is the SQLSTATE of err, "" when it has none.
func sqlStateOf(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

// TestAppRolePrivileges (docs/outbox.md "Privileges"): an application's
// login role that is a member of the database's application role
// (orisun_app_role()) and holds no privilege on orisun's tables appends and
// enqueues in its own transaction (the functions are SECURITY DEFINER), and
// can neither write orisun's tables (move the head, insert at a position,
// remove staged events) nor call the mover or a helper; a role outside the
// application role cannot call the functions; and temporary tables named
// like orisun's do not stand in for them inside the functions (their
// search_path is pinned, pg_temp last). The same holds with orisun in a
// schema of its own ("orisun", through the URL's search_path): the
// application role is granted USAGE on it, so the application calls the
// functions by their qualified names, or unqualified with orisun's schema
// on its connection's search_path, as package outbox does.
func TestAppRolePrivileges(t *testing.T) {
	for _, schema := range []string{"", "orisun"} {
		name := "public"
		if schema != "" {
			name = "schema " + schema
		}
		t.Run(name, func(t *testing.T) { appRolePrivileges(t, schema) })
	}
}

func appRolePrivileges(t *testing.T, schema string) {
	f := setupIn(t, schema)
	ctx := context.Background()
	appURL := pgtest.LoginRole(t, f.url, pgtest.AppRole(t, f.url))
	strangerURL := pgtest.LoginRole(t, f.url)
	admin := pgtest.Connect(t, f.url)
	app := pgtest.Connect(t, appURL)
	var role string
	if err := app.QueryRow(ctx, `SELECT current_user`).Scan(&role); err != nil {
		t.Fatal(err)
	}
	// The application's own table is the application's.
	if _, err := admin.Exec(ctx, `GRANT INSERT ON orders TO `+role); err != nil {
		t.Fatal(err)
	}

	tx, err := app.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO orders (id, customer) VALUES (1, 'c-1')`); err != nil {
		t.Fatal(err)
	}
	res, err := outbox.Append(ctx, tx, "orders", []event.Input{placed(1), placed(2)}, nil)
	if err != nil {
		t.Fatalf("orisun_append as a member of orisun_app: %v", err)
	}
	if res.First != 1 || res.Last != 2 {
		t.Fatalf("append: positions %d..%d, want 1..2", res.First, res.Last)
	}
	if n, err := outbox.Enqueue(ctx, tx, "orders", []event.Input{placed(3)}); err != nil || n != 1 {
		t.Fatalf("orisun_enqueue as a member of orisun_app: %d, %v", n, err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if got := logOf(t, f); len(got) != 2 {
		t.Fatalf("the log holds %v, want the 2 appended events", got)
	}
	if got := staged(t, f); len(got) != 1 {
		t.Fatalf("staged: %v, want the 1 enqueued event", got)
	}

	// What the application's role may not do, each refused for want of a
	// privilege (42501), and nothing of it written.
	for _, q := range []string{
		`UPDATE orisun_boundaries SET head = head + 10 WHERE name = 'orders'`,
		`INSERT INTO orisun_events (boundary, position, id, type, time, tags, data)
		 VALUES ('orders', 100, gen_random_uuid(), 'order.forged', now(), '{}', '{}')`,
		`DELETE FROM orisun_staged`,
		`SELECT * FROM orisun_move_staged('orders', 'x', 1, 10)`,
		`SELECT * FROM orisun_prepare_events('orders', '[{"type":"t","data":{}}]', 'x')`,
		`SELECT holder, term FROM orisun_leases`,
	} {
		_, err := app.Exec(ctx, q)
		if code := sqlStateOf(err); code != "42501" {
			t.Errorf("%s as the application's role: %v (SQLSTATE %q), want 42501 insufficient_privilege", q, err, code)
		}
	}
	// A role that is not a member of the application role cannot call
	// the functions (nor, in a schema of orisun's own, use the schema).
	qualified := ""
	if schema != "" {
		qualified = schema + "."
	}
	stranger := pgtest.Connect(t, strangerURL)
	for _, q := range []string{
		`SELECT * FROM ` + qualified + `orisun_append('orders', '[{"type":"order.placed","data":{}}]')`,
		`SELECT ` + qualified + `orisun_enqueue('orders', '[{"type":"order.placed","data":{}}]')`,
	} {
		_, err := stranger.Exec(ctx, q)
		if code := sqlStateOf(err); code != "42501" {
			t.Errorf("%s as a role outside the application role: %v (SQLSTATE %q), want 42501", q, err, code)
		}
	}
	if schema != "" {
		// Without orisun's schema on its search_path, the application
		// calls the functions by their qualified names.
		plain := pgtest.Connect(t, withParam(t, appURL, "search_path", ""))
		var first int64
		if err := plain.QueryRow(ctx, `SELECT first_position FROM `+qualified+
			`orisun_append('orders', '[{"type":"order.placed","data":{"order":9}}]')`).Scan(&first); err != nil || first != 3 {
			t.Fatalf("%sorisun_append without orisun's schema on the search_path: position %d, %v; want 3", qualified, first, err)
		}
	}

	// Temporary tables named like orisun's: a limit of one event and a
	// head of 1000. The functions read orisun's tables all the same.
	for _, q := range []string{
		`CREATE TEMP TABLE orisun_append_limits (singleton boolean, max_append_events integer, max_append_bytes integer,
		 max_event_bytes integer, recorded_by text, recorded_at timestamptz)`,
		`INSERT INTO orisun_append_limits VALUES (true, 1, 1, 1, 'app', now())`,
		`CREATE TEMP TABLE orisun_boundaries (name text, epoch uuid, head bigint)`,
		`INSERT INTO orisun_boundaries VALUES ('orders', gen_random_uuid(), 1000)`,
	} {
		if _, err := app.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	tx, err = app.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	res, err = outbox.Append(ctx, tx, "orders", []event.Input{placed(4), placed(5)}, nil)
	if err != nil {
		t.Fatalf("append beside temporary tables named like orisun's: %v", err)
	}
	next := uint64(3)
	if schema != "" {
		next = 4 // after the qualified call's event
	}
	if res.First != next || res.Last != next+1 {
		t.Fatalf("append beside temporary tables: positions %d..%d, want %d..%d", res.First, res.Last, next, next+1)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if got := logOf(t, f); uint64(len(got)) != next+1 {
		t.Fatalf("the log holds %v, want %d events", got, next+1)
	}
}

// TestAppRolePerDatabase (docs/outbox.md "Privileges"): roles belong to the
// whole server and CONNECT is granted to PUBLIC, so the application role
// must be the database's own. Two databases with orisun on one server: a
// login role made a member of database A's application role appends and
// enqueues in A, and is refused (42501) in B, where nothing is written.
func TestAppRolePerDatabase(t *testing.T) {
	a, b := setup(t), setup(t)
	ctx := context.Background()
	roleA, roleB := pgtest.AppRole(t, a.url), pgtest.AppRole(t, b.url)
	if roleA == roleB {
		t.Fatalf("databases A and B share the application role %s", roleA)
	}
	appURL := pgtest.LoginRole(t, a.url, roleA)
	for _, c := range []struct {
		f       fixture
		allowed bool
	}{{a, true}, {b, false}} {
		conn := pgtest.Connect(t, strings.Replace(appURL, pgtest.DatabaseName(t, a.url), pgtest.DatabaseName(t, c.f.url), 1))
		for _, call := range []func(tx pgx.Tx) error{
			func(tx pgx.Tx) error {
				_, err := outbox.Append(ctx, tx, "orders", []event.Input{placed(1)}, nil)
				return err
			},
			func(tx pgx.Tx) error {
				_, err := outbox.Enqueue(ctx, tx, "orders", []event.Input{placed(2)})
				return err
			},
		} {
			tx, err := conn.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			err = call(tx)
			if c.allowed && err != nil {
				t.Fatalf("in the role's own database: %v", err)
			}
			if !c.allowed && sqlStateOf(err) != "42501" {
				t.Fatalf("in another database: %v (SQLSTATE %q), want 42501 insufficient_privilege", err, sqlStateOf(err))
			}
			if err := tx.Commit(ctx); c.allowed && err != nil {
				t.Fatal(err)
			}
		}
	}
	if got := logOf(t, a); len(got) != 1 || len(staged(t, a)) != 1 {
		t.Fatalf("database A: log %v, staged %v; want one event each", got, staged(t, a))
	}
	if got := logOf(t, b); len(got) != 0 || len(staged(t, b)) != 0 {
		t.Fatalf("database B: log %v, staged %v; want nothing written by a role of A's", got, staged(t, b))
	}
}
