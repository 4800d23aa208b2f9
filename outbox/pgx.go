package outbox

import (
	"context"
	"fmt"

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
	op := fmt.Sprintf("orisun_append to %q", boundary)
	evs, c, err := encode(op, events, cond)
	if err != nil {
		return event.AppendResult{}, err
	}
	var epoch string
	var first, last int64
	if err := tx.QueryRow(ctx, sqlAppend, boundary, evs, c).Scan(&epoch, &first, &last); err != nil {
		return event.AppendResult{}, translate(op, boundary, cond, err)
	}
	return result(epoch, first, last), nil
}

// Enqueue stages events for boundary in tx (orisun_enqueue) and returns
// how many it staged. It validates as Append does but takes no head row and
// has no condition: many transactions enqueue to one boundary at once. Once
// tx commits, the boundary's lease holder moves the events into the log
// with the next positions, in the order it finds them committed.
func Enqueue(ctx context.Context, tx pgx.Tx, boundary string, events []event.Input) (int, error) {
	op := fmt.Sprintf("orisun_enqueue to %q", boundary)
	evs, _, err := encode(op, events, nil)
	if err != nil {
		return 0, err
	}
	var n int
	if err := tx.QueryRow(ctx, sqlEnqueue, boundary, evs).Scan(&n); err != nil {
		return 0, translate(op, boundary, nil, err)
	}
	return n, nil
}
