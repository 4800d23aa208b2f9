// Package backend is the store seam of orisun: the operations the relay needs
// from a durable store, as small role interfaces, and the promises every
// backend keeps (see package backendtest for the conformance suite that checks
// them against a real database).
// It is orisun's machinery, not for import by applications, and not yet a
// plugin API for stores kept outside this repository: its API may change
// without notice, and such a change is not a breaking change of orisun.
//
// The promises, in short:
//
//   - Append is atomic and gives the boundary's events dense positions
//     1, 2, 3, … in commit order; a reader never sees position p+1 without p
//     (I1). Appending an id already stored with the same content returns the
//     stored positions and writes nothing; other content is ErrConflict.
//     Concurrent appends may share one transaction (group commit), but one
//     request's failure never fails another's, and a request's condition
//     sees the events of the requests before it in the group (and never
//     those of a request that failed).
//   - Queries: nil, no items, or an item without types and tags match
//     every event (see event.Query and docs/queries.md).
//   - ReadBackward is Read newest first: the same events, the same query
//     matching, the same checks, in the reverse order, below a position
//     and never beyond the head of its snapshot.
//   - The checkpoint only moves forward, never past the head, and a write
//     with a stale lease term changes nothing (ErrLeaseLost) (I3, I6).
//   - Lease terms grow by one on every change of holder or expiry; a
//     holder known to have ended (AcquireLease's gone) loses its lease at
//     once, to the next term.
//   - Errors are the sentinels of package event (ErrNotFound, ErrConflict,
//     ErrLeaseLost, ErrLeaseHeld, ErrUnavailable, …), never driver types.
//
// Positions and names are values: no backend splices a boundary name into SQL.
package backend

import (
	"context"
	"math"
	"time"

	"github.com/orisun-io/orisun/event"
)

// Boundaries creates and lists boundaries.
type Boundaries interface {
	// CreateBoundary creates the boundary with a new epoch, or returns the
	// existing one unchanged (created is false then).
	CreateBoundary(ctx context.Context, name string) (b event.Boundary, created bool, err error)
	// Boundary returns one boundary with its current head; ErrNotFound if
	// it does not exist.
	Boundary(ctx context.Context, name string) (event.Boundary, error)
	// Boundaries lists every boundary, by name.
	Boundaries(ctx context.Context) ([]event.Boundary, error)
}

// Appender appends events. The events are validated and normalised
// (event.Prepare) by the caller; the backend checks only what needs the
// store: that the boundary exists, ids, and the condition.
type Appender interface {
	Append(ctx context.Context, boundary string, events []event.Input, cond *event.Condition) (event.AppendResult, error)
}

// Reader reads committed events in position order.
type Reader interface {
	// Read returns up to limit events of the boundary with position > after,
	// in position order, matching q (nil: all). The epoch is returned with
	// them, read in the same snapshot. A stored row that does not fit the
	// log fails the read with event.ErrCorrupt naming it; the events before
	// it, checked and good, are returned with that error (none when it is
	// the first), so that the publisher publishes up to it and never past
	// it (docs/design.md §5, "Bad rows"). With any other error, none.
	//
	// Without a query and without an error, a page of fewer than limit
	// events ends at the boundary's head as of the read's snapshot: the
	// publisher takes a short page for the head and waits for a wake-up
	// (the conformance suite's Pagination checks it).
	Read(ctx context.Context, boundary string, after uint64, limit int, q *event.Query) (epoch string, events []event.Event, err error)
}

// BackwardReader reads committed events newest first: the log as a person
// browses it (the DCB specification's "backwards" read option). A
// key-value backend answers it with a reverse range scan, as Latest.
type BackwardReader interface {
	// ReadBackward returns up to limit events of the boundary with
	// position < before (before 0: from the head), highest position
	// first, matching q (nil: all) as Read matches it. Only committed
	// events are returned, those up to the head read in the same snapshot
	// as the events and the epoch: a row stored beyond the head is no
	// event and is never returned. A stored row that does not fit the log
	// fails the read with event.ErrCorrupt naming it, and the events
	// before it in the read's order (the newer ones), checked and good,
	// are returned with that error, as Read does. ErrNotFound if the
	// boundary does not exist; ErrInvalid for a limit below 1.
	ReadBackward(ctx context.Context, boundary string, before uint64, limit int, q *event.Query) (epoch string, events []event.Event, err error)
}

// LatestReader reads the context of a decision (docs/design.md §4): the last event
// matching a query, with the head to put in the condition of the append
// that follows. A key-value backend answers it with a reverse range scan
// (of an index by type or tag, or of the log) bounded by the head it read.
type LatestReader interface {
	// Latest returns the boundary's epoch and head and the event matching q
	// (nil: every event) with the highest position, or a nil Event when none
	// matches, all read in one snapshot: no event after Head was seen, and
	// every event up to Head was. ErrNotFound if the boundary does not
	// exist.
	Latest(ctx context.Context, boundary string, q *event.Query) (event.Latest, error)
}

// Head is one boundary's head as the relay's shared head read sees it.
type Head struct {
	Boundary event.Boundary
	// Held is true when a transaction still open has taken the boundary's
	// head row (an append under way, or one held open by a slow client):
	// its events get positions when it commits. It is a hint that sends
	// the publisher to probe the row itself before the status says it
	// waits; false where the store cannot tell or no transaction holds the
	// row for long (SQLite: one process, short transactions).
	Held bool
}

// HeadReader reads the head of every boundary in one statement: a node
// reads it once per poll interval and wakes only the publishers whose
// boundary has events they have not read, instead of every publisher
// reading its own boundary every poll interval (a thousand statements a
// second for a thousand idle boundaries, docs/performance.md "Scale").
type HeadReader interface {
	// Heads returns every boundary, by name, with its committed head and
	// epoch read in one snapshot.
	Heads(ctx context.Context) ([]Head, error)
}

// Checkpoints stores each boundary's publish checkpoint.
type Checkpoints interface {
	// Checkpoint returns the last position the publisher saved (0: none).
	Checkpoint(ctx context.Context, boundary string) (uint64, error)
	// SaveCheckpoint moves the checkpoint to max(current, position), only
	// while term is the boundary's current lease term held by holder, and
	// only up to the head. A stale term is ErrLeaseLost and changes nothing;
	// a position beyond the head is ErrInvalid.
	SaveCheckpoint(ctx context.Context, boundary string, lease Lease, position uint64) error
}

// Lease is one holder's term on a boundary.
type Lease struct {
	Boundary string
	Holder   string
	Term     uint64
	// Expires is the expiry, in the store's clock.
	Expires time.Time
	// TakenFrom is set on a lease AcquireLease took from an unexpired term
	// of a holder the caller named gone: that term, as it was. Nil
	// otherwise.
	TakenFrom *Lease
}

// Leases keeps the per-boundary lease of docs/design.md §9, in the store's time.
type Leases interface {
	// AcquireLease takes the lease for holder when it is free or expired
	// (the term grows by one), or renews it when holder already has it.
	// An unexpired lease of a holder in gone is taken at once, with the
	// next term, as if it had expired, and the returned Lease's TakenFrom
	// describes it: gone names holders the caller knows to have ended (the
	// earlier processes of the data directory it has locked, see
	// docs/design.md §9); nil names none.
	// When another holder has an unexpired lease the error is ErrLeaseHeld
	// and the returned Lease describes that holder.
	AcquireLease(ctx context.Context, boundary, holder string, gone []string, ttl time.Duration) (Lease, error)
	// RenewLease extends the holder's unexpired lease of that term;
	// ErrLeaseLost otherwise.
	RenewLease(ctx context.Context, l Lease, ttl time.Duration) (Lease, error)
	// ReleaseLease gives the lease up so another holder can take it at
	// once, and tells the OnLeaseReleased callbacks (ReleaseNotifier) of
	// every store of the database. Releasing a lease not held is not an
	// error.
	ReleaseLease(ctx context.Context, l Lease) error
	// LeaseHolder returns the current lease of the boundary (zero Lease when
	// there has never been one).
	LeaseHolder(ctx context.Context, boundary string) (Lease, error)
}

// Notifier tells the relay that a boundary has new committed events. It is a
// hint: correctness never depends on it (the publisher also polls).
type Notifier interface {
	// OnAppend registers fn, called after each commit with the boundary
	// that got events. fn must not block.
	OnAppend(fn func(boundary string))
}

// ReleaseNotifier tells the lease runners that a boundary's lease was
// released, by this store or another on the same database, so that a
// standby tries to take it at once instead of at its next retry. It is a
// hint: a standby also retries on its own.
type ReleaseNotifier interface {
	// OnLeaseReleased registers fn, called after a release with the
	// boundary whose lease is free. fn must not block.
	OnLeaseReleased(fn func(boundary string))
}

// Store is everything a backend provides.
type Store interface {
	Boundaries
	Appender
	Reader
	BackwardReader
	LatestReader
	HeadReader
	Checkpoints
	Leases
	Notifier
	ReleaseNotifier
	Close() error
}

// BoundaryState is what the status measures of one boundary (docs/design.md §8).
type BoundaryState struct {
	Boundary   event.Boundary
	Checkpoint uint64
	// OldestUnpublished is the commit time of the event at Checkpoint+1,
	// zero when there is none (nothing to publish).
	OldestUnpublished time.Time
	// Lease is the boundary's lease (zero when there has never been one).
	Lease Lease
}

// StateReader measures every boundary at once, in one snapshot: the status
// of a node with a thousand boundaries is one statement, not four per
// boundary. Within the snapshot the checkpoint never exceeds the head.
type StateReader interface {
	BoundaryStates(ctx context.Context) ([]BoundaryState, error)
}

// ClampPosition is position p as the int64 the SQL stores keep positions
// in. Positions never leave the int64 range, so a larger p means "after
// every event" and becomes the largest int64, after which no event is; a
// plain int64(p) would turn it negative, and a read or condition after it
// would start again at position 1.
func ClampPosition(p uint64) int64 {
	return int64(min(p, math.MaxInt64))
}

// StoreDetail is a database's own words about an error, kept as text (no
// driver type crosses the seam). A backend wraps them in it where it
// translates the error, so that what a client is told can leave them out
// (package api/service): they may name the database's host, user, files,
// tables or constraints. The node's log has them.
type StoreDetail struct{ Text string }

func (e *StoreDetail) Error() string { return e.Text }
