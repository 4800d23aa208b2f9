// Package serviceutil holds the waits of orisun's retry loops: a sleep that
// ends with its context, and an exponential back-off (river's
// rivershared/util/serviceutil). It is orisun's machinery: its API may change
// without notice.
package serviceutil

import (
	"context"
	"errors"
	"time"
)

// errOwnDeadline is the cause (context.Cause) of a context that ended with
// a deadline orisun set on its own work (WithTimeout).
var errOwnDeadline = errors.New("orisun's own deadline for the work passed")

// WithTimeout is context.WithTimeout for a deadline orisun sets on its own
// work (an API request's timeout, a status measurement, a store read of the
// node's own), as opposed to one its caller chose: once it passes,
// OwnDeadline says so. The node counts a store operation that outlives such
// a deadline as the store's failure (the store did not answer in time),
// and one that outlives its caller's deadline as the caller's answer.
func WithTimeout(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeoutCause(ctx, d, errOwnDeadline)
}

// OwnDeadline reports whether ctx ended with a deadline of WithTimeout's
// (its own, or a parent's).
func OwnDeadline(ctx context.Context) bool {
	return errors.Is(context.Cause(ctx), errOwnDeadline)
}

// Sleep waits d, or until ctx ends; it reports false when ctx ended. A loop
// that retries selects on its context this way rather than calling
// time.Sleep, so that a stop never waits out a retry interval.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// Backoff is an exponential back-off: each Wait waits twice as long as the
// one before, from Min up to Max, until Reset.
type Backoff struct {
	min, max, cur time.Duration
}

// NewBackoff returns a back-off from lo up to hi.
func NewBackoff(lo, hi time.Duration) *Backoff { return &Backoff{min: lo, max: hi, cur: lo} }

// Reset makes the next Wait wait the shortest time again.
func (b *Backoff) Reset() { b.cur = b.min }

// Wait sleeps for the current back-off or until ctx ends, and doubles the
// back-off (up to its maximum); it reports false when ctx ended.
func (b *Backoff) Wait(ctx context.Context) bool {
	d := b.cur
	b.cur = min(b.cur*2, b.max)
	return Sleep(ctx, d)
}
