package postgres

import (
	"context"
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

// checkpointAttempts bounds SaveCheckpoint's tries when what changed nothing
// is gone by the time it looks (the head grew, the lease came back).
const checkpointAttempts = 3

// SaveCheckpoint moves the checkpoint to max(current, position), only while
// l.Term is the boundary's current term held by l.Holder and only up to the
// head (I3, I6). The fence is in the UPDATE itself, so no read-then-write
// race can let a stale publisher through; when it changes nothing, a second
// statement finds out why.
func (s *Store) SaveCheckpoint(ctx context.Context, boundary string, l backend.Lease, position uint64) error {
	op := fmt.Sprintf("save checkpoint %d of %q", position, boundary)
	if s.isClosed() {
		return errClosed(op)
	}
	pos := backend.ClampPosition(position)
	for range checkpointAttempts {
		var cp int64
		err := s.pool.QueryRow(ctx, sqlSaveCheckpoint, pos, boundary, l.Holder, backend.ClampPosition(l.Term)).Scan(&cp)
		if err == nil {
			return nil
		}
		if !isNoRows(err) {
			return s.translate(op, err)
		}
		var head int64
		var holder *string
		var term *int64
		err = s.pool.QueryRow(ctx, sqlCheckpointRefusal, boundary).Scan(&head, &holder, &term)
		switch {
		case isNoRows(err):
			return notFound(op, boundary)
		case err != nil:
			return s.translate(op, err)
		case pos > head:
			return fmt.Errorf("postgres: %s: %w: checkpoint %d is beyond head %d", op, event.ErrInvalid, position, head)
		}
		cur := backend.Lease{Boundary: boundary}
		if holder != nil {
			cur.Holder, cur.Term = *holder, uint64(*term)
		}
		if cur.Holder != l.Holder || cur.Term != l.Term {
			return fmt.Errorf("postgres: %s: %w: %s", op, event.ErrLeaseLost, sqlstore.LeaseLoss(l, cur))
		}
		// The head or the lease changed between the two statements: try
		// again.
	}
	return fmt.Errorf("postgres: %s: %w: the boundary kept changing under the save; try again", op, event.ErrUnavailable)
}

// leaseAttempts bounds AcquireLease's tries when the lease changes between
// the acquisition that took nothing and the look at who holds it.
const leaseAttempts = 5

// AcquireLease takes the boundary's lease for holder when it is free or
// expired (the term grows by one), or renews it when holder has it unexpired
// (same term). An unexpired lease of a holder in gone (a process known to
// have ended) is taken like an expired one, and returned in TakenFrom.
// Another holder's unexpired lease is ErrLeaseHeld, returned with that
// lease. The boundary must exist (ErrNotFound). Expiry is judged and set in
// the database's clock, never this process's.
func (s *Store) AcquireLease(ctx context.Context, boundary, holder string, gone []string, ttl time.Duration) (backend.Lease, error) {
	op := fmt.Sprintf("acquire lease of %q for %q", boundary, holder)
	if err := sqlstore.CheckLeaseArgs(reads{s}, holder, ttl); err != nil {
		return backend.Lease{}, fmt.Errorf("postgres: %s: %w", op, err)
	}
	if gone == nil {
		gone = []string{} // an empty array, not NULL
	}
	for range leaseAttempts {
		var term int64
		var expires time.Time
		var was struct {
			holder  *string
			term    *int64
			expires *time.Time
			live    bool
		}
		err := s.pool.QueryRow(ctx, sqlAcquireLease, boundary, holder, ttl.Microseconds(), gone).
			Scan(&term, &expires, &was.holder, &was.term, &was.expires, &was.live)
		if err == nil {
			l := backend.Lease{Boundary: boundary, Holder: holder, Term: uint64(term), Expires: expires.UTC()}
			if was.live && was.holder != nil && *was.holder != holder && *was.term == term-1 {
				l.TakenFrom = &backend.Lease{Boundary: boundary, Holder: *was.holder, Term: uint64(*was.term), Expires: was.expires.UTC()}
			}
			return l, nil
		}
		if !isNoRows(err) {
			return backend.Lease{}, s.translate(op, err)
		}
		// Nothing taken: the boundary is missing, or another holder has it.
		var curHolder *string
		var curTerm *int64
		var curExpires *time.Time
		var unexpired bool
		err = s.pool.QueryRow(ctx, sqlLeaseState, boundary).Scan(&curHolder, &curTerm, &curExpires, &unexpired)
		if isNoRows(err) {
			return backend.Lease{}, notFound(op, boundary)
		}
		if err != nil {
			return backend.Lease{}, s.translate(op, err)
		}
		if curHolder != nil && *curHolder != holder && unexpired && !slices.Contains(gone, *curHolder) {
			cur := backend.Lease{Boundary: boundary, Holder: *curHolder, Term: uint64(*curTerm), Expires: curExpires.UTC()}
			return cur, fmt.Errorf("postgres: %s: %w: %q holds term %d until %s",
				op, event.ErrLeaseHeld, cur.Holder, cur.Term, cur.Expires.Format(time.RFC3339Nano))
		}
		// The lease expired, was released or went to an ended holder in
		// between: try again.
	}
	return backend.Lease{}, fmt.Errorf("postgres: %s: %w: the lease kept changing hands; try again", op, event.ErrUnavailable)
}

// RenewLease extends the holder's unexpired lease of that term.
func (s *Store) RenewLease(ctx context.Context, l backend.Lease, ttl time.Duration) (backend.Lease, error) {
	op := fmt.Sprintf("renew lease term %d of %q for %q", l.Term, l.Boundary, l.Holder)
	if err := sqlstore.CheckLeaseArgs(reads{s}, l.Holder, ttl); err != nil {
		return backend.Lease{}, fmt.Errorf("postgres: %s: %w", op, err)
	}
	var expires time.Time
	err := s.pool.QueryRow(ctx, sqlRenewLease, l.Boundary, l.Holder, backend.ClampPosition(l.Term), ttl.Microseconds()).Scan(&expires)
	if isNoRows(err) {
		return backend.Lease{}, fmt.Errorf("postgres: %s: %w: the lease expired or another term began; acquire it again",
			op, event.ErrLeaseLost)
	}
	if err != nil {
		return backend.Lease{}, s.translate(op, err)
	}
	l.Expires = expires.UTC()
	return l, nil
}

// ReleaseLease ends the holder's term at once (it expires now), so another
// holder can take the lease without waiting, and announces it: to this
// store's OnLeaseReleased callbacks at once, and through the database to
// every store listening (other nodes' standbys). Releasing a lease not
// held is not an error, and announces nothing.
func (s *Store) ReleaseLease(ctx context.Context, l backend.Lease) error {
	op := fmt.Sprintf("release lease term %d of %q for %q", l.Term, l.Boundary, l.Holder)
	if s.isClosed() {
		return errClosed(op)
	}
	var released int64
	if err := s.pool.QueryRow(ctx, sqlReleaseLease, l.Boundary, l.Holder, backend.ClampPosition(l.Term)).Scan(&released); err != nil {
		return s.translate(op, err)
	}
	if released > 0 {
		s.releases.Notify(l.Boundary)
	}
	return nil
}

// OnLeaseReleased registers fn, called with the boundary of every lease
// released: at once after a release of this store, and when another
// store's release is announced on the LISTEN connection (from the listener
// goroutine). A hint, as OnAppend's: fn must not block.
func (s *Store) OnLeaseReleased(fn func(boundary string)) { s.releases.Add(fn) }

// LeaseHolder returns the boundary's lease row (zero Lease when there has
// never been one). An expired lease is returned as it is: its Expires says
// so.
func (s *Store) LeaseHolder(ctx context.Context, boundary string) (backend.Lease, error) {
	op := fmt.Sprintf("read lease of %q", boundary)
	if s.isClosed() {
		return backend.Lease{}, errClosed(op)
	}
	var holder string
	var term int64
	var expires time.Time
	err := s.pool.QueryRow(ctx, sqlSelectLease, boundary).Scan(&holder, &term, &expires)
	if isNoRows(err) {
		return backend.Lease{}, nil
	}
	if err != nil {
		return backend.Lease{}, s.translate(op, err)
	}
	return backend.Lease{Boundary: boundary, Holder: holder, Term: uint64(term), Expires: expires.UTC()}, nil
}
