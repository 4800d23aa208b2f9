package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/orisun-io/orisun/event"
)

// DB is a backend's read handle as the reads that both backends run alike
// use it. The statement is each backend's own (its dialect); the steps
// around it (the closed check, no row as a boundary that does not exist,
// each row scanned, the driver's errors translated) are the same in both
// and are written once, in QueryOne and QueryAll.
type DB interface {
	// QueryRow runs a statement that returns at most one row.
	QueryRow(ctx context.Context, stmt string, args ...any) Row
	// Query runs a statement of any number of rows; the caller closes
	// them.
	Query(ctx context.Context, stmt string, args ...any) (ClosingRows, error)
	// Closed reports whether the store is closed.
	Closed() bool
	// Translate is the backend's error of op that failed with err, a
	// driver's error or one of the core's (it adds the backend's prefix).
	Translate(op string, err error) error
}

// ClosingRows is Rows that the caller closes.
type ClosingRows interface {
	Rows
	Close()
}

// Closed is the error of an operation on a closed store, before a
// backend's prefix and the operation.
func Closed() error { return fmt.Errorf("%w: the store is closed", event.ErrClosed) }

// NotFound is the error of an operation on a boundary that does not exist,
// before a backend's prefix and the operation.
func NotFound(boundary string) error {
	return fmt.Errorf("%w: boundary %q does not exist; create it first", event.ErrNotFound, boundary)
}

// QueryOne runs stmt, whose one argument is boundary, and reads its row
// with scan. No row is the error of a boundary that does not exist: stmt
// reads the boundary's row, or one that exists with it. (pgx's ErrNoRows
// is database/sql's too, for errors.Is.)
func QueryOne[T any](ctx context.Context, db DB, op, stmt, boundary string, scan func(Row) (T, error)) (T, error) {
	var zero T
	if db.Closed() {
		return zero, db.Translate(op, Closed())
	}
	v, err := scan(db.QueryRow(ctx, stmt, boundary))
	if errors.Is(err, sql.ErrNoRows) {
		return zero, db.Translate(op, NotFound(boundary))
	}
	if err != nil {
		return zero, db.Translate(op, err)
	}
	return v, nil
}

// QueryAll runs stmt, which takes no arguments, and reads each of its rows
// with scan, in the statement's order; no rows is an empty list, not nil.
func QueryAll[T any](ctx context.Context, db DB, op, stmt string, scan func(Row) (T, error)) ([]T, error) {
	if db.Closed() {
		return nil, db.Translate(op, Closed())
	}
	rows, err := db.Query(ctx, stmt)
	if err != nil {
		return nil, db.Translate(op, err)
	}
	defer rows.Close()
	out := []T{}
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, db.Translate(op, err)
		}
		out = append(out, v)
	}
	if err := rows.Err(); err != nil {
		return nil, db.Translate(op, err)
	}
	return out, nil
}

// PageCap is the room a read's page of events starts with; it grows as
// rows come. A page sized for its limit up to 256 events (43 KB) was most
// of what the publisher's reads allocated when it follows appends a few
// dozen events at a time (issue 22, docs/performance.md); a full page of
// 1,000 now grows from 16, which allocates 13% more for the page itself,
// and little beside the events' data.
func PageCap(limit int) int { return min(limit, 16) }

// CheckRead checks a read's limit, then that the store is open, before
// the read asks the database. Its errors carry no backend prefix and no
// operation.
func CheckRead(db DB, limit int) error {
	if limit < 1 {
		return fmt.Errorf("%w: limit is %d; it must be at least 1", event.ErrInvalid, limit)
	}
	if db.Closed() {
		return Closed()
	}
	return nil
}

// ReadBoundary reads one boundary with stmt: the columns name, epoch and
// head (ScanBoundary) of the boundary named by its one argument.
func ReadBoundary(ctx context.Context, db DB, stmt, name string) (event.Boundary, error) {
	return QueryOne(ctx, db, fmt.Sprintf("read boundary %q", name), stmt, name, ScanBoundary)
}

// ReadBoundaries lists every boundary with stmt: the columns name, epoch
// and head (ScanBoundary), by name.
func ReadBoundaries(ctx context.Context, db DB, stmt string) ([]event.Boundary, error) {
	return QueryAll(ctx, db, "list boundaries", stmt, ScanBoundary)
}

// ReadCheckpoint reads a boundary's publish checkpoint with stmt: one
// column, 0 when none is saved, of the boundary named by its one argument.
func ReadCheckpoint(ctx context.Context, db DB, stmt, boundary string) (uint64, error) {
	return QueryOne(ctx, db, fmt.Sprintf("read checkpoint of %q", boundary), stmt, boundary, func(row Row) (uint64, error) {
		var cp int64
		err := row.Scan(&cp)
		return uint64(cp), err
	})
}
