package postgres

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/orisun-io/orisun/internal/pgtest"
)

// TestMigrateWithoutCreateRole (docs/outbox.md "Privileges"): orisun's role
// may not create roles, so its migrations cannot create the database's
// application role (orisun_app_<database>, here orisun_app_orisun_own). They
// apply all the same, with every orisun function revoked from PUBLIC, and
// the node logs what an administrator runs; once the role exists with its
// grants, the node says nothing. The server is the test's own: roles
// belong to the whole server.
func TestMigrateWithoutCreateRole(t *testing.T) {
	t.Parallel()
	srv := pgtest.StartServer(t)
	ctx := context.Background()
	admin := pgtest.Connect(t, srv.URL)
	for _, q := range []string{`CREATE ROLE orisun_owner LOGIN NOCREATEROLE`, `CREATE DATABASE orisun_own OWNER orisun_owner`} {
		if _, err := admin.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	url := strings.Replace(strings.Replace(srv.URL, "postgres@", "orisun_owner@", 1), "/postgres?", "/orisun_own?", 1)
	open := func() string {
		t.Helper()
		var logs bytes.Buffer
		s, err := Open(ctx, Config{URL: url, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		if err != nil {
			t.Fatalf("open as a role that may not create roles: %v", err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		return logs.String()
	}
	logs := open()
	if !strings.Contains(logs, "the role orisun_app_orisun_own does not exist or may not execute") ||
		!strings.Contains(logs, "CREATE ROLE orisun_app_orisun_own NOLOGIN") {
		t.Fatalf("the node's log does not say that orisun_app_orisun_own is missing and what to run:\n%s", logs)
	}
	owner := pgtest.Connect(t, url)
	var public bool
	if err := owner.QueryRow(ctx, `SELECT bool_or(has_function_privilege('public', p.oid, 'EXECUTE'))
		FROM pg_proc p WHERE p.proname LIKE 'orisun\_%'`).Scan(&public); err != nil {
		t.Fatal(err)
	}
	if public {
		t.Fatal("an orisun function is executable by PUBLIC")
	}
	if _, err := admin.Exec(ctx, `CREATE ROLE orisun_app_orisun_own NOLOGIN`); err != nil {
		t.Fatal(err)
	}
	if _, err := owner.Exec(ctx, `GRANT EXECUTE ON FUNCTION orisun_append(text, json, json), orisun_append(text, text, text),
		orisun_append(text, jsonb, jsonb), orisun_enqueue(text, json), orisun_enqueue(text, text), orisun_enqueue(text, jsonb)
		TO orisun_app_orisun_own`); err != nil {
		t.Fatal(err)
	}
	if logs := open(); strings.Contains(logs, "orisun_app") {
		t.Fatalf("the node warns about orisun_app once it exists with its grants:\n%s", logs)
	}
}
