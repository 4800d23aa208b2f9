// Package startstop is the one lifecycle shape of orisun's long-lived parts
// (the node, a boundary's publisher and its checkpointer, a lease runner,
// the status listener, the NATS API service). It is orisun's machinery:
// its API may change without notice.
//
// A part embeds a Base and writes its own start and stop steps; Base makes
// them safe to call in any order, from any number of goroutines:
//
//	new ──Start: start ok──▶ running ──Stop: stop, then Wait──▶ stopped
//	 │            │                                              ▲
//	 │            └─ start fails: stop, then Wait ───────────────┤
//	 └──Stop: stop, then Wait ───────────────────────────────────┘
//
// In detail:
//
//   - Start runs start once. A second Start returns nil; a Start after Stop
//     returns ErrStopped (wrapped by each part in its own error). A Start
//     that fails leaves the part stopped: stop runs at once to undo what
//     start did, and the part cannot be started again.
//   - Stop runs stop once, whether or not Start ran (stop copes with a part
//     never started). A Stop while start runs waits for start to return. A
//     second or concurrent Stop waits for the first and returns its error.
//   - Every goroutine of the part is started with Go, which adds it to the
//     part's WaitGroup (nats-server's startGoRoutine). Wait shuts the door
//     on new goroutines (Go returns false from then on) and waits for the
//     running ones; stop calls it where its order needs it, and Stop calls
//     it again after stop, so Stop returns only once every goroutine of the
//     part has ended.
//
// A part is not restarted: one that must run again is made anew, as a
// node is. The shape follows river's BaseStartStop
// (rivershared/startstop) and nats-server's startGoRoutine, Shutdown and
// WaitForShutdown.
package startstop

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
)

// ErrStopped is what Start returns once Stop has begun (or a Start failed).
var ErrStopped = errors.New("start after stop")

// State is where a part is in its lifecycle.
type State int32

// The states of a part.
const (
	New     State = iota // not started yet (start may be running)
	Running              // Start returned nil, Stop has not begun
	Stopped              // Stop has begun, or Start failed
)

func (s State) String() string {
	switch s {
	case New:
		return "new"
	case Running:
		return "running"
	default:
		return "stopped"
	}
}

// Base carries a part's lifecycle. Its zero value is a part not started.
// It must not be copied after first use.
type Base struct {
	// mu is held while start runs and while Start or Stop changes the
	// state, so a Stop never begins in the middle of a start, and IfRunning
	// runs its function in a state that cannot change under it.
	mu      sync.Mutex
	state   atomic.Int32
	started atomic.Bool
	done    chan struct{} // closed once stop and Wait returned; made under mu
	err     error         // stop's error, written before done is closed

	// gmu guards closed against wg.Add: no goroutine is added once Wait
	// has begun (sync.WaitGroup forbids an Add from zero concurrent with
	// Wait).
	gmu    sync.Mutex
	closed bool
	wg     sync.WaitGroup
}

// Start runs start unless the part was started or stopped before (see the
// package doc). start gets ctx; it may start goroutines with Go. stop is
// what undoes a start that failed: it runs, then Wait, before Start returns
// start's error.
func (b *Base) Start(ctx context.Context, start func(context.Context) error, stop func() error) error {
	b.mu.Lock()
	switch b.State() {
	case Running:
		b.mu.Unlock()
		return nil
	case Stopped:
		b.mu.Unlock()
		return ErrStopped
	}
	b.doneLocked()
	err := start(ctx)
	if err == nil {
		b.started.Store(true)
		b.state.Store(int32(Running))
		b.mu.Unlock()
		return nil
	}
	b.state.Store(int32(Stopped))
	// stop runs without the lock: a goroutine of the part may be waiting
	// in IfRunning, and stop waits for it.
	b.mu.Unlock()
	b.finish(stop)
	return err
}

// Stop runs stop once, then Wait, and returns stop's error; see the
// package doc. stop may be nil.
func (b *Base) Stop(stop func() error) error {
	b.mu.Lock()
	done := b.doneLocked()
	if b.State() == Stopped {
		b.mu.Unlock()
		<-done
		return b.err
	}
	b.state.Store(int32(Stopped))
	b.mu.Unlock()
	return b.finish(stop)
}

func (b *Base) finish(stop func() error) error {
	var err error
	if stop != nil {
		err = stop()
	}
	b.Wait()
	b.err = err
	close(b.done)
	return err
}

// doneLocked returns the done channel, making it first; b.mu is held.
func (b *Base) doneLocked() chan struct{} {
	if b.done == nil {
		b.done = make(chan struct{})
	}
	return b.done
}

// Done is closed once the part is stopped: Stop's stop and Wait returned
// (or those of a Start that failed).
func (b *Base) Done() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.doneLocked()
}

// State is the part's state now. It takes no lock.
func (b *Base) State() State { return State(b.state.Load()) }

// Started reports whether a Start of the part succeeded, even if it has
// stopped since: a stop step that reports only what a running part did
// asks it.
func (b *Base) Started() bool { return b.started.Load() }

// IfRunning runs f and reports true if the part is running, under the lock
// Start and Stop take: Stop cannot begin while f runs, and a call made
// while start runs waits for it. f must be short and must not call Start,
// Stop or IfRunning.
func (b *Base) IfRunning(f func()) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.State() != Running {
		return false
	}
	f()
	return true
}

// Go runs f on a goroutine the part owns and reports true, or reports false
// and runs nothing once Wait has begun. It may be called before Start (a
// part can have work before it is started, such as a publisher its lease
// runner drives) and while start or stop runs.
func (b *Base) Go(f func()) bool {
	b.gmu.Lock()
	defer b.gmu.Unlock()
	if b.closed {
		return false
	}
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		f()
	}()
	return true
}

// Wait shuts the door on new goroutines (Go returns false from now on) and
// waits until every goroutine started with Go has returned. stop calls it
// at the point of its order where the goroutines must be gone; calling it
// more than once is harmless.
func (b *Base) Wait() {
	b.gmu.Lock()
	b.closed = true
	b.gmu.Unlock()
	b.wg.Wait()
}
