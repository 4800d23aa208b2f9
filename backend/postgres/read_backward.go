package postgres

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/orisun-io/orisun/backend"
	"github.com/orisun-io/orisun/backend/internal/sqlstore"
	"github.com/orisun-io/orisun/event"
)

// sqlReadBackward* read a backward page with the boundary's epoch and head
// in one statement, so all come from one snapshot, as the read-latest
// statement does: the boundary's row, with the events up to its head and
// up to the bound, from the highest down, beside it (one row with NULL
// events when none is there; no row when the boundary is missing). A
// position beyond the head is no committed event and is never read. The
// events come from a backward walk of the primary key, or, with a query,
// from the indexes a forward read uses. $1 boundary, $2 the highest
// position wanted (before-1), $3 limit, $4… the query.
const (
	sqlReadBackwardPrefix = `SELECT b.epoch::text, b.head, e.position, e.id::text, e.type, e.time, e.tags, e.data, e.metadata
FROM orisun_boundaries b
LEFT JOIN LATERAL (
    SELECT ev.position, ev.id, ev.type, ev.time, ev.tags, ev.data, ev.metadata
    FROM orisun_events ev
    WHERE ev.boundary = b.name AND ev.position <= b.head AND ev.position <= $2`
	sqlReadBackwardSuffix = `
    ORDER BY ev.position DESC
    LIMIT $3
) e ON true
WHERE b.name = $1`
)

// readBackwardSQL returns the backward read statement for q and its
// query's bind values, which follow $3.
func readBackwardSQL(q *event.Query) (string, []any) {
	filter, args := whereQuery(q, "ev", 4)
	return sqlReadBackwardPrefix + filter + sqlReadBackwardSuffix, args
}

// ReadBackward returns up to limit events of boundary below position
// before (0: from the head), highest first, matching q (nil: all), with the
// boundary's epoch read in the same snapshot: one statement gives all
// (backend.BackwardReader).
func (s *Store) ReadBackward(ctx context.Context, boundary string, before uint64, limit int, q *event.Query) (string, []event.Event, error) {
	op := fmt.Sprintf("read %q backward before %d", boundary, before)
	if err := sqlstore.CheckRead(reads{s}, limit); err != nil {
		return "", nil, fmt.Errorf("postgres: %s: %w", op, err)
	}
	upTo := int64(math.MaxInt64)
	if before > 0 {
		upTo = backend.ClampPosition(before - 1)
	}
	sql, fargs := readBackwardSQL(q)
	args := make([]any, 0, 3+len(fargs))
	args = append(args, boundary, upTo, limit)
	args = append(args, fargs...)
	rows, err := s.pool.Query(ctx, sql, s.withValues(fargs, args)...)
	if err != nil {
		return "", nil, s.translate(op, err)
	}
	defer rows.Close()
	var (
		epoch string
		head  uint64
		found bool
	)
	events := make([]event.Event, 0, sqlstore.PageCap(limit))
	for rows.Next() {
		var e *event.Event
		if epoch, head, e, err = scanBoundaryEvent(rows, boundary); err != nil {
			return "", nil, s.translate(op, err)
		}
		found = true
		if e != nil { // else no event: the boundary's row alone
			events = append(events, *e)
		}
	}
	if err := rows.Err(); err != nil {
		return "", nil, s.translate(op, err)
	}
	if !found {
		return "", nil, notFound(op, boundary)
	}
	// The lateral page's order is its ORDER BY, but nothing in SQL
	// promises that the join keeps it: checked rather than assumed.
	byPositionDesc := func(a, b event.Event) int { return cmp.Compare(b.Position, a.Position) }
	if !slices.IsSortedFunc(events, byPositionDesc) {
		slices.SortFunc(events, byPositionDesc)
	}
	top := sqlstore.BackwardTop(before, head)
	if good, err := sqlstore.CheckPageBackward(boundary, top, head, limit, events, sqlstore.MatchesAll(q), false); err != nil {
		return epoch, events[:good], fmt.Errorf("postgres: %s: %w", op, err)
	}
	return epoch, events, nil
}

// scanBoundaryEvent reads a row of the read-latest and backward read
// statements: the boundary's epoch and head, and an event of it (nil when
// the row has none: the boundary's row alone).
func scanBoundaryEvent(row sqlstore.Row, boundary string) (epoch string, head uint64, e *event.Event, err error) {
	var (
		h        int64
		pos      *int64
		id, typ  *string
		t        *time.Time
		tags     []string
		data, md []byte
	)
	if err := row.Scan(&epoch, &h, &pos, &id, &typ, &t, &tags, &data, &md); err != nil {
		return "", 0, nil, err
	}
	if pos == nil {
		return epoch, uint64(h), nil, nil
	}
	e = &event.Event{ID: *id, Boundary: boundary, Epoch: epoch, Position: uint64(*pos), Type: *typ,
		Time: t.UTC(), Tags: tags, Data: data}
	if e.Tags == nil {
		e.Tags = []string{}
	}
	if md != nil {
		e.Metadata = md
	}
	return epoch, uint64(h), e, nil
}
