package outbox

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/orisun-io/orisun/event"
)

// Append appends events to boundary in tx, under cond when it is not nil
// (orisun_append): the events get the boundary's next positions, exist if
// and only if tx commits, and the relay learns of them at the commit. It
// validates, is idempotent by id and checks the condition exactly as the
// API's append, and returns what the client's Append returns. The
// boundary's head row stays held until tx ends.
func Append(ctx context.Context, tx pgx.Tx, boundary string, events []event.Input, cond *event.Condition) (event.AppendResult, error) {
	return appendVia(pgxQuery(ctx, tx), boundary, events, cond)
}

// Enqueue stages events for boundary in tx (orisun_enqueue) and returns
// how many it staged. It validates as Append does but takes no head row and
// has no condition: many transactions enqueue to one boundary at once. Once
// tx commits, the boundary's lease holder moves the events into the log
// with the next positions, in the order it finds them committed.
func Enqueue(ctx context.Context, tx pgx.Tx, boundary string, events []event.Input) (int, error) {
	return enqueueVia(pgxQuery(ctx, tx), boundary, events)
}

func pgxQuery(ctx context.Context, tx pgx.Tx) queryRow {
	return func(sql string, args ...any) scanner { return tx.QueryRow(ctx, sql, args...) }
}
