// Package pgtest gives tests a fresh, empty PostgreSQL database each.
// Being internal, it is orisun's machinery (test scaffolding): its API may
// change without notice.
//
// The server comes from ORISUN_TEST_PG_URL, which scripts/test sets after it
// starts a throwaway PostgreSQL (or which points at a server the user runs;
// its user must be allowed to CREATE DATABASE). A missing URL fails the test
// rather than skipping it: a PostgreSQL test that silently does not run is a
// green build that checked nothing.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// EnvURL is the variable that holds the server's URL.
const EnvURL = "ORISUN_TEST_PG_URL"

// Variables scripts/test also exports, for tests that restart or stop the
// throwaway server (they are empty when the server is not the script's).
const (
	EnvBin    = "ORISUN_TEST_PG_BIN"    // the server's bin directory
	EnvData   = "ORISUN_TEST_PG_DATA"   // its data directory
	EnvPort   = "ORISUN_TEST_PG_PORT"   // its port
	EnvOSUser = "ORISUN_TEST_PG_OSUSER" // the OS user it runs as ("" for the current one)
)

// dbPrefix names the databases this package creates, so a leftover one (a
// test binary killed before its cleanup) is recognisable.
const dbPrefix = "orisun_test_"

// ServerURL returns ORISUN_TEST_PG_URL, failing the test when it is unset.
func ServerURL(t testing.TB) string {
	t.Helper()
	u := os.Getenv(EnvURL)
	if u == "" {
		t.Fatalf("%s is not set: the PostgreSQL tests need a server. Run the tests with scripts/test, "+
			"which starts a throwaway PostgreSQL, or set %s to a server whose user may CREATE DATABASE "+
			"(e.g. postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable)", EnvURL, EnvURL)
	}
	return u
}

// URL creates a new, empty database for this test on the server of
// ORISUN_TEST_PG_URL and returns its URL. The database is dropped (WITH
// (FORCE): connections still open are ended) when the test and its
// subtests finish; register the closing of anything that uses it with
// t.Cleanup after calling URL, so it runs first.
func URL(t testing.TB) string {
	t.Helper()
	return URLWith(t, "")
}

// URLWith is URL with options for CREATE DATABASE (for example
// "ENCODING 'LATIN1' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0").
func URLWith(t testing.TB, options string) string {
	t.Helper()
	server := ServerURL(t)
	u, err := url.Parse(server)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		// Never print the URL: it may hold a password.
		t.Fatalf("%s must be a postgres:// URL (e.g. postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable)", EnvURL)
	}
	name := dbPrefix + randomHex(t, 8)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// The name is ours (a prefix and random hex), never user input; it is
	// still quoted as an identifier.
	if err := adminExec(ctx, server, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()+" "+options); err != nil {
		t.Fatalf("pgtest: create database %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := adminExec(ctx, server, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
			t.Errorf("pgtest: drop database %s: %v", name, err)
		}
	})
	db := *u
	db.Path = "/" + name
	db.RawPath = ""
	return db.String()
}

// adminExec runs one statement on the server's own database, on a
// connection of its own: CREATE and DROP DATABASE cannot run in a
// transaction block, and a pool would keep a connection to nothing.
func adminExec(ctx context.Context, server, sql string) error {
	conn, err := pgx.Connect(ctx, server)
	if err != nil {
		return fmt.Errorf("connect to the server of %s: %w", EnvURL, err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, sql); err != nil {
		return err
	}
	return nil
}

// Exec runs one statement on the server's own database (not a test's), as
// its superuser: for tests that end other connections
// (pg_terminate_backend) or look at the server as a whole.
func Exec(t testing.TB, sql string, args ...any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, ServerURL(t))
	if err != nil {
		t.Fatalf("pgtest: connect to the server: %v", err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, sql, args...); err != nil {
		t.Fatalf("pgtest: %s: %v", firstLine(sql), err)
	}
}

// Connect opens a connection of the test's own to the database at dbURL
// (a URL that URL returned, or ServerURL), closed when the test ends.
func Connect(t testing.TB, dbURL string) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatalf("pgtest: connect: %v", err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// Begin begins a transaction on conn, rolled back when the test ends
// unless the test ended it first (a rollback of an ended transaction does
// nothing).
func Begin(t testing.TB, conn *pgx.Conn) pgx.Tx {
	t.Helper()
	tx, err := conn.Begin(context.Background())
	if err != nil {
		t.Fatalf("pgtest: begin: %v", err)
	}
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	return tx
}

// Lock is another session that holds row locks: on a connection of its
// own to dbURL it begins a transaction and runs lockSQL there (a SELECT
// ... FOR KEY SHARE, as a foreign key's check takes it), and returns that
// transaction, rolled back when the test ends unless the test ended it,
// and the session's backend pid, which the holder's victims name.
func Lock(t testing.TB, dbURL, lockSQL string) (tx pgx.Tx, pid int) {
	t.Helper()
	conn := Connect(t, dbURL)
	if err := conn.QueryRow(context.Background(), `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		t.Fatalf("pgtest: the locking session's pid: %v", err)
	}
	tx = Begin(t, conn)
	if _, err := tx.Exec(context.Background(), lockSQL); err != nil {
		t.Fatalf("pgtest: %s: %v", firstLine(lockSQL), err)
	}
	return tx, pid
}

// DatabaseName returns the database of a URL that URL returned.
func DatabaseName(t testing.TB, dbURL string) string {
	t.Helper()
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatalf("pgtest: parse a test database URL: %v", err)
	}
	return strings.TrimPrefix(u.Path, "/")
}

func randomHex(t testing.TB, n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatalf("pgtest: random database name: %v", err)
	}
	return hex.EncodeToString(b)
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i] + " …"
	}
	return s
}

// LoginRole creates a login role of the test's own on the server, member of
// the roles in memberOf (e.g. the database's AppRole), with no other privilege, and
// returns the URL of dbURL's database as that role. The role and what it
// was granted in dbURL's database are dropped when the test ends (close
// its connections with t.Cleanup after calling LoginRole).
func LoginRole(t testing.TB, dbURL string, memberOf ...string) string {
	t.Helper()
	name := dbPrefix + "role_" + randomHex(t, 6)
	in := ""
	if len(memberOf) > 0 {
		quoted := make([]string, len(memberOf))
		for i, r := range memberOf {
			quoted[i] = pgx.Identifier{r}.Sanitize()
		}
		in = " IN ROLE " + strings.Join(quoted, ", ")
	}
	Exec(t, "CREATE ROLE "+name+" LOGIN"+in)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := adminExec(ctx, dbURL, "DROP OWNED BY "+name); err != nil {
			t.Errorf("pgtest: drop what role %s owns: %v", name, err)
		}
		if err := adminExec(ctx, ServerURL(t), "DROP ROLE "+name); err != nil {
			t.Errorf("pgtest: drop role %s: %v", name, err)
		}
	})
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatalf("pgtest: parse a test database URL: %v", err)
	}
	u.User = url.User(name)
	return u.String()
}

// AppRole returns the application role of the orisun installation in
// dbURL's database (orisun_app_role(), migration 0004): the role a test's
// LoginRole joins to call orisun_append and orisun_enqueue.
func AppRole(t testing.TB, dbURL string) string {
	t.Helper()
	var role string
	if err := Connect(t, dbURL).QueryRow(context.Background(), `SELECT orisun_app_role()`).Scan(&role); err != nil {
		t.Fatalf("pgtest: orisun_app_role(): %v", err)
	}
	return role
}
