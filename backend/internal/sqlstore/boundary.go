package sqlstore

import (
	"fmt"

	"github.com/google/uuid"

	"github.com/orisun-io/orisun/event"
)

// NewBoundaryEpoch is what a backend's CreateBoundary does before it asks
// the database: it checks name (defence in depth: the API validates too,
// but a name that reaches the store is a NATS subject token and a stream
// name for ever) and that the store is open, then draws the new boundary's
// epoch, a time-ordered UUID, so that the epochs of one database sort by
// creation. Its errors carry no backend prefix and no operation.
func NewBoundaryEpoch(db DB, name string) (string, error) {
	if err := event.ValidateBoundaryName(name); err != nil {
		return "", err
	}
	if db.Closed() {
		return "", Closed()
	}
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
