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
