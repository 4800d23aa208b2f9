package sqlstore

import (
	"fmt"

	"github.com/google/uuid"

	"github.com/orisun-io/orisun/event"
)

// NewEpoch returns a new boundary epoch: a time-ordered UUID, so epochs of
// one database sort by creation.
func NewEpoch() (string, error) {
	u, err := uuid.NewV7()
	if err != nil {
		return "", fmt.Errorf("new epoch: %w", err)
	}
	return u.String(), nil
}

// Row is a row of a result: a *sql.Row or *sql.Rows, a pgx.Row or
// pgx.Rows.
type Row interface {
	Scan(dest ...any) error
}

// Rows is the rows of a result, *sql.Rows or pgx.Rows; the caller closes
// them.
type Rows interface {
	Row
	Next() bool
	Err() error
}

// ScanBoundary reads a boundary from the columns name, epoch and head, the
// statements' order in both backends.
func ScanBoundary(row Row) (event.Boundary, error) {
	var b event.Boundary
	var head int64
	if err := row.Scan(&b.Name, &b.Epoch, &head); err != nil {
		return event.Boundary{}, err
	}
	b.Head = uint64(head)
	return b, nil
}

// ScanBoundaries reads every row of rows as a boundary (ScanBoundary); no
// rows is an empty list, not nil.
func ScanBoundaries(rows Rows) ([]event.Boundary, error) {
	out := []event.Boundary{}
	for rows.Next() {
		b, err := ScanBoundary(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, b)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return out, nil
}
