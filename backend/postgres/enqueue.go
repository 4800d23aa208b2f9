package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/orisun-io/orisun/backend"
	"github.com/orisun-io/orisun/backend/internal/sqlstore"
	"github.com/orisun-io/orisun/event"
)

// The staged appends of orisun_enqueue (migrations/postgres/0005_enqueue.sql,
// docs/outbox.md): application transactions stage events without taking
// the boundary's head row, and the boundary's lease holder moves the
// committed ones into the log (MoveStaged), woken by a notification on
// stagedChannel at the commit of an enqueue that found the boundary's
// staging empty (the mover scans on its own while events keep coming).
const (
	stagedChannel = "orisun_staged" // payload: a boundary with newly staged events

	sqlMoveStaged = `SELECT moved, duplicates, set_aside, first_position, last_position, more
FROM orisun_move_staged($1, $2, $3, $4)`

	// sqlStagedStates reads, per boundary with any, the committed staged
	// events not moved yet (count, oldest enqueue time) and the events set
	// aside (count, latest reason), in one statement.
	sqlStagedStates = `SELECT coalesce(s.boundary, a.boundary), coalesce(s.n, 0), s.oldest, coalesce(a.n, 0), a.reason
FROM (SELECT boundary, count(*) AS n, min(enqueued_at) AS oldest FROM orisun_staged GROUP BY boundary) s
FULL JOIN (SELECT DISTINCT ON (boundary) boundary, count(*) OVER (PARTITION BY boundary) AS n, reason
           FROM orisun_set_aside ORDER BY boundary, set_aside_at DESC, seq DESC) a ON a.boundary = s.boundary`

	// sqlStagedBoundaries lists the boundaries with committed staged
	// events (the node's periodic head check, StagedBoundaries).
	sqlStagedBoundaries = `SELECT DISTINCT boundary FROM orisun_staged`

	// codeLeaseLost is orisun_move_staged's refusal of a holder whose
	// term is not the boundary's current, unexpired one.
	codeLeaseLost = "ORLST"
)

// MoveResult is what one MoveStaged did.
type MoveResult struct {
	// Moved events got positions First..Last; Duplicates were already in
	// the log with the same content (dropped); SetAside were in the log
	// with other content (kept in orisun_set_aside with the reason).
	Moved, Duplicates, SetAside int
	First, Last                 uint64
	// More is true when the batch was full: more staged events may wait.
	More bool
}

// StagedState is a boundary's staging as the status shows it.
type StagedState struct {
	Boundary string
	// Staged counts the committed staged events not moved yet; Oldest is
	// the enqueue time of the oldest of them (zero when none).
	Staged int64
	Oldest time.Time
	// SetAside counts the events set aside; Reason is the latest one's.
	SetAside int64
	Reason   string
}

// MoveStaged moves up to batch committed staged events of the boundary into
// the log at its next positions (whole enqueue calls, and the first call
// whole whatever its size), in one transaction that also removes them from
// the staging table, so that each staged event enters the log exactly
// once. It is fenced by the lease: only l's holder in l's term, unexpired
// in the database's clock, moves anything (event.ErrLeaseLost otherwise),
// and a takeover waits for the move's commit. After a move that wrote, the
// OnAppend callbacks are called, as after an append.
//
// ctx's deadline, when it has one, also bounds the move on the server
// (statement_timeout and idle_in_transaction_session_timeout of the
// transaction): the move holds the lease row FOR SHARE, which the holder's
// renewals wait for, so it must end in time even when this process cannot
// cancel it (frozen, or cut off from the server). A staged row that
// another session holds a row lock on fails the move, naming that session
// (moveBlocked): the call it belongs to, and every call behind it, wait
// for it rather than be split or overtaken.
func (s *Store) MoveStaged(ctx context.Context, l backend.Lease, batch int) (MoveResult, error) {
	op := fmt.Sprintf("move the staged events of %q", l.Boundary)
	if s.isClosed() {
		return MoveResult{}, errClosed(op)
	}
	if batch < 1 {
		return MoveResult{}, fmt.Errorf("postgres: %s: %w: batch is %d; it must be at least 1", op, event.ErrInvalid, batch)
	}
	opts := pgx.TxOptions{IsoLevel: pgx.ReadCommitted}
	var bound time.Duration
	if d, ok := ctx.Deadline(); ok {
		// One round trip with the BEGIN (a simple query of three
		// statements); at least a millisecond, as 0 turns them off.
		bound = max(time.Until(d).Truncate(time.Millisecond), time.Millisecond)
		opts.BeginQuery = fmt.Sprintf("BEGIN ISOLATION LEVEL READ COMMITTED; SET LOCAL statement_timeout = %d; "+
			"SET LOCAL idle_in_transaction_session_timeout = %d", bound.Milliseconds(), bound.Milliseconds())
	}
	var r MoveResult
	var first, last int64
	err := pgx.BeginTxFunc(ctx, s.pool, opts, func(tx pgx.Tx) error {
		err := tx.QueryRow(ctx, sqlMoveStaged, l.Boundary, l.Holder, backend.ClampPosition(l.Term), batch).
			Scan(&r.Moved, &r.Duplicates, &r.SetAside, &first, &last, &r.More)
		if err == nil && s.cfg.BeforeMoveCommit != nil {
			s.cfg.BeforeMoveCommit(l.Boundary, uint64(first), uint64(last))
		}
		return err
	})
	var pe *pgconn.PgError
	if err != nil && r.Moved > 0 && !errors.As(err, &pe) {
		// The move ran and its COMMIT's outcome is unknown (an error on
		// the client's side): if it committed, the listener passes over
		// its NOTIFY as the pool's own, so the callbacks are called
		// anyway. A hint too many is harmless.
		s.notify(l.Boundary)
	}
	switch {
	case errors.As(err, &pe) && pe.Code == codeLeaseLost:
		return MoveResult{}, fmt.Errorf("postgres: %s: %w: %s", op, event.ErrLeaseLost, pe.Message)
	case errors.As(err, &pe) && pe.Code == "55P03": // lock_not_available: NOWAIT on a staged row
		return MoveResult{}, s.moveBlocked(op, l.Boundary, pe)
	case bound > 0 && (errors.As(err, &pe) && (pe.Code == "57014" || pe.Code == "25P03") || ctx.Err() != nil):
		// statement_timeout, idle_in_transaction_session_timeout, or the
		// caller's deadline itself.
		return MoveResult{}, fmt.Errorf("postgres: %s: the move did not end within %s, its bound, and was rolled back "+
			"(nothing moved; the next move tries again): %w", op, bound, s.translate(op, err))
	case err != nil:
		return MoveResult{}, s.translate(op, err)
	}
	if r.Moved > 0 {
		r.First, r.Last = uint64(first), uint64(last)
		s.noteHead(l.Boundary, last)
		s.notify(l.Boundary)
	}
	return r, nil
}

// sqlStagedLocker finds a staged row of the boundary that a transaction
// still running holds a row lock on, and that transaction's session: the
// row's xmax is the locker's transaction id (or a subtransaction's), and
// every transaction holds the lock of its own id, which pg_locks lists
// with the session's pid; a prepared transaction (PREPARE TRANSACTION)
// has no session, but its name (gid) is in pg_prepared_xacts. Rows locked
// by several sessions at once have a multixact id for xmax instead, which
// matches neither: then the first row with an xmax is named without one.
const sqlStagedLocker = `SELECT s.call, s.id::text, s.xmax::text, l.pid, p.gid
FROM orisun_staged s
LEFT JOIN pg_locks l ON l.locktype = 'transactionid' AND l.transactionid = s.xmax AND l.mode = 'ExclusiveLock'
    AND l.granted AND l.pid IS NOT NULL
LEFT JOIN pg_prepared_xacts p ON p.transaction = s.xmax
WHERE s.boundary = $1 AND s.xmax <> '0'::xid
ORDER BY l.pid IS NULL AND p.gid IS NULL, s.call, s.seq LIMIT 1`

// moveBlocked is the error of a move that found a staged row locked by
// another session (cause), naming that session when it still holds it.
func (s *Store) moveBlocked(op, boundary string, cause *pgconn.PgError) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var call int64
	var id, xmax string
	var pid *int32
	var gid *string
	err := s.pool.QueryRow(ctx, sqlStagedLocker, boundary).Scan(&call, &id, &xmax, &pid, &gid)
	const rest = "; the events of that call, and every call staged after it, wait for the lock to end so that " +
		"none is split or moved ahead of it (docs/outbox.md, \"Locks on staged rows\")"
	switch {
	case err == nil && pid != nil:
		return fmt.Errorf("postgres: %s: staged event %s (enqueue call %d) is locked by the transaction %s of pid %d "+
			"(a row lock: SELECT … FOR SHARE/UPDATE, or a foreign key's check); end that transaction, or "+
			"SELECT pg_terminate_backend(%d)%s: %w: %s", op, id, call, xmax, *pid, *pid, rest, event.ErrUnavailable, describe(cause))
	case err == nil && gid != nil:
		return fmt.Errorf("postgres: %s: staged event %s (enqueue call %d) is locked by the prepared transaction %q "+
			"(transaction %s; PREPARE TRANSACTION, it has no session); finish it with COMMIT PREPARED or ROLLBACK PREPARED%s: %w: %s",
			op, id, call, *gid, xmax, rest, event.ErrUnavailable, describe(cause))
	case err == nil:
		return fmt.Errorf("postgres: %s: staged event %s (enqueue call %d) is locked by several transactions at once "+
			"(multixact %s; the extension pgrowlocks names them)%s: %w: %s", op, id, call, xmax, rest, event.ErrUnavailable, describe(cause))
	default:
		return fmt.Errorf("postgres: %s: a lock was not available, and no staged row is locked now (the lock ended meanwhile, or it was "+
			"another lock, such as the head row's under a lock_timeout; %v)%s: %w: %s",
			op, err, rest, event.ErrUnavailable, describe(cause))
	}
}

// OnStaged registers fn, called with the boundary of every enqueue
// committed that announced itself (on any node: the LISTEN connection
// delivers the notification of orisun_enqueue's commit; an enqueue
// announces itself when the boundary's staging was empty), and of every
// boundary after the LISTEN connection was restored. A hint, as
// OnAppend's: fn must not block.
func (s *Store) OnStaged(fn func(boundary string)) { s.staged.Add(fn) }

// StagedBoundaries lists the boundaries with committed staged events, in
// one statement: the node's periodic head check wakes their movers with
// it, so an enqueue that sent no notification, or lost it, costs a poll interval.
func (s *Store) StagedBoundaries(ctx context.Context) ([]string, error) {
	const op = "list the boundaries with staged events"
	if s.isClosed() {
		return nil, errClosed(op)
	}
	rows, err := s.pool.Query(ctx, sqlStagedBoundaries)
	if err != nil {
		return nil, s.translate(op, err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, s.translate(op, err)
	}
	return names, nil
}

// StagedStates reads every boundary's staged and set-aside events in one
// statement; boundaries with neither are absent.
func (s *Store) StagedStates(ctx context.Context) ([]StagedState, error) {
	return sqlstore.QueryAll(ctx, reads{s}, "read the staged and set-aside events", sqlStagedStates, scanStagedState)
}

// scanStagedState reads a row of sqlStagedStates.
func scanStagedState(row sqlstore.Row) (StagedState, error) {
	var st StagedState
	var oldest *time.Time
	var reason *string
	if err := row.Scan(&st.Boundary, &st.Staged, &oldest, &st.SetAside, &reason); err != nil {
		return StagedState{}, err
	}
	if oldest != nil {
		st.Oldest = oldest.UTC()
	}
	if reason != nil {
		st.Reason = *reason
	}
	return st, nil
}
