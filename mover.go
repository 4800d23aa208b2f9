package orisun

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/orisun-io/orisun/backend"
	"github.com/orisun-io/orisun/backend/postgres"
	"github.com/orisun-io/orisun/event"
	"github.com/orisun-io/orisun/internal/serviceutil"
)

// stagedMover is a store with staged appends: PostgreSQL's orisun_enqueue
// (docs/outbox.md), whose events the boundary's lease holder moves into the
// log.
type stagedMover interface {
	MoveStaged(ctx context.Context, l backend.Lease, max int) (postgres.MoveResult, error)
	OnStaged(fn func(boundary string))
	StagedStates(ctx context.Context) ([]postgres.StagedState, error)
	StagedBoundaries(ctx context.Context) ([]string, error)
}

// Once a move has found staged events, the mover scans again every
// moverScanInterval until it has found nothing for moverQuiet: an enqueue
// announces its commit only when it sees no committed staged event of the
// boundary (orisun_enqueue; the announcement's NOTIFY serialises the
// commits of the transactions that send it), so during a burst the
// mover's own scans are what find the enqueues. moverScanInterval is the
// delay an unannounced enqueue waits at most while enqueues keep coming,
// against one read-only statement per scan that finds nothing (it takes
// no lock and writes nothing); moverQuiet outlasts the pauses of an
// application's ordinary traffic (a GC pause, a slow transaction), after
// which the boundary is idle again and the next enqueue announces itself.
// An enqueue that committed later than moverQuiet after the move that
// made it stay silent is found by the node's head check, within
// ORISUN_POLL_INTERVAL (docs/outbox.md "When the mover learns of an
// enqueue").
const (
	moverScanInterval = 10 * time.Millisecond
	moverQuiet        = time.Second
)

// mover moves a boundary's staged events into the log while this node
// holds the boundary's lease: at the start of each term, when an enqueue's
// commit is announced (wake), every moverScanInterval for moverQuiet after
// a move that found staged events, when the node's head check (every poll
// interval) finds committed staged events of the boundary (wake: an
// enqueue not announced costs at most a poll interval), and every poll
// backstop in case all fail. Each move is one transaction of at most batch events
// in whole enqueue calls (and always the first call whole: orisun_enqueue
// refuses a call of more than max_append_events, which is thus the batch's
// floor), fenced by the term (postgres.Store.MoveStaged); a full batch is
// followed by the next at once. The publisher relays what it moved, woken
// by the move's commit as by an append's. A move is bounded by a third of
// the lease TTL (moveBound), in this process and on the server.
type mover struct {
	store    stagedMover
	boundary string
	batch    int
	poll     time.Duration
	retry    time.Duration
	timeout  time.Duration
	log      *slog.Logger
	wake     chan struct{}
	// failing is the last move's error while moves fail (nil: they do
	// not), for the status.
	failing atomic.Pointer[string]
}

// newMover returns the mover of boundary b when the store has staged
// appends, else nil.
func (n *Node) newMover(b string) *mover {
	m, ok := n.rawStore.(stagedMover)
	if !ok {
		return nil
	}
	return &mover{store: m, boundary: b, batch: n.cfg.AppendGroupMax, poll: n.cfg.PollBackstop,
		retry: n.cfg.PollInterval, timeout: moveBound(n.cfg.LeaseTTL), log: n.log.With("component", "mover", "boundary", b),
		wake: make(chan struct{}, 1)}
}

// moveBound is how long a move may take with a lease TTL of ttl. Once a
// move holds the lease row (FOR SHARE), the holder's renewals, every TTL/3
// and each bounded by the lease's expiry, wait for it: a move allowed half
// the TTL or more (it was max(TTL/2, 1 s)) could make a node with a short
// TTL drop its own lease. A third leaves the renewal that waited for a
// whole move another third of the TTL. A move that cannot end within it
// (a call too large for the database's speed, a lock that never comes) is
// rolled back and retried, and the status's move_error says so: raise
// ORISUN_LEASE_TTL, or lower the limits (docs/outbox.md, "How long a move
// may take").
func moveBound(ttl time.Duration) time.Duration { return max(ttl/3, time.Millisecond) }

// start runs the mover for the term l until ctx ends or stop is called;
// stop returns once it has. A nil mover starts nothing.
func (m *mover) start(ctx context.Context, l backend.Lease) (stop func()) {
	if m == nil {
		return func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { m.run(ctx, l) })
	return func() { cancel(); wg.Wait() }
}

// notify is the hint that the boundary has staged events; it never blocks.
func (m *mover) notify() {
	if m == nil {
		return
	}
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

func (m *mover) run(ctx context.Context, l backend.Lease) {
	defer m.failing.Store(nil)
	var found time.Time // the last move that found staged events
	for {
		mctx, cancel := serviceutil.WithTimeout(ctx, m.timeout)
		r, err := m.store.MoveStaged(mctx, l, m.batch)
		cancel()
		if ctx.Err() != nil {
			return
		}
		switch {
		case errors.Is(err, event.ErrLeaseLost):
			// The lease runner finds out on its own and ends the term.
			m.log.Info("staged events not moved: this node no longer holds the lease", "term", l.Term, "err", err)
			return
		case err != nil:
			if m.failing.Load() == nil {
				m.log.Warn("staged events cannot be moved into the log; retrying every ORISUN_POLL_INTERVAL", "move_bound", m.timeout, "err", err)
			}
			why := err.Error()
			m.failing.Store(&why)
			if !serviceutil.Sleep(ctx, m.retry) {
				return
			}
			continue
		default:
			if m.failing.Swap(nil) != nil {
				m.log.Info("staged events are moved again")
			}
			if r.SetAside > 0 {
				m.log.Warn("staged events set aside: their ids are in the log with other content, or they are over the limits "+
					"row's max_event_bytes (see orisun_set_aside and its reason column)",
					"set_aside", r.SetAside)
			}
			if r.Moved+r.Duplicates+r.SetAside > 0 {
				found = time.Now()
			}
			if r.More {
				continue
			}
		}
		wait := m.poll
		if !found.IsZero() && time.Since(found) < moverQuiet {
			wait = moverScanInterval
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-m.wake:
		case <-t.C:
		}
		t.Stop()
	}
}

// moveError is the mover's last failure while its moves fail, else "".
func (m *mover) moveError() string {
	if m == nil {
		return ""
	}
	if p := m.failing.Load(); p != nil {
		return *p
	}
	return ""
}

// stagedWake is the store's callback for a committed enqueue (on any
// node): a hint to the boundary's mover, which moves only while this node
// leads the boundary.
func (n *Node) stagedWake(boundary string) {
	r := n.runner(boundary)
	if r == nil {
		n.wake(boundary) // adopts a boundary this node does not run yet
		return
	}
	r.move.notify()
}
