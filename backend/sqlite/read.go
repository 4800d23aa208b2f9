package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

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
		return event.Boundary{}, false, fmt.Errorf("sqlite: %s: %w", op, err)
	}
	tx, err := s.wdb.BeginTx(ctx, nil)
	if err != nil {
		return event.Boundary{}, false, s.translate(op, err)
	}
	defer func() { _ = tx.Rollback() }()
	res, err := tx.ExecContext(ctx, sqlInsertBoundary, name, epoch, s.now().UnixNano())
	if err != nil {
		return event.Boundary{}, false, s.translate(op, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return event.Boundary{}, false, s.translate(op, err)
	}
	b, err := sqlstore.ScanBoundary(tx.QueryRowContext(ctx, sqlSelectBoundary, name))
	if err != nil {
		return event.Boundary{}, false, s.translate(op, err)
	}
	if err := tx.Commit(); err != nil {
		return event.Boundary{}, false, s.translate(op+": commit", err)
	}
	if n > 0 {
		s.log.Info("boundary created", "boundary", name, "epoch", b.Epoch)
	}
	return b, n > 0, nil
}

// Boundary returns one boundary with its current head.
func (s *Store) Boundary(ctx context.Context, name string) (event.Boundary, error) {
	return sqlstore.ReadBoundary(ctx, reads{s}, sqlSelectBoundary, name)
}

// Boundaries lists every boundary, by name.
func (s *Store) Boundaries(ctx context.Context) ([]event.Boundary, error) {
	return sqlstore.ReadBoundaries(ctx, reads{s}, sqlSelectBoundaries)
}

// reads is the store's reader pool as the reads of package sqlstore use
// it.
type reads struct{ s *Store }

func (r reads) QueryRow(ctx context.Context, stmt string, args ...any) sqlstore.Row {
	return r.s.rdb.QueryRowContext(ctx, stmt, args...)
}

func (r reads) Query(ctx context.Context, stmt string, args ...any) (sqlstore.ClosingRows, error) {
	rows, err := r.s.rdb.QueryContext(ctx, stmt, args...)
	if err != nil {
		return nil, err
	}
	return closingRows{rows}, nil
}

func (r reads) Closed() bool                         { return r.s.closed() }
func (r reads) Translate(op string, err error) error { return r.s.translate(op, err) }

// closingRows is *sql.Rows as sqlstore.ClosingRows: rows read to their
// end, or cut short by an error the read returns, have nothing to say when
// closed.
type closingRows struct{ *sql.Rows }

func (r closingRows) Close() { _ = r.Rows.Close() }

// Heads reads every boundary's head in one statement
// (backend.HeadReader). Held is always false: the append transactions are
// this process's own, on one writer, and short.
func (s *Store) Heads(ctx context.Context) ([]backend.Head, error) {
	bs, err := s.Boundaries(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]backend.Head, len(bs))
	for i, b := range bs {
		out[i] = backend.Head{Boundary: b}
	}
	return out, nil
}

// Read returns up to limit events of boundary after position after, in
// position order, matching q (nil: all), with the boundary's epoch read in the
// same snapshot.
func (s *Store) Read(ctx context.Context, boundary string, after uint64, limit int, q *event.Query) (string, []event.Event, error) {
	return s.readPage(ctx, fmt.Sprintf("read %q after %d", boundary, after), boundary, limit, q, pageRead{
		dir:   forward,
		bound: func(uint64) uint64 { return after },
		stmt:  func(q *event.Query, bound uint64) (string, []any) { return readSQL(q, boundary, bound, limit) },
		check: func(head, _ uint64, events []event.Event, dense bool) (int, error) {
			return sqlstore.CheckPage(boundary, after, head, limit, events, dense, true)
		},
	})
}

// pageRead is what a read of a page (readPage) does in its direction: the
// bound its statement starts from, given the head of the read's snapshot;
// its statement; and the check of its events against that head and bound
// (sqlstore.CheckPage, CheckPageBackward).
type pageRead struct {
	dir   direction
	bound func(head uint64) uint64
	stmt  func(q *event.Query, bound uint64) (string, []any)
	check func(head, bound uint64, events []event.Event, dense bool) (good int, err error)
}

// readPage reads a page of boundary's events matching q (nil: all), with
// the boundary's epoch, in one read transaction: in WAL mode its snapshot
// starts with the first SELECT, so the epoch, the head and the events are
// of one moment. The head and the events being of one snapshot, a position
// missing or beyond the head, or a text that is not JSON, is a row changed
// behind orisun's back, named instead of served; the good rows before it
// are returned with the error (backend.Reader).
func (s *Store) readPage(ctx context.Context, op, boundary string, limit int, q *event.Query, r pageRead) (string, []event.Event, error) {
	if err := sqlstore.CheckRead(reads{s}, limit); err != nil {
		return "", nil, fmt.Errorf("sqlite: %s: %w", op, err)
	}
	tx, err := s.rdb.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return "", nil, s.translate(op, err)
	}
	defer func() { _ = tx.Rollback() }()
	rtx := s.readTx(tx)
	var epoch string
	var head int64
	err = rtx.QueryRowContext(ctx, sqlSelectEpochHead, boundary).Scan(&epoch, &head)
	if errors.Is(err, sql.ErrNoRows) {
		return "", nil, notFound(op, boundary)
	}
	if err != nil {
		return "", nil, s.translate(op, err)
	}
	dense := sqlstore.MatchesAll(q)
	bound := r.bound(uint64(head))
	if q, err = rarestTagFirst(ctx, rtx, boundary, bound, r.dir, q); err != nil {
		return "", nil, s.translate(op, err)
	}
	text, args := r.stmt(q, bound)
	rows, err := rtx.QueryContext(ctx, text, args...)
	if err != nil {
		return "", nil, s.translate(op, err)
	}
	defer rows.Close()
	events := make([]event.Event, 0, sqlstore.PageCap(limit))
	var badTags error
	for rows.Next() {
		e, err := scanEvent(rows, boundary, epoch)
		if errors.As(err, new(*event.CorruptError)) {
			// Tags that do not decode: the page ends at this row, and
			// the rows before it are checked as any others.
			badTags = err
			events = append(events, e)
			break
		}
		if err != nil {
			return "", nil, s.translate(op, err)
		}
		events = append(events, e)
	}
	if err := rows.Err(); err != nil {
		return "", nil, s.translate(op, err)
	}
	good, err := r.check(uint64(head), bound, events, dense)
	if badTags != nil && good == len(events) {
		// Nothing wrong before the row whose tags do not decode (a hole
		// after it, the page being cut there, is no finding).
		good, err = len(events)-1, badTags
	}
	if err != nil {
		return epoch, events[:good], fmt.Errorf("sqlite: %s: %w", op, err)
	}
	return epoch, events, nil
}

// Latest returns the epoch, the head and the last event matching q (nil:
// none), from one read transaction (one WAL snapshot).
func (s *Store) Latest(ctx context.Context, boundary string, q *event.Query) (event.Latest, error) {
	op := fmt.Sprintf("read the latest of %q", boundary)
	if s.closed() {
		return event.Latest{}, errClosed(op)
	}
	tx, err := s.rdb.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return event.Latest{}, s.translate(op, err)
	}
	defer func() { _ = tx.Rollback() }()
	rtx := s.readTx(tx)
	var l event.Latest
	var head int64
	err = rtx.QueryRowContext(ctx, sqlSelectEpochHead, boundary).Scan(&l.Epoch, &head)
	if errors.Is(err, sql.ErrNoRows) {
		return event.Latest{}, notFound(op, boundary)
	}
	if err != nil {
		return event.Latest{}, s.translate(op, err)
	}
	l.Head = uint64(head)
	if q, err = rarestTagFirst(ctx, rtx, boundary, uint64(head), backward, q); err != nil {
		return event.Latest{}, s.translate(op, err)
	}
	all := sqlstore.MatchesAll(q)
	text, args := latestSQL(q, boundary, uint64(head))
	e, err := scanEvent(rtx.QueryRowContext(ctx, text, args...), boundary, l.Epoch)
	if errors.Is(err, sql.ErrNoRows) {
		if all && head > 0 {
			// Every event matches: the one at the head is missing.
			return event.Latest{}, fmt.Errorf("sqlite: %s: %w", op, sqlstore.Hole(boundary, uint64(head), uint64(head), 0))
		}
		return l, nil
	}
	if err != nil {
		return event.Latest{}, s.translate(op, err)
	}
	if err := sqlstore.CheckLatest(&e, l.Head, all, true); err != nil {
		return event.Latest{}, fmt.Errorf("sqlite: %s: %w", op, err)
	}
	l.Event = &e
	return l, nil
}

// readSQL is the statement of a read page, with its arguments.
func readSQL(q *event.Query, boundary string, after uint64, limit int) (string, []any) {
	return matchStatement(q, forward, sqlReadAll, sqlReadMatchPrefix, sqlReadMatchSuffix, boundary, after, limit)
}

// latestSQL is the statement of a read-latest up to head, with its
// arguments.
func latestSQL(q *event.Query, boundary string, head uint64) (string, []any) {
	return matchStatement(q, backward, sqlLatestAny, sqlReadMatchPrefix, sqlLatestMatchSuffix, boundary, head, 1)
}

// scanEvent reads one event row (position, id, type, time, tags, data,
// metadata) of the read statements.
func scanEvent(row sqlstore.Row, boundary, epoch string) (event.Event, error) {
	e := event.Event{Boundary: boundary, Epoch: epoch}
	var pos, t int64
	var tags string
	var data, md []byte
	if err := row.Scan(&pos, &e.ID, &e.Type, &t, &tags, &data, &md); err != nil {
		return event.Event{}, err
	}
	e.Position = uint64(pos)
	e.Time = time.Unix(0, t).UTC()
	e.Data = data
	if md != nil {
		e.Metadata = md
	}
	var err error
	if e.Tags, err = decodeTags(tags); err != nil {
		// The event is returned with its position, for the read to end
		// its page there.
		return e, &event.CorruptError{Boundary: boundary, Position: e.Position, Column: "tags",
			Reason: "the stored text is not a JSON array of strings; orisun wrote it at append, " +
				"so it was changed behind orisun's back: restore the row from a backup or repair the text"}
	}
	return e, nil
}

// sqlBoundaryStates reads every boundary's head, checkpoint, lease and the
// commit time of its oldest unpublished event in one statement (one
// snapshot).
const sqlBoundaryStates = `SELECT b.name, b.epoch, b.head, b.checkpoint, l.holder, l.term, l.expires_at,
       (SELECT e.time FROM events e WHERE e.boundary = b.name AND e.position = b.checkpoint + 1)
FROM boundaries b LEFT JOIN leases l ON l.boundary = b.name
ORDER BY b.name`

// BoundaryStates measures every boundary in one statement (backend.StateReader).
func (s *Store) BoundaryStates(ctx context.Context) ([]backend.BoundaryState, error) {
	return sqlstore.QueryAll(ctx, reads{s}, "read the state of every boundary", sqlBoundaryStates, s.scanBoundaryState)
}

// scanBoundaryState reads a row of sqlBoundaryStates.
func (s *Store) scanBoundaryState(row sqlstore.Row) (backend.BoundaryState, error) {
	var (
		st               backend.BoundaryState
		head, cp         int64
		holder           sql.NullString
		term, expires, t sql.NullInt64
	)
	if err := row.Scan(&st.Boundary.Name, &st.Boundary.Epoch, &head, &cp, &holder, &term, &expires, &t); err != nil {
		return backend.BoundaryState{}, err
	}
	st.Boundary.Head, st.Checkpoint = uint64(head), uint64(cp)
	if t.Valid {
		st.OldestUnpublished = time.Unix(0, t.Int64).UTC()
	}
	if holder.Valid {
		st.Lease = s.withRenewed(backend.Lease{Boundary: st.Boundary.Name, Holder: holder.String, Term: uint64(term.Int64),
			Expires: time.UnixMilli(expires.Int64).UTC()})
	}
	return st, nil
}
