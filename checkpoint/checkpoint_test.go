package checkpoint_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "modernc.org/sqlite"

	"github.com/orisun-io/orisun"
	"github.com/orisun-io/orisun/checkpoint"
	"github.com/orisun-io/orisun/event"
	"github.com/orisun-io/orisun/internal/pgtest"
	"github.com/orisun-io/orisun/internal/testutil"
)

// The in-process node is a Subscriber; the NATS client will be one too.
var _ checkpoint.Subscriber = (*orisun.Node)(nil)

// projection is what the tests run through the helper, per database: a
// table with a counter per applied position, so that a double application
// shows as n = 2 instead of hiding behind a unique constraint.
type projection[Tx any] struct {
	cp *checkpoint.Consumer[Tx]
	// apply counts the position in tx; fail makes it fail after writing.
	apply func(ctx context.Context, tx Tx, pos uint64) error
	// counts returns n per position.
	counts func(t *testing.T) map[uint64]int
	// setEpoch overwrites the saved epoch (a restored database).
	setEpoch func(t *testing.T, epoch string)
	// clear empties the projection in tx.
	clear func(ctx context.Context, tx Tx) error
}

// counter ensures p's schema and returns a handler that applies each
// event's position (p.apply) with the checkpoint.
func (p projection[Tx]) counter(t *testing.T) event.Handler {
	t.Helper()
	if err := p.cp.EnsureSchema(context.Background()); err != nil {
		t.Fatal(err)
	}
	return p.cp.Handler(func(ctx context.Context, tx Tx, e event.Event) error { return p.apply(ctx, tx, e.Position) })
}

// onBothDatabases runs a test of the helper as two parallel subtests, on
// a projection named name in SQLite and in PostgreSQL.
func onBothDatabases(t *testing.T, name string, onSQLite func(*testing.T, projection[*sql.Tx]), onPostgres func(*testing.T, projection[pgx.Tx])) {
	t.Run("SQLite", func(t *testing.T) {
		t.Parallel()
		onSQLite(t, sqliteProjection(t, name))
	})
	t.Run("Postgres", func(t *testing.T) {
		t.Parallel()
		onPostgres(t, pgProjection(t, name))
	})
}

func sqliteProjection(t *testing.T, name string) projection[*sql.Tx] {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+filepath.Join(t.TempDir(), "projection.db")+"?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if _, err := db.Exec(`CREATE TABLE applied (position INTEGER PRIMARY KEY, n INTEGER NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	cp, err := checkpoint.NewSQLite(db, name, "default")
	if err != nil {
		t.Fatal(err)
	}
	return projection[*sql.Tx]{
		cp: cp,
		apply: func(ctx context.Context, tx *sql.Tx, pos uint64) error {
			_, err := tx.ExecContext(ctx, `INSERT INTO applied (position, n) VALUES (?, 1) ON CONFLICT (position) DO UPDATE SET n = applied.n + 1`, int64(pos))
			return err
		},
		counts: func(t *testing.T) map[uint64]int {
			rows, err := db.Query(`SELECT position, n FROM applied`)
			if err != nil {
				t.Fatal(err)
			}
			defer rows.Close()
			return countRows(t, rows)
		},
		setEpoch: func(t *testing.T, epoch string) {
			if _, err := db.Exec(`UPDATE orisun_consumer_checkpoints SET epoch = ?`, epoch); err != nil {
				t.Fatal(err)
			}
		},
		clear: func(ctx context.Context, tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, `DELETE FROM applied`)
			return err
		},
	}
}

func pgPool(t *testing.T, url string) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// pgApplied is the PostgreSQL projection's SQL (also the kill test's child).
const (
	pgAppliedTable = `CREATE TABLE IF NOT EXISTS applied (position bigint PRIMARY KEY, n int NOT NULL)`
	pgApply        = `INSERT INTO applied (position, n) VALUES ($1, 1) ON CONFLICT (position) DO UPDATE SET n = applied.n + 1`
)

func pgCounts(t *testing.T, pool *pgxpool.Pool) map[uint64]int {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT position, n FROM applied`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	return countRows(t, rows)
}

func pgProjection(t *testing.T, name string) projection[pgx.Tx] {
	t.Helper()
	pool := pgPool(t, pgtest.URL(t))
	if _, err := pool.Exec(context.Background(), pgAppliedTable); err != nil {
		t.Fatal(err)
	}
	cp, err := checkpoint.NewPG(pool, name, "default")
	if err != nil {
		t.Fatal(err)
	}
	return projection[pgx.Tx]{
		cp: cp,
		apply: func(ctx context.Context, tx pgx.Tx, pos uint64) error {
			_, err := tx.Exec(ctx, pgApply, int64(pos))
			return err
		},
		counts: func(t *testing.T) map[uint64]int { return pgCounts(t, pool) },
		setEpoch: func(t *testing.T, epoch string) {
			if _, err := pool.Exec(context.Background(), `UPDATE orisun_consumer_checkpoints SET epoch = $1`, epoch); err != nil {
				t.Fatal(err)
			}
		},
		clear: func(ctx context.Context, tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `DELETE FROM applied`)
			return err
		},
	}
}

// startNode starts a node in this process with cfg, NATS on a random port
// and a poll interval of 50 ms, and stops it when the test ends.
func startNode(t *testing.T, cfg orisun.Config) *orisun.Node {
	t.Helper()
	cfg.NATSPort, cfg.PollInterval = -1, 50*time.Millisecond
	if cfg.DataDir == "" {
		cfg.DataDir = t.TempDir()
	}
	n, err := orisun.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Stop() })
	return n
}

// countRows reads the (position, n) rows of a projection's table.
func countRows(t *testing.T, rows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
}) map[uint64]int {
	t.Helper()
	out := map[uint64]int{}
	for rows.Next() {
		var p int64
		var n int
		if err := rows.Scan(&p, &n); err != nil {
			t.Fatal(err)
		}
		out[uint64(p)] = n
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestHandler_I5(t *testing.T) {
	t.Parallel()
	onBothDatabases(t, "proj", testHandler, testHandler)
}

// testHandler: positions are applied once each with the checkpoint in the
// same transaction; a redelivery is skipped without calling the function; a
// gap, another epoch or a failing function write nothing at all.
func testHandler[Tx any](t *testing.T, p projection[Tx]) {
	ctx := context.Background()
	for range 2 { // idempotent
		if err := p.cp.EnsureSchema(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if st, err := p.cp.Load(ctx); err != nil || st != (checkpoint.State{}) {
		t.Fatalf("fresh checkpoint: %+v %v", st, err)
	}
	epoch := uuid.NewString()
	ev := func(pos uint64, ep string) event.Event {
		return event.Event{ID: uuid.NewString(), Boundary: "default", Epoch: ep, Position: pos, Type: "t"}
	}
	var calls atomic.Int64
	var fail atomic.Bool
	h := p.cp.Handler(func(ctx context.Context, tx Tx, e event.Event) error {
		calls.Add(1)
		if err := p.apply(ctx, tx, e.Position); err != nil {
			return err
		}
		if fail.Load() {
			return errors.New("projection refused")
		}
		return nil
	})
	for pos := uint64(1); pos <= 3; pos++ {
		if err := h(ctx, ev(pos, epoch)); err != nil {
			t.Fatal(err)
		}
	}
	want := func(pos uint64, applied int) {
		t.Helper()
		st, err := p.cp.Load(ctx)
		if err != nil || st != (checkpoint.State{Epoch: epoch, Position: pos}) {
			t.Fatalf("checkpoint %+v (%v), want %s/%d", st, err, epoch, pos)
		}
		counts := p.counts(t)
		if len(counts) != applied {
			t.Fatalf("%d positions applied, want %d: %v", len(counts), applied, counts)
		}
		for q, n := range counts {
			if n != 1 || q < 1 || q > uint64(applied) {
				t.Fatalf("position %d applied %d times (want 1..%d once each)", q, n, applied)
			}
		}
	}
	want(3, 3)

	// A redelivery (the process died between commit and acknowledgement).
	calls.Store(0)
	for _, pos := range []uint64{2, 3} {
		if err := h(ctx, ev(pos, epoch)); err != nil {
			t.Fatalf("redelivery of %d: %v", pos, err)
		}
	}
	if calls.Load() != 0 {
		t.Fatalf("the function ran %d times for already applied positions", calls.Load())
	}
	want(3, 3)

	// A gap.
	if err := h(ctx, ev(5, epoch)); !errors.Is(err, checkpoint.ErrOutOfOrder) {
		t.Fatalf("position 5 after 3: %v, want ErrOutOfOrder", err)
	}
	want(3, 3)

	// The function fails after writing: all of it rolls back.
	fail.Store(true)
	if err := h(ctx, ev(4, epoch)); err == nil || !strings.Contains(err.Error(), "projection refused") {
		t.Fatalf("failing function: %v", err)
	}
	fail.Store(false)
	want(3, 3)

	// Another epoch: the boundary was reset or restored.
	err := h(ctx, ev(4, uuid.NewString()))
	var ee *checkpoint.EpochError
	if !errors.Is(err, event.ErrEpochChanged) || !errors.As(err, &ee) || ee.Saved != epoch ||
		!strings.Contains(err.Error(), "Reset") || !strings.Contains(err.Error(), "reset or restored") {
		t.Fatalf("event of another epoch: %v", err)
	}
	want(3, 3)

	if err := h(ctx, ev(4, epoch)); err != nil {
		t.Fatal(err)
	}
	want(4, 4)

	if err := p.cp.Reset(ctx); err != nil {
		t.Fatal(err)
	}
	if st, err := p.cp.Load(ctx); err != nil || st != (checkpoint.State{}) {
		t.Fatalf("after Reset: %+v %v", st, err)
	}
}

func TestNamesChecked(t *testing.T) {
	t.Parallel()
	db, err := sql.Open("sqlite", "file:"+filepath.Join(t.TempDir(), "p.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := checkpoint.NewSQLite(db, "", "default"); !errors.Is(err, event.ErrInvalid) {
		t.Fatalf("empty consumer name: %v", err)
	}
	if _, err := checkpoint.NewSQLite(db, "x", "Not.Valid"); !errors.Is(err, event.ErrInvalid) {
		t.Fatalf("bad boundary: %v", err)
	}
	a, _ := checkpoint.NewSQLite(db, "x", "default")
	if err := a.EnsureSchema(context.Background()); err != nil {
		t.Fatal(err)
	}
	h := a.Handler(func(context.Context, *sql.Tx, event.Event) error { return nil })
	if err := h(context.Background(), event.Event{Boundary: "default", Epoch: "e", Position: 1}); err != nil {
		t.Fatal(err)
	}
	b, _ := checkpoint.NewSQLite(db, "x", "other")
	if _, err := b.Load(context.Background()); !errors.Is(err, event.ErrConflict) {
		t.Fatalf("one consumer name on two boundaries: %v", err)
	}
}

// TestRunResumes_I5: Run against a real node (SQLite store, embedded NATS)
// applies every position once, stops, resumes from the saved checkpoint
// after more appends, and applies every later position once. Then a saved
// epoch that is not the boundary's ends Run with an EpochError that says to
// rebuild and reset.
func TestRunResumes_I5(t *testing.T) {
	t.Parallel()
	n := startNode(t, orisun.Config{})
	ctx := context.Background()
	p := sqliteProjection(t, "totals")
	if err := p.cp.EnsureSchema(ctx); err != nil {
		t.Fatal(err)
	}
	fn := func(ctx context.Context, tx *sql.Tx, e event.Event) error { return p.apply(ctx, tx, e.Position) }
	runUntil := func(head uint64) {
		t.Helper()
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- p.cp.Run(rctx, n, fn) }()
		testutil.Until(t, fmt.Sprintf("the checkpoint at %d", head), 60*time.Second, 20*time.Millisecond, func() error {
			st, err := p.cp.Load(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if st.Position == head {
				return nil
			}
			select {
			case err := <-done:
				t.Fatalf("Run ended at %d of %d: %v", st.Position, head, err)
			default:
			}
			return fmt.Errorf("checkpoint at %d", st.Position)
		})
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("Run after cancel: %v", err)
		}
	}
	appendN := func(k int) {
		t.Helper()
		in := make([]orisun.Input, k)
		for i := range in {
			in[i] = orisun.Input{Type: "order.placed", Data: []byte(fmt.Sprintf(`{"i":%d}`, i))}
		}
		if _, err := n.Append(ctx, "default", in, nil); err != nil {
			t.Fatal(err)
		}
	}
	appendN(100)
	runUntil(100)
	appendN(50)
	runUntil(150)
	counts := p.counts(t)
	for pos := uint64(1); pos <= 150; pos++ {
		if counts[pos] != 1 {
			t.Fatalf("position %d applied %d times", pos, counts[pos])
		}
	}
	if len(counts) != 150 {
		t.Fatalf("%d positions applied, want 150", len(counts))
	}

	p.setEpoch(t, uuid.NewString())
	err := p.cp.Run(ctx, n, fn)
	var ee *checkpoint.EpochError
	if !errors.Is(err, event.ErrEpochChanged) || !errors.As(err, &ee) || !strings.Contains(err.Error(), "Reset") {
		t.Fatalf("Run with a checkpoint of another epoch: %v", err)
	}
	if len(p.counts(t)) != 150 {
		t.Fatal("something was applied across an epoch change")
	}
}

func TestTwoInstances_I5(t *testing.T) {
	t.Parallel()
	onBothDatabases(t, "twice", testTwoInstances, testTwoInstances)
}

// testTwoInstances: two instances of one consumer fed the same positions
// at the same time (a deployment that briefly runs the old and the new
// process) apply each position once: the checkpoint row's lock orders them
// and the second skips what the first applied.
func testTwoInstances[Tx any](t *testing.T, p projection[Tx]) {
	ctx := context.Background()
	h := p.counter(t)
	epoch := uuid.NewString()
	const total = 200
	errs := make(chan error, 2)
	for range 2 {
		go func() {
			for pos := uint64(1); pos <= total; pos++ {
				if err := h(ctx, event.Event{Boundary: "default", Epoch: epoch, Position: pos, Type: "t"}); err != nil {
					errs <- fmt.Errorf("position %d: %w", pos, err)
					return
				}
			}
			errs <- nil
		}()
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	counts := p.counts(t)
	for pos := uint64(1); pos <= total; pos++ {
		if counts[pos] != 1 {
			t.Fatalf("position %d applied %d times by two instances", pos, counts[pos])
		}
	}
	if st, err := p.cp.Load(ctx); err != nil || st.Position != total {
		t.Fatalf("checkpoint %+v %v", st, err)
	}
}

func TestRebuild(t *testing.T) {
	t.Parallel()
	onBothDatabases(t, "proj", testRebuild, testRebuild)
}

// testRebuild: Rebuild empties the state and deletes the checkpoint in one
// transaction; when the emptying fails, both stay as they were.
func testRebuild[Tx any](t *testing.T, p projection[Tx]) {
	ctx := context.Background()
	h := p.counter(t)
	epoch := uuid.NewString()
	for pos := uint64(1); pos <= 3; pos++ {
		if err := h(ctx, event.Event{ID: uuid.NewString(), Boundary: "default", Epoch: epoch, Position: pos, Type: "t"}); err != nil {
			t.Fatal(err)
		}
	}
	boom := errors.New("rebuild refused")
	if err := p.cp.Rebuild(ctx, func(ctx context.Context, tx Tx) error {
		if err := p.clear(ctx, tx); err != nil {
			return err
		}
		return boom
	}); !errors.Is(err, boom) {
		t.Fatalf("failing rebuild: %v", err)
	}
	if st, err := p.cp.Load(ctx); err != nil || st.Position != 3 || len(p.counts(t)) != 3 {
		t.Fatalf("after a failed rebuild: checkpoint %+v (%v), %d applied; want both untouched", st, err, len(p.counts(t)))
	}
	if err := p.cp.Rebuild(ctx, p.clear); err != nil {
		t.Fatal(err)
	}
	if st, err := p.cp.Load(ctx); err != nil || st != (checkpoint.State{}) || len(p.counts(t)) != 0 {
		t.Fatalf("after a rebuild: checkpoint %+v (%v), %d applied; want both empty", st, err, len(p.counts(t)))
	}
}
