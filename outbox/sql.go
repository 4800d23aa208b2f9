package outbox

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/orisun-io/orisun/event"
)

// AppendSQL is Append for database/sql: tx is a transaction of a
// PostgreSQL driver that takes $n placeholders (pgx's stdlib, lib/pq).
func AppendSQL(ctx context.Context, tx *sql.Tx, boundary string, events []event.Input, cond *event.Condition) (event.AppendResult, error) {
	op := fmt.Sprintf("orisun_append to %q", boundary)
	evs, c, err := encode(op, events, cond)
	if err != nil {
		return event.AppendResult{}, err
	}
	var epoch string
	var first, last int64
	if err := tx.QueryRowContext(ctx, sqlAppend, boundary, evs, c).Scan(&epoch, &first, &last); err != nil {
		return event.AppendResult{}, translate(op, boundary, cond, err)
	}
	return result(epoch, first, last), nil
}

// EnqueueSQL is Enqueue for database/sql (see AppendSQL).
func EnqueueSQL(ctx context.Context, tx *sql.Tx, boundary string, events []event.Input) (int, error) {
	op := fmt.Sprintf("orisun_enqueue to %q", boundary)
	evs, _, err := encode(op, events, nil)
	if err != nil {
		return 0, err
	}
	var n int
	if err := tx.QueryRowContext(ctx, sqlEnqueue, boundary, evs).Scan(&n); err != nil {
		return 0, translate(op, boundary, nil, err)
	}
	return n, nil
}
