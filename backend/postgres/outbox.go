package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/orisun-io/orisun/event"
)

// The append limits the SQL function orisun_append enforces
// (migrations/postgres/0004_outbox.sql, docs/outbox.md): every node writes
// its own into the one row of orisun_append_limits at start, the first one
// creates it, and a node whose limits differ from the row's is refused.
const (
	sqlInsertAppendLimits = `INSERT INTO orisun_append_limits (max_append_events, max_append_bytes, max_event_bytes, recorded_by)
VALUES ($1, $2, $3, $4) ON CONFLICT (singleton) DO NOTHING`
	sqlSelectAppendLimits = `SELECT max_append_events, max_append_bytes, max_event_bytes, recorded_by, recorded_at
FROM orisun_append_limits`
)

// RecordAppendLimits records lim, the append limits of the node named by,
// as the limits of orisun_append, or checks them against those recorded by
// an earlier node. Limits that differ are an error naming both sides: the
// SQL functions and the API would refuse different appends. An operator
// changes the row (docs/outbox.md) before the nodes start with new limits.
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
	if events != lim.MaxAppendEvents || bytes != lim.MaxAppendBytes || eventBytes != lim.MaxEventBytes {
		return fmt.Errorf("postgres: %s: this node's limits (ORISUN_MAX_APPEND_EVENTS %d, ORISUN_MAX_APPEND_BYTES %d, NATS max payload %d) "+
			"differ from those recorded by %s at %s (max_append_events %d, max_append_bytes %d, max_event_bytes %d); "+
			"every node on one database must have the same limits, as orisun_append enforces them: configure this node alike, "+
			"or update the row (docs/outbox.md, \"Limits\") and restart every node with the new limits",
			op, lim.MaxAppendEvents, lim.MaxAppendBytes, lim.MaxEventBytes,
			recordedBy, at.UTC().Format(time.RFC3339), events, bytes, eventBytes)
	}
	return nil
}
