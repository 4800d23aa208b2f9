package outbox

import (
	"context"
	"database/sql"

	"github.com/orisun-io/orisun/event"
)

// AppendSQL is Append for database/sql: tx is a transaction of a
// PostgreSQL driver that takes $n placeholders (pgx's stdlib, lib/pq).
func AppendSQL(ctx context.Context, tx *sql.Tx, boundary string, events []event.Input, cond *event.Condition) (event.AppendResult, error) {
	return appendVia(sqlQuery(ctx, tx), boundary, events, cond)
}

// EnqueueSQL is Enqueue for database/sql (see AppendSQL).
func EnqueueSQL(ctx context.Context, tx *sql.Tx, boundary string, events []event.Input) (int, error) {
	return enqueueVia(sqlQuery(ctx, tx), boundary, events)
}

func sqlQuery(ctx context.Context, tx *sql.Tx) queryRow {
	return func(query string, args ...any) scanner { return tx.QueryRowContext(ctx, query, args...) }
}
