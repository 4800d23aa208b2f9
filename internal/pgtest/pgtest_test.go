package pgtest

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
)

// TestURLGivesFreshDatabases: two calls give two different, empty
// databases, each reachable at its URL.
func TestURLGivesFreshDatabases(t *testing.T) {
	t.Parallel()
	a, b := URL(t), URL(t)
	if a == b || DatabaseName(t, a) == DatabaseName(t, b) {
		t.Fatalf("URL returned the same database twice: %s", DatabaseName(t, a))
	}
	for _, u := range []string{a, b} {
		conn, err := pgx.Connect(context.Background(), u)
		if err != nil {
			t.Fatal(err)
		}
		var db string
		var tables int
		err = conn.QueryRow(context.Background(),
			`SELECT current_database(), (SELECT count(*) FROM pg_tables WHERE schemaname = 'public')`).Scan(&db, &tables)
		_ = conn.Close(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if db != DatabaseName(t, u) || tables != 0 {
			t.Fatalf("connected to %q with %d tables, want %q and an empty database", db, tables, DatabaseName(t, u))
		}
	}
}

// TestDatabaseDroppedAfterTest: the database of a finished (sub)test is
// gone, even with a connection still open to it.
func TestDatabaseDroppedAfterTest(t *testing.T) {
	t.Parallel()
	var name string
	var conn *pgx.Conn
	ok := t.Run("uses a database", func(t *testing.T) {
		u := URL(t)
		name = DatabaseName(t, u)
		var err error
		conn, err = pgx.Connect(context.Background(), u) // left open on purpose
		if err != nil {
			t.Fatal(err)
		}
	})
	if !ok {
		return
	}
	defer conn.Close(context.Background())
	admin, err := pgx.Connect(context.Background(), ServerURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(context.Background())
	var n int
	if err := admin.QueryRow(context.Background(), `SELECT count(*) FROM pg_database WHERE datname = $1`, name).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("database %s still exists after its test", name)
	}
}
