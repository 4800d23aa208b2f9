package sqlstore

import (
	"fmt"
	"time"

	"github.com/orisun-io/orisun/backend"
	"github.com/orisun-io/orisun/event"
)

// CheckLeaseArgs checks the holder and the TTL of a lease (or of a node's
// heartbeat), then that the store is open, before anything is asked of the
// database. Its errors carry no backend prefix and no operation.
func CheckLeaseArgs(db DB, holder string, ttl time.Duration) error {
	if holder == "" {
		return fmt.Errorf("%w: holder is empty; name the node that takes the lease", event.ErrInvalid)
	}
	if ttl < time.Millisecond {
		return fmt.Errorf("%w: ttl is %s; it must be at least 1ms", event.ErrInvalid, ttl)
	}
	if db.Closed() {
		return Closed()
	}
	return nil
}

// LeaseLoss says why mine no longer fences a checkpoint, given the
// boundary's current lease cur (zero when it has none): the text after
// ErrLeaseLost.
func LeaseLoss(mine, cur backend.Lease) string {
	if cur.Holder == "" {
		return fmt.Sprintf("%q holds no lease term %d: the boundary has no lease", mine.Holder, mine.Term)
	}
	return fmt.Sprintf("%q holds no lease term %d: the current term is %d, held by %q", mine.Holder, mine.Term, cur.Term, cur.Holder)
}
