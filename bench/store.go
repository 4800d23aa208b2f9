package bench

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/orisun-io/orisun/backend"
	"github.com/orisun-io/orisun/backend/postgres"
	"github.com/orisun-io/orisun/backend/sqlite"
	"github.com/orisun-io/orisun/event"
)

// dbPrefix names the databases the bench creates.
const dbPrefix = "orisun_bench_"

// createDatabase creates a fresh database orisun_bench_<random> on the
// server of serverURL and returns its URL and a function that drops it. A
// name that exists already is an error (CREATE DATABASE refuses it): the
// bench never writes into a database it did not create.
func createDatabase(ctx context.Context, serverURL string) (string, func() error, error) {
	u, err := url.Parse(serverURL)
	if err != nil {
		return "", nil, fmt.Errorf("%w: bench: pg-url is not a URL", event.ErrInvalid)
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := dbPrefix + hex.EncodeToString(b[:])
	admin := func(ctx context.Context, stmt string) error {
		conn, err := pgx.Connect(ctx, serverURL)
		if err != nil {
			return err
		}
		defer conn.Close(context.Background())
		_, err = conn.Exec(ctx, stmt)
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := admin(cctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return "", nil, fmt.Errorf("bench: create database %s (the user of pg-url must be allowed to CREATE DATABASE): %w", name, err)
	}
	u.Path = "/" + name
	drop := func() error {
		dctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := admin(dctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
			return fmt.Errorf("bench: drop database %s: %w", name, err)
		}
		return nil
	}
	return u.String(), drop, nil
}

// dbName is the database of a URL.
func dbName(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		return "?"
	}
	return strings.TrimPrefix(p.Path, "/")
}

// openStore opens the backend directly, without a node: no publisher runs.
func (r *runner) openStore(ctx context.Context) (backend.Store, error) {
	if r.cfg.Backend == "postgres" {
		return postgres.Open(ctx, postgres.Config{URL: r.pgURL})
	}
	return sqlite.Open(ctx, sqlite.Config{Dir: r.dir})
}

// fillBacklog appends the backlog through the store in batches of 1,000
// (from two appenders, so the store always has the next batch waiting).
func (r *runner) fillBacklog(ctx context.Context, s backend.Store) error {
	if _, _, err := s.CreateBoundary(ctx, relayBoundary); err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	r.progress("backlog: appending %d events of %d bytes through the store (no publisher running)", r.cfg.Events, r.cfg.EventBytes)
	m := startMeter()
	defer m.finish()
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				end := next.Add(1000)
				start := end - 1000
				if start >= int64(r.cfg.Events) {
					return
				}
				k := int(min(end, int64(r.cfg.Events)) - start)
				in, err := event.Prepare(relayBoundary, r.inputs(k), r.lim)
				if err == nil {
					_, err = s.Append(ctx, relayBoundary, in, nil)
				}
				if err != nil {
					errs <- fmt.Errorf("bench: backlog: %w", err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return err
	}
	row := m.row("backlog", "store append, batches of 1000, 2 appenders", int64(r.cfg.Events), r.cfg.EventBytes)
	row.Note = "the backlog written through the store's append path before the node starts (no publisher)"
	r.rep.Rows = append(r.rep.Rows, row)
	b, err := s.Boundary(ctx, relayBoundary)
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	r.rep.check("backlog head = events appended", int64(r.cfg.Events), int64(b.Head))
	return nil
}

// rawRead is the range-read loop over the backlog in pages of the
// publisher's batch size, with each row scanned into plain Go values.
func (r *runner) rawRead(ctx context.Context) error {
	const page = 1000
	r.progress("limit: raw range reads of the backlog, pages of %d", page)
	var m *meter
	var readPage func(after int64) (got int, last int64, err error)
	if r.cfg.Backend == "postgres" {
		conn, err := pgx.Connect(ctx, r.pgURL)
		if err != nil {
			return fmt.Errorf("bench: raw read: %w", err)
		}
		defer conn.Close(context.Background())
		readPage = func(after int64) (got int, last int64, err error) {
			rows, err := conn.Query(ctx, `SELECT position, id::text, type, time, tags, data, metadata FROM orisun_events
WHERE boundary = $1 AND position > $2 ORDER BY position LIMIT $3`, relayBoundary, after, page)
			if err != nil {
				return 0, 0, err
			}
			defer rows.Close()
			for rows.Next() {
				var (
					id, typ  string
					t        time.Time
					tags     []string
					data, md []byte
				)
				if err := rows.Scan(&last, &id, &typ, &t, &tags, &data, &md); err != nil {
					return 0, 0, err
				}
				got++
			}
			return got, last, rows.Err()
		}
	} else {
		db, err := sql.Open("sqlite", sqlite.ReaderDSN(filepath.Join(r.dir, sqlite.DBFile)))
		if err != nil {
			return fmt.Errorf("bench: raw read: %w", err)
		}
		defer db.Close()
		readPage = func(after int64) (got int, last int64, err error) {
			rows, err := db.QueryContext(ctx, `SELECT position, id, type, time, tags, data, metadata FROM events
WHERE boundary = ?1 AND position > ?2 ORDER BY position LIMIT ?3`, relayBoundary, after, page)
			if err != nil {
				return 0, 0, err
			}
			defer rows.Close()
			for rows.Next() {
				var (
					t             int64
					id, typ, tags string
					data, md      []byte
				)
				if err := rows.Scan(&last, &id, &typ, &t, &tags, &data, &md); err != nil {
					return 0, 0, err
				}
				got++
			}
			return got, last, rows.Err()
		}
	}
	m = startMeter()
	defer m.finish()
	var n, after int64
	for {
		got, last, err := readPage(after)
		if err != nil {
			return fmt.Errorf("bench: raw read: %w", err)
		}
		n += int64(got)
		if got < page {
			break
		}
		after = last
	}
	row := m.row("limit", "raw_read", n, r.cfg.EventBytes)
	row.Note = fmt.Sprintf("SELECT … WHERE boundary = ? AND position > ? ORDER BY position LIMIT %d, one connection, rows scanned into plain values", page)
	r.rep.Limits = append(r.rep.Limits, row)
	r.rep.check("raw read rows = backlog", int64(r.cfg.Events), n)
	return nil
}

// The SQLite copy of the events table: the same columns, keys, indexes and
// tag-index trigger as migrations/sqlite.
const sqliteRawSchema = `
CREATE TABLE raw_events (
    boundary TEXT NOT NULL, position INTEGER NOT NULL, id TEXT NOT NULL, type TEXT NOT NULL,
    time INTEGER NOT NULL, tags TEXT NOT NULL, data TEXT NOT NULL, metadata TEXT,
    PRIMARY KEY (boundary, position)) WITHOUT ROWID;
CREATE UNIQUE INDEX raw_events_boundary_id ON raw_events (boundary, id);
CREATE INDEX raw_events_boundary_type_position ON raw_events (boundary, type, position);
CREATE TABLE raw_event_tags (boundary TEXT NOT NULL, tag TEXT NOT NULL, position INTEGER NOT NULL,
    PRIMARY KEY (boundary, tag, position)) WITHOUT ROWID;
CREATE TRIGGER raw_events_tag_index AFTER INSERT ON raw_events
BEGIN
    INSERT OR IGNORE INTO raw_event_tags (boundary, tag, position)
    SELECT NEW.boundary, value, NEW.position FROM json_each(NEW.tags);
END;`

// rawInsert inserts rows of the run's shape, 100 per statement, each
// statement its own transaction, into a copy of the events table, for the
// append duration: PostgreSQL from 8 connections (the node's pool size),
// SQLite from its one writer connection with the node's pragmas.
func (r *runner) rawInsert(ctx context.Context) error {
	const perStmt = 100
	var n atomic.Int64
	var m *meter
	var cp pgCheckpoints // the server's counters before the row (PostgreSQL)
	var note string
	if r.cfg.Backend == "postgres" {
		const conns = 8
		r.progress("limit: raw multi-row INSERTs into a copy of orisun_events, %d rows each, %d connections, %s", perStmt, conns, r.cfg.AppendDuration)
		pcfg, err := pgxpool.ParseConfig(r.pgURL)
		if err != nil {
			return fmt.Errorf("bench: raw insert: %w", err)
		}
		pcfg.MaxConns = conns
		pool, err := pgxpool.NewWithConfig(ctx, pcfg)
		if err != nil {
			return fmt.Errorf("bench: raw insert: %w", err)
		}
		defer pool.Close()
		if _, err := pool.Exec(ctx, `CREATE TABLE raw_events (LIKE orisun_events INCLUDING ALL)`); err != nil {
			return fmt.Errorf("bench: raw insert: %w", err)
		}
		defer pool.Exec(context.Background(), `DROP TABLE IF EXISTS raw_events`)
		var pos atomic.Int64
		cp = r.pgCheckpoints(ctx)
		m = startMeter()
		defer m.finish()
		deadline := time.Now().Add(r.cfg.AppendDuration)
		var wg sync.WaitGroup
		errs := make(chan error, conns)
		for range conns {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ids := make([]string, perStmt)
				data := make([]string, perStmt)
				for i := range data {
					data[i] = string(r.data)
				}
				for time.Now().Before(deadline) {
					for i := range ids {
						ids[i] = event.NewID()
					}
					first := pos.Add(perStmt) - perStmt + 1
					_, err := pool.Exec(ctx, `INSERT INTO raw_events (boundary, position, id, type, time, tags, data, metadata)
SELECT 'bench', $1::bigint + u.ord - 1, u.id, 'bench.event', statement_timestamp(), ARRAY['bench'], u.data::json, NULL
FROM unnest($2::uuid[], $3::text[]) WITH ORDINALITY AS u(id, data, ord)`, first, ids, data)
					if err != nil {
						errs <- fmt.Errorf("bench: raw insert: %w", err)
						return
					}
					n.Add(perStmt)
				}
			}()
		}
		wg.Wait()
		close(errs)
		if err := <-errs; err != nil {
			return err
		}
		note = fmt.Sprintf("%d-row INSERT … SELECT FROM unnest(…) statements in autocommit from %d connections into CREATE TABLE … (LIKE orisun_events INCLUDING ALL)", perStmt, conns)
	} else {
		r.progress("limit: raw multi-row INSERTs into a copy of the events table, %d rows each, %s", perStmt, r.cfg.AppendDuration)
		// The store's own writer settings (the store, open meanwhile, has
		// created the database and its writer is idle).
		db, err := sql.Open("sqlite", sqlite.WriterDSN(filepath.Join(r.dir, sqlite.DBFile), "FULL"))
		if err != nil {
			return fmt.Errorf("bench: raw insert: %w", err)
		}
		defer db.Close()
		db.SetMaxOpenConns(1)
		if _, err := db.ExecContext(ctx, sqliteRawSchema); err != nil {
			return fmt.Errorf("bench: raw insert: %w", err)
		}
		defer db.ExecContext(context.Background(), `DROP TABLE raw_events; DROP TABLE raw_event_tags`)
		stmt := `INSERT INTO raw_events (boundary, position, id, type, time, tags, data, metadata) VALUES ` +
			strings.TrimSuffix(strings.Repeat("(?, ?, ?, ?, ?, ?, ?, ?),", perStmt), ",")
		ps, err := db.PrepareContext(ctx, stmt)
		if err != nil {
			return fmt.Errorf("bench: raw insert: %w", err)
		}
		defer ps.Close()
		data := string(r.data)
		args := make([]any, 0, 8*perStmt)
		m = startMeter()
		defer m.finish()
		deadline := time.Now().Add(r.cfg.AppendDuration)
		var pos int64
		for time.Now().Before(deadline) {
			args = args[:0]
			now := time.Now().UnixNano()
			for range perStmt {
				pos++
				args = append(args, "bench", pos, event.NewID(), "bench.event", now, `["bench"]`, data, nil)
			}
			if _, err := ps.ExecContext(ctx, args...); err != nil {
				return fmt.Errorf("bench: raw insert: %w", err)
			}
			n.Add(perStmt)
		}
		note = fmt.Sprintf("%d-row INSERT statements in autocommit (synchronous FULL, WAL) into a copy of the events table with its indexes and tag-index trigger", perStmt)
	}
	row := m.row("limit", "raw_insert", n.Load(), r.cfg.EventBytes)
	row.Note = note
	r.noteCheckpoints(ctx, &row, cp)
	r.rep.Limits = append(r.rep.Limits, row)
	return nil
}
