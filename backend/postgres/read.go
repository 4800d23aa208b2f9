package postgres

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/orisun-io/orisun/backend"
	"github.com/orisun-io/orisun/backend/internal/sqlstore"
	"github.com/orisun-io/orisun/event"
)

// CreateBoundary creates the boundary with a new epoch, or returns the
// existing one unchanged.
func (s *Store) CreateBoundary(ctx context.Context, name string) (event.Boundary, bool, error) {
	op := fmt.Sprintf("create boundary %q", name)
	epoch, err := sqlstore.NewBoundaryEpoch(reads{s}, name)
	if err != nil {
		return event.Boundary{}, false, fmt.Errorf("postgres: %s: %w", op, err)
	}
	b, err := sqlstore.ScanBoundary(s.pool.QueryRow(ctx, sqlInsertBoundary, name, epoch))
	if err == nil {
		s.log.Info("boundary created", "boundary", name, "epoch", b.Epoch)
		return b, true, nil
	}
	if !isNoRows(err) {
		return event.Boundary{}, false, s.translate(op, err)
	}
	// It exists (perhaps created a moment ago by another node): a new
	// statement, so a new snapshot that sees it.
	b, err = sqlstore.ScanBoundary(s.pool.QueryRow(ctx, sqlSelectBoundary, name))
	if err != nil {
		return event.Boundary{}, false, s.translate(op, err)
	}
	return b, false, nil
}

// Boundary returns one boundary with its current head.
func (s *Store) Boundary(ctx context.Context, name string) (event.Boundary, error) {
	return sqlstore.ReadBoundary(ctx, reads{s}, sqlSelectBoundary, name)
}

// Boundaries lists every boundary, by name.
func (s *Store) Boundaries(ctx context.Context) ([]event.Boundary, error) {
	return sqlstore.ReadBoundaries(ctx, reads{s}, sqlSelectBoundaries)
}

// reads is the store's pool as the reads of package sqlstore use it.
type reads struct{ s *Store }

func (r reads) QueryRow(ctx context.Context, stmt string, args ...any) sqlstore.Row {
	return r.s.pool.QueryRow(ctx, stmt, args...)
}

func (r reads) Query(ctx context.Context, stmt string, args ...any) (sqlstore.ClosingRows, error) {
	return r.s.pool.Query(ctx, stmt, args...)
}

func (r reads) Closed() bool                         { return r.s.isClosed() }
func (r reads) Translate(op string, err error) error { return r.s.translate(op, err) }

// sqlSelectHeads reads every boundary's head and whether a transaction
// that is still open has taken its head row: the row's xmax is the id of
// the last transaction that updated or locked it, and pg_xact_status says
// whether that transaction is still in progress. A subtransaction counts:
// after orisun_append inside a savepoint that was then released, xmax is
// the savepoint's own id, which pg_locks no longer lists (its lock passed
// to the top transaction) but which is in progress until the top
// transaction ends (docs/outbox.md).
//
// xmax is 32 bits; pg_xact_status takes the 64-bit id. age(xmax) is the
// distance from xmax to the next id to be assigned (as this statement
// first read it), so xmax + age is that next id's low 32 bits; the
// statement's snapshot xmax (64 bits, at most that next id and close
// below it) gives its high bits, and the id is the next id less age. Only
// an age above 0 is asked about: the id is then in the past, never "in the
// future", which pg_xact_status refuses with an error. CASE keeps that
// order of evaluation. A row locked by several transactions at once has a
// multixact id for xmax, not a transaction's: it reads as not held (or,
// rarely, as held by an unrelated transaction, which costs one probe); the
// publisher's own probe is what the status reports.
//
// It reads and writes nothing else, unlike the probe (FOR SHARE NOWAIT, a
// row lock of its own), so one statement a poll interval covers every
// boundary.
const sqlSelectHeads = `WITH s AS (SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint AS nx)
SELECT b.name, b.epoch::text, b.head,
       CASE WHEN b.xmax::text::bigint >= 3 AND age(b.xmax) > 0 AND x.fx >= 3
            THEN pg_xact_status(x.fx::text::xid8) IS NOT DISTINCT FROM 'in progress' ELSE false END
FROM orisun_boundaries b CROSS JOIN s
CROSS JOIN LATERAL (SELECT s.nx + ((b.xmax::text::bigint + age(b.xmax) - s.nx % 4294967296) % 4294967296 + 4294967296) % 4294967296
                           - age(b.xmax) AS fx) x
ORDER BY b.name`

// Heads reads every boundary's head in one statement (backend.HeadReader).
func (s *Store) Heads(ctx context.Context) ([]backend.Head, error) {
	out, err := sqlstore.QueryAll(ctx, reads{s}, "read the heads of the boundaries", sqlSelectHeads, scanHead)
	if err != nil {
		return nil, err
	}
	// The node reads every head each poll interval: what another node
	// appended then counts in how far back a condition's position is
	// (groupRun.near) within that interval.
	s.noteHeads(out)
	return out, nil
}

// scanHead reads a row of sqlSelectHeads.
func scanHead(row sqlstore.Row) (backend.Head, error) {
	var h backend.Head
	var head int64
	err := row.Scan(&h.Boundary.Name, &h.Boundary.Epoch, &head, &h.Held)
	h.Boundary.Head = uint64(head)
	return h, err
}

// Read returns up to limit events of boundary after position after, in
// position order, matching q (nil: all), with the boundary's epoch read in the
// same snapshot: one statement gives both.
func (s *Store) Read(ctx context.Context, boundary string, after uint64, limit int, q *event.Query) (string, []event.Event, error) {
	op := fmt.Sprintf("read %q after %d", boundary, after)
	if err := sqlstore.CheckRead(reads{s}, limit); err != nil {
		return "", nil, fmt.Errorf("postgres: %s: %w", op, err)
	}
	sql, fargs := readSQL(q)
	args := make([]any, 0, 3+len(fargs))
	args = append(args, boundary, backend.ClampPosition(after), limit)
	args = append(args, fargs...)
	rows, err := s.pool.Query(ctx, sql, s.withValues(fargs, args)...)
	if err != nil {
		return "", nil, s.translate(op, err)
	}
	defer rows.Close()
	var epoch pgtype.Text
	var head pgtype.Int8
	events := make([]event.Event, 0, sqlstore.PageCap(limit))
	// Scanned into for every row, declared once (each would be a heap
	// allocation per row): every Scan sets each of them anew, the slices
	// and strings to new ones.
	var (
		ep   pgtype.Text
		pos  pgtype.Int8
		id   pgtype.UUID
		typ  pgtype.Text
		t    pgtype.Timestamptz
		tags []string
		data []byte
		md   []byte
		h    pgtype.Int8
	)
	for rows.Next() {
		if err := rows.Scan(&ep, &pos, &id, &typ, &t, &tags, &data, &md, &h); err != nil {
			return "", nil, s.translate(op, err)
		}
		if !pos.Valid {
			epoch, head = ep, h // the boundary's row
			continue
		}
		e := event.Event{ID: uuid.UUID(id.Bytes).String(), Boundary: boundary, Position: uint64(pos.Int64),
			Type: typ.String, Time: t.Time.UTC(), Tags: tags, Data: data}
		if e.Tags == nil {
			e.Tags = []string{}
		}
		if md != nil {
			e.Metadata = md
		}
		events = append(events, e)
	}
	if err := rows.Err(); err != nil {
		return "", nil, s.translate(op, err)
	}
	if !epoch.Valid {
		return "", nil, notFound(op, boundary)
	}
	for i := range events {
		events[i].Epoch = epoch.String
	}
	inPositionOrder(events)
	// The head and the events are of one snapshot: a position missing or
	// beyond the head is a row changed behind orisun's back, named
	// instead of served; the good rows before it are returned with the
	// error (backend.Reader). The json columns refuse text that is not
	// JSON at every write, so that is not checked again here.
	if good, err := sqlstore.CheckPage(boundary, after, uint64(head.Int64), limit, events, sqlstore.MatchesAll(q), false); err != nil {
		return epoch.String, events[:good], fmt.Errorf("postgres: %s: %w", op, err)
	}
	return epoch.String, events, nil
}

// withValues returns the arguments of a statement for pgx: one with a
// query's bind values (values, from whereQuery) goes unnamed (s.unnamed)
// where the pool would prepare it, so that PostgreSQL plans it with its
// values every time: the plan of a read by a tag or a type depends on
// them (see Open). One without is prepared and may run its generic plan.
func (s *Store) withValues(values, args []any) []any {
	if len(values) == 0 || s.unnamed == nil {
		return args
	}
	return append([]any{*s.unnamed}, args...)
}

// inPositionOrder sorts events by position unless they are sorted already.
// A read's events come in position order from the primary key, before the
// boundary's row; only the statement's ORDER BY inside its first branch
// says so, and nothing in SQL orders the rows of a UNION ALL, so the order
// is checked rather than assumed.
func inPositionOrder(events []event.Event) {
	byPosition := func(a, b event.Event) int { return cmp.Compare(a.Position, b.Position) }
	if !slices.IsSortedFunc(events, byPosition) {
		slices.SortFunc(events, byPosition)
	}
}

// Latest returns the epoch, the head and the last event matching q (nil:
// none), from one statement (one snapshot).
func (s *Store) Latest(ctx context.Context, boundary string, q *event.Query) (event.Latest, error) {
	op := fmt.Sprintf("read the latest of %q", boundary)
	if s.isClosed() {
		return event.Latest{}, errClosed(op)
	}
	sql, fargs := latestSQL(q)
	args := append([]any{boundary}, fargs...)
	var l event.Latest
	var e *event.Event
	var err error
	l.Epoch, l.Head, e, err = scanBoundaryEvent(s.pool.QueryRow(ctx, sql, s.withValues(fargs, args)...), boundary)
	if isNoRows(err) {
		return event.Latest{}, notFound(op, boundary)
	}
	if err != nil {
		return event.Latest{}, s.translate(op, err)
	}
	all := sqlstore.MatchesAll(q)
	if e == nil {
		if all && l.Head > 0 {
			// Every event matches: the one at the head is missing.
			return event.Latest{}, fmt.Errorf("postgres: %s: %w", op, sqlstore.Hole(boundary, l.Head, l.Head, 0))
		}
		return l, nil // nothing matches
	}
	if err := sqlstore.CheckLatest(e, l.Head, all, false); err != nil {
		return event.Latest{}, fmt.Errorf("postgres: %s: %w", op, err)
	}
	l.Event = e
	return l, nil
}

// HeadHolder reports which transaction holds the boundary's head row at
// this moment, "" when none does: an append in flight, or one held open by
// a slow appender. The publisher asks it when it finds nothing new to
// publish, to say in its status that it waits for an uncommitted append
// rather than that it is idle, and says so only when the same transaction
// holds the row at two probes a probe interval apart: a quick succession
// of short holders (the Go appends, the mover's moves, short application
// transactions) is not one long holder (I7).
//
// The probe is one statement in its own implicit transaction (FOR SHARE
// NOWAIT): it never waits, and its lock ends with the statement on the
// server, even if this process is frozen right after sending it. (An
// explicit BEGIN … ROLLBACK around it held the lock for as long as a
// SIGSTOPped node slept, and every append of the boundary waited.) When it
// finds the row held, a plain read of the row's xmax names the holder: the
// id of the transaction (or subtransaction) that locked or updated it
// last, which the holder's own lock keeps there until it ends; a row
// locked by several transactions at once has a multixact id there
// instead, as stable while they hold it. An xmax of 0 means the holder
// ended between the two statements: not held.
func (s *Store) HeadHolder(ctx context.Context, boundary string) (string, error) {
	op := fmt.Sprintf("probe the head row of %q", boundary)
	if s.isClosed() {
		return "", errClosed(op)
	}
	var one int
	err := s.pool.QueryRow(ctx, sqlProbeHead, boundary).Scan(&one)
	var pgErr *pgconn.PgError
	switch {
	case errors.As(err, &pgErr) && pgErr.Code == "55P03": // lock_not_available
	case isNoRows(err):
		return "", notFound(op, boundary)
	case err != nil:
		return "", s.translate(op, err)
	default:
		return "", nil
	}
	var xmax string
	err = s.pool.QueryRow(ctx, sqlHeadXmax, boundary).Scan(&xmax)
	switch {
	case isNoRows(err):
		return "", notFound(op, boundary)
	case err != nil:
		return "", s.translate(op, err)
	case xmax == "0":
		return "", nil
	}
	return xmax, nil
}

// sqlBoundaryStates reads every boundary's head, checkpoint, lease and the
// commit time of its oldest unpublished event in one statement (one
// snapshot).
const sqlBoundaryStates = `SELECT b.name, b.epoch::text, b.head, coalesce(l.checkpoint, 0), l.holder, l.term, l.expires_at,
       (SELECT e.time FROM orisun_events e WHERE e.boundary = b.name AND e.position = coalesce(l.checkpoint, 0) + 1)
FROM orisun_boundaries b LEFT JOIN orisun_leases l ON l.boundary = b.name
ORDER BY b.name`

// BoundaryStates measures every boundary in one statement (backend.StateReader).
func (s *Store) BoundaryStates(ctx context.Context) ([]backend.BoundaryState, error) {
	return sqlstore.QueryAll(ctx, reads{s}, "read the state of every boundary", sqlBoundaryStates, scanBoundaryState)
}

// scanBoundaryState reads a row of sqlBoundaryStates.
func scanBoundaryState(row sqlstore.Row) (backend.BoundaryState, error) {
	var (
		st         backend.BoundaryState
		head, cp   int64
		holder     *string
		term       *int64
		expires, t *time.Time
	)
	if err := row.Scan(&st.Boundary.Name, &st.Boundary.Epoch, &head, &cp, &holder, &term, &expires, &t); err != nil {
		return backend.BoundaryState{}, err
	}
	st.Boundary.Head, st.Checkpoint = uint64(head), uint64(cp)
	if t != nil {
		st.OldestUnpublished = t.UTC()
	}
	if holder != nil {
		st.Lease = backend.Lease{Boundary: st.Boundary.Name, Holder: *holder, Term: uint64(*term), Expires: expires.UTC()}
	}
	return st, nil
}
