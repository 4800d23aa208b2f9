package sqlstore

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/orisun-io/orisun/event"
)

// The states of an append request. The caller and the writer race for the
// transition out of queued with a compare-and-swap, so a request is either
// abandoned (the caller returns ctx.Err() and nothing is written) or taken
// (the caller waits for the true outcome), never both.
const (
	stateQueued int32 = iota
	stateTaken
	stateAbandoned
)

// Request is one call of a backend's Append on its way to a group commit:
// its caller hands it to the backend's writer and waits (Wait); the writer
// takes it when its turn in a group transaction comes (Take) and answers it
// once (Answer).
type Request struct {
	// Ctx is the caller's: once it ends, a request not yet taken is
	// abandoned.
	Ctx      context.Context
	Boundary string
	Events   []event.Input
	Cond     *event.Condition

	state atomic.Int32
	// reply has room for the one answer, so the writer never waits for a
	// caller that has gone.
	reply chan Reply
}

// Reply is the outcome of a request.
type Reply struct {
	Res event.AppendResult
	Err error
}

// CheckAppend checks an append before it is queued: that it holds events,
// that the store is open and that its caller still waits. Its errors carry
// no backend prefix and no operation.
func CheckAppend(ctx context.Context, db DB, events []event.Input) error {
	if len(events) == 0 {
		return fmt.Errorf("%w: events: the append holds no events; send at least one", event.ErrInvalid)
	}
	if db.Closed() {
		return Closed()
	}
	return ctx.Err()
}

// NewRequest returns a queued request.
func NewRequest(ctx context.Context, boundary string, events []event.Input, cond *event.Condition) *Request {
	return &Request{Ctx: ctx, Boundary: boundary, Events: events, Cond: cond, reply: make(chan Reply, 1)}
}

// Take moves r from queued to taken, for the writer: from then on its
// caller waits for the outcome. false: its caller gave up first, or r was
// taken already.
func (r *Request) Take() bool { return r.state.CompareAndSwap(stateQueued, stateTaken) }

// Queued reports whether r is neither taken nor abandoned.
func (r *Request) Queued() bool { return r.state.Load() == stateQueued }

// Taken reports whether a writer has taken r.
func (r *Request) Taken() bool { return r.state.Load() == stateTaken }

// Answer sends r its reply. It never blocks: a request gets one answer,
// and there is room for it whether or not its caller still waits.
func (r *Request) Answer(rep Reply) { r.reply <- rep }

// Wait waits for r's reply. When r.Ctx ends before a writer has taken r, r
// is abandoned: abandoned is true and nothing of r is or will be written.
// Once a writer has taken r, Wait returns its real outcome, a group commit
// away, whatever r.Ctx does.
func (r *Request) Wait() (rep Reply, abandoned bool) {
	select {
	case rep := <-r.reply:
		return rep, false
	case <-r.Ctx.Done():
		if r.state.CompareAndSwap(stateQueued, stateAbandoned) {
			return Reply{}, true
		}
		// The writer has it: the outcome is a group commit away.
		return <-r.reply, false
	}
}
