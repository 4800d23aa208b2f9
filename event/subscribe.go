package event

import "context"

// Handler processes one event of a subscription. Its return acknowledges
// it: the next event is not delivered before it returns, and an error ends
// the subscription with that error.
type Handler func(ctx context.Context, e Event) error

// SubscribeOptions are the options of one subscription.
type SubscribeOptions struct {
	// Epoch is the epoch the after position belongs to. Empty means the
	// boundary's current epoch. A different epoch is ErrEpochChanged.
	Epoch string
	// OnCaughtUp is called when the subscription goes live at next.
	OnCaughtUp func(next uint64)
	// OnFellBehind is called when a live subscription goes back to the
	// store at next, with the reason.
	OnFellBehind func(next uint64, reason string)
}
