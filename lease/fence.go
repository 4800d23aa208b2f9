package lease

import (
	"context"
	"errors"
	"sync"
)

// ErrSteppingDown is what EnterFence returns once the runner has begun to
// give the lease up: a fenced operation must not start then, since the
// lease is about to be released for another node.
var ErrSteppingDown = errors.New("the lease is being given up: no fenced operation may start")

// EnterFence marks the start of a fenced section of the leader work: an
// operation that destroys shared state (the publisher's delete, purge or
// recreate of a stream) and is safe only while this node holds the lease.
// Call it before the renewal that fences the operation, and call end when
// the operation has returned.
//
// A runner that steps down (Runner.StepDown, Runner.Stalled) releases the
// lease before the leader work returns, so that a work stuck in a call does
// not keep the boundary from the others; but while a fenced section is in
// flight it waits for the section to end first: releasing the lease then
// would let another node take it while this node's delete still runs and
// erases the new leader's stream. The section is bounded by the renewed
// lease (the publisher gives it a deadline at the renewed expiry), so the
// wait is too. Once a step-down has begun, EnterFence refuses with
// ErrSteppingDown.
//
// Outside a Runner's leader work (a context the runner did not make),
// EnterFence always succeeds and end does nothing.
func EnterFence(ctx context.Context) (end func(), err error) {
	f, _ := ctx.Value(fenceKey{}).(*fences)
	if f == nil {
		return func() {}, nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil, ErrSteppingDown
	}
	f.n++
	var once sync.Once
	return func() { once.Do(f.leave) }, nil
}

type fenceKey struct{}

// fences counts the fenced sections in flight in one leader work.
type fences struct {
	mu     sync.Mutex
	n      int
	closed bool
	idle   chan struct{} // closed once closed and no section is in flight
}

func newFences() *fences { return &fences{idle: make(chan struct{})} }

func (f *fences) leave() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.n--
	if f.closed && f.n == 0 {
		close(f.idle)
	}
}

// close refuses new sections and returns a channel closed once none is in
// flight.
func (f *fences) close() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.closed {
		f.closed = true
		if f.n == 0 {
			close(f.idle)
		}
	}
	return f.idle
}
