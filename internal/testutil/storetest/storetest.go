// Package storetest opens orisun's real stores for the tests of the
// packages above them (the node, the relay's parts, the outbox, the fault
// harness): a PostgreSQL or SQLite store, closed when the test ends. The
// backends' own tests open theirs with a setup of their own, as this
// package imports them. It is apart from package testutil, which needs
// nothing but the standard library. It is orisun's machinery, not for
// import by applications (being internal, it cannot be): its API may
// change without notice.
package storetest

import (
	"context"
	"testing"

	"github.com/orisun-io/orisun/backend/postgres"
	"github.com/orisun-io/orisun/backend/sqlite"
)

// Postgres opens a PostgreSQL store with cfg (cfg.URL: a database of
// pgtest.URL, say) and closes it when the test ends; it fails the test if
// the store cannot open.
func Postgres(t testing.TB, cfg postgres.Config) *postgres.Store {
	t.Helper()
	s, err := postgres.Open(context.Background(), cfg)
	return opened(t, s, err, "PostgreSQL")
}

// SQLite opens a SQLite store with cfg (cfg.Dir: a t.TempDir(), say) and
// closes it when the test ends; it fails the test if the store cannot
// open. The store locks its directory until then: a test that opens the
// directory again (a node on it) closes the store first.
func SQLite(t testing.TB, cfg sqlite.Config) *sqlite.Store {
	t.Helper()
	s, err := sqlite.Open(context.Background(), cfg)
	return opened(t, s, err, "SQLite")
}

// opened returns s, closed when the test ends, or fails the test when the
// open of the kind's store failed with err.
func opened[S interface{ Close() error }](t testing.TB, s S, err error, kind string) S {
	t.Helper()
	if err != nil {
		t.Fatalf("open the %s store: %v", kind, err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}
