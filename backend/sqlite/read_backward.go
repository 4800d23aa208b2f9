package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/orisun-io/orisun/backend/internal/sqlstore"
	"github.com/orisun-io/orisun/event"
)

// ReadBackward returns up to limit events of boundary below position
// before (0: from the head), highest first, matching q (nil: all), with
// the boundary's epoch, from one read transaction (one WAL snapshot): the
// events up to the head read in it (backend.BackwardReader).
func (s *Store) ReadBackward(ctx context.Context, boundary string, before uint64, limit int, q *event.Query) (string, []event.Event, error) {
	op := fmt.Sprintf("read %q backward before %d", boundary, before)
	if limit < 1 {
		return "", nil, fmt.Errorf("sqlite: %s: %w: limit is %d; it must be at least 1", op, event.ErrInvalid, limit)
	}
	if s.closed() {
		return "", nil, errClosed(op)
	}
	tx, err := s.rdb.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return "", nil, s.translate(op, err)
	}
	defer func() { _ = tx.Rollback() }()
	var epoch string
	var head int64
	err = tx.QueryRowContext(ctx, sqlSelectEpochHead, boundary).Scan(&epoch, &head)
	if errors.Is(err, sql.ErrNoRows) {
		return "", nil, notFound(op, boundary)
	}
	if err != nil {
		return "", nil, s.translate(op, err)
	}
	top := sqlstore.BackwardTop(before, uint64(head))
	if top == 0 {
		return epoch, []event.Event{}, nil
	}
	dense := sqlstore.MatchesAll(q)
	if q, err = rarestTagFirst(ctx, tx, boundary, top, backward, q); err != nil {
		return "", nil, s.translate(op, err)
	}
	// The read-latest statements with a page's limit: the positions up
	// to top, from the top down, by the primary key or the index that
	// drives each query item (matchSQL).
	text, args := readBackwardSQL(q, boundary, top, limit)
	rows, err := tx.QueryContext(ctx, text, args...)
	if err != nil {
		return "", nil, s.translate(op, err)
	}
	defer rows.Close()
	events := make([]event.Event, 0, min(limit, 256))
	var badTags error
	for rows.Next() {
		e, err := scanEvent(rows, boundary, epoch)
		if errors.As(err, new(*event.CorruptError)) {
			badTags = err // the page ends at this row, as in Read
			events = append(events, e)
			break
		}
		if err != nil {
			return "", nil, s.translate(op, err)
		}
		events = append(events, e)
	}
	if err := rows.Err(); err != nil {
		return "", nil, s.translate(op, err)
	}
	good, err := sqlstore.CheckPageBackward(boundary, top, uint64(head), limit, events, dense, true)
	if badTags != nil && good == len(events) {
		good, err = len(events)-1, badTags
	}
	if err != nil {
		return epoch, events[:good], fmt.Errorf("sqlite: %s: %w", op, err)
	}
	return epoch, events, nil
}

// readBackwardSQL is the statement of a backward read page from top down,
// with its arguments.
func readBackwardSQL(q *event.Query, boundary string, top uint64, limit int) (string, []any) {
	return matchStatement(q, backward, sqlLatestAny, sqlReadMatchPrefix, sqlLatestMatchSuffix, boundary, top, limit)
}
