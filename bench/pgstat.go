package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// pgCheckpoints is what PostgreSQL's statistics say of its checkpoints so
// far: how many began, and the milliseconds their sync phases took
// (pg_stat_bgwriter before PostgreSQL 17, pg_stat_checkpointer from 17);
// and of the autovacuum workers' runs on the run's own database
// (pg_stat_user_tables: vacuums and analyzes, which an insert-only table
// such as orisun_events gets every 20% of growth, and whose reads and
// writes commits also wait behind). A checkpoint's sync phase flushes the
// data files it wrote; on a disk that serves one flush at a time, the
// commits of that moment (their WAL flush) wait behind it, tens to
// hundreds of milliseconds. A latency row's tail may then be the server's,
// not the path measured, and the row it is compared with may have had
// such a stall, or not (docs/performance.md, "The live path at 5,000
// events/s"). ok false: not PostgreSQL, or the statistics could not be
// read (err says why).
type pgCheckpoints struct {
	n      int64
	syncMs float64
	// autovacuums counts autovacuum and autoanalyze runs.
	autovacuums int64
	// settled: the row starts right after a VACUUM and a CHECKPOINT
	// (beforePaced).
	settled bool
	ok      bool
	err     error
}

// The queries of the counters: PostgreSQL 17 moved the checkpointer's
// from pg_stat_bgwriter to pg_stat_checkpointer.
const (
	pgActivityBefore17 = `SELECT checkpoints_timed + checkpoints_req, checkpoint_sync_time,
    (SELECT coalesce(sum(autovacuum_count + autoanalyze_count), 0)::bigint FROM pg_stat_user_tables)
  FROM pg_stat_bgwriter`
	pgActivity17 = `SELECT num_timed + num_requested, sync_time,
    (SELECT coalesce(sum(autovacuum_count + autoanalyze_count), 0)::bigint FROM pg_stat_user_tables)
  FROM pg_stat_checkpointer`
)

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
		return pgCheckpoints{err: err}
	}
	defer conn.Close(context.Background())
	var version int
	if err := conn.QueryRow(ctx, `SELECT current_setting('server_version_num')::int`).Scan(&version); err != nil {
		return pgCheckpoints{err: err}
	}
	q := pgActivityBefore17
	if version >= 170000 {
		q = pgActivity17
	}
	var c pgCheckpoints
	if err := conn.QueryRow(ctx, q).Scan(&c.n, &c.syncMs, &c.autovacuums); err != nil {
		return pgCheckpoints{err: err}
	}
	c.ok = true
	return c
}

// beforePaced readies the server for a paced row and reads its counters
// (pgCheckpoints). On PostgreSQL it first vacuums the run's database and
// takes a checkpoint (settleNoted), so that every paced row, the limit
// raw_e2e and the rows compared with it, starts alike: the WAL and the
// unvacuumed rows that the rows before it left (the throughput rows write
// gigabytes) would otherwise bring a checkpoint's sync or an autovacuum
// into whichever row comes after them, and not into the row it is
// compared with (docs/performance.md, "The live path at 5,000 events/s").
// A row then runs between checkpoints: what one costs is not in it.
func (r *runner) beforePaced(ctx context.Context) pgCheckpoints {
	if r.pgURL == "" {
		return pgCheckpoints{}
	}
	settled := r.settleNoted(ctx)
	c := r.pgCheckpoints(ctx)
	c.settled = settled
	return c
}

// settleNoted settles the server (settle) and reports whether it did.
// Where the server refuses (CHECKPOINT needs a superuser or
// pg_checkpoint) the report says so once, and the rows run anyway.
// CHECKPOINT is the whole server's: on a server shared with other work it
// flushes theirs too.
func (r *runner) settleNoted(ctx context.Context) bool {
	if r.pgURL == "" {
		return false
	}
	r.progress("PostgreSQL: VACUUM (ANALYZE) of the run's database and CHECKPOINT, so the next row starts alike")
	err := r.settle(ctx)
	if err != nil && ctx.Err() == nil && !r.pgUnsettled && r.rep != nil {
		r.pgUnsettled = true
		r.rep.Notes = append(r.rep.Notes, fmt.Sprintf("PostgreSQL: the rows could not start after a VACUUM and a CHECKPOINT (%v): "+
			"what the rows before each one wrote may stall its commits; the paced rows without pg_settled did not start settled", err))
	}
	return err == nil
}

// settle vacuums the run's database and takes a checkpoint.
func (r *runner) settle(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, r.pgURL)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	for _, stmt := range []string{"VACUUM (ANALYZE)", "CHECKPOINT"} {
		if _, err := conn.Exec(ctx, stmt); err != nil {
			return fmt.Errorf("%s: %w", stmt, err)
		}
	}
	return nil
}

// noteCheckpoints records on row the checkpoints PostgreSQL began during
// it, the sync time of those that ended during it, and the autovacuum
// passes, since before. Where they could not be read it says so in the
// report's notes (once a run), so that their absence is not taken for
// "none".
func (r *runner) noteCheckpoints(ctx context.Context, row *Row, before pgCheckpoints) {
	if r.pgURL == "" {
		return
	}
	row.PGSettled = before.settled
	after := r.pgCheckpoints(ctx)
	if !before.ok || !after.ok {
		if !r.pgStatsUnread && r.rep != nil {
			r.pgStatsUnread = true
			r.rep.Notes = append(r.rep.Notes, fmt.Sprintf("%s %s: PostgreSQL's checkpoint and autovacuum statistics could not be read "+
				"(%v); the rows without pg_activity_read say nothing of the server's stalls", row.Workload, row.Name, cmpErr(before.err, after.err)))
		}
		return
	}
	row.PGActivityRead = true
	row.PGCheckpoints = after.n - before.n
	row.PGCheckpointSyncMs = after.syncMs - before.syncMs
	row.PGAutovacuums = after.autovacuums - before.autovacuums
}

// cmpErr is the first of the errors that is not nil.
func cmpErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}
