package bench

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// pgCheckpoints is what PostgreSQL's statistics say of its checkpoints so
// far (pg_stat_bgwriter): how many began, and the milliseconds their sync
// phases took; and of the autovacuum workers' runs on the run's own
// database (pg_stat_user_tables: vacuums and analyzes, which an
// insert-only table such as orisun_events gets every 20% of growth, and
// whose reads and writes commits also wait behind). A checkpoint's sync phase flushes the data files it
// wrote; on a disk that serves one flush at a time, the commits of that
// moment (their WAL flush) wait behind it, tens to hundreds of
// milliseconds. A latency row's tail is then the server's checkpoint, not
// the path measured, and the two rows it is compared with may have had a
// checkpoint each, or not (docs/performance.md, "The live path at 5,000
// events/s"). ok false: not PostgreSQL, or the statistics could not be
// read.
type pgCheckpoints struct {
	n      int64
	syncMs float64
	// autovacuums counts autovacuum and autoanalyze runs.
	autovacuums int64
	ok          bool
}

// pgCheckpoints reads the counters, on a connection of its own to the
// run's database: read before a row's meter starts and after it ends, so
// the row pays nothing for it.
func (r *runner) pgCheckpoints(ctx context.Context) pgCheckpoints {
	if r.pgURL == "" {
		return pgCheckpoints{}
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, r.pgURL)
	if err != nil {
		return pgCheckpoints{}
	}
	defer conn.Close(context.Background())
	var c pgCheckpoints
	if err := conn.QueryRow(ctx, `SELECT checkpoints_timed + checkpoints_req, checkpoint_sync_time,
	    (SELECT coalesce(sum(autovacuum_count + autoanalyze_count), 0)::bigint FROM pg_stat_user_tables)
	  FROM pg_stat_bgwriter`).
		Scan(&c.n, &c.syncMs, &c.autovacuums); err != nil {
		return pgCheckpoints{}
	}
	c.ok = true
	return c
}

// noteCheckpoints records on row the checkpoints PostgreSQL began during
// it and the sync time of those that ended during it, since before.
func (r *runner) noteCheckpoints(ctx context.Context, row *Row, before pgCheckpoints) {
	after := r.pgCheckpoints(ctx)
	if !before.ok || !after.ok {
		return
	}
	row.PGCheckpoints = after.n - before.n
	row.PGCheckpointSyncMs = after.syncMs - before.syncMs
	row.PGAutovacuums = after.autovacuums - before.autovacuums
}
