package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/orisun-io/orisun/backend"
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

// MoveStaged moves up to max committed staged events of the boundary into
// the log at its next positions (whole enqueue calls; a call larger than
// max moves whole), in one transaction that also removes them from the
// staging table, so that each staged event enters the log exactly once. It
// is fenced by the lease: only l's holder in l's term, unexpired in the
// database's clock, moves anything (event.ErrLeaseLost otherwise), and a
// takeover waits for the move's commit. After a move that wrote, the
// OnAppend callbacks are called, as after an append.
func (s *Store) MoveStaged(ctx context.Context, l backend.Lease, max int) (MoveResult, error) {
	op := fmt.Sprintf("move the staged events of %q", l.Boundary)
	if s.isClosed() {
		return MoveResult{}, errClosed(op)
	}
	if max < 1 {
		return MoveResult{}, fmt.Errorf("postgres: %s: %w: max is %d; it must be at least 1", op, event.ErrInvalid, max)
	}
	var r MoveResult
	var first, last int64
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.ReadCommitted}, func(tx pgx.Tx) error {
		err := tx.QueryRow(ctx, sqlMoveStaged, l.Boundary, l.Holder, backend.ClampPosition(l.Term), max).
			Scan(&r.Moved, &r.Duplicates, &r.SetAside, &first, &last, &r.More)
		if err == nil && s.cfg.BeforeMoveCommit != nil {
			s.cfg.BeforeMoveCommit(l.Boundary, uint64(first), uint64(last))
		}
		return err
	})
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == codeLeaseLost {
		return MoveResult{}, fmt.Errorf("postgres: %s: %w: %s", op, event.ErrLeaseLost, pe.Message)
	}
	if err != nil {
		return MoveResult{}, s.translate(op, err)
	}
	if r.Moved > 0 {
		r.First, r.Last = uint64(first), uint64(last)
		s.noteHead(l.Boundary, last)
		s.notify(l.Boundary)
	}
	return r, nil
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
	const op = "read the staged and set-aside events"
	if s.isClosed() {
		return nil, errClosed(op)
	}
	rows, err := s.pool.Query(ctx, sqlStagedStates)
	if err != nil {
		return nil, s.translate(op, err)
	}
	defer rows.Close()
	var out []StagedState
	for rows.Next() {
		var st StagedState
		var oldest *time.Time
		var reason *string
		if err := rows.Scan(&st.Boundary, &st.Staged, &oldest, &st.SetAside, &reason); err != nil {
			return nil, s.translate(op, err)
		}
		if oldest != nil {
			st.Oldest = oldest.UTC()
		}
		if reason != nil {
			st.Reason = *reason
		}
		out = append(out, st)
	}
	if err := rows.Err(); err != nil {
		return nil, s.translate(op, err)
	}
	return out, nil
}
