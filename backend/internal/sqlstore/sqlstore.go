// Package sqlstore is orisun's machinery shared by the SQL backends
// (backend/postgres and backend/sqlite): what both do alike and must keep
// doing alike. It is internal: its API may change without notice.
//
// It holds the append request of group commit and the race between its
// caller and the writer (Request), the judgement of an append whose ids are
// stored (Retry), the checks and texts of leases, new epochs, how a
// boundary's row reads, which errors are already the core's (IsDomain),
// the checks of what a read returns (CheckPage: a row changed behind
// orisun's back is named, never served), the checks before a statement
// (CheckRead, CheckLeaseArgs, NewBoundaryEpoch: the arguments, then that
// the store is open), and the steps around a read's statement (QueryOne,
// QueryAll on a backend's DB: the closed check, no row as a boundary that
// does not exist, the rows scanned, the errors translated). What is
// dialect-specific (the statements, the transactions, the driver's errors,
// how requests queue) stays in each backend. Errors returned here carry no
// backend prefix: each backend wraps them as it wraps its own
// ("postgres: <op>: …").
package sqlstore

import (
	"context"
	"errors"

	"github.com/orisun-io/orisun/event"
)

// domainErrors are the errors a backend passes on as they are: the
// sentinels of package event and the end of a context.
var domainErrors = []error{
	event.ErrInvalid, event.ErrTooLarge, event.ErrNotFound, event.ErrConflict, event.ErrUnavailable,
	event.ErrLeaseLost, event.ErrLeaseHeld, event.ErrEpochChanged, event.ErrClosed, event.ErrCorrupt,
	context.Canceled, context.DeadlineExceeded,
}

// IsDomain reports whether err is already an error of the core (a sentinel
// of package event, or a context's end): a backend's translate wraps it with
// the operation and keeps it, rather than reading it as a driver's error.
func IsDomain(err error) bool {
	for _, target := range domainErrors {
		if errors.Is(err, target) {
			return true
		}
	}
	return false
}
