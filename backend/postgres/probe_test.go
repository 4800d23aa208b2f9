package postgres

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/orisun-io/orisun/event"
	"github.com/orisun-io/orisun/internal/pgtest"
	"github.com/orisun-io/orisun/internal/testutil"
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
	s := setup(t, Config{URL: srv.URL})
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
	testutil.Until(t, "an append on a read-only-by-default database", 30*time.Second, 20*time.Millisecond, func() error { _, err := s.Append(ctx, "b", in(), nil); return err })
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
	testutil.Until(t, "the probe once the server is back", 30*time.Second, 20*time.Millisecond, func() error { return s.ProbeWrite(ctx) })

	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.ProbeWrite(ctx); !errors.Is(err, event.ErrClosed) {
		t.Fatalf("probe on a closed store: %v", err)
	}
}

// TestProbeWriteDataDiskFull: the server's data files on a small file
// system that fills up while its WAL, elsewhere, has room (a tablespace on
// a tmpfs of the test's own, the database's default): appends fail for
// want of a new page, and so does the probe, which takes a new page of its
// scratch table; a transaction id alone (what the probe did before) still
// commits there, so it would have called the store healthy. Once space is
// freed the probe and appends succeed again. Root only (it mounts); under
// CI a machine that cannot mount fails the test rather than skip it.
func TestProbeWriteDataDiskFull(t *testing.T) {
	t.Parallel()
	// Mounted before the server starts, so that it is unmounted after the
	// server stopped (cleanups run last first).
	mnt := testutil.MountTmpfs(t, "8m", os.Getenv(pgtest.EnvOSUser))
	srv := pgtest.StartServer(t)
	ctx := context.Background()
	admin := pgtest.Connect(t, srv.URL)
	tablespace := filepath.Join(mnt, "ts")
	mkdir := exec.Command("mkdir", tablespace)
	if u := os.Getenv(pgtest.EnvOSUser); u != "" {
		mkdir = exec.Command("runuser", "-u", u, "--", "mkdir", tablespace)
	}
	if out, err := mkdir.CombinedOutput(); err != nil {
		t.Fatalf("mkdir %s: %v: %s", tablespace, err, out)
	}
	for _, q := range []string{
		`CREATE TABLESPACE small LOCATION '` + tablespace + `'`,
		`ALTER DATABASE postgres SET default_tablespace = small`,
	} {
		if _, err := admin.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	s := setup(t, Config{URL: srv.URL})
	var where string
	if err := admin.QueryRow(ctx, `SELECT coalesce(t.spcname, '') FROM pg_class c LEFT JOIN pg_tablespace t ON t.oid = c.reltablespace
WHERE c.relname = 'orisun_write_probe'`).Scan(&where); err != nil || where != "small" {
		t.Fatalf("the probe's table is in tablespace %q (%v), want small: the test must fill its file system", where, err)
	}
	if _, _, err := s.CreateBoundary(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	if err := s.ProbeWrite(ctx); err != nil {
		t.Fatalf("probe with room: %v", err)
	}

	filler := filepath.Join(mnt, "filler")
	testutil.FillFile(t, filler)
	big := func() []event.Input {
		return []event.Input{{ID: event.NewID(), Type: "t", Data: []byte(`{"pad":"` + strings.Repeat("x", 6000) + `"}`)}}
	}
	var aerr error
	for i := 0; i < 2000 && aerr == nil; i++ { // the pages in hand take a few
		_, aerr = s.Append(ctx, "b", big(), nil)
	}
	if !errors.Is(aerr, event.ErrUnavailable) {
		t.Fatalf("appends with the data disk full: %v; want them to fail as unavailable", aerr)
	}
	perr := s.ProbeWrite(ctx)
	if !errors.Is(perr, event.ErrUnavailable) {
		t.Fatalf("probe with the data disk full (appends fail: %v): %v; want unavailable", aerr, perr)
	}
	// What the probe was before: a transaction id, committed. The WAL has
	// room, so it succeeds where appends fail.
	tx, err := admin.BeginTx(ctx, pgx.TxOptions{AccessMode: pgx.ReadWrite})
	if err != nil {
		t.Fatal(err)
	}
	var xid int64
	if err := tx.QueryRow(ctx, `SELECT txid_current()`).Scan(&xid); err != nil {
		t.Fatal(err)
	}
	xerr := tx.Commit(ctx)
	t.Logf("data disk full: append %v; probe %v; a transaction id alone: %v", aerr, perr, xerr)

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	testutil.Until(t, "the probe once space is freed", 30*time.Second, 20*time.Millisecond, func() error { return s.ProbeWrite(ctx) })
	testutil.Until(t, "an append once space is freed", 30*time.Second, 20*time.Millisecond, func() error { _, err := s.Append(ctx, "b", big(), nil); return err })
	var rows int
	if err := admin.QueryRow(ctx, `SELECT count(*) FROM orisun_write_probe`).Scan(&rows); err != nil || rows != 0 {
		t.Fatalf("the probe's table holds %d rows (%v), want none", rows, err)
	}
}

// BenchmarkProbeWrite: what one write probe costs (it runs once per poll
// interval, only while store writes fail), against the old probe, a
// transaction id alone:
//
//	scripts/test -bench ProbeWrite -run '^$' ./backend/postgres/
func BenchmarkProbeWrite(b *testing.B) {
	s := setup(b, Config{})
	ctx := context.Background()
	b.Run("scratch-table", func(b *testing.B) {
		for b.Loop() {
			if err := s.ProbeWrite(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("txid-only", func(b *testing.B) {
		for b.Loop() {
			tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{AccessMode: pgx.ReadWrite})
			if err != nil {
				b.Fatal(err)
			}
			if _, err := tx.Exec(ctx, `SELECT txid_current()`); err != nil {
				b.Fatal(err)
			}
			if err := tx.Commit(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
}
