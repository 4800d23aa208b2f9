package sqlite

import (
	"context"
	"fmt"

	"github.com/orisun-io/orisun/backend/internal/sqlstore"
	"github.com/orisun-io/orisun/event"
)

// ReadBackward returns up to limit events of boundary below position
// before (0: from the head), highest first, matching q (nil: all), with
// the boundary's epoch, from one read transaction (one WAL snapshot): the
// events up to the head read in it (backend.BackwardReader). The statement
// is read-latest's with the page's limit: the positions from the top down,
// by the primary key or the index that drives each query item (matchSQL).
func (s *Store) ReadBackward(ctx context.Context, boundary string, before uint64, limit int, q *event.Query) (string, []event.Event, error) {
	return s.readPage(ctx, fmt.Sprintf("read %q backward before %d", boundary, before), boundary, limit, q, pageRead{
		dir:   backward,
		bound: func(head uint64) uint64 { return sqlstore.BackwardTop(before, head) },
		stmt:  func(q *event.Query, top uint64) (string, []any) { return readBackwardSQL(q, boundary, top, limit) },
		check: func(head, top uint64, events []event.Event, dense bool) (int, error) {
			return sqlstore.CheckPageBackward(boundary, top, head, limit, events, dense, true)
		},
	})
}

// readBackwardSQL is the statement of a backward read page from top down,
// with its arguments.
func readBackwardSQL(q *event.Query, boundary string, top uint64, limit int) (string, []any) {
	return matchStatement(q, backward, sqlLatestAny, sqlReadMatchPrefix, sqlLatestMatchSuffix, boundary, top, limit)
}
