package postgres

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/orisun-io/orisun/event"
	"github.com/orisun-io/orisun/internal/pgtest"
)

// TestProbeWrite: the write probe agrees with appends. It succeeds on a
// server that takes writes, and on a database whose sessions default to
// read-only (appends begin READ WRITE, and so does the probe: it must not
// call a store failing whose appends succeed); it fails as unavailable
// while the server is stopped, as appends do, and succeeds once it is back;
// on a closed store it is ErrClosed. The server is the test's own: it is
// stopped, and the other packages share scripts/test's.
func TestProbeWrite(t *testing.T) {
	t.Parallel()
	srv := pgtest.StartServer(t)
	ctx := context.Background()
	s, err := Open(ctx, Config{URL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	if _, _, err := s.CreateBoundary(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	in := func() []event.Input { return []event.Input{{ID: event.NewID(), Type: "t", Data: []byte(`{}`)}} }
	if err := s.ProbeWrite(ctx); err != nil {
		t.Fatalf("probe on a writable server: %v", err)
	}

	admin := pgtest.Connect(t, srv.URL)
	if _, err := admin.Exec(ctx, `ALTER DATABASE postgres SET default_transaction_read_only = on`); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = 'postgres' AND pid <> pg_backend_pid()`); err != nil {
		t.Fatal(err)
	}
	admin.Close(ctx)
	eventually(t, "an append on a read-only-by-default database", func() error { _, err := s.Append(ctx, "b", in(), nil); return err })
	if err := s.ProbeWrite(ctx); err != nil {
		t.Fatalf("probe where appends succeed: %v", err)
	}

	srv.Stop(t)
	_, aerr := s.Append(ctx, "b", in(), nil)
	perr := s.ProbeWrite(ctx)
	if !errors.Is(aerr, event.ErrUnavailable) || !errors.Is(perr, event.ErrUnavailable) {
		t.Fatalf("server stopped: append %v; probe %v", aerr, perr)
	}
	t.Logf("server stopped: probe %v", perr)
	srv.Start(t)
	eventually(t, "the probe once the server is back", func() error { return s.ProbeWrite(ctx) })

	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.ProbeWrite(ctx); !errors.Is(err, event.ErrClosed) {
		t.Fatalf("probe on a closed store: %v", err)
	}
}

// eventually retries f for up to 30 s until it succeeds.
func eventually(t *testing.T, what string, f func() error) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for err := f(); err != nil; err = f() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
