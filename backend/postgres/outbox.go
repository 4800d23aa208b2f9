package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/orisun-io/orisun/event"
)

// The append limits the SQL functions orisun_append and orisun_enqueue
// enforce (migrations/postgres/0004_outbox.sql, docs/outbox.md): the first
// node writes its own into the one row of orisun_append_limits, and every
// node checks at start that it accepts everything the row allows.
const (
	sqlInsertAppendLimits = `INSERT INTO orisun_append_limits (max_append_events, max_append_bytes, max_event_bytes, recorded_by)
VALUES ($1, $2, $3, $4) ON CONFLICT (singleton) DO NOTHING`
	sqlSelectAppendLimits = `SELECT max_append_events, max_append_bytes, max_event_bytes, recorded_by, recorded_at
FROM orisun_append_limits`
)

// RecordAppendLimits records lim, the append limits of the node named by,
// as the limits of the SQL functions when no node has recorded any, or
// checks them against the row. The node must accept every append the row
// allows: a row limit above the node's is an error naming both sides, as
// an event the functions accepted could then be refused by this node (an
// event over its NATS max payload cannot be published). Limits of the row
// below the node's are accepted: that is how they are changed without
// stopping every node at once (docs/outbox.md, "Changing the limits": the
// row is lowered first and raised last), and the functions then refuse a
// little more than this node's API does.
func (s *Store) RecordAppendLimits(ctx context.Context, lim event.Limits, by string) error {
	const op = "record the append limits in orisun_append_limits"
	if _, err := s.pool.Exec(ctx, sqlInsertAppendLimits, lim.MaxAppendEvents, lim.MaxAppendBytes, lim.MaxEventBytes, by); err != nil {
		return translate(op, err)
	}
	var events, bytes, eventBytes int
	var recordedBy string
	var at time.Time
	err := s.pool.QueryRow(ctx, sqlSelectAppendLimits).Scan(&events, &bytes, &eventBytes, &recordedBy, &at)
	if isNoRows(err) {
		return fmt.Errorf("postgres: %s: the row is gone right after it was written; was it deleted meanwhile?", op)
	}
	if err != nil {
		return translate(op, err)
	}
	if events > lim.MaxAppendEvents || bytes > lim.MaxAppendBytes || eventBytes > lim.MaxEventBytes {
		return fmt.Errorf("postgres: %s: the limits recorded by %s at %s (max_append_events %d, max_append_bytes %d, max_event_bytes %d) "+
			"allow more than this node's (ORISUN_MAX_APPEND_EVENTS %d, ORISUN_MAX_APPEND_BYTES %d, NATS max payload %d): "+
			"orisun_append and orisun_enqueue would accept appends this node refuses, or events it cannot publish. "+
			"Start this node with limits at least the row's, or lower the row first (docs/outbox.md, \"Changing the limits\")",
			op, recordedBy, at.UTC().Format(time.RFC3339), events, bytes, eventBytes,
			lim.MaxAppendEvents, lim.MaxAppendBytes, lim.MaxEventBytes)
	}
	return nil
}
