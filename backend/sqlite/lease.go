package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/orisun-io/orisun/backend"
	"github.com/orisun-io/orisun/backend/internal/sqlstore"
	"github.com/orisun-io/orisun/event"
)

// Checkpoint returns the boundary's publish checkpoint (0: none saved).
func (s *Store) Checkpoint(ctx context.Context, boundary string) (uint64, error) {
	return sqlstore.ReadCheckpoint(ctx, reads{s}, sqlSelectCheckpoint, boundary)
}

// SaveCheckpoint moves the checkpoint to max(current, position), only while
// l.Term is the boundary's current term held by l.Holder and only up to the
// head (I3, I6). The fence is in the UPDATE itself, so no read-then-write
// race can let a stale publisher through.
func (s *Store) SaveCheckpoint(ctx context.Context, boundary string, l backend.Lease, position uint64) error {
	op := fmt.Sprintf("save checkpoint %d of %q", position, boundary)
	if s.closed() {
		return errClosed(op)
	}
	tx, err := s.wdb.BeginTx(ctx, nil)
	if err != nil {
		return s.translate(op, err)
	}
	defer func() { _ = tx.Rollback() }()
	res, err := groupTx{tx: tx, stmts: s.stmts, use: &s.stmtUse}.ExecContext(ctx, sqlSaveCheckpoint, backend.ClampPosition(position), boundary, l.Holder, int64(l.Term))
	if err != nil {
		return s.translate(op, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return s.translate(op, err)
	}
	if n == 0 {
		// Nothing changed: say why, from the same transaction.
		var head int64
		err := tx.QueryRowContext(ctx, sqlSelectHead, boundary).Scan(&head)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			return notFound(op, boundary)
		case err != nil:
			return s.translate(op, err)
		case position > uint64(head):
			return fmt.Errorf("sqlite: %s: %w: checkpoint %d is beyond head %d", op, event.ErrInvalid, position, head)
		}
		cur, err := selectLease(ctx, tx, boundary)
		if err != nil {
			return s.translate(op, err)
		}
		return fmt.Errorf("sqlite: %s: %w: %s", op, event.ErrLeaseLost, sqlstore.LeaseLoss(l, cur))
	}
	if err := tx.Commit(); err != nil {
		return s.translate(op+": commit", err)
	}
	return nil
}

// AcquireLease takes the boundary's lease for holder when it is free or
// expired (the term grows by one), or renews it when holder has it unexpired
// (same term). An unexpired lease of a holder in gone (a process known to
// have ended) is taken like an expired one, and returned in TakenFrom.
// Another holder's unexpired lease is ErrLeaseHeld, returned with that
// lease. The boundary must exist (ErrNotFound).
func (s *Store) AcquireLease(ctx context.Context, boundary, holder string, gone []string, ttl time.Duration) (backend.Lease, error) {
	op := fmt.Sprintf("acquire lease of %q for %q", boundary, holder)
	if err := sqlstore.CheckLeaseArgs(reads{s}, holder, ttl); err != nil {
		return backend.Lease{}, fmt.Errorf("sqlite: %s: %w", op, err)
	}
	s.leaseMu.Lock()
	defer s.leaseMu.Unlock()
	tx, err := s.wdb.BeginTx(ctx, nil)
	if err != nil {
		return backend.Lease{}, s.translate(op, err)
	}
	defer func() { _ = tx.Rollback() }()
	var head int64
	if err := tx.QueryRowContext(ctx, sqlSelectHead, boundary).Scan(&head); errors.Is(err, sql.ErrNoRows) {
		return backend.Lease{}, notFound(op, boundary)
	} else if err != nil {
		return backend.Lease{}, s.translate(op, err)
	}
	now := s.now().UnixMilli()
	expires := now + ttl.Milliseconds()
	cur, err := selectLease(ctx, tx, boundary)
	if err != nil {
		return backend.Lease{}, s.translate(op, err)
	}
	cur = s.renewedLocked(cur)
	l := backend.Lease{Boundary: boundary, Holder: holder, Expires: time.UnixMilli(expires).UTC()}
	live := cur.Expires.UnixMilli() > now
	switch {
	case cur.Holder == "":
		if _, err := tx.ExecContext(ctx, sqlInsertLease, boundary, holder, expires); err != nil {
			return backend.Lease{}, s.translate(op, err)
		}
		l.Term = 1
	case live && cur.Holder == holder:
		if _, err := tx.ExecContext(ctx, sqlExtendLease, expires, boundary, holder, int64(cur.Term)); err != nil {
			return backend.Lease{}, s.translate(op, err)
		}
		l.Term = cur.Term
	case live && !slices.Contains(gone, cur.Holder):
		return cur, fmt.Errorf("sqlite: %s: %w: %q holds term %d until %s",
			op, event.ErrLeaseHeld, cur.Holder, cur.Term, cur.Expires.Format(time.RFC3339Nano))
	default:
		// Expired, released, or held by a process that has ended: a new
		// term, even for the same holder, so anything done under the old
		// term is fenced off.
		var term int64
		if err := tx.QueryRowContext(ctx, sqlTakeLease, holder, expires, boundary, int64(cur.Term)).Scan(&term); err != nil {
			return backend.Lease{}, s.translate(op, err)
		}
		l.Term = uint64(term)
		if live {
			was := cur
			l.TakenFrom = &was
		}
	}
	if err := tx.Commit(); err != nil {
		return backend.Lease{}, s.translate(op+": commit", err)
	}
	s.renewed[boundary] = l
	return l, nil
}

// RenewLease extends the holder's unexpired lease of that term.
//
// A lease this store acquired is renewed in memory, not in the database:
// one process owns the data directory (its lock, docs/design.md §9), so nobody
// else reads the row's expiry, and a renewal need not be a commit on the
// single writer, where a thousand boundaries' renewals (300 a second)
// queued with the appends (docs/performance.md, "Scale"). Every reader of
// the lease here (AcquireLease, LeaseHolder, BoundaryStates) sees the
// renewed expiry. The term, the fence of the checkpoint (I3, I6), is
// still written by every acquisition, before it is used. After a crash the
// row's expiry is the one written at acquisition, so a restarted process
// takes the lease (a new term) sooner, which is safe: the old process is
// gone with its lock.
func (s *Store) RenewLease(ctx context.Context, l backend.Lease, ttl time.Duration) (backend.Lease, error) {
	op := fmt.Sprintf("renew lease term %d of %q for %q", l.Term, l.Boundary, l.Holder)
	if err := sqlstore.CheckLeaseArgs(reads{s}, l.Holder, ttl); err != nil {
		return backend.Lease{}, fmt.Errorf("sqlite: %s: %w", op, err)
	}
	s.leaseMu.Lock()
	defer s.leaseMu.Unlock()
	now := s.now().UnixMilli()
	expires := now + ttl.Milliseconds()
	if mem, ok := s.renewed[l.Boundary]; ok {
		// This store acquired the lease, or saw it last: memory is the
		// truth (nobody else writes the row while the directory is ours).
		if mem.Holder != l.Holder || mem.Term != l.Term || mem.Expires.UnixMilli() <= now {
			return backend.Lease{}, fmt.Errorf("sqlite: %s: %w: the lease expired or another term began; acquire it again",
				op, event.ErrLeaseLost)
		}
		l.Expires = time.UnixMilli(expires).UTC()
		s.renewed[l.Boundary] = l
		return l, nil
	}
	// A lease row this store did not write (a term of an earlier
	// process): renewed in the row.
	res, err := s.wdb.ExecContext(ctx, sqlRenewLease, expires, l.Boundary, l.Holder, int64(l.Term), now)
	if err != nil {
		return backend.Lease{}, s.translate(op, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return backend.Lease{}, s.translate(op, err)
	}
	if n == 0 {
		return backend.Lease{}, fmt.Errorf("sqlite: %s: %w: the lease expired or another term began; acquire it again",
			op, event.ErrLeaseLost)
	}
	l.Expires = time.UnixMilli(expires).UTC()
	s.renewed[l.Boundary] = l
	return l, nil
}

// renewedLocked returns the row's lease with the expiry renewed in memory
// when it is the term this store renewed. s.leaseMu must be held.
func (s *Store) renewedLocked(row backend.Lease) backend.Lease {
	mem, ok := s.renewed[row.Boundary]
	if ok && row.Holder != "" && mem.Holder == row.Holder && mem.Term == row.Term && mem.Expires.After(row.Expires) {
		row.Expires = mem.Expires
	}
	return row
}

// withRenewed is renewedLocked for a reader that does not hold s.leaseMu.
func (s *Store) withRenewed(row backend.Lease) backend.Lease {
	s.leaseMu.Lock()
	defer s.leaseMu.Unlock()
	return s.renewedLocked(row)
}

// ReleaseLease ends the holder's term at once (it expires now), so another
// holder can take the lease without waiting. Releasing a lease not held is
// not an error.
func (s *Store) ReleaseLease(ctx context.Context, l backend.Lease) error {
	op := fmt.Sprintf("release lease term %d of %q for %q", l.Term, l.Boundary, l.Holder)
	if s.closed() {
		return errClosed(op)
	}
	released, err := s.release(ctx, l)
	if err != nil {
		return s.translate(op, err)
	}
	if released {
		// Outside leaseMu: a callback may read the lease.
		s.releases.Notify(l.Boundary)
	}
	return nil
}

// release expires l's row, if it is still l's term, and reports whether it
// did.
func (s *Store) release(ctx context.Context, l backend.Lease) (bool, error) {
	s.leaseMu.Lock()
	defer s.leaseMu.Unlock()
	res, err := s.wdb.ExecContext(ctx, sqlReleaseLease, l.Boundary, l.Holder, int64(l.Term))
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, err
	}
	if mem, ok := s.renewed[l.Boundary]; ok && mem.Holder == l.Holder && mem.Term == l.Term {
		delete(s.renewed, l.Boundary) // the row says expired now
	}
	return n > 0, nil
}

// OnLeaseReleased registers fn, called after this store released a lease,
// with its boundary (one process owns the database: nobody else releases
// one).
func (s *Store) OnLeaseReleased(fn func(boundary string)) { s.releases.Add(fn) }

// LeaseHolder returns the boundary's lease row (zero Lease when there has
// never been one). An expired lease is returned as it is: its Expires says
// so.
func (s *Store) LeaseHolder(ctx context.Context, boundary string) (backend.Lease, error) {
	op := fmt.Sprintf("read lease of %q", boundary)
	if s.closed() {
		return backend.Lease{}, errClosed(op)
	}
	l, err := selectLease(ctx, s.rdb, boundary)
	if err != nil {
		return backend.Lease{}, s.translate(op, err)
	}
	return s.withRenewed(l), nil
}

// selectLease reads the lease row; a zero Lease when there is none.
func selectLease(ctx context.Context, q execer, boundary string) (backend.Lease, error) {
	var holder string
	var term, expires int64
	err := q.QueryRowContext(ctx, sqlSelectLease, boundary).Scan(&holder, &term, &expires)
	if errors.Is(err, sql.ErrNoRows) {
		return backend.Lease{}, nil
	}
	if err != nil {
		return backend.Lease{}, err
	}
	return backend.Lease{Boundary: boundary, Holder: holder, Term: uint64(term), Expires: time.UnixMilli(expires).UTC()}, nil
}
