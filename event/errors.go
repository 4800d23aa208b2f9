package event

import "errors"

// The sentinel errors of orisun. Backends translate their database errors
// into these where they meet the database; everything above the store seam
// matches them with errors.Is and never sees a driver's error type. The API
// maps each one to a stable code (the name after "Err", in lower case).
var (
	// ErrInvalid: the request is malformed; the message names the field.
	ErrInvalid = errors.New("invalid")
	// ErrTooLarge: an event or a batch is over a limit; the message names it.
	ErrTooLarge = errors.New("too large")
	// ErrNotFound: the boundary (or another named thing) does not exist.
	ErrNotFound = errors.New("not found")
	// ErrConflict: an event id is stored with other content, or a
	// consistency condition failed.
	ErrConflict = errors.New("conflict")
	// ErrUnavailable: the store or NATS cannot serve the request now; a
	// retry may succeed.
	ErrUnavailable = errors.New("unavailable")
	// ErrLeaseLost: the caller's lease term is no longer current; its
	// writes were refused.
	ErrLeaseLost = errors.New("lease lost")
	// ErrLeaseHeld: another holder has an unexpired lease.
	ErrLeaseHeld = errors.New("lease held by another node")
	// ErrEpochChanged: the boundary's epoch differs from the one the caller
	// knows: the boundary was reset or restored, positions no longer mean
	// what they meant.
	ErrEpochChanged = errors.New("epoch changed")
	// ErrClosed: the component was stopped.
	ErrClosed = errors.New("closed")
	// ErrCorrupt: a stored event does not fit the log: its data or
	// metadata is not JSON, its tags do not decode, or its position is
	// missing (a hole) or beyond the boundary's head. The store was changed
	// behind orisun's back. Nothing at or after that position is served
	// and retrying fails the same way until an operator repairs the row
	// (docs/operations.md, "A bad row"). A *CorruptError names the row.
	ErrCorrupt = errors.New("corrupt")
)

// ConflictError is the error of a failed append condition: it says which
// stored position matched the condition's query.
type ConflictError struct {
	Boundary string
	After    uint64 // the condition's position
	Position uint64 // the first matching position after After
}

func (e *ConflictError) Error() string {
	return "conflict: boundary " + quote(e.Boundary) + ": condition failed: an event matching the query exists at position " +
		utoa(e.Position) + " (after " + utoa(e.After) + ")"
}

// Is makes errors.Is(err, ErrConflict) true.
func (e *ConflictError) Is(target error) bool { return target == ErrConflict }

// CorruptError names a stored row that does not fit the log (ErrCorrupt):
// the boundary, the position and the column, and how it does not fit.
type CorruptError struct {
	Boundary string
	Position uint64
	// Column is "data", "metadata", "tags" or "position" (a position
	// missing, taken by a row beyond the head, or out of order).
	Column string
	// Reason says how the row does not fit and what to do.
	Reason string
}

func (e *CorruptError) Error() string {
	s := "corrupt: "
	if e.Boundary != "" {
		s += "boundary " + quote(e.Boundary) + " "
	}
	s += "position " + utoa(e.Position)
	if e.Column != "" {
		s += ", column " + e.Column
	}
	if e.Reason != "" {
		s += ": " + e.Reason
	}
	return s
}

// Is makes errors.Is(err, ErrCorrupt) true.
func (e *CorruptError) Is(target error) bool { return target == ErrCorrupt }

func quote(s string) string { return "\"" + s + "\"" }

func utoa(u uint64) string {
	if u == 0 {
		return "0"
	}
	var b [20]byte
	i := len(b)
	for u > 0 {
		i--
		b[i] = byte('0' + u%10)
		u /= 10
	}
	return string(b[i:])
}
